//! The three-node mode's Cassandra ring: node N on 127.0.0.N (all of 127/8 is loopback), the
//! same CQL and storage ports on each address, its own data, commitlog, saved_caches, hints
//! and cdc dirs, one `cluster_name`, node 1 the seed, local JMX on 127.0.0.1 at a port of its
//! own (for `nodetool`). Every other setting is the single node's ([`crate::cassandra`]).
//!
//! How the nodes join: one token each, precomputed (`initial_token`, the range cut in three),
//! `auto_bootstrap: false`, and started one at a time, each only once the one before answers
//! CQL (which it does only after it joined the ring as NORMAL). Why:
//! - Fixed tokens: no token allocation that depends on the join order or on what a node saw of
//!   the others, and the same ownership after every `reset`. With RF 3 on three nodes every node
//!   holds every row anyway, so balance is not a concern.
//! - No bootstrap: a fresh ring has nothing to stream, and concurrent bootstraps are refused
//!   (`cassandra.consistent.rangemovement`); a node that restarts after `kill` rejoins with
//!   the tokens it saved.
//! - One at a time, seed first: a non-seed that reaches no seed within its shadow gossip round
//!   (ring delay, 5 s here) exits with "Unable to gossip with any peers", which a concurrent
//!   start on two cores, the seed still loading classes, makes likely; and three JVMs booting at
//!   once (beside three brokers) fight over the two cores. A node restarted while the others run
//!   finds them at once.
//!
//! Readiness: each node answers a CQL query itself (the probe connects to it alone), then each
//! sees the ring whole: three NORMAL endpoints in its gossip and a read at consistency ALL it
//! coordinates (`qim-stack-probe cql --ring 3`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cassandra::{self, NodeConfig};
use crate::layout::Settings;
use crate::log;
use crate::output::failed_with_tails;
use crate::probe::Probe;
use crate::process::pid_if;
use crate::rf3_layout::{Node, CLUSTER_NAME, INITIAL_TOKENS, NODES};

/// Node `n`'s config.
pub fn node(settings: &Settings, n: u8) -> NodeConfig {
    let rf3 = &settings.rf3;
    NodeConfig {
        dir: rf3.node_dir(Node::Cassandra(n)),
        cluster_name: CLUSTER_NAME,
        address: rf3.address(n),
        cql_port: rf3.cql_port,
        storage_port: rf3.storage_port,
        seeds: format!("{}:{}", rf3.address(1), rf3.storage_port),
        initial_token: Some(INITIAL_TOKENS[usize::from(n - 1)]),
        heap: rf3.cassandra_heap.clone(),
        jmx_port: Some(rf3.jmx(n)),
    }
}

/// The pid of node `n` if its pid file names a live JVM started with its `cassandra.yaml`.
pub fn running_pid(settings: &Settings, n: u8) -> Option<i32> {
    pid_if(&settings.rf3.pid_file(Node::Cassandra(n)), &settings.rf3.identity(Node::Cassandra(n)))
}

/// Where the probe's complaints about node `n` go.
fn probe_err(settings: &Settings, n: u8) -> PathBuf {
    settings.rf3.node_dir(Node::Cassandra(n)).join("cql_probe.err")
}

/// The error that ends a wait on node `n`, after its log tails.
fn failed(settings: &Settings, n: u8, msg: String) -> anyhow::Error {
    let node = Node::Cassandra(n);
    failed_with_tails(&settings.rf3.main_log(node), Some(&settings.rf3.out_log(node)), msg)
}

/// Launches node `n` (the caller knows it is not running and its ports are free).
pub fn start(settings: &Settings, java: &Path, n: u8) -> anyhow::Result<()> {
    let pid = cassandra::launch(settings, java, &node(settings, n))?;
    std::fs::write(settings.rf3.pid_file(Node::Cassandra(n)), format!("{pid}\n"))?;
    log!(
        "rf3 cassandra-{n} starting on {}:{} (storage {}, JMX {}), pid {pid}",
        settings.rf3.address(n),
        settings.rf3.cql_port,
        settings.rf3.storage_port,
        settings.rf3.jmx(n)
    );
    Ok(())
}

/// One probe of node `n`: its release (with `ring`, also the ring as it sees it).
pub fn probe(settings: &Settings, probe: &Probe, n: u8, ring: bool) -> anyhow::Result<String> {
    let nodes = ring.then_some(usize::from(NODES));
    probe.ring_node(&settings.rf3.address(n), settings.rf3.cql_port, nodes, &probe_err(settings, n))
}

/// Waits (bounded by `QIM_STACK_TIMEOUT`) until node `n` answers a CQL query (with `ring`: and
/// sees the three nodes NORMAL and answering). `alive` fails the wait if another node of the
/// mode died meanwhile (or the other half of `up` failed).
pub fn wait(
    settings: &Settings,
    probe_: &Probe,
    n: u8,
    ring: bool,
    alive: &dyn Fn() -> anyhow::Result<()>,
) -> anyhow::Result<String> {
    let deadline = Instant::now() + settings.timeout;
    loop {
        if running_pid(settings, n).is_none() {
            return Err(failed(settings, n, format!("rf3 cassandra-{n} process is not running")));
        }
        alive()?;
        if let Ok(answer) = probe(settings, probe_, n, ring) {
            let at = format!("{}:{}", settings.rf3.address(n), settings.rf3.cql_port);
            log!("rf3 cassandra-{n} ready: {at} (CQL query ok, release {answer})");
            return Ok(answer);
        }
        if Instant::now() >= deadline {
            let last = crate::logfile::last_lines(&probe_err(settings, n), 1);
            let what = if ring { "does not see the ring whole" } else { "not answering CQL" };
            let msg = format!("rf3 cassandra-{n} {what} after {}s: {}", settings.timeout.as_secs(), last.trim_end());
            return Err(failed(settings, n, msg));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// `rf3 status`'s line for node `n` (without its name and pid), and whether it is up.
pub fn status(settings: &Settings, probe_: &Probe, n: u8) -> (bool, String) {
    let at = format!("{}:{}", settings.rf3.address(n), settings.rf3.cql_port);
    match probe(settings, probe_, n, true) {
        Ok(answer) => (true, format!("{at}  Cassandra {answer}")),
        Err(_) => {
            let last = crate::logfile::last_lines(&probe_err(settings, n), 1);
            (false, format!("{at}  {}", last.trim_end()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_node_has_its_address_dirs_token_and_jmx_port() {
        let s = Settings::from_lookup(|k| match k {
            "QIM_STACK_DIR" => Some("/s".into()),
            "QIM_STACK_CACHE" => Some("/c".into()),
            _ => None,
        })
        .unwrap();
        let n3 = node(&s, 3);
        let y = cassandra::node_yaml(&n3);
        assert!(y.contains("\ncluster_name: qim-rf3\n"), "{y}");
        assert!(y.contains("\nnum_tokens: 1\ninitial_token: 3074457345618258602\nauto_bootstrap: false\n"), "{y}");
        assert!(y.contains("\nblock_for_peers_timeout_in_secs: -1\n"), "{y}");
        assert!(y.contains("      - seeds: \"127.0.0.1:7010\"\n"), "{y}");
        assert!(y.contains("\nlisten_address: 127.0.0.3\nstorage_port: 7010\nrpc_address: 127.0.0.3\n"), "{y}");
        assert!(y.contains("\nnative_transport_port: 9142\n"), "{y}");
        for d in [
            "data_file_directories:\n  - /s-rf3/cassandra-3/data/data",
            "commitlog_directory: /s-rf3/cassandra-3/data/commitlog",
        ] {
            assert!(y.contains(d), "{d} in {y}");
        }
        for d in ["saved_caches", "hints", "cdc_raw"] {
            assert!(y.contains(&format!("/s-rf3/cassandra-3/data/{d}\n")), "{d} in {y}");
        }
        assert!(!y.contains('{') && !y.contains('}'), "{y}");
        assert_eq!(node(&s, 1).initial_token, Some(i64::MIN));
        let a = cassandra::node_jvm_args(&s, &n3, Path::new("/c/jamm.jar")).join(" ");
        assert!(a.starts_with("-Xms1G -Xmx1G "), "{a}");
        assert!(a.contains(" -Dcassandra.jmx.local.port=7193 -Dcom.sun.management.jmxremote.rmi.port=7193 "), "{a}");
        assert!(a.contains("-Dcassandra.config=file:///s-rf3/cassandra-3/conf/cassandra.yaml"), "{a}");
        assert!(a.contains("-Dlogback.configurationFile=/s-rf3/cassandra-3/conf/logback.xml"), "{a}");
        // the single node keeps JMX off and no fixed token
        let single = cassandra::jvm_args(&s, Path::new("/c/jamm.jar")).join(" ");
        assert!(!single.contains("cassandra.jmx.local.port"), "{single}");
        assert!(!cassandra::yaml(&s).contains("initial_token"));
    }

    #[test]
    fn the_tokens_cut_the_ring_in_three() {
        let width = |a: i64, b: i64| i128::from(b) - i128::from(a);
        let third = (i128::from(i64::MAX) - i128::from(i64::MIN) + 1) / 3;
        for w in INITIAL_TOKENS.windows(2) {
            assert!((width(w[0], w[1]) - third).abs() <= 1, "{w:?}");
        }
    }
}
