//! What the commands print: progress lines `[stack HH:MM:SS] ...` on stderr (local time, as
//! `date +%H:%M:%S`), and the tails of a server's logs when it failed.

use std::fmt::Arguments;
use std::io::Write as _;
use std::path::Path;

use crate::layout::{Service, Settings};
use crate::logfile;

/// Writes one progress line to stderr.
pub fn log(args: Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "[stack {}] {args}", clock());
}

/// `log!("...", ..)`: [`log`] with `format!` arguments.
#[macro_export]
macro_rules! log {
    ($($t:tt)*) => { $crate::output::log(format_args!($($t)*)) };
}

/// The local wall-clock time as `HH:MM:SS` (the time zone as the C library sees it: `TZ`,
/// else `/etc/localtime`).
pub fn clock() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let t = libc::time_t::try_from(now).unwrap_or_default();
    // SAFETY: `tm` is plain data that `localtime_r` fills; both pointers are valid for the call.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = !unsafe { libc::localtime_r(&t, &mut tm) }.is_null();
    if ok {
        format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
    } else {
        let s = now % 86_400;
        format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    }
}

/// Prints the last 60 lines of `svc`'s log and the last 20 of its JVM output, if there are any:
/// what a failed start or readiness wait shows before giving up.
pub fn show_failure(settings: &Settings, svc: Service) {
    show_tails(&settings.main_log(svc), settings.out_log(svc).as_deref());
}

/// [`show_failure`] of the server whose log is `main` and JVM output `out`.
pub fn show_tails(main: &Path, out: Option<&Path>) {
    if main.is_file() {
        log!("last 60 lines of {}:", main.display());
        eprint!("{}", logfile::last_lines(main, 60));
    }
    if let Some(out) = out {
        if std::fs::metadata(out).is_ok_and(|m| m.len() > 0) {
            log!("last 20 lines of {}:", out.display());
            eprint!("{}", logfile::last_lines(out, 20));
        }
    }
}

/// [`show_tails`], then the error that ends the command.
pub fn failed_with_tails(main: &Path, out: Option<&Path>, msg: String) -> anyhow::Error {
    show_tails(main, out);
    anyhow::anyhow!(msg)
}

/// [`show_failure`], then the error that ends the command.
pub fn failed(settings: &Settings, svc: Service, msg: String) -> anyhow::Error {
    show_failure(settings, svc);
    anyhow::anyhow!(msg)
}
