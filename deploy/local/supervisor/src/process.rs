//! Processes and ports: which pid is our running server, signalling and waiting for it,
//! launching a server detached from the command that started it, and running a tool with a
//! time limit.
//!
//! Only pids read from our own pid files are ever signalled, and only once they pass
//! [`running_pid`]'s identity check: a stack in another state dir, or on other ports, is never
//! touched.

use std::fs::File;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use rustix::process::{kill_process, Pid, Signal};

use crate::layout::{Identity, Service, Settings};

/// What `/proc/<pid>` says about a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcInfo {
    pub comm: String,
    /// The arguments joined by single spaces.
    pub cmdline: String,
    /// The state letter of `/proc/<pid>/stat` (`R`, `S`, `Z`, ...).
    pub state: char,
    /// The working directory, if we may read it.
    pub cwd: Option<PathBuf>,
}

impl ProcInfo {
    /// The process as `/proc` has it now, or `None` when it is gone.
    pub fn of(pid: i32) -> Option<ProcInfo> {
        let dir = format!("/proc/{pid}");
        let cmdline = std::fs::read(format!("{dir}/cmdline")).ok()?;
        let comm = std::fs::read_to_string(format!("{dir}/comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
        Some(ProcInfo {
            comm: comm.trim_end().to_owned(),
            cmdline: String::from_utf8_lossy(&cmdline)
                .split('\0')
                .filter(|a| !a.is_empty())
                .collect::<Vec<_>>()
                .join(" "),
            state: stat_state(&stat)?,
            cwd: std::fs::read_link(format!("{dir}/cwd")).ok(),
        })
    }

    /// Whether this is a live process (not a zombie) of the server `identity` describes.
    pub fn is(&self, identity: &Identity) -> bool {
        let ours = match identity {
            Identity::CommIn { comm, cwd } => self.comm.starts_with(comm) && self.cwd.as_ref().is_none_or(|c| c == cwd),
            Identity::CmdlineContains(m) => self.cmdline.contains(m.as_str()),
        };
        ours && self.state != 'Z'
    }
}

/// The state letter of a `/proc/<pid>/stat` line: the field after the parenthesised command
/// name (which may itself contain spaces and parentheses).
fn stat_state(stat: &str) -> Option<char> {
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// The pid in a pid file: its digits (as `tr -dc 0-9`), if any.
pub fn read_pid(path: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(path).ok()?;
    let digits: String = text.chars().filter(char::is_ascii_digit).collect();
    digits.parse().ok().filter(|&p| p > 0)
}

/// The pid of `svc` if its pid file names a live process that is that server.
pub fn running_pid(settings: &Settings, svc: Service) -> Option<i32> {
    pid_if(&settings.pid_file(svc), &settings.identity(svc))
}

/// The pid in `pid_file` if it names a live process that `identity` recognises.
pub fn pid_if(pid_file: &Path, identity: &Identity) -> Option<i32> {
    let pid = read_pid(pid_file)?;
    ProcInfo::of(pid)?.is(identity).then_some(pid)
}

/// SIGTERM, then SIGKILL if `pid` is still there after `limit`; returns once it is gone (or 5 s
/// after the SIGKILL). True if it needed the SIGKILL.
pub fn terminate(pid: i32, limit: Duration) -> bool {
    signal(pid, Signal::TERM);
    if wait_gone(pid, Some(limit), Duration::from_millis(200)) {
        return false;
    }
    signal(pid, Signal::KILL);
    wait_gone(pid, Some(Duration::from_secs(5)), Duration::from_millis(100));
    true
}

/// Whether `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    ProcInfo::of(pid).is_some_and(|p| p.state != 'Z')
}

/// Sends `signal` to `pid` (errors, e.g. already gone, are ignored as `kill ... || true`).
pub fn signal(pid: i32, signal: Signal) {
    if let Some(pid) = Pid::from_raw(pid) {
        let _ = kill_process(pid, signal);
    }
}

/// Waits until `pid` is gone (or a zombie) or `limit` has passed; true if it is gone.
pub fn wait_gone(pid: i32, limit: Option<Duration>, poll: Duration) -> bool {
    let deadline = limit.map(|l| Instant::now() + l);
    while alive(pid) {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return false;
        }
        std::thread::sleep(poll);
    }
    true
}

/// Launches `cmd` as a server: in its own session (no terminal, so Ctrl-C on `up` or closing the
/// terminal does not reach it), SIGHUP ignored (as `nohup`), stdin from /dev/null, stdout and
/// stderr appended to `out`. The returned pid is the server itself. File descriptors of this
/// program (the state-dir lock) are close-on-exec, so the server does not hold them.
pub fn spawn_detached(cmd: &mut Command, out: &Path) -> anyhow::Result<u32> {
    let log =
        File::options().create(true).append(true).open(out).with_context(|| format!("opening {}", out.display()))?;
    cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    // SAFETY: only async-signal-safe calls (setsid, signal) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::setsid()?;
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let child = cmd.spawn().with_context(|| format!("starting {:?}", cmd.get_program()))?;
    Ok(child.id())
}

/// Waits for `child` at most `limit`; past it, SIGTERM (as `timeout`), then SIGKILL after 5 s.
/// `None` when it had to be stopped.
pub fn wait_with_limit(child: &mut Child, limit: Duration) -> anyhow::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            let pid = i32::try_from(child.id()).unwrap_or(0);
            signal(pid, Signal::TERM);
            let killed_at = Instant::now() + Duration::from_secs(5);
            while child.try_wait()?.is_none() {
                if Instant::now() >= killed_at {
                    let _ = child.kill();
                    child.wait()?;
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` to completion within `limit`, stdout captured, stderr where `cmd` says; true if it
/// exited 0 in time, with its stdout.
pub fn output_within(cmd: &mut Command, limit: Duration) -> anyhow::Result<(bool, String)> {
    let mut child = cmd.stdout(Stdio::piped()).spawn().with_context(|| format!("running {:?}", cmd.get_program()))?;
    let mut stdout = child.stdout.take().context("no stdout pipe")?;
    // Read on a thread: a full pipe must not stall the child while we wait for it.
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let status = wait_with_limit(&mut child, limit)?;
    let out = reader.join().unwrap_or_default();
    Ok((status.is_some_and(|s| s.success()), out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_follows_the_last_parenthesis() {
        assert_eq!(stat_state("123 (java) S 1 2 3"), Some('S'));
        assert_eq!(stat_state("9 (a) b) (c) Z 1"), Some('Z'));
        assert_eq!(stat_state("garbage"), None);
    }

    #[test]
    fn identity_needs_the_marker_and_life() {
        let kafka = Identity::CmdlineContains("/s/kafka/config/server.properties".into());
        let p = ProcInfo {
            comm: "java".into(),
            cmdline: "java -cp x kafka.Kafka /s/kafka/config/server.properties".into(),
            state: 'S',
            cwd: Some("/s/kafka".into()),
        };
        assert!(p.is(&kafka));
        assert!(!ProcInfo { state: 'Z', ..p.clone() }.is(&kafka));
        let other = Identity::CmdlineContains("/other/kafka/config/server.properties".into());
        assert!(!p.is(&other));
        let redis = Identity::CommIn { comm: "redis-server", cwd: "/s/redis/data".into() };
        let ours = ProcInfo {
            comm: "redis-server".into(),
            cmdline: "redis-server 127.0.0.1:16379".into(),
            state: 'S',
            cwd: Some("/s/redis/data".into()),
        };
        assert!(ours.is(&redis));
        assert!(ProcInfo { cwd: None, ..ours.clone() }.is(&redis), "an unreadable cwd: the pid file decides");
        assert!(!ProcInfo { cwd: Some("/other/redis/data".into()), ..ours }.is(&redis), "another stack's redis");
        assert!(!p.is(&redis));
    }

    #[test]
    fn pid_files_yield_their_digits() {
        let f = std::env::temp_dir().join(format!("qim-stack-pid-{}", std::process::id()));
        std::fs::write(&f, "4242\n").unwrap();
        assert_eq!(read_pid(&f), Some(4242));
        std::fs::write(&f, "\n").unwrap();
        assert_eq!(read_pid(&f), None);
        std::fs::remove_file(&f).unwrap();
        assert_eq!(read_pid(&f), None);
    }

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        assert!(alive(i32::try_from(std::process::id()).unwrap()));
        let mut child = Command::new("true").spawn().unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        child.wait().unwrap();
        assert!(wait_gone(pid, Some(Duration::from_secs(5)), Duration::from_millis(10)));
    }

    #[test]
    fn a_tool_past_its_limit_is_stopped() {
        let (ok, _) = output_within(Command::new("sleep").arg("30"), Duration::from_millis(200)).unwrap();
        assert!(!ok);
        let (ok, out) = output_within(Command::new("echo").arg("hi"), Duration::from_secs(10)).unwrap();
        assert!(ok);
        assert_eq!(out, "hi\n");
    }
}
