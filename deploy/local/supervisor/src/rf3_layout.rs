//! Where the three-node mode (`stack rf3 ...`) lives and listens: three Kafka brokers (KRaft,
//! each broker and controller) and a three-node Cassandra ring on 127.0.0.1, 127.0.0.2 and
//! 127.0.0.3, in a state dir of their own, on ports apart from the single-node stack's and its
//! Redis Cluster's so that all of them run side by side. Read from the environment with the
//! other knobs ([`crate::layout::Settings::from_env`]).
//!
//! | knob | default | what |
//! |------|---------|------|
//! | `QIM_STACK_RF3_DIR` | `$QIM_STACK_DIR-rf3` (`<repo>/.stack-rf3`) | the mode's state |
//! | `QIM_STACK_RF3_KAFKA_PORT` | 9192 | broker N: client port + 2(N-1), controller port one above |
//! | `QIM_STACK_RF3_CASSANDRA_PORT` | 9142 | CQL, on each node's own address |
//! | `QIM_STACK_RF3_CASSANDRA_STORAGE_PORT` | 7010 | storage (gossip), on each node's own address |
//! | `QIM_STACK_RF3_JMX_PORT` | 7191 | node N's JMX: + N-1, on 127.0.0.1 (local JMX binds there) |
//! | `QIM_STACK_RF3_KAFKA_HEAP` | 512m | each broker's heap |
//! | `QIM_STACK_RF3_CASSANDRA_HEAP` | 1G | each Cassandra node's heap |

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::bail;

use crate::layout::{physical, port_knob, Identity, Ports, HOST};

/// Nodes of each kind.
pub const NODES: u8 = 3;
/// The ring's `cluster_name` (the single node's is `qim-local`: the two never gossip).
pub const CLUSTER_NAME: &str = "qim-rf3";
/// `num_tokens: 1` and node N's `initial_token`: the Murmur3 range cut in three equal parts, as
/// Cassandra's own token generator (and ccm) cut it. With RF 3 on three nodes every node holds
/// every row whatever the tokens; fixed tokens only make ownership the same on every start.
pub const INITIAL_TOKENS: [i64; 3] = [i64::MIN, -3_074_457_345_618_258_603, 3_074_457_345_618_258_602];

/// One node of the mode: `kafka-N` or `cassandra-N`, N in 1..=3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Node {
    Kafka(u8),
    Cassandra(u8),
}

impl Node {
    /// kafka-1..3, then cassandra-1..3.
    pub fn all() -> impl Iterator<Item = Node> {
        (1..=NODES).map(Node::Kafka).chain((1..=NODES).map(Node::Cassandra))
    }

    /// N.
    pub fn index(self) -> u8 {
        match self {
            Node::Kafka(n) | Node::Cassandra(n) => n,
        }
    }

    /// `kafka` or `cassandra`.
    pub fn kind(self) -> &'static str {
        match self {
            Node::Kafka(_) => "kafka",
            Node::Cassandra(_) => "cassandra",
        }
    }
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.kind(), self.index())
    }
}

impl FromStr for Node {
    type Err = String;

    fn from_str(s: &str) -> Result<Node, String> {
        let bad = || format!("{s:?} is not a node: kafka-1..kafka-{NODES} or cassandra-1..cassandra-{NODES}");
        let (kind, n) = s.rsplit_once('-').ok_or_else(bad)?;
        let n: u8 = n.parse().ok().filter(|n| (1..=NODES).contains(n)).ok_or_else(bad)?;
        match kind {
            "kafka" => Ok(Node::Kafka(n)),
            "cassandra" => Ok(Node::Cassandra(n)),
            _ => Err(bad()),
        }
    }
}

/// The mode's state dir, ports and heaps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rf3 {
    pub dir: PathBuf,
    /// Broker 1's client port.
    pub kafka_port: u16,
    pub cql_port: u16,
    pub storage_port: u16,
    /// Node 1's JMX port.
    pub jmx_port: u16,
    pub kafka_heap: String,
    pub cassandra_heap: String,
}

impl Rf3 {
    /// The mode's settings from `var` (an empty value already counts as unset there); `stack_dir`
    /// is the single stack's state dir, `single` its ports, which must stay apart from these.
    pub fn from_lookup(
        var: &dyn Fn(&str) -> Option<OsString>,
        stack_dir: &Path,
        single: &Ports,
    ) -> anyhow::Result<Rf3> {
        let dir = var("QIM_STACK_RF3_DIR").map_or_else(
            || {
                let mut d = stack_dir.as_os_str().to_owned();
                d.push("-rf3");
                PathBuf::from(d)
            },
            |d| physical(Path::new(&d)),
        );
        let port = |k: &str, d: u16| port_knob(k, var(k), d);
        let heap = |k: &str, d: &str| -> anyhow::Result<String> {
            let v = var(k).map_or_else(|| d.to_owned(), |v| v.to_string_lossy().trim().to_owned());
            let digits = v.trim_end_matches(['k', 'K', 'm', 'M', 'g', 'G']);
            if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) || v.len() > digits.len() + 1 {
                bail!("{k}={v:?} is not a heap size (as -Xmx takes it: 512m, 1G)");
            }
            Ok(v)
        };
        let rf3 = Rf3 {
            dir,
            kafka_port: port("QIM_STACK_RF3_KAFKA_PORT", 9192)?,
            cql_port: port("QIM_STACK_RF3_CASSANDRA_PORT", 9142)?,
            storage_port: port("QIM_STACK_RF3_CASSANDRA_STORAGE_PORT", 7010)?,
            jmx_port: port("QIM_STACK_RF3_JMX_PORT", 7191)?,
            kafka_heap: heap("QIM_STACK_RF3_KAFKA_HEAP", "512m")?,
            cassandra_heap: heap("QIM_STACK_RF3_CASSANDRA_HEAP", "1G")?,
        };
        if rf3.kafka_port > u16::MAX - 2 * u16::from(NODES) || rf3.jmx_port > u16::MAX - u16::from(NODES) {
            bail!("QIM_STACK_RF3_KAFKA_PORT / QIM_STACK_RF3_JMX_PORT leave no room for three nodes");
        }
        // The ring's CQL and storage ports are bound on 127.0.0.1 too (node 1), so every port
        // here must differ from every other and from the single stack's (Redis Cluster buses too).
        let mut all = rf3.port_numbers();
        all.extend(single.numbers());
        all.extend((0..crate::redis_cluster::NODES).map(|i| single.redis_cluster + 10_000 + i));
        all.sort_unstable();
        if let Some(w) = all.windows(2).find(|w| w[0] == w[1]) {
            bail!("port {} is given twice (QIM_STACK_RF3_*_PORT against each other or the single stack's)", w[0]);
        }
        Ok(rf3)
    }

    /// Every port number the mode listens on, once each (the ring's CQL and storage ports are
    /// the same number on the three addresses).
    pub fn port_numbers(&self) -> Vec<u16> {
        let mut all = vec![self.cql_port, self.storage_port];
        for n in 1..=NODES {
            all.extend([self.kafka_client(n), self.kafka_controller(n), self.jmx(n)]);
        }
        all
    }

    /// `(address, port)` of every socket `node` listens on, which must be free before it starts.
    pub fn listens(&self, node: Node) -> Vec<(String, u16)> {
        match node {
            Node::Kafka(n) => vec![(HOST.into(), self.kafka_client(n)), (HOST.into(), self.kafka_controller(n))],
            Node::Cassandra(n) => {
                vec![(self.address(n), self.cql_port), (self.address(n), self.storage_port), (HOST.into(), self.jmx(n))]
            }
        }
    }

    pub fn kafka_client(&self, n: u8) -> u16 {
        self.kafka_port + 2 * u16::from(n - 1)
    }

    pub fn kafka_controller(&self, n: u8) -> u16 {
        self.kafka_client(n) + 1
    }

    /// Cassandra node N's address: 127.0.0.N (all of 127/8 is loopback on Linux).
    pub fn address(&self, n: u8) -> String {
        format!("127.0.0.{n}")
    }

    pub fn jmx(&self, n: u8) -> u16 {
        self.jmx_port + u16::from(n - 1)
    }

    /// `controller.quorum.voters` of every broker.
    pub fn voters(&self) -> String {
        let v: Vec<String> = (1..=NODES).map(|n| format!("{n}@{HOST}:{}", self.kafka_controller(n))).collect();
        v.join(",")
    }

    /// The Kafka bootstrap servers list.
    pub fn bootstrap_servers(&self) -> String {
        let v: Vec<String> = (1..=NODES).map(|n| format!("{HOST}:{}", self.kafka_client(n))).collect();
        v.join(",")
    }

    /// The CQL contact points, `host:port` each.
    pub fn contact_points(&self) -> String {
        let v: Vec<String> = (1..=NODES).map(|n| format!("{}:{}", self.address(n), self.cql_port)).collect();
        v.join(",")
    }

    /// `<rf3>/kafka-N` or `<rf3>/cassandra-N`: everything of one node.
    pub fn node_dir(&self, node: Node) -> PathBuf {
        self.dir.join(node.to_string())
    }

    pub fn pid_file(&self, node: Node) -> PathBuf {
        self.node_dir(node).join(format!("{}.pid", node.kind()))
    }

    /// The config file the node is started with, which its command line names.
    pub fn config(&self, node: Node) -> PathBuf {
        match node {
            Node::Kafka(_) => self.node_dir(node).join("config/server.properties"),
            Node::Cassandra(_) => self.node_dir(node).join("conf/cassandra.yaml"),
        }
    }

    /// The server's own log.
    pub fn main_log(&self, node: Node) -> PathBuf {
        match node {
            Node::Kafka(_) => self.node_dir(node).join("logs/server.log"),
            Node::Cassandra(_) => self.node_dir(node).join("logs/system.log"),
        }
    }

    /// The JVM's stdout and stderr.
    pub fn out_log(&self, node: Node) -> PathBuf {
        self.node_dir(node).join(format!("{}.out", node.kind()))
    }

    /// What tells this node's JVM from any other: its config file in its command line.
    pub fn identity(&self, node: Node) -> Identity {
        Identity::CmdlineContains(self.config(node).display().to_string())
    }

    /// The one KRaft cluster id every broker is formatted with.
    pub fn cluster_id_file(&self) -> PathBuf {
        self.dir.join("kafka-cluster.id")
    }

    /// Marks the dir as the mode's: `rf3 reset` deletes only a dir that has it.
    pub fn marker_file(&self) -> PathBuf {
        self.dir.join(".qim-stack-rf3")
    }

    /// Serialises `rf3 up`, `down` and `reset`.
    pub fn lock_file(&self) -> PathBuf {
        self.dir.join(".lock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rf3(vars: &[(&str, &str)]) -> anyhow::Result<Rf3> {
        let vars: Vec<(String, OsString)> = vars.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        let var = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        Rf3::from_lookup(&var, Path::new("/r/.stack"), &Ports::default())
    }

    #[test]
    fn the_default_layout_stays_apart_from_the_single_stack() {
        let r = rf3(&[]).unwrap();
        assert_eq!(r.dir, Path::new("/r/.stack-rf3"));
        assert_eq!(r.bootstrap_servers(), "127.0.0.1:9192,127.0.0.1:9194,127.0.0.1:9196");
        assert_eq!(r.voters(), "1@127.0.0.1:9193,2@127.0.0.1:9195,3@127.0.0.1:9197");
        assert_eq!(r.contact_points(), "127.0.0.1:9142,127.0.0.2:9142,127.0.0.3:9142");
        assert_eq!(
            r.listens(Node::Cassandra(2)),
            [("127.0.0.2".into(), 9142), ("127.0.0.2".into(), 7010), ("127.0.0.1".into(), 7192)]
        );
        let mut mine = r.port_numbers();
        mine.sort_unstable();
        assert_eq!(mine, [7010, 7191, 7192, 7193, 9142, 9192, 9193, 9194, 9195, 9196, 9197]);
        let single = Ports::default().numbers();
        assert!(mine.iter().all(|p| !single.contains(p)), "{mine:?} against {single:?}");
        // nor the fault stack's (+10 000) or the README's second stack's (+20 000)
        assert!(mine.iter().all(|p| single.iter().all(|s| *p != s + 10_000 && *p != s + 20_000)));
        assert_eq!((r.kafka_heap.as_str(), r.cassandra_heap.as_str()), ("512m", "1G"));
    }

    #[test]
    fn every_knob_moves_and_bad_ones_are_named() {
        let r = rf3(&[
            ("QIM_STACK_RF3_DIR", "/elsewhere"),
            ("QIM_STACK_RF3_KAFKA_PORT", "29192"),
            ("QIM_STACK_RF3_CASSANDRA_PORT", "29142"),
            ("QIM_STACK_RF3_CASSANDRA_STORAGE_PORT", "27010"),
            ("QIM_STACK_RF3_JMX_PORT", "27191"),
            ("QIM_STACK_RF3_KAFKA_HEAP", "384m"),
            ("QIM_STACK_RF3_CASSANDRA_HEAP", "768M"),
        ])
        .unwrap();
        assert_eq!(r.dir, Path::new("/elsewhere"));
        assert_eq!((r.kafka_client(3), r.kafka_controller(3), r.jmx(3)), (29196, 29197, 27193));
        assert_eq!((r.cql_port, r.storage_port), (29142, 27010));
        assert_eq!((r.kafka_heap.as_str(), r.cassandra_heap.as_str()), ("384m", "768M"));
        let e = rf3(&[("QIM_STACK_RF3_CASSANDRA_PORT", "9042")]).unwrap_err().to_string();
        assert!(e.contains("port 9042 is given twice"), "{e}");
        let e = rf3(&[("QIM_STACK_RF3_JMX_PORT", "9141")]).unwrap_err().to_string();
        assert!(e.contains("port 9142 is given twice"), "{e}");
        let e = rf3(&[("QIM_STACK_RF3_KAFKA_PORT", "17300")]).unwrap_err().to_string();
        assert!(e.contains("port 17301 is given twice"), "a Redis Cluster bus port: {e}");
        let e = rf3(&[("QIM_STACK_RF3_KAFKA_PORT", "65534")]).unwrap_err().to_string();
        assert!(e.contains("no room for three nodes"), "{e}");
        for bad in ["lots", "1.5G", "512mb", "m"] {
            let e = rf3(&[("QIM_STACK_RF3_KAFKA_HEAP", bad)]).unwrap_err().to_string();
            assert!(e.contains("QIM_STACK_RF3_KAFKA_HEAP"), "{e}");
        }
    }

    #[test]
    fn nodes_are_named_as_the_kill_command_takes_them() {
        assert_eq!("kafka-2".parse::<Node>(), Ok(Node::Kafka(2)));
        assert_eq!("cassandra-3".parse::<Node>(), Ok(Node::Cassandra(3)));
        for bad in ["kafka-0", "kafka-4", "kafka", "redis-1", "cassandra-x", ""] {
            assert!(bad.parse::<Node>().is_err(), "{bad}");
        }
        let names: Vec<String> = Node::all().map(|n| n.to_string()).collect();
        assert_eq!(names, ["kafka-1", "kafka-2", "kafka-3", "cassandra-1", "cassandra-2", "cassandra-3"]);
        let r = rf3(&[]).unwrap();
        assert_eq!(r.pid_file(Node::Kafka(2)), Path::new("/r/.stack-rf3/kafka-2/kafka.pid"));
        assert_eq!(
            r.identity(Node::Cassandra(1)),
            Identity::CmdlineContains("/r/.stack-rf3/cassandra-1/conf/cassandra.yaml".into())
        );
        assert_eq!(r.main_log(Node::Kafka(3)), Path::new("/r/.stack-rf3/kafka-3/logs/server.log"));
    }
}
