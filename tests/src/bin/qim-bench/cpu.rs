//! CPU time of whole processes (user + system, from `/proc` through `procfs`), for the
//! benchmarks' CPU per operation: this process, the services they start and the local stack's
//! servers, whose pids the stack keeps in `$QIM_STACK_DIR/<server>/<server>.pid`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use procfs::process::Process;
use procfs::Current;

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

/// CPU seconds (user + system) process `pid` has used, or `None` when it is gone.
pub fn process_seconds(pid: u32) -> Option<f64> {
    seconds_of(&Process::new(i32::try_from(pid).ok()?).ok()?)
}

/// CPU seconds (user + system) this process has used (0 where `/proc` is missing).
pub fn own_seconds() -> f64 {
    Process::myself().ok().as_ref().and_then(seconds_of).unwrap_or(0.0)
}

fn seconds_of(process: &Process) -> Option<f64> {
    let stat = process.stat().ok()?;
    Some((stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64)
}

/// The pid of the first process whose command line has the argument `arg` (the local stack's
/// Kafka broker: `kafka.Kafka`).
pub fn pid_with_argument(arg: &str) -> Option<u32> {
    procfs::process::all_processes().ok()?.flatten().find_map(|p| {
        let matches = p.cmdline().ok()?.iter().any(|a| a == arg);
        matches.then(|| u32::try_from(p.pid).ok()).flatten()
    })
}

/// This machine's memory in GiB (0 where `/proc` is missing).
pub fn memory_gib() -> f64 {
    procfs::Meminfo::current().map_or(0.0, |m| m.mem_total as f64 / f64::from(1u32 << 30))
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
