//! The fault stack: a second local stack (Redis, Kafka, Cassandra) with its own state dir and
//! ports, on which the tests that kill and restart servers run.
//!
//! A test that kills a server of the shared stack breaks every test running beside it, so such
//! tests used to run alone, with the rest of the machine idle for minutes. On a stack of their
//! own they run beside everything else; among themselves they still take turns (one test group,
//! `.config/nextest.toml`), since each kills servers the others use.
//!
//! A fault test runs its body through [`run_test`] (or calls [`FaultStack::enter`] before it
//! starts a runtime or a thread): the stack is brought up if it is not running (the first time
//! on a machine about a minute, for Cassandra; afterwards a check of a second or two), and the
//! process is pointed at it through the same variables every other helper reads, so the code
//! under test needs no change:
//!
//! | variable | value |
//! |---|---|
//! | `QIM_TEST_KAFKA_BROKERS`, `QIM_TEST_REDIS_URL`, `QIM_TEST_SCYLLA_HOSTS` | the fault stack's servers |
//! | `QIM_STACK_DIR` and the five `QIM_STACK_*_PORT` | the fault stack, for the `deploy/local/stack kill` and `up` the test runs |
//!
//! Its state dir is the shared stack's with `-faults` appended (`<checkout>/.stack-faults`, or
//! `$QIM_STACK_DIR-faults`); its ports are the shared stack's defaults plus 10 000. Like the
//! shared stack it is left running; `deploy/local/test` sweeps its leftovers too.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{bail, Context as _};

use crate::stack::{self, Endpoints};

/// Redis of the fault stack.
pub const REDIS_PORT: u16 = 16379;
/// Kafka's broker listener of the fault stack.
pub const KAFKA_PORT: u16 = 19092;
/// Kafka's KRaft controller listener of the fault stack.
pub const KAFKA_CONTROLLER_PORT: u16 = 19093;
/// Cassandra's CQL port of the fault stack.
pub const CASSANDRA_PORT: u16 = 19042;
/// Cassandra's storage (gossip) port of the fault stack.
pub const CASSANDRA_STORAGE_PORT: u16 = 17000;

/// The checkout's `deploy/local/stack`.
fn stack_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/local/stack")
}

/// The fault stack this process entered, if it did.
static ENTERED: OnceLock<FaultStack> = OnceLock::new();

/// The second local stack of the server-killing tests (see the module's documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultStack {
    dir: PathBuf,
}

impl FaultStack {
    /// The fault stack of this checkout: state dir `$QIM_STACK_DIR-faults`, or
    /// `<checkout>/.stack-faults` when `QIM_STACK_DIR` is unset or blank; in a process that
    /// [entered](FaultStack::enter) it (and so pointed `QIM_STACK_DIR` at it), the one entered.
    pub fn locate() -> Self {
        if let Some(entered) = ENTERED.get() {
            return entered.clone();
        }
        let shared = std::env::var("QIM_STACK_DIR").ok().filter(|d| !d.trim().is_empty());
        Self::beside(shared.as_deref())
    }

    fn beside(shared_dir: Option<&str>) -> Self {
        let dir = match shared_dir {
            Some(d) => PathBuf::from(format!("{}-faults", d.trim().trim_end_matches('/'))),
            // The checkout without a `..`: the supervisor compares Redis's working directory
            // (which `/proc` shows resolved) with paths under this one.
            None => {
                Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("testkit/ has a parent").join(".stack-faults")
            }
        };
        Self { dir }
    }

    /// The state dir.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether this stack was ever started here (its state dir exists); it may be down now.
    pub fn was_started(&self) -> bool {
        self.dir.is_dir()
    }

    /// Where its servers answer.
    pub fn endpoints(&self) -> Endpoints {
        Endpoints {
            kafka_brokers: format!("127.0.0.1:{KAFKA_PORT}"),
            redis_url: format!("redis://127.0.0.1:{REDIS_PORT}/0"),
            scylla_hosts: vec![format!("127.0.0.1:{CASSANDRA_PORT}")],
        }
    }

    /// The variables that point `deploy/local/stack` at this stack.
    pub fn stack_vars(&self) -> Vec<(&'static str, String)> {
        vec![
            ("QIM_STACK_DIR", self.dir.display().to_string()),
            ("QIM_STACK_REDIS_PORT", REDIS_PORT.to_string()),
            ("QIM_STACK_KAFKA_PORT", KAFKA_PORT.to_string()),
            ("QIM_STACK_KAFKA_CONTROLLER_PORT", KAFKA_CONTROLLER_PORT.to_string()),
            ("QIM_STACK_CASSANDRA_PORT", CASSANDRA_PORT.to_string()),
            ("QIM_STACK_CASSANDRA_STORAGE_PORT", CASSANDRA_STORAGE_PORT.to_string()),
        ]
    }

    /// The variables that point a test process at this stack: [`FaultStack::stack_vars`] and
    /// the `QIM_TEST_*` endpoints.
    pub fn test_vars(&self) -> Vec<(&'static str, String)> {
        let endpoints = self.endpoints();
        let mut vars = self.stack_vars();
        vars.push((stack::KAFKA_BROKERS_ENV, endpoints.kafka_brokers));
        vars.push((stack::REDIS_URL_ENV, endpoints.redis_url));
        vars.push((stack::SCYLLA_HOSTS_ENV, endpoints.scylla_hosts.join(",")));
        vars
    }

    /// Runs `deploy/local/stack ARGS` on this stack and waits for it; its output goes where the
    /// caller's goes.
    ///
    /// # Errors
    ///
    /// The command could not be run or exited non-zero.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<()> {
        let script = stack_script();
        let status = Command::new(&script)
            .args(args)
            .envs(self.stack_vars())
            .status()
            .with_context(|| format!("running {}", script.display()))?;
        if !status.success() {
            bail!("the fault stack's `deploy/local/stack {}` failed ({status})", args.join(" "));
        }
        Ok(())
    }

    /// Brings the fault stack up (a check when it already runs) and points this process at it
    /// ([`FaultStack::test_vars`]), so everything the test starts afterwards, clients, services
    /// and `deploy/local/stack` commands, uses it.
    ///
    /// Call it first in the test, before any runtime or thread is started: it sets environment
    /// variables of the process.
    ///
    /// # Panics
    ///
    /// When the stack does not come up; the stack's own messages say why.
    pub fn enter() -> Self {
        let fault_stack = Self::locate();
        eprintln!("fault stack: {} (the servers this test kills)", fault_stack.dir.display());
        fault_stack.run(&["up"]).unwrap_or_else(|e| panic!("{e:#}"));
        for (var, value) in fault_stack.test_vars() {
            std::env::set_var(var, value);
        }
        ENTERED.get_or_init(|| fault_stack.clone()).clone()
    }
}

/// A fault test's body: enters the fault stack ([`FaultStack::enter`]), then runs `test` on a
/// multi-threaded runtime of `worker_threads` threads built after that.
///
/// # Panics
///
/// When the fault stack does not come up or the runtime can not be built; whatever `test`
/// panics with.
pub fn run_test<F: Future>(worker_threads: usize, test: F) -> F::Output {
    FaultStack::enter();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads)
        .enable_all()
        .build()
        .expect("a runtime for the fault test")
        .block_on(test)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fault_stack_sits_beside_the_shared_one() {
        assert_eq!(FaultStack::beside(Some("/srv/qim/.stack/")).dir(), Path::new("/srv/qim/.stack-faults"));
        assert_eq!(FaultStack::beside(Some("/tmp/s")).dir(), Path::new("/tmp/s-faults"));
        let default = FaultStack::beside(None);
        assert!(default.dir().ends_with(".stack-faults"), "{}", default.dir().display());
    }

    #[test]
    fn no_port_of_the_fault_stack_is_one_of_the_shared_stack() {
        let shared = [6379, 9092, 9093, 9042, 7000];
        let vars = FaultStack::beside(None).test_vars();
        for (var, value) in &vars {
            for port in shared {
                assert!(!value.ends_with(&format!(":{port}")) && *value != port.to_string(), "{var}={value}");
                assert!(!value.contains(&format!(":{port}/")), "{var}={value}");
            }
        }
        assert_eq!(vars.iter().filter(|(v, _)| v.ends_with("_PORT")).count(), 5);
    }
}
