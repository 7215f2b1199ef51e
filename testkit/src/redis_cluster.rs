//! A throwaway Redis Cluster per test (three masters, three replicas, AOF on), for tests that
//! kill a master or move slots and so must not touch the local stack's cluster, which every
//! other test shares. Each node is a `redis-server` child on a port of [`crate::ports`] with
//! its cluster bus on another (`cluster-port`), in a temporary directory removed on drop.
//! Everything goes through `redis-cli`, as an operator would: `--cluster create`,
//! `--cluster reshard`, `CLUSTER NODES`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::ports::free_port;

/// How long a failed master goes unanswered before its replica takes over (ms).
const NODE_TIMEOUT_MS: &str = "2000";

struct Node {
    port: u16,
    child: Option<Child>,
}

/// A private Redis Cluster; every node is killed on drop, and its directory removed, unless the
/// test is failing: then each node's log ends on stderr (what the cluster did: failovers,
/// resyncs) and the directory is kept, named.
pub struct PrivateCluster {
    nodes: Vec<Node>,
    dir: PathBuf,
}

/// One line of `CLUSTER NODES`: a node's id, port, whether it is a master, and whether the
/// cluster marks it failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    pub id: String,
    pub port: u16,
    pub master: bool,
    pub failed: bool,
    /// Slot ranges it serves (masters), as `CLUSTER NODES` lists them.
    pub slots: Vec<String>,
}

impl PrivateCluster {
    /// Where its nodes keep their files (`<port>/redis.log`, AOF, `nodes.conf`).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Starts six nodes and joins them (`redis-cli --cluster create --cluster-replicas 1`); ready
    /// when every node reports `cluster_state:ok`.
    ///
    /// # Errors
    ///
    /// `redis-server` or `redis-cli` is missing (the local stack installs them:
    /// `deploy/local/stack up`), a node does not start, or the cluster does not form in 60 s.
    pub fn start() -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("qim-private-cluster-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut cluster = Self { nodes: Vec::new(), dir };
        let mut ports: Vec<u16> = Vec::new();
        while ports.len() < 12 {
            let port = free_port();
            if !ports.contains(&port) {
                ports.push(port);
            }
        }
        for pair in ports.chunks(2) {
            let (port, bus) = (pair[0], pair[1]);
            let node_dir = cluster.dir.join(port.to_string());
            std::fs::create_dir_all(&node_dir)?;
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--cluster-port", &bus.to_string(), "--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", NODE_TIMEOUT_MS, "--appendonly", "yes", "--appendfsync", "everysec"])
                .args(["--save", ""])
                .arg("--dir")
                .arg(&node_dir)
                .arg("--logfile")
                .arg(node_dir.join("redis.log"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting redis-server (deploy/local/stack up installs it)")?;
            cluster.nodes.push(Node { port, child: Some(child) });
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        for node in &mut cluster.nodes {
            while cli(node.port, &["PING"]).map(|o| o.trim().to_owned()).ok().as_deref() != Some("PONG") {
                let exited = node.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
                if exited.is_some() || Instant::now() > deadline {
                    let log = std::fs::read_to_string(cluster.dir.join(node.port.to_string()).join("redis.log"));
                    bail!(
                        "redis node {} does not answer PING ({exited:?}); its log: {}",
                        node.port,
                        log.unwrap_or_default()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let addresses: Vec<String> = cluster.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .context("running redis-cli --cluster create")?;
        if !out.status.success() {
            bail!("redis-cli --cluster create: {}", String::from_utf8_lossy(&out.stdout));
        }
        cluster.wait_ok(Duration::from_secs(60))?;
        // A replica that never finished its first sync refuses to take over ("disconnected from
        // master for longer than allowed"): wait until every replica's link is up, and every
        // node knows the three replicas (their roles spread by gossip).
        loop {
            let replicas: Vec<u16> = cluster.view()?.iter().filter(|n| !n.master).map(|n| n.port).collect();
            let linked = replicas.iter().all(|&p| {
                cli(p, &["INFO", "replication"]).is_ok_and(|i| i.lines().any(|l| l.trim() == "master_link_status:up"))
            });
            if replicas.len() == 3 && linked {
                return Ok(cluster);
            }
            if Instant::now() > deadline {
                bail!("the replicas did not sync with their masters: {:?}", cluster.view());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `redis+cluster://` naming the first three nodes (the masters of a fresh cluster).
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes.iter().take(3).map(|n| format!("127.0.0.1:{}", n.port)).collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The cluster as a live node sees it (`CLUSTER NODES`).
    ///
    /// # Errors
    ///
    /// No node answers.
    pub fn view(&self) -> anyhow::Result<Vec<NodeView>> {
        let live = self.nodes.iter().find(|n| n.child.is_some()).context("no node runs")?;
        let text = cli(live.port, &["CLUSTER", "NODES"])?;
        Ok(text.lines().filter_map(parse_node_line).collect())
    }

    /// The ports of the masters that serve slots and are not marked failed.
    ///
    /// # Errors
    ///
    /// No node answers.
    pub fn masters(&self) -> anyhow::Result<Vec<u16>> {
        Ok(self.view()?.into_iter().filter(|n| n.master && !n.failed && !n.slots.is_empty()).map(|n| n.port).collect())
    }

    /// SIGKILL of the node on `port`, as a crash (its replica takes over after the node timeout).
    pub fn kill(&mut self, port: u16) {
        if let Some(node) = self.nodes.iter_mut().find(|n| n.port == port) {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// The port of the serving master that holds `key`'s slot (`CLUSTER KEYSLOT`).
    ///
    /// # Errors
    ///
    /// No node answers, or no serving master lists the slot.
    pub fn master_of(&self, key: &str) -> anyhow::Result<u16> {
        let live = self.nodes.iter().find(|n| n.child.is_some()).context("no node runs")?;
        let slot: u16 = cli(live.port, &["CLUSTER", "KEYSLOT", key])?.trim().parse().context("a slot number")?;
        let serves = |range: &str| match range.split_once('-') {
            Some((a, b)) => a.parse::<u16>().is_ok_and(|a| a <= slot) && b.parse::<u16>().is_ok_and(|b| slot <= b),
            None => range.parse::<u16>().is_ok_and(|s| s == slot),
        };
        self.view()?
            .into_iter()
            .find(|n| n.master && !n.failed && n.slots.iter().any(|r| serves(r)))
            .map(|n| n.port)
            .context("no master serves the slot")
    }

    /// The port of a replica of the master on `master`.
    ///
    /// # Errors
    ///
    /// No node answers, or the master has no replica.
    pub fn replica_of(&self, master: u16) -> anyhow::Result<u16> {
        let live = self.nodes.iter().find(|n| n.child.is_some()).context("no node runs")?;
        let text = cli(live.port, &["CLUSTER", "NODES"])?;
        let id = self.view()?.into_iter().find(|n| n.port == master).context("no such node")?.id;
        text.lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                (fields.get(3) == Some(&id.as_str())).then(|| parse_node_line(line).map(|n| n.port)).flatten()
            })
            .next()
            .context("the master has no replica")
    }

    /// Stops the node on `port` (SIGSTOP): it neither answers nor replicates until
    /// [`PrivateCluster::resume`].
    pub fn pause(&self, port: u16) {
        self.signal(port, "-STOP");
    }

    /// Waits until a replica of `master` has acknowledged every write the master took so far
    /// (`WAIT 1`): replication is asynchronous, so a test that stops a replica waits on this
    /// first to know what the replica holds.
    ///
    /// # Errors
    ///
    /// The master does not answer, or no replica caught up within `limit`.
    pub fn wait_replicated(&self, master: u16, limit: Duration) -> anyhow::Result<()> {
        let millis = limit.as_millis().to_string();
        let acked = cli(master, &["WAIT", "1", &millis])?;
        match acked.trim().parse::<u64>() {
            Ok(n) if n >= 1 => Ok(()),
            _ => bail!("no replica of {master} acknowledged its writes within {limit:?} (WAIT answered {acked:?})"),
        }
    }

    /// Closes the master's links to its replicas (`CLIENT KILL TYPE replica`): with its replica
    /// paused, the writes that follow reach no replica until it resyncs.
    ///
    /// # Errors
    ///
    /// The master does not answer.
    pub fn cut_replication(&self, master: u16) -> anyhow::Result<()> {
        cli(master, &["CLIENT", "KILL", "TYPE", "replica"]).map(drop)
    }

    /// Lets a paused node run again (SIGCONT).
    pub fn resume(&self, port: u16) {
        self.signal(port, "-CONT");
    }

    fn signal(&self, port: u16, signal: &str) {
        if let Some(child) = self.nodes.iter().find(|n| n.port == port).and_then(|n| n.child.as_ref()) {
            let _ = Command::new("kill").args([signal, &child.id().to_string()]).status();
        }
    }

    /// Waits until every running node reports `cluster_state:ok` and every slot is served by a
    /// running master; returns how long that took.
    ///
    /// # Errors
    ///
    /// Not within `limit`.
    pub fn wait_ok(&self, limit: Duration) -> anyhow::Result<Duration> {
        let started = Instant::now();
        loop {
            let states_ok = self.nodes.iter().filter(|n| n.child.is_some()).all(|n| {
                cli(n.port, &["CLUSTER", "INFO"]).is_ok_and(|info| info.lines().any(|l| l.trim() == "cluster_state:ok"))
            });
            // Every slot's master is a node that runs (a killed master keeps its slots until
            // its replica is elected).
            let running = |port: &u16| self.nodes.iter().any(|n| n.port == *port && n.child.is_some());
            let served = self.masters().is_ok_and(|m| m.len() == 3 && m.iter().all(running));
            if states_ok && served {
                return Ok(started.elapsed());
            }
            if started.elapsed() > limit {
                bail!("the cluster is not ok after {limit:?}: {:?}", self.view());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Moves `slots` slots from the master on `from` to the master on `to`
    /// (`redis-cli --cluster reshard`), key by key while clients keep running.
    ///
    /// # Errors
    ///
    /// Either port is not a serving master, or `redis-cli` failed.
    pub fn reshard(&self, from: u16, to: u16, slots: u32) -> anyhow::Result<()> {
        let view = self.view()?;
        let id =
            |port: u16| view.iter().find(|n| n.port == port && n.master).map(|n| n.id.clone()).context("not a master");
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("reshard")
            .arg(format!("127.0.0.1:{from}"))
            .args(["--cluster-from", &id(from)?, "--cluster-to", &id(to)?])
            .args(["--cluster-slots", &slots.to_string(), "--cluster-yes", "--cluster-pipeline", "100"])
            .stdin(Stdio::null())
            .output()
            .context("running redis-cli --cluster reshard")?;
        if !out.status.success() {
            bail!("redis-cli --cluster reshard: {}", String::from_utf8_lossy(&out.stdout));
        }
        Ok(())
    }
}

/// Lines of each node's log a failing test prints.
const LOG_TAIL_LINES: usize = 40;

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if std::thread::panicking() {
            for node in &self.nodes {
                let log = std::fs::read_to_string(self.dir.join(node.port.to_string()).join("redis.log"));
                let log = log.unwrap_or_else(|e| format!("(no log: {e})"));
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
                eprintln!(
                    "---- private cluster node {}: the last {LOG_TAIL_LINES} lines of its log ----\n{tail}",
                    node.port
                );
            }
            eprintln!("private cluster files kept in {}", self.dir.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `redis-cli -p <port> <args>`: its output, or the failure.
fn cli(port: u16, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("redis-cli").args(["-p", &port.to_string()]).args(args).stdin(Stdio::null()).output()?;
    if !out.status.success() {
        bail!("redis-cli -p {port} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `<id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link> <slot> ...`
fn parse_node_line(line: &str) -> Option<NodeView> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let port = fields.get(1)?.split('@').next()?.rsplit(':').next()?.parse().ok()?;
    let flags = fields.get(2)?;
    Some(NodeView {
        id: (*fields.first()?).to_owned(),
        port,
        master: flags.split(',').any(|f| f == "master"),
        failed: flags.split(',').any(|f| f == "fail" || f == "fail?"),
        slots: fields.iter().skip(8).map(|s| (*s).to_owned()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lines_parse() {
        let line = "07c3 127.0.0.1:30004@31004 myself,master - 0 1426238316232 1 connected 0-5460 6000";
        let view = parse_node_line(line).unwrap();
        assert_eq!((view.port, view.master, view.failed), (30004, true, false));
        assert_eq!(view.slots, vec!["0-5460", "6000"]);
        let failed = parse_node_line("a 127.0.0.1:7000@17000 master,fail - 0 0 2 disconnected").unwrap();
        assert!(failed.failed && failed.slots.is_empty());
    }

    /// A test that fails with a private cluster up keeps its nodes' files; one that passes does
    /// not. Needs `redis-server` (the local stack installs it).
    #[test]
    fn a_failing_test_keeps_its_clusters_files_and_a_passing_one_does_not() {
        let kept = std::panic::catch_unwind(|| {
            let cluster = PrivateCluster::start().expect("a private cluster starts");
            std::panic::panic_any(cluster.dir().to_owned())
        })
        .expect_err("the closure panics");
        let kept = *kept.downcast::<PathBuf>().expect("the cluster's directory");
        let logs = std::fs::read_dir(&kept)
            .expect("kept")
            .filter(|e| e.as_ref().is_ok_and(|e| e.path().join("redis.log").exists()));
        assert_eq!(logs.count(), 6, "every node's log is kept in {}", kept.display());
        std::fs::remove_dir_all(&kept).expect("cleaning up");

        let cluster = PrivateCluster::start().expect("a private cluster starts");
        let dir = cluster.dir().to_owned();
        drop(cluster);
        assert!(!dir.exists(), "{} is removed after a passing test", dir.display());
    }
}
