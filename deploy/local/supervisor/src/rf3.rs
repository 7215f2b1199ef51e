//! `stack rf3 up|down|status|reset|kill <node>|nodetool <n> ...`: the three-node mode, three
//! Kafka brokers ([`crate::kafka_cluster`]) and a three-node Cassandra ring
//! ([`crate::cassandra_ring`]) on loopback, in their own state dir ([`crate::rf3_layout`]),
//! beside the single-node stack and its Redis Cluster. `up` is idempotent and waits for real
//! readiness; `kill` is a SIGKILL of one node, which the next `up` restarts.

use std::os::unix::process::CommandExt as _;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rustix::process::Signal;

use crate::commands::lock_at;
use crate::install::{ensure_java, fetch_cassandra, fetch_kafka, find_java17};
use crate::layout::Settings;
use crate::probe::{Build, Probe};
use crate::process::{pid_if, signal, terminate, wait_gone};
use crate::rf3_layout::{Node, NODES};
use crate::{cassandra_ring, kafka_cluster, log, ports};

/// Why one half of `rf3 up` stopped waiting: the other half failed.
const ABORTED: &str = "rf3 up stopped: the other half failed";

/// The pid of `node` if it runs.
fn running(settings: &Settings, node: Node) -> Option<i32> {
    pid_if(&settings.rf3.pid_file(node), &settings.rf3.identity(node))
}

/// `rf3 up`: starts what is not running (the brokers together, the Cassandra nodes one at a
/// time), waits until each broker sees three brokers, the topics exist with RF 3 and are in
/// sync, and each Cassandra node answers CQL and sees the ring whole; prints the connection
/// strings on stdout.
pub fn up(settings: &Settings) -> anyhow::Result<ExitCode> {
    let rf3 = &settings.rf3;
    std::fs::create_dir_all(&rf3.dir).with_context(|| format!("creating {}", rf3.dir.display()))?;
    std::fs::create_dir_all(&settings.cache_dir)?;
    std::fs::write(rf3.marker_file(), "")?;
    // The default dir is in the checkout, which does not list it in .gitignore.
    std::fs::write(rf3.dir.join(".gitignore"), "*\n")?;
    let _lock = lock_at(&rf3.lock_file())?;
    let t0 = Instant::now();
    for node in Node::all().filter(|&n| running(settings, n).is_none()) {
        for (addr, port) in rf3.listens(node) {
            if ports::taken_on(addr.parse()?, port) {
                log!("{addr}:{port} (needed by rf3 {node}) is already in use by another process:");
                eprint!("{}", ports::who_listens(port));
                bail!("free {addr}:{port} or move the mode's ports (QIM_STACK_RF3_*_PORT) and retry");
            }
        }
    }
    let java_home = ensure_java(settings)?;
    let java = java_home.join("bin/java");
    fetch_kafka(settings, &java_home)?;
    fetch_cassandra(settings, &java_home)?;
    let brokers_started = kafka_cluster::start(settings, &java)?;
    let mut cassandra_started = Vec::new();
    if cassandra_ring::running_pid(settings, 1).is_none() {
        cassandra_ring::start(settings, &java, 1)?;
        cassandra_started.push(1);
    }
    let probe_build = Build::start_into(settings, &rf3.dir)?;

    // Kafka's readiness and topics on a thread, the Cassandra nodes one by one on this one; a
    // failure of either half stops the other's wait.
    let failed = AtomicBool::new(false);
    let alive = || -> anyhow::Result<()> {
        if failed.load(Ordering::Relaxed) {
            bail!(ABORTED);
        }
        Ok(())
    };
    let (kafka, ring) = std::thread::scope(|scope| {
        let kafka = scope.spawn(|| {
            let r =
                kafka_cluster::wait(settings, &alive).and_then(|md| kafka_cluster::ensure_topics(settings, &java, &md));
            failed.fetch_or(r.is_err(), Ordering::Relaxed);
            r
        });
        let ring = (|| -> anyhow::Result<Probe> {
            let probe = probe_build.finish(settings)?;
            for n in 1..=NODES {
                // (A node started above that died already is not started again: its wait fails.)
                if !cassandra_started.contains(&n) && cassandra_ring::running_pid(settings, n).is_none() {
                    cassandra_ring::start(settings, &java, n)?;
                    cassandra_started.push(n);
                }
                // A node started now, or one before a node still to start, must answer first;
                // the ring check below covers those that ran already.
                let later_down = (n + 1..=NODES).any(|m| cassandra_ring::running_pid(settings, m).is_none());
                if cassandra_started.contains(&n) || later_down {
                    cassandra_ring::wait(settings, &probe, n, false, &alive)?;
                }
            }
            Ok(probe)
        })();
        failed.fetch_or(ring.is_err(), Ordering::Relaxed);
        (kafka.join().unwrap_or_else(|_| Err(anyhow::anyhow!("the kafka wait panicked"))), ring)
    });
    // The error to show is the half's that failed first, not the other's "stopped".
    let probe = match (ring, kafka) {
        (Ok(probe), Ok(())) => probe,
        (Err(r), Err(k)) => return Err(if r.to_string() == ABORTED { k } else { r }),
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    for n in 1..=NODES {
        cassandra_ring::wait(settings, &probe, n, true, &|| Ok(()))?;
    }
    kafka_cluster::wait_in_sync(settings)?;
    let started: Vec<String> = brokers_started
        .iter()
        .map(|&n| Node::Kafka(n).to_string())
        .chain(cassandra_started.iter().map(|&n| Node::Cassandra(n).to_string()))
        .collect();
    log!(
        "rf3 up in {}s ({}): kafka {} (RF 3, min ISR 2), cassandra ring {} (state: {})",
        t0.elapsed().as_secs(),
        if started.is_empty() { "all were running".to_owned() } else { format!("started {}", started.join(" ")) },
        rf3.bootstrap_servers(),
        rf3.contact_points(),
        rf3.dir.display()
    );
    println!("QIM_KAFKA_BROKERS={}", rf3.bootstrap_servers());
    println!("QIM_SCYLLA_HOSTS={}", rf3.contact_points());
    println!("QIM_SCYLLA_DC=datacenter1");
    println!("QIM_SCYLLA_RF=3");
    Ok(ExitCode::SUCCESS)
}

/// Stops every node of the mode that runs, all at once (SIGTERM, SIGKILL after
/// `QIM_STACK_STOP_TIMEOUT`); the caller holds the lock.
fn stop_all(settings: &Settings) {
    let t0 = Instant::now();
    std::thread::scope(|scope| {
        for node in Node::all() {
            scope.spawn(move || {
                let pid_file = settings.rf3.pid_file(node);
                if let Some(pid) = running(settings, node) {
                    log!("rf3 {node}: stopping pid {pid} (SIGTERM)");
                    if terminate(pid, settings.stop_timeout) {
                        log!("rf3 {node}: still alive after {}s, SIGKILL", settings.stop_timeout.as_secs());
                    }
                    log!("rf3 {node}: stopped");
                }
                let _ = std::fs::remove_file(pid_file);
            });
        }
    });
    log!("rf3 down in {}s", t0.elapsed().as_secs());
}

/// `rf3 down`: stops the six nodes; their data stays.
pub fn down(settings: &Settings) -> anyhow::Result<ExitCode> {
    if !settings.rf3.dir.is_dir() {
        log!("rf3: nothing to stop ({} does not exist)", settings.rf3.dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let _lock = lock_at(&settings.rf3.lock_file())?;
    stop_all(settings);
    Ok(ExitCode::SUCCESS)
}

/// `rf3 reset`: `rf3 down`, then deletes the mode's state dir (which must carry its marker).
pub fn reset(settings: &Settings) -> anyhow::Result<ExitCode> {
    let dir = &settings.rf3.dir;
    if !dir.is_dir() {
        log!("rf3: nothing to reset ({} does not exist)", dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let _lock = lock_at(&settings.rf3.lock_file())?;
    stop_all(settings);
    if !settings.rf3.marker_file().is_file() {
        bail!("{} has no .qim-stack-rf3 marker; not deleting it", dir.display());
    }
    std::fs::remove_dir_all(dir).with_context(|| format!("deleting {}", dir.display()))?;
    log!("rf3: deleted {}", dir.display());
    Ok(ExitCode::SUCCESS)
}

/// `rf3 kill <node>`: SIGKILL, as a crash, waiting until the process is gone; `rf3 up` restarts it.
pub fn kill(settings: &Settings, node: Node) -> anyhow::Result<ExitCode> {
    let Some(pid) = running(settings, node) else {
        log!("rf3 {node}: not running");
        return Ok(ExitCode::SUCCESS);
    };
    signal(pid, Signal::KILL);
    wait_gone(pid, None, Duration::from_millis(50));
    let _ = std::fs::remove_file(settings.rf3.pid_file(node));
    log!("rf3 {node}: killed (pid {pid}, SIGKILL)");
    Ok(ExitCode::SUCCESS)
}

/// `rf3 status`: one line per node; exit 0 only if each broker sees the three brokers and each
/// Cassandra node sees the ring whole.
pub fn status(settings: &Settings) -> anyhow::Result<ExitCode> {
    let probe = if (1..=NODES).any(|n| cassandra_ring::running_pid(settings, n).is_some()) {
        Some(Probe::build_now(settings)?)
    } else {
        None
    };
    let mut all_up = true;
    for node in Node::all() {
        let (up, state, detail) = match (running(settings, node), node, &probe) {
            (None, _, _) => (false, "down", String::new()),
            (Some(pid), Node::Kafka(n), _) => {
                let (up, d) = kafka_cluster::status(settings, n);
                (up, if up { "up" } else { "NOT READY" }, format!("pid {pid}  {d}"))
            }
            (Some(pid), Node::Cassandra(n), Some(p)) => {
                let (up, d) = cassandra_ring::status(settings, p, n);
                (up, if up { "up" } else { "NOT READY" }, format!("pid {pid}  {d}"))
            }
            (Some(pid), Node::Cassandra(_), None) => (false, "NOT READY", format!("pid {pid}")),
        };
        all_up &= up;
        println!("{:<12} {:<10} {}", node.to_string(), state, detail);
    }
    Ok(if all_up { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// nodetool's logging: warnings on stderr only.
const NODETOOL_LOGBACK: &str = r#"<configuration>
  <appender name="STDERR" class="ch.qos.logback.core.ConsoleAppender">
    <target>System.err</target>
    <encoder><pattern>%-5level %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="STDERR"/></root>
</configuration>
"#;

/// `rf3 nodetool <n> ARGS...`: Cassandra's `nodetool` against node `n`'s JMX port.
pub fn nodetool(settings: &Settings, n: u8, args: &[String]) -> anyhow::Result<ExitCode> {
    let java = find_java17(settings).context("no Java 17 found (run `stack rf3 up` first)")?.join("bin/java");
    let logback = settings.rf3.dir.join("nodetool-logback.xml");
    std::fs::create_dir_all(&settings.rf3.dir)?;
    std::fs::write(&logback, NODETOOL_LOGBACK)?;
    let err = Command::new(java)
        .args(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
        .args(crate::cassandra::JVM17_OPTS)
        .arg(format!("-Dlogback.configurationFile={}", logback.display()))
        .arg("-cp")
        .arg(format!("{}/*", settings.cassandra_lib().display()))
        .arg("org.apache.cassandra.tools.NodeTool")
        .args(["-h", "127.0.0.1", "-p", &settings.rf3.jmx(n).to_string()])
        .args(args)
        .exec();
    Err(anyhow::Error::new(err).context("running nodetool"))
}
