//! CPU time of whole processes from `/proc/<pid>/stat` (user + system), for the pipeline
//! benchmark's CPU per message: the services it starts and the local stack's servers, whose pids
//! the stack keeps in `$QIM_STACK_DIR/<server>/<server>.pid`.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// The stack's state directory (`QIM_STACK_DIR`, else `.stack` under the current directory,
/// as `deploy/local/stack` uses).
pub fn stack_dir() -> PathBuf {
    std::env::var_os("QIM_STACK_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(".stack"))
}

/// The stack's servers that have a live pid file: `(name, pid)`.
pub fn stack_pids() -> Vec<(String, u32)> {
    let dir = stack_dir();
    ["redis", "kafka", "cassandra"]
        .iter()
        .filter_map(|name| {
            let text = std::fs::read_to_string(dir.join(name).join(format!("{name}.pid"))).ok()?;
            let pid = text.trim().parse::<u32>().ok()?;
            std::path::Path::new(&format!("/proc/{pid}")).exists().then(|| ((*name).to_owned(), pid))
        })
        .collect()
}

/// Clock ticks per second of `/proc` times (`getconf CLK_TCK`).
fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// CPU seconds (user + system) process `pid` has used, or `None` when it is gone.
pub fn process_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok());
    Some((ticks(14)? + ticks(15)?) / ticks_per_second())
}

/// CPU seconds per named process at one moment.
#[derive(Clone, Debug, Default)]
pub struct Sample(pub BTreeMap<String, f64>);

impl Sample {
    /// Samples `processes` (`(name, pid)`); a process that is gone is left out.
    pub fn take(processes: &[(String, u32)]) -> Self {
        Self(processes.iter().filter_map(|(n, p)| Some((n.clone(), process_seconds(*p)?))).collect())
    }

    /// CPU seconds used since `earlier`, per process in this sample (one missing from
    /// `earlier` started since, so all its time counts).
    pub fn since(&self, earlier: &Sample) -> BTreeMap<String, f64> {
        self.0.iter().map(|(n, s)| (n.clone(), s - earlier.0.get(n).copied().unwrap_or(0.0))).collect()
    }
}
