//! Where everything lives and which knobs are turned: the state dir, the download cache, each
//! server's files and ports, the timeouts. Read once from the environment ([`Settings::from_env`]);
//! everything else takes a `&Settings`.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};

use crate::rf3_layout::Rf3;

/// Every server listens on this address only.
pub const HOST: &str = "127.0.0.1";

/// `org.apache.kafka:kafka_2.13` (+ `kafka-tools` for `TopicCommand`).
pub const KAFKA_VERSION: &str = "3.9.2";
pub const SCALA_VERSION: &str = "2.13";
/// `org.apache.cassandra:cassandra-all`.
pub const CASSANDRA_VERSION: &str = "5.0.9";
/// Kafka 3.x ships no logging backend: reload4j and its slf4j binding.
pub const RELOAD4J_VERSION: &str = "1.2.25";
pub const SLF4J_RELOAD4J_VERSION: &str = "1.7.36";
pub const DEPENDENCY_PLUGIN: &str = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1";

pub const KAFKA_HEAP: &str = "512m";
pub const CASSANDRA_HEAP: &str = "1G";

/// One of the three servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Service {
    Redis,
    Kafka,
    Cassandra,
}

impl Service {
    /// In the order `status` lists them and `down` stops them.
    pub const ALL: [Service; 3] = [Service::Redis, Service::Kafka, Service::Cassandra];

    /// The name used in messages, directories and pid files.
    pub fn name(self) -> &'static str {
        match self {
            Service::Redis => "redis",
            Service::Kafka => "kafka",
            Service::Cassandra => "cassandra",
        }
    }
}

impl std::fmt::Display for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The ports the servers listen on (all on [`HOST`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ports {
    pub redis: u16,
    pub kafka: u16,
    pub kafka_controller: u16,
    pub cassandra_cql: u16,
    pub cassandra_storage: u16,
    /// The first of the Redis Cluster's six node ports ([`crate::redis_cluster`]).
    pub redis_cluster: u16,
}

impl Default for Ports {
    fn default() -> Self {
        Ports {
            redis: 6379,
            kafka: 9092,
            kafka_controller: 9093,
            cassandra_cql: 9042,
            cassandra_storage: 7000,
            redis_cluster: 7301,
        }
    }
}

impl Ports {
    /// Every port these servers listen on, Redis Cluster nodes (not their bus ports) included.
    pub fn numbers(&self) -> Vec<u16> {
        let mut all = vec![self.redis, self.kafka, self.kafka_controller, self.cassandra_cql, self.cassandra_storage];
        all.extend((0..crate::redis_cluster::NODES).map(|i| self.redis_cluster + i));
        all
    }

    /// The ports `svc` listens on, which must be free before it starts.
    pub fn of(&self, svc: Service) -> Vec<u16> {
        match svc {
            Service::Redis => vec![self.redis],
            Service::Kafka => vec![self.kafka, self.kafka_controller],
            Service::Cassandra => vec![self.cassandra_cql, self.cassandra_storage],
        }
    }
}

/// How a pid from a pid file is recognised as our server (and not a recycled pid).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// `/proc/<pid>/comm` starts with `comm`, and the working directory is `cwd` (where `/proc`
    /// lets us read it): Redis, which `--dir` moves into its data dir.
    CommIn { comm: &'static str, cwd: PathBuf },
    /// The command line (arguments joined by spaces) contains this.
    CmdlineContains(String),
}

/// Everything the commands read from the environment, resolved.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The checkout: `QIM_STACK_REPO` (set by `deploy/local/stack`), else where this was built.
    pub repo: PathBuf,
    /// `QIM_STACK_DIR`, default `<repo>/.stack`; made absolute and physical (as `realpath -m`).
    pub stack_dir: PathBuf,
    /// `QIM_STACK_CACHE`, default `${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/qim-stack`.
    pub cache_dir: PathBuf,
    /// Cargo's target dir for this program and the CQL probe: `QIM_STACK_TARGET_DIR`, else
    /// `${CARGO_TARGET_DIR:-<repo>/target}/stack`.
    pub target_dir: PathBuf,
    pub ports: Ports,
    /// The three-node mode's dir, ports and heaps ([`crate::rf3_layout`]).
    pub rf3: Rf3,
    /// `QIM_STACK_TIMEOUT` (240 s): how long each server may take to become ready on `up`.
    pub timeout: Duration,
    /// `QIM_STACK_STOP_TIMEOUT` (60 s): SIGTERM to SIGKILL on `down`.
    pub stop_timeout: Duration,
    /// `KAFKA_TOOL_TIMEOUT` (60 s): each Kafka admin JVM (storage format, topic creation).
    pub kafka_tool_timeout: Duration,
    /// `QIM_STACK_LOG_LINES` (100), handed to `tail -n` as given.
    pub log_lines: String,
    /// `QIM_JAVA17_HOME`: tried first when looking for a Java 17.
    pub java17_home: Option<PathBuf>,
}

impl Settings {
    /// The settings of this process's environment.
    ///
    /// # Errors
    ///
    /// A knob is set to something that is not a number (seconds, port).
    pub fn from_env() -> anyhow::Result<Settings> {
        Settings::from_lookup(|k| std::env::var_os(k))
    }

    /// The settings when `env` gives the variables; an empty value counts as unset (as `${X:-d}`).
    pub fn from_lookup(env: impl Fn(&str) -> Option<OsString>) -> anyhow::Result<Settings> {
        let var = |k: &str| env(k).filter(|v| !v.is_empty());
        let repo = var("QIM_STACK_REPO")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.."));
        // As `cd -P`: the physical path, so markers match what the shell script wrote.
        let repo = repo.canonicalize().unwrap_or_else(|_| absolute(&repo));
        // Physical too: Redis is recognised by its working directory, which `/proc` shows resolved.
        let stack_dir = physical(&var("QIM_STACK_DIR").map_or_else(|| repo.join(".stack"), PathBuf::from));
        let cache_dir = var("QIM_STACK_CACHE").map_or_else(
            || {
                let base = var("XDG_CACHE_HOME").map_or_else(
                    || PathBuf::from(var("HOME").unwrap_or_else(|| "/root".into())).join(".cache"),
                    PathBuf::from,
                );
                base.join("qim-stack")
            },
            PathBuf::from,
        );
        let target_dir = var("QIM_STACK_TARGET_DIR").map_or_else(
            || var("CARGO_TARGET_DIR").map_or_else(|| repo.join("target"), PathBuf::from).join("stack"),
            PathBuf::from,
        );
        let defaults = Ports::default();
        let port = |k: &str, d: u16| port_knob(k, var(k), d);
        let ports = Ports {
            redis: port("QIM_STACK_REDIS_PORT", defaults.redis)?,
            kafka: port("QIM_STACK_KAFKA_PORT", defaults.kafka)?,
            kafka_controller: port("QIM_STACK_KAFKA_CONTROLLER_PORT", defaults.kafka_controller)?,
            cassandra_cql: port("QIM_STACK_CASSANDRA_PORT", defaults.cassandra_cql)?,
            cassandra_storage: port("QIM_STACK_CASSANDRA_STORAGE_PORT", defaults.cassandra_storage)?,
            redis_cluster: port("QIM_STACK_REDIS_CLUSTER_PORT", defaults.redis_cluster)?,
        };
        if ports.redis_cluster > u16::MAX - 10_000 - crate::redis_cluster::NODES {
            bail!(
                "QIM_STACK_REDIS_CLUSTER_PORT {} leaves no room for six nodes and their bus ports",
                ports.redis_cluster
            );
        }
        let mut all = ports.numbers();
        all.sort_unstable();
        if let Some(w) = all.windows(2).find(|w| w[0] == w[1]) {
            bail!("port {} is given to two servers (QIM_STACK_*_PORT)", w[0]);
        }
        let rf3 = Rf3::from_lookup(&var, &stack_dir, &ports)?;
        let secs = |k: &str, d: u64| -> anyhow::Result<Duration> {
            Ok(Duration::from_secs(var(k).map(|v| parse::<u64>(k, &v)).transpose()?.unwrap_or(d)))
        };
        Ok(Settings {
            repo,
            stack_dir,
            cache_dir,
            target_dir,
            ports,
            rf3,
            timeout: secs("QIM_STACK_TIMEOUT", 240)?,
            stop_timeout: secs("QIM_STACK_STOP_TIMEOUT", 60)?,
            kafka_tool_timeout: secs("KAFKA_TOOL_TIMEOUT", 60)?,
            log_lines: var("QIM_STACK_LOG_LINES").map_or_else(|| "100".into(), |v| v.to_string_lossy().into_owned()),
            java17_home: var("QIM_JAVA17_HOME").map(PathBuf::from),
        })
    }

    /// `<state>/<svc>`: everything of one server.
    pub fn dir(&self, svc: Service) -> PathBuf {
        self.stack_dir.join(svc.name())
    }

    /// `<state>/<svc>/<svc>.pid` (Redis writes its own; the JVMs' are written at launch).
    pub fn pid_file(&self, svc: Service) -> PathBuf {
        self.dir(svc).join(format!("{svc}.pid"))
    }

    /// The server's own log, which `logs` shows and readiness reads.
    pub fn main_log(&self, svc: Service) -> PathBuf {
        match svc {
            Service::Redis => self.dir(svc).join("redis.log"),
            Service::Kafka => self.dir(svc).join("logs/server.log"),
            Service::Cassandra => self.dir(svc).join("logs/system.log"),
        }
    }

    /// The JVM's stdout/stderr (crashes, JVM warnings); Redis has none.
    pub fn out_log(&self, svc: Service) -> Option<PathBuf> {
        match svc {
            Service::Redis => None,
            Service::Kafka => Some(self.dir(svc).join("kafka.out")),
            Service::Cassandra => Some(self.dir(svc).join("cassandra.out")),
        }
    }

    /// Where the readiness check's start-of-log mark is kept (see `logfile::Mark`).
    pub fn log_offset_file(&self, svc: Service) -> PathBuf {
        self.dir(svc).join("log.offset")
    }

    /// What tells our process from any other of the same kind (another state dir's, say): the
    /// config file each JVM is started with, in its command line; Redis's data dir, its cwd.
    pub fn identity(&self, svc: Service) -> Identity {
        match svc {
            Service::Redis => Identity::CommIn { comm: "redis-server", cwd: self.dir(svc).join("data") },
            Service::Kafka => Identity::CmdlineContains(self.kafka_config().display().to_string()),
            Service::Cassandra => Identity::CmdlineContains(self.cassandra_yaml().display().to_string()),
        }
    }

    pub fn kafka_config(&self) -> PathBuf {
        self.dir(Service::Kafka).join("config/server.properties")
    }

    pub fn cassandra_yaml(&self) -> PathBuf {
        self.dir(Service::Cassandra).join("conf/cassandra.yaml")
    }

    /// `<cache>/kafka-<version>/lib`: the broker's and tools' classpath.
    pub fn kafka_lib(&self) -> PathBuf {
        self.cache_dir.join(format!("kafka-{KAFKA_VERSION}/lib"))
    }

    /// `<cache>/cassandra-<version>/lib`.
    pub fn cassandra_lib(&self) -> PathBuf {
        self.cache_dir.join(format!("cassandra-{CASSANDRA_VERSION}/lib"))
    }

    /// Marks a state dir as ours: `reset` deletes only a dir that has it.
    pub fn marker_file(&self) -> PathBuf {
        self.stack_dir.join(".qim-stack")
    }

    /// Serialises `up`, `down` and `reset` of one state dir.
    pub fn lock_file(&self) -> PathBuf {
        self.stack_dir.join(".lock")
    }
}

pub(crate) fn parse<T: std::str::FromStr>(key: &str, value: &std::ffi::OsStr) -> anyhow::Result<T> {
    let text = value.to_string_lossy();
    text.trim().parse().ok().with_context(|| format!("{key}={text:?} is not a number"))
}

/// The port a knob gives (`default` when unset); refused when not a number, or 0.
pub(crate) fn port_knob(key: &str, value: Option<OsString>, default: u16) -> anyhow::Result<u16> {
    let Some(v) = value else { return Ok(default) };
    let p = parse::<u16>(key, &v)?;
    if p == 0 {
        bail!("{key} must be a port (1-65535), not 0");
    }
    Ok(p)
}

/// `path` made absolute against the current directory (not resolving links), so that config
/// files and command-line markers never depend on where a command was run from.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// As `realpath -m`: `path` made absolute, each component that exists resolved (symlinks
/// followed), `..` taken from what is resolved so far, and what does not exist yet kept as written.
pub(crate) fn physical(path: &Path) -> PathBuf {
    let mut real = PathBuf::new();
    for part in absolute(path).components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                real.pop();
            }
            other => {
                real.push(other);
                if let Ok(resolved) = real.canonicalize() {
                    real = resolved;
                }
            }
        }
    }
    real
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> anyhow::Result<Settings> {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        Settings::from_lookup(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.into()))
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let s = settings(&[("QIM_STACK_REPO", "/r"), ("HOME", "/home/u")]).unwrap();
        assert_eq!(s.stack_dir, Path::new("/r/.stack"));
        assert_eq!(s.cache_dir, Path::new("/home/u/.cache/qim-stack"));
        assert_eq!(s.target_dir, Path::new("/r/target/stack"));
        assert_eq!(s.ports, Ports::default());
        assert_eq!(s.ports.of(Service::Kafka), [9092, 9093]);
        assert_eq!(s.timeout, Duration::from_secs(240));
        assert_eq!(s.stop_timeout, Duration::from_secs(60));
        assert_eq!(s.kafka_tool_timeout, Duration::from_secs(60));
        assert_eq!(s.log_lines, "100");
        assert_eq!(s.pid_file(Service::Kafka), Path::new("/r/.stack/kafka/kafka.pid"));
        assert_eq!(s.main_log(Service::Cassandra), Path::new("/r/.stack/cassandra/logs/system.log"));
        assert_eq!(s.kafka_lib(), Path::new("/home/u/.cache/qim-stack/kafka-3.9.2/lib"));
        assert_eq!(
            s.identity(Service::Kafka),
            Identity::CmdlineContains("/r/.stack/kafka/config/server.properties".into())
        );
    }

    #[test]
    fn env_moves_dirs_ports_and_timeouts_and_empty_means_unset() {
        let s = settings(&[
            ("QIM_STACK_REPO", "/r"),
            ("QIM_STACK_DIR", "/alt"),
            ("QIM_STACK_CACHE", ""),
            ("XDG_CACHE_HOME", "/xdg"),
            ("CARGO_TARGET_DIR", "/t"),
            ("QIM_STACK_REDIS_PORT", "16379"),
            ("QIM_STACK_KAFKA_PORT", "19092"),
            ("QIM_STACK_KAFKA_CONTROLLER_PORT", "19093"),
            ("QIM_STACK_CASSANDRA_PORT", "19042"),
            ("QIM_STACK_CASSANDRA_STORAGE_PORT", "17000"),
            ("QIM_STACK_TIMEOUT", "5"),
            ("QIM_STACK_STOP_TIMEOUT", " 7 "),
        ])
        .unwrap();
        assert_eq!(s.stack_dir, Path::new("/alt"));
        assert_eq!(s.cache_dir, Path::new("/xdg/qim-stack"));
        assert_eq!(s.target_dir, Path::new("/t/stack"));
        assert_eq!(
            s.ports,
            Ports {
                redis: 16379,
                kafka: 19092,
                kafka_controller: 19093,
                cassandra_cql: 19042,
                cassandra_storage: 17000,
                redis_cluster: 7301
            }
        );
        assert_eq!(s.timeout, Duration::from_secs(5));
        assert_eq!(s.stop_timeout, Duration::from_secs(7));
    }

    #[test]
    fn bad_knobs_are_refused_by_name() {
        let e = settings(&[("QIM_STACK_TIMEOUT", "soon")]).unwrap_err().to_string();
        assert!(e.contains("QIM_STACK_TIMEOUT"), "{e}");
        let e = settings(&[("QIM_STACK_REDIS_PORT", "70000")]).unwrap_err().to_string();
        assert!(e.contains("QIM_STACK_REDIS_PORT"), "{e}");
        let e = settings(&[("QIM_STACK_KAFKA_PORT", "7303")]).unwrap_err().to_string();
        assert!(e.contains("port 7303 is given to two servers"), "{e}");
        let e = settings(&[("QIM_STACK_KAFKA_PORT", "6379")]).unwrap_err().to_string();
        assert!(e.contains("6379"), "{e}");
    }

    #[test]
    fn a_relative_state_dir_is_made_absolute() {
        let s = settings(&[("QIM_STACK_DIR", "rel/state")]).unwrap();
        assert!(s.stack_dir.is_absolute());
        assert!(s.stack_dir.ends_with("rel/state"));
    }

    #[test]
    fn the_state_dir_is_physical_as_proc_shows_a_working_directory() {
        let tmp = std::env::temp_dir().canonicalize().unwrap();
        let given = tmp.join("qim-no-such-dir/../qim-state-not-yet-made");
        let s = settings(&[("QIM_STACK_DIR", given.to_str().unwrap())]).unwrap();
        assert_eq!(s.stack_dir, tmp.join("qim-state-not-yet-made"));
    }
}
