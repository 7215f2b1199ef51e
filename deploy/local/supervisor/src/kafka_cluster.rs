//! The three-node mode's Kafka: three brokers in KRaft, each broker and controller in one JVM
//! (node ids 1-3, a static quorum of the three controllers), RF 3 and `min.insync.replicas` 2
//! for new topics and for the internal ones (offsets, transaction state, whose min ISR is 2
//! too), every data dir formatted with one cluster id. The brokers start together: none
//! finishes starting before two of the three controllers have elected a leader.
//!
//! Readiness is a Metadata request to each broker ([`crate::kafka_wire`]) that must list the
//! three brokers; then the qim topics are created with RF 3 where missing ([`crate::topics`]),
//! and `up` finally waits until no partition lacks a leader or an in-sync replica (after a
//! broker's restart its replicas catch up first).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::kafka::{self, BrokerConfig};
use crate::kafka_wire::{self, Metadata};
use crate::layout::{Settings, HOST};
use crate::log;
use crate::output::failed_with_tails;
use crate::process::pid_if;
use crate::rf3_layout::{Node, NODES};
use crate::topics;

/// Each metadata request.
const REQUEST_LIMIT: Duration = Duration::from_secs(3);

/// Broker `n`'s config.
pub fn broker(settings: &Settings, n: u8) -> BrokerConfig {
    let rf3 = &settings.rf3;
    BrokerConfig {
        dir: rf3.node_dir(Node::Kafka(n)),
        node_id: n,
        voters: rf3.voters(),
        port: rf3.kafka_client(n),
        controller_port: rf3.kafka_controller(n),
        replication: NODES,
        min_isr: 2,
        heap: rf3.kafka_heap.clone(),
    }
}

/// The pid of broker `n` if its pid file names a live JVM started with its config.
pub fn running_pid(settings: &Settings, n: u8) -> Option<i32> {
    pid_if(&settings.rf3.pid_file(Node::Kafka(n)), &settings.rf3.identity(Node::Kafka(n)))
}

/// The error that ends a wait on broker `n`, after its log tails.
fn failed(settings: &Settings, n: u8, msg: String) -> anyhow::Error {
    let node = Node::Kafka(n);
    failed_with_tails(&settings.rf3.main_log(node), Some(&settings.rf3.out_log(node)), msg)
}

/// Starts the brokers that are not running, all at once, formatting the storage of those that
/// have none (in parallel, with the cluster id of `kafka-cluster.id`, made on the first
/// format). Returns the node ids started.
pub fn start(settings: &Settings, java: &Path) -> anyhow::Result<Vec<u8>> {
    let todo: Vec<u8> = (1..=NODES).filter(|&n| running_pid(settings, n).is_none()).collect();
    let unformatted: Vec<BrokerConfig> =
        todo.iter().map(|&n| broker(settings, n)).filter(|b| !b.dir.join("data/meta.properties").is_file()).collect();
    for &n in &todo {
        kafka::write_config(&broker(settings, n))?;
    }
    if !unformatted.is_empty() {
        let id_file = settings.rf3.cluster_id_file();
        let cid = match std::fs::read_to_string(&id_file) {
            Ok(id) if !id.trim().is_empty() => id.trim().to_owned(),
            _ => {
                let id = kafka::new_cluster_id()?;
                std::fs::write(&id_file, format!("{id}\n"))?;
                id
            }
        };
        log!("rf3 kafka: formatting KRaft storage of {} broker(s) (cluster id {cid})", unformatted.len());
        std::thread::scope(|scope| {
            let jobs: Vec<_> =
                unformatted.iter().map(|b| scope.spawn(|| kafka::format_storage(settings, java, b, &cid))).collect();
            jobs.into_iter().try_for_each(|j| j.join().map_err(|_| anyhow::anyhow!("format panicked"))?)
        })?;
    }
    for &n in &todo {
        let pid = kafka::launch(settings, java, &broker(settings, n))?;
        std::fs::write(settings.rf3.pid_file(Node::Kafka(n)), format!("{pid}\n"))?;
        log!(
            "rf3 kafka-{n} starting on {HOST}:{} (controller {}), pid {pid}",
            settings.rf3.kafka_client(n),
            settings.rf3.kafka_controller(n)
        );
    }
    Ok(todo)
}

/// Broker `n`'s metadata, if it answers.
pub fn metadata(settings: &Settings, n: u8) -> anyhow::Result<Metadata> {
    kafka_wire::metadata(settings.rf3.kafka_client(n), REQUEST_LIMIT)
}

/// Why broker `n`'s answer is not yet a ready cluster's, if it is not.
fn not_ready(answer: &anyhow::Result<Metadata>) -> Option<String> {
    match answer {
        Err(e) => Some(format!("{e:#}")),
        Ok(md) if md.brokers != (1..=i32::from(NODES)).collect::<Vec<_>>() => {
            Some(format!("it sees brokers {:?}", md.brokers))
        }
        Ok(_) => None,
    }
}

/// Waits (bounded by `QIM_STACK_TIMEOUT`) until each broker answers a metadata request that
/// lists the three brokers; returns broker 1's. `alive` fails the wait if another node of the
/// mode died meanwhile (or the other half of `up` failed).
pub fn wait(settings: &Settings, alive: &dyn Fn() -> anyhow::Result<()>) -> anyhow::Result<Metadata> {
    let deadline = Instant::now() + settings.timeout;
    loop {
        for n in 1..=NODES {
            if running_pid(settings, n).is_none() {
                return Err(failed(settings, n, format!("rf3 kafka-{n} process is not running")));
            }
        }
        alive()?;
        let answers: Vec<_> = (1..=NODES).map(|n| metadata(settings, n)).collect();
        let lagging = answers.iter().zip(1..).find_map(|(a, n)| not_ready(a).map(|why| (n, why)));
        match lagging {
            None => {
                log!("rf3 kafka ready: {} (each sees brokers 1, 2, 3)", settings.rf3.bootstrap_servers());
                return answers.into_iter().next().context("no broker")?;
            }
            Some((n, why)) if Instant::now() >= deadline => {
                let msg = format!("rf3 kafka-{n} not ready after {}s: {why}", settings.timeout.as_secs());
                return Err(failed(settings, n, msg));
            }
            Some(_) => std::thread::sleep(Duration::from_secs(1)),
        }
    }
}

/// Creates the qim topics `md` lacks, with RF 3 (admin JVMs, output in `kafka-1/topic-*.log`).
pub fn ensure_topics(settings: &Settings, java: &Path, md: &Metadata) -> anyhow::Result<()> {
    let listed: Vec<String> = md.topics.iter().map(|t| t.name.clone()).collect();
    for (name, _) in topics::TOPICS {
        if let Some(rf) = md.replication(name).filter(|&rf| rf != usize::from(NODES)) {
            log!("rf3 kafka: WARNING: topic {name} exists with RF {rf}, not {NODES} (`rf3 reset` starts afresh)");
        }
    }
    let dir = settings.rf3.node_dir(Node::Kafka(1));
    topics::ensure_on(settings, java, &dir, &settings.rf3.bootstrap_servers(), NODES, &listed)
}

/// Waits (bounded by `QIM_STACK_TIMEOUT`) until broker 1 reports every partition with a leader
/// and all its replicas in sync; returns that metadata.
pub fn wait_in_sync(settings: &Settings) -> anyhow::Result<Metadata> {
    let deadline = Instant::now() + settings.timeout;
    loop {
        let answer = metadata(settings, 1);
        let why = match &answer {
            Ok(md) if not_ready(&answer).is_none() && md.under_replicated().is_empty() => {
                let (topics, partitions) =
                    (md.topics.len(), md.topics.iter().map(|t| t.partitions.len()).sum::<usize>());
                log!("rf3 kafka in sync: {topics} topics, {partitions} partitions, every replica in the ISR");
                return answer;
            }
            Ok(md) => not_ready(&answer).unwrap_or_else(|| format!("out of sync: {}", md.under_replicated().join(" "))),
            Err(e) => format!("{e:#}"),
        };
        if Instant::now() >= deadline {
            return Err(failed(
                settings,
                1,
                format!("rf3 kafka not in sync after {}s: {why}", settings.timeout.as_secs()),
            ));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// `rf3 status`'s line for broker `n` (without its name and pid), and whether it is up.
pub fn status(settings: &Settings, n: u8) -> (bool, String) {
    let at = format!("{HOST}:{} (controller {})", settings.rf3.kafka_client(n), settings.rf3.kafka_controller(n));
    let answer = metadata(settings, n);
    match (&answer, not_ready(&answer)) {
        (Ok(md), None) => {
            let lagging = md.under_replicated().len();
            (true, format!("{at}  sees brokers 1,2,3, {lagging} partitions out of sync"))
        }
        (_, why) => (false, format!("{at}  {}", why.unwrap_or_default())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brokers_share_one_quorum_and_replicate_three_times() {
        let s = Settings::from_lookup(|k| match k {
            "QIM_STACK_DIR" => Some("/s".into()),
            _ => None,
        })
        .unwrap();
        let b = broker(&s, 2);
        let p = b.properties();
        assert_eq!(b.config(), Path::new("/s-rf3/kafka-2/config/server.properties"));
        assert!(p.contains("\nnode.id=2\n"), "{p}");
        assert!(p.contains("\ncontroller.quorum.voters=1@127.0.0.1:9193,2@127.0.0.1:9195,3@127.0.0.1:9197\n"), "{p}");
        assert!(p.contains("\nlisteners=PLAINTEXT://127.0.0.1:9194,CONTROLLER://127.0.0.1:9195\n"), "{p}");
        assert!(p.contains("\nadvertised.listeners=PLAINTEXT://127.0.0.1:9194\n"), "{p}");
        assert!(p.contains("\nlog.dirs=/s-rf3/kafka-2/data\n"), "{p}");
        for line in [
            "default.replication.factor=3",
            "min.insync.replicas=2",
            "offsets.topic.replication.factor=3",
            "transaction.state.log.replication.factor=3",
            "transaction.state.log.min.isr=2",
        ] {
            assert!(p.contains(&format!("\n{line}\n")), "{line} in {p}");
        }
        assert_eq!(b.heap, "512m");
        // the single stack's broker is unchanged: RF 1 everywhere
        let single = crate::kafka::server_properties(&s);
        assert!(single.contains("\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:9093\n"), "{single}");
        assert!(single.contains("\ndefault.replication.factor=1\nmin.insync.replicas=1\n"), "{single}");
        assert!(single.contains("\ntransaction.state.log.min.isr=1\n"), "{single}");
    }

    #[test]
    fn a_ready_answer_lists_the_three_brokers() {
        let md = |brokers: Vec<i32>| -> anyhow::Result<Metadata> { Ok(Metadata { brokers, ..Metadata::default() }) };
        assert_eq!(not_ready(&md(vec![1, 2, 3])), None);
        assert_eq!(not_ready(&md(vec![1, 3])).as_deref(), Some("it sees brokers [1, 3]"));
        assert!(not_ready(&Err(anyhow::anyhow!("refused"))).is_some());
    }
}
