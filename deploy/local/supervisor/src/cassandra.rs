//! Cassandra 5.0 on Java 17, one node: its minimal `cassandra.yaml` (5.0 refuses unknown keys)
//! and `logback.xml`, the JVM's command line, the start, and readiness (a real CQL query by
//! `qim-stack-probe`, see [`crate::probe`]). The three-node ring's nodes
//! ([`crate::cassandra_ring`]) are configured and launched by the same code ([`NodeConfig`]).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::layout::{Service, Settings, CASSANDRA_HEAP, HOST};
use crate::logfile::Mark;
use crate::output::failed;
use crate::process::{running_pid, spawn_detached};
use crate::{log, ports, probe};

/// From Cassandra's `conf/jvm17-server.options` (JPMS section) + netty options.
pub const JVM17_OPTS: &[&str] = &[
    "-Djdk.attach.allowAttachSelf=true",
    "--add-exports",
    "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports",
    "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports",
    "java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports",
    "java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports",
    "java.sql/java.sql=ALL-UNNAMED",
    "--add-exports",
    "java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports",
    "jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports",
    "jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports",
    "jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens",
    "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens",
    "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.io=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens",
    "jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.util=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.useCacheForAllThreads=true",
    "-Dio.netty.allocator.maxOrder=11",
];

/// The directories under `cassandra/` a start needs.
const DIRS: [&str; 9] = [
    "conf",
    "logs",
    "tmp",
    "triggers",
    "data/data",
    "data/commitlog",
    "data/saved_caches",
    "data/hints",
    "data/cdc_raw",
];

/// What differs between one Cassandra node and another: the single stack's
/// ([`NodeConfig::single`]) or one of the three-node ring's ([`crate::cassandra_ring`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeConfig {
    /// `conf/`, `data/`, `logs/`, `tmp/`, the pid file and the JVM's output are under it.
    pub dir: PathBuf,
    pub cluster_name: &'static str,
    /// `listen_address` and `rpc_address`.
    pub address: String,
    pub cql_port: u16,
    pub storage_port: u16,
    /// `host:port` of the seeds.
    pub seeds: String,
    /// A ring node's fixed `initial_token` (with no bootstrap and no startup wait for peers: see
    /// `cassandra_ring`); none: the single node.
    pub initial_token: Option<i64>,
    pub heap: String,
    /// Local JMX (127.0.0.1) on this port; none: JMX off.
    pub jmx_port: Option<u16>,
}

impl NodeConfig {
    /// The single stack's node: 127.0.0.1, its own seed, no JMX.
    pub fn single(settings: &Settings) -> NodeConfig {
        let storage = settings.ports.cassandra_storage;
        NodeConfig {
            dir: settings.dir(Service::Cassandra),
            cluster_name: "qim-local",
            address: HOST.into(),
            cql_port: settings.ports.cassandra_cql,
            storage_port: storage,
            seeds: format!("{HOST}:{storage}"),
            initial_token: None,
            heap: CASSANDRA_HEAP.into(),
            jmx_port: None,
        }
    }

    /// `conf/cassandra.yaml`, the file its command line names.
    pub fn yaml_path(&self) -> PathBuf {
        self.dir.join("conf/cassandra.yaml")
    }

    /// `logs/system.log`.
    pub fn main_log(&self) -> PathBuf {
        self.dir.join("logs/system.log")
    }
}

/// The single stack's `conf/cassandra.yaml`. (what the tests read)
#[cfg(test)]
pub fn yaml(settings: &Settings) -> String {
    node_yaml(&NodeConfig::single(settings))
}

/// A node's `conf/cassandra.yaml`.
pub fn node_yaml(node: &NodeConfig) -> String {
    let d = node.dir.display().to_string();
    let (storage, cql, address, seeds, cluster) =
        (node.storage_port, node.cql_port, &node.address, &node.seeds, node.cluster_name);
    let tokens = match node.initial_token {
        None => "num_tokens: 1".to_owned(),
        // A ring node (see `cassandra_ring`): its fixed token, no bootstrap, and no waiting up
        // to 10 s at startup for the peers' connections (the seed restarted first after `down`
        // waits for nodes not yet started; `rf3 up` checks the ring itself).
        Some(t) => {
            format!("num_tokens: 1\ninitial_token: {t}\nauto_bootstrap: false\nblock_for_peers_timeout_in_secs: -1")
        }
    };
    format!(
        r#"# generated by deploy/local/stack -- minimal config for Cassandra 5.0 (5.0 refuses unknown
# keys). Edits are overwritten on every start.
cluster_name: {cluster}
{tokens}
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "{seeds}"
listen_address: {address}
storage_port: {storage}
rpc_address: {address}
start_native_transport: true
native_transport_port: {cql}

data_file_directories:
  - {d}/data/data
commitlog_directory: {d}/data/commitlog
saved_caches_directory: {d}/data/saved_caches
hints_directory: {d}/data/hints
cdc_raw_directory: {d}/data/cdc_raw
# A write is acknowledged only once its commitlog section is synced: one node (RF=1) killed
# with SIGKILL must not lose what it acknowledged (periodic sync acknowledges first and a
# crash loses up to a period of writes, which the fault suite's Cassandra kill caught).
commitlog_sync: group
commitlog_sync_group_window: 5ms

storage_compatibility_mode: NONE
paxos_variant: v2

authenticator: AllowAllAuthenticator
authorizer: AllowAllAuthorizer

memtable_allocation_type: heap_buffers
memtable_heap_space: 128MiB
memtable_offheap_space: 128MiB
key_cache_size: 32MiB
concurrent_reads: 8
# Under group commitlog sync each mutation thread waits for its section's sync (a few ms): 16
# threads held the node to about 3 000 writes/s; 128 let a window gather the writes in flight.
concurrent_writes: 128
concurrent_counter_writes: 8
concurrent_compactors: 1

batch_size_warn_threshold: 256KiB
batch_size_fail_threshold: 1024KiB
unlogged_batch_across_partitions_warn_threshold: 100

read_request_timeout: 5000ms
range_request_timeout: 10000ms
write_request_timeout: 5000ms
counter_write_request_timeout: 5000ms
cas_contention_timeout: 3000ms
truncate_request_timeout: 60000ms
request_timeout: 10000ms

# dev/test box: no snapshot on DROP/TRUNCATE (keeps test teardown fast)
auto_snapshot: false
snapshot_before_compaction: false
"#
    )
}

/// `conf/logback.xml`: INFO into `logs/system.log` (50 MB x 3), for the node in `dir`.
pub fn logback(dir: &Path) -> String {
    let d = dir.display().to_string();
    format!(
        r#"<configuration scan="false">
  <appender name="FILE" class="ch.qos.logback.core.rolling.RollingFileAppender">
    <file>{d}/logs/system.log</file>
    <rollingPolicy class="ch.qos.logback.core.rolling.FixedWindowRollingPolicy">
      <fileNamePattern>{d}/logs/system.log.%i.zip</fileNamePattern>
      <minIndex>1</minIndex>
      <maxIndex>2</maxIndex>
    </rollingPolicy>
    <triggeringPolicy class="ch.qos.logback.core.rolling.SizeBasedTriggeringPolicy">
      <maxFileSize>50MB</maxFileSize>
    </triggeringPolicy>
    <encoder>
      <pattern>%-5level [%thread] %date{{ISO8601}} %F:%L - %msg%n</pattern>
    </encoder>
  </appender>
  <root level="INFO">
    <appender-ref ref="FILE"/>
  </root>
</configuration>
"#
    )
}

/// The single stack's JVM arguments (after `java`), given the jamm agent jar. (what the tests read)
#[cfg(test)]
pub fn jvm_args(settings: &Settings, jamm: &Path) -> Vec<String> {
    node_jvm_args(settings, &NodeConfig::single(settings), jamm)
}

/// A node's JVM arguments (after `java`), given the jamm agent jar.
pub fn node_jvm_args(settings: &Settings, node: &NodeConfig, jamm: &Path) -> Vec<String> {
    let d = node.dir.display().to_string();
    let mut a: Vec<String> = [
        format!("-Xms{}", node.heap),
        format!("-Xmx{}", node.heap),
        "-XX:+UseG1GC".into(),
        "-XX:+ParallelRefProcEnabled".into(),
        "-XX:MaxTenuringThreshold=1".into(),
        "-XX:G1HeapRegionSize=16m".into(),
        "-XX:G1RSetUpdatingPauseTimePercent=5".into(),
        "-XX:MaxGCPauseMillis=300".into(),
        "-XX:InitiatingHeapOccupancyPercent=70".into(),
        "-Xss512k".into(),
        "-XX:+UseTLAB".into(),
        "-XX:+ResizeTLAB".into(),
        "-XX:+PerfDisableSharedMem".into(),
        "-XX:StringTableSize=1000003".into(),
        "-XX:+ExitOnOutOfMemoryError".into(),
        "-Djava.net.preferIPv4Stack=true".into(),
    ]
    .into();
    a.extend(JVM17_OPTS.iter().map(|s| (*s).to_owned()));
    if let Some(port) = node.jmx_port {
        // Local JMX (bound to 127.0.0.1, no auth), RMI on the same port (as cassandra-env.sh
        // sets it; otherwise a random port), for nodetool.
        a.push(format!("-Dcassandra.jmx.local.port={port}"));
        a.push(format!("-Dcom.sun.management.jmxremote.rmi.port={port}"));
    }
    a.extend([
        format!("-javaagent:{}", jamm.display()),
        "-Dcassandra-foreground=yes".into(),
        format!("-Dcassandra.config=file://{d}/conf/cassandra.yaml"),
        format!("-Dcassandra.storagedir={d}/data"),
        format!("-Dcassandra.logdir={d}/logs"),
        format!("-Dcassandra.triggers_dir={d}/triggers"),
        format!("-Dlogback.configurationFile={d}/conf/logback.xml"),
        "-Dcassandra.skip_wait_for_gossip_to_settle=0".into(),
        "-Dcassandra.ring_delay_ms=5000".into(),
        // JNA (and netty) unpack native code into a temp dir that must allow exec: always one
        // inside the state dir, so a noexec /tmp does not matter.
        format!("-Djna.tmpdir={d}/tmp"),
        format!("-Dio.netty.native.workdir={d}/tmp"),
        "-cp".into(),
        format!("{d}/conf:{}/*", settings.cassandra_lib().display()),
        "org.apache.cassandra.service.CassandraDaemon".into(),
    ]);
    a
}

/// The first `jamm-*.jar` of the classpath (the memory-measuring agent Cassandra needs).
fn jamm_jar(lib: &Path) -> Option<PathBuf> {
    let mut jars: Vec<PathBuf> = std::fs::read_dir(lib)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("jamm-") && n.ends_with(".jar"))
        })
        .collect();
    jars.sort();
    jars.into_iter().next()
}

/// Starts Cassandra unless it runs already (returns whether it was started now).
pub fn start(settings: &Settings, java: &Path) -> anyhow::Result<bool> {
    if let Some(pid) = running_pid(settings, Service::Cassandra) {
        log!("cassandra already running (pid {pid})");
        return Ok(false);
    }
    ports::assert_free(settings, Service::Cassandra)?;
    let pid = launch(settings, java, &NodeConfig::single(settings))?;
    std::fs::write(settings.pid_file(Service::Cassandra), format!("{pid}\n"))?;
    log!("cassandra starting on {HOST}:{}, pid {pid} (usually 20-60 s)", settings.ports.cassandra_cql);
    Ok(true)
}

/// Writes a node's configs and launches its JVM, detached, output in `<dir>/cassandra.out`,
/// after marking where this start begins in its log (`<dir>/log.offset`). Returns the pid; the
/// caller writes the pid file.
pub fn launch(settings: &Settings, java: &Path, node: &NodeConfig) -> anyhow::Result<u32> {
    let dir = &node.dir;
    for sub in DIRS {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    std::fs::write(node.yaml_path(), node_yaml(node))?;
    std::fs::write(dir.join("conf/logback.xml"), logback(dir))?;
    let lib = settings.cassandra_lib();
    let jamm = jamm_jar(&lib).with_context(|| format!("jamm jar not found in {}", lib.display()))?;
    let out = dir.join("cassandra.out");
    File::create(&out)?;
    std::fs::write(dir.join("log.offset"), Mark::of(&node.main_log()).render())?;
    let mut cmd = Command::new(java);
    cmd.current_dir(dir).args(node_jvm_args(settings, node, &jamm));
    spawn_detached(&mut cmd, &out)
}

/// Waits until a CQL query answers (bounded by `QIM_STACK_TIMEOUT`); returns the release.
/// `others_alive` fails the wait if another server started by this `up` died meanwhile.
pub fn wait(
    settings: &Settings,
    probe: &probe::Probe,
    others_alive: &dyn Fn() -> anyhow::Result<()>,
) -> anyhow::Result<String> {
    let deadline = Instant::now() + settings.timeout;
    loop {
        if running_pid(settings, Service::Cassandra).is_none() {
            return Err(failed(settings, Service::Cassandra, "cassandra process is not running".into()));
        }
        others_alive()?;
        if ports::port_open(settings.ports.cassandra_cql) {
            if let Ok(release) = probe.cql(settings, false) {
                log!("cassandra ready: {HOST}:{} (CQL query ok, release {release})", settings.ports.cassandra_cql);
                return Ok(release);
            }
        }
        if Instant::now() >= deadline {
            let msg = format!("cassandra not ready after {}s", settings.timeout.as_secs());
            return Err(failed(settings, Service::Cassandra, msg));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alt() -> Settings {
        Settings::from_lookup(|k| match k {
            "QIM_STACK_DIR" => Some("/s".into()),
            "QIM_STACK_CACHE" => Some("/c".into()),
            "QIM_STACK_CASSANDRA_PORT" => Some("19042".into()),
            "QIM_STACK_CASSANDRA_STORAGE_PORT" => Some("17000".into()),
            _ => None,
        })
        .unwrap()
    }

    #[test]
    fn the_node_listens_on_the_configured_ports_and_keeps_data_in_the_state_dir() {
        let y = yaml(&alt());
        assert!(y.contains("      - seeds: \"127.0.0.1:17000\"\n"), "{y}");
        assert!(y.contains("\nstorage_port: 17000\n"), "{y}");
        assert!(y.contains("\nnative_transport_port: 19042\n"), "{y}");
        assert!(y.contains("\ndata_file_directories:\n  - /s/cassandra/data/data\n"), "{y}");
        assert!(y.contains("\ncommitlog_sync: group\ncommitlog_sync_group_window: 5ms\n"), "{y}");
        assert!(!y.contains("{") && !y.contains("}"), "{y}");
    }

    #[test]
    fn logback_writes_into_the_state_dir() {
        let l = logback(&alt().dir(Service::Cassandra));
        assert!(l.contains("<file>/s/cassandra/logs/system.log</file>"), "{l}");
        assert!(l.contains("%date{ISO8601}"), "{l}");
    }

    #[test]
    fn the_command_line_carries_the_yaml_path_our_pid_check_looks_for() {
        let s = alt();
        let a = jvm_args(&s, Path::new("/c/cassandra-5.0.9/lib/jamm-0.4.0.jar")).join(" ");
        assert!(a.starts_with("-Xms1G -Xmx1G -XX:+UseG1GC"), "{a}");
        assert!(a.contains("-javaagent:/c/cassandra-5.0.9/lib/jamm-0.4.0.jar -Dcassandra-foreground=yes"), "{a}");
        assert!(a.contains(&s.cassandra_yaml().display().to_string()), "{a}");
        assert!(
            a.ends_with("-cp /s/cassandra/conf:/c/cassandra-5.0.9/lib/* org.apache.cassandra.service.CassandraDaemon")
        );
        assert!(a.contains("--add-opens java.base/java.util=ALL-UNNAMED -Dio.netty.tryReflectionSetAccessible=true"));
    }
}
