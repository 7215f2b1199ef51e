//! Shared helpers for tests that run against the local stack (Kafka, Cassandra, Redis).
//!
//! Endpoints come from environment variables with loopback defaults, so the same tests run
//! against `deploy/local/stack up` or any other deployment:
//!
//! | server    | variable                 | default                    |
//! |-----------|--------------------------|----------------------------|
//! | Kafka     | `QIM_TEST_KAFKA_BROKERS` | `127.0.0.1:9092`           |
//! | Redis     | `QIM_TEST_REDIS_URL`     | `redis://127.0.0.1:6379/0` |
//! | Redis Cluster | `QIM_TEST_REDIS_CLUSTER_URL` | `redis+cluster://127.0.0.1:7301,127.0.0.1:7302,127.0.0.1:7303` |
//! | Cassandra | `QIM_TEST_SCYLLA_HOSTS`  | `127.0.0.1:9042`           |
//!
//! Stack tests never skip: when a server is missing, the `connect_*` helpers fail within a
//! short, bounded time with a message naming the server, the address tried and the command
//! that starts it ([`START_HINT`]). The `require_*` helpers turn that error into a panic, which
//! is what a test wants.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Context as _};
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::ClientConfig;
use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;

/// Environment variable holding the Kafka bootstrap servers (comma-separated `host:port`).
pub const KAFKA_BROKERS_ENV: &str = "QIM_TEST_KAFKA_BROKERS";
/// Environment variable holding the Redis URL (`redis://host:port/db`).
pub const REDIS_URL_ENV: &str = "QIM_TEST_REDIS_URL";
/// Environment variable holding the Redis Cluster's URL (`redis+cluster://host:port,...`).
pub const REDIS_CLUSTER_URL_ENV: &str = "QIM_TEST_REDIS_CLUSTER_URL";
/// Environment variable holding the Cassandra contact points (comma-separated `host:port`).
pub const SCYLLA_HOSTS_ENV: &str = "QIM_TEST_SCYLLA_HOSTS";

/// Kafka bootstrap servers used when [`KAFKA_BROKERS_ENV`] is unset or blank.
pub const DEFAULT_KAFKA_BROKERS: &str = "127.0.0.1:9092";
/// Redis URL used when [`REDIS_URL_ENV`] is unset or blank.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379/0";
/// The local stack's Redis Cluster (`deploy/local/stack cluster up`), used when
/// [`REDIS_CLUSTER_URL_ENV`] is unset or blank.
pub const DEFAULT_REDIS_CLUSTER_URL: &str = "redis+cluster://127.0.0.1:7301,127.0.0.1:7302,127.0.0.1:7303";
/// Cassandra contact points used when [`SCYLLA_HOSTS_ENV`] is unset or blank.
pub const DEFAULT_SCYLLA_HOSTS: &str = "127.0.0.1:9042";

/// Environment variable holding the three-node mode's brokers (`deploy/local/stack rf3 up`).
pub const RF3_KAFKA_BROKERS_ENV: &str = "QIM_TEST_RF3_KAFKA_BROKERS";
/// Environment variable holding the three-node mode's Cassandra contact points.
pub const RF3_SCYLLA_HOSTS_ENV: &str = "QIM_TEST_RF3_SCYLLA_HOSTS";
/// The three-node mode's brokers by default (`stack rf3`'s default ports).
pub const DEFAULT_RF3_KAFKA_BROKERS: &str = "127.0.0.1:9192,127.0.0.1:9194,127.0.0.1:9196";
/// The three-node mode's ring by default.
pub const DEFAULT_RF3_SCYLLA_HOSTS: &str = "127.0.0.1:9142,127.0.0.2:9142,127.0.0.3:9142";

/// How to bring the servers up; every "not reachable" message ends with it.
pub const START_HINT: &str = "start the local stack with `deploy/local/stack up`";

/// Upper bound for one connection attempt (TCP connect, handshake or metadata fetch).
///
/// A missing server is reported after at most about this long (twice for Kafka: a TCP probe,
/// then a metadata request), never after a driver's default minutes-long retry loop.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads `var`, falling back to `default` when it is unset, blank or not valid UTF-8.
/// The value is trimmed.
fn env_or(var: &str, default: &str) -> String {
    std::env::var(var).ok().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_owned())
}

/// Splits a comma-separated endpoint list, trimming entries and dropping empty ones.
fn split_list(list: &str) -> Vec<String> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

/// The Kafka bootstrap servers, as given to librdkafka's `bootstrap.servers`
/// (comma-separated `host:port`): [`KAFKA_BROKERS_ENV`] or [`DEFAULT_KAFKA_BROKERS`].
pub fn kafka_brokers() -> String {
    env_or(KAFKA_BROKERS_ENV, DEFAULT_KAFKA_BROKERS)
}

/// The Redis URL: [`REDIS_URL_ENV`] or [`DEFAULT_REDIS_URL`].
pub fn redis_url() -> String {
    env_or(REDIS_URL_ENV, DEFAULT_REDIS_URL)
}

/// The Redis Cluster URL: [`REDIS_CLUSTER_URL_ENV`] or [`DEFAULT_REDIS_CLUSTER_URL`].
pub fn redis_cluster_url() -> String {
    env_or(REDIS_CLUSTER_URL_ENV, DEFAULT_REDIS_CLUSTER_URL)
}

/// The Cassandra contact points (`host:port` each, at least one): [`SCYLLA_HOSTS_ENV`] split on
/// commas, or [`DEFAULT_SCYLLA_HOSTS`] when that yields nothing.
pub fn scylla_hosts() -> Vec<String> {
    let hosts = split_list(&env_or(SCYLLA_HOSTS_ENV, DEFAULT_SCYLLA_HOSTS));
    if hosts.is_empty() {
        split_list(DEFAULT_SCYLLA_HOSTS)
    } else {
        hosts
    }
}

/// Where one stack's servers answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoints {
    /// Kafka bootstrap servers (comma-separated `host:port`).
    pub kafka_brokers: String,
    /// The Redis URL.
    pub redis_url: String,
    /// Cassandra contact points (`host:port` each).
    pub scylla_hosts: Vec<String>,
}

impl Endpoints {
    /// The servers the `QIM_TEST_*` variables name (the shared local stack's by default).
    pub fn from_env() -> Self {
        Self { kafka_brokers: kafka_brokers(), redis_url: redis_url(), scylla_hosts: scylla_hosts() }
    }

    /// The three-node mode (`deploy/local/stack rf3 up`: three brokers, a three-node ring) with
    /// the shared stack's Redis: [`RF3_KAFKA_BROKERS_ENV`] and [`RF3_SCYLLA_HOSTS_ENV`], or
    /// their defaults.
    pub fn rf3() -> Self {
        Self {
            kafka_brokers: env_or(RF3_KAFKA_BROKERS_ENV, DEFAULT_RF3_KAFKA_BROKERS),
            redis_url: redis_url(),
            scylla_hosts: split_list(&env_or(RF3_SCYLLA_HOSTS_ENV, DEFAULT_RF3_SCYLLA_HOSTS)),
        }
    }
}

/// The message every connect helper fails with: names the server, the address tried, the
/// variable that overrides it and [`START_HINT`], then the underlying cause.
fn unreachable(server: &str, addr: &str, env: &str, cause: impl std::fmt::Display) -> anyhow::Error {
    anyhow!(
        "{server} is not reachable at {addr}: {START_HINT} \
         (or point {env} at a running {server}); cause: {cause}"
    )
}

/// Returns a name no other test, test process or earlier run is using:
/// `{prefix}_{pid}_{unix millis, hex}_{per-process counter}`.
///
/// The result is lowercase ASCII alphanumerics and `_` only and at most 48 characters, so it is
/// valid unquoted as a Kafka topic, a CQL keyspace or table name, and a Redis key prefix.
///
/// # Panics
///
/// If `prefix` is empty, longer than 16 characters, does not start with a lowercase ASCII
/// letter, or contains anything but lowercase ASCII letters, digits and `_` (a programming
/// error in the test).
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    assert!(
        prefix.len() <= 16
            && prefix.starts_with(|c: char| c.is_ascii_lowercase())
            && prefix.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
        "unique_name prefix {prefix:?} must be 1-16 chars of [a-z0-9_] starting with a letter"
    );
    let millis = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or_default();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}_{}_{millis:x}_{n}", std::process::id())
}

/// Who made a [`unique_name`] (or a generated test keyspace), and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// The creating process.
    pub pid: u32,
    /// When it was named, since the Unix epoch.
    pub created: Duration,
}

/// The inverse of [`unique_name`]: the creator and time of `name` (`{prefix}_{pid}_{millis
/// hex}_{n}`, optionally followed by `.{suffix}` as in `<run>.messages`); `None` for any name not
/// of that form.
pub fn unique_name_origin(name: &str) -> Option<Origin> {
    let base = name.split('.').next()?;
    let mut parts = base.rsplitn(4, '_');
    let (n, millis, pid, prefix) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    n.parse::<u64>().ok()?;
    if !prefix.starts_with(|c: char| c.is_ascii_lowercase()) {
        return None;
    }
    let millis = u64::from_str_radix(millis, 16).ok()?;
    Some(Origin { pid: pid.parse().ok()?, created: Duration::from_millis(millis) })
}

/// Test resources a test sweeps are older than this as well as left by an exited process: a
/// test of another machine's run on the same stack still uses its own.
pub const MIN_AGE: Duration = Duration::from_secs(10 * 60);

/// Whether what `origin` made may be deleted at `now` (since the Unix epoch): older than
/// `min_age` and its process no longer runs on this machine (Linux: `/proc/<pid>`; elsewhere
/// nothing is ever swept).
pub fn abandoned(origin: Origin, now: Duration, min_age: Duration) -> bool {
    let running = origin.pid == std::process::id() || std::path::Path::new(&format!("/proc/{}", origin.pid)).exists();
    cfg!(target_os = "linux") && !running && now.saturating_sub(origin.created) >= min_age
}

/// Whether this test runs under cargo-nextest (`NEXTEST_RUN_ID`), whose runner, the test
/// command, sweeps leftovers before the run (`qim-test-sweep`): its tests, one
/// process each, then leave sweeping alone instead of each sweeping on its own.
pub fn swept_by_the_runner() -> bool {
    std::env::var_os("NEXTEST_RUN_ID").is_some_and(|run| !run.is_empty())
}

/// A librdkafka config with `bootstrap.servers` set to [`kafka_brokers`] and the TCP connection
/// setup timeout set to [`CONNECT_TIMEOUT`]; request timeouts keep librdkafka's defaults.
/// Callers add the client-specific settings (group id, acks, ...).
pub fn kafka_config() -> ClientConfig {
    kafka_config_at(&kafka_brokers())
}

/// Like [`kafka_config`], for the Kafka at `brokers` (comma-separated `host:port`).
pub fn kafka_config_at(brokers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("socket.connection.setup.timeout.ms", CONNECT_TIMEOUT.as_millis().to_string());
    config
}

/// Checks that Kafka answers at [`kafka_brokers`]: a TCP connect to some bootstrap server, then
/// a cluster metadata request, each bounded by [`CONNECT_TIMEOUT`]. Returns the number of
/// brokers in the cluster.
///
/// # Errors
///
/// A "Kafka is not reachable at …" error naming [`START_HINT`] when neither step succeeds.
pub async fn connect_kafka() -> anyhow::Result<usize> {
    connect_kafka_at(&kafka_brokers()).await
}

/// Like [`connect_kafka`], for the Kafka at `brokers` (comma-separated `host:port`).
///
/// # Errors
///
/// As [`connect_kafka`].
pub async fn connect_kafka_at(brokers: &str) -> anyhow::Result<usize> {
    let brokers = brokers.to_owned();
    let mut last_err = String::from("no bootstrap server configured");
    let mut tcp_ok = false;
    for broker in split_list(&brokers) {
        match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(&broker)).await {
            Ok(Ok(_)) => {
                tcp_ok = true;
                break;
            }
            Ok(Err(e)) => last_err = format!("TCP connect to {broker}: {e}"),
            Err(_) => last_err = format!("TCP connect to {broker} timed out after {CONNECT_TIMEOUT:?}"),
        }
    }
    if !tcp_ok {
        return Err(unreachable("Kafka", &brokers, KAFKA_BROKERS_ENV, last_err));
    }

    // The metadata request proves a Kafka broker (not just an open port) answers, and that the
    // addresses it advertises work. librdkafka's call blocks, so keep it off the runtime.
    let config = kafka_config_at(&brokers);
    let probe = tokio::task::spawn_blocking(move || -> anyhow::Result<usize> {
        let consumer: BaseConsumer = config.create().context("creating a Kafka client")?;
        let metadata = consumer.fetch_metadata(None, CONNECT_TIMEOUT).context("fetching cluster metadata")?;
        Ok(metadata.brokers().len())
    })
    .await
    .context("Kafka probe task failed")?;
    probe.map_err(|e| unreachable("Kafka", &brokers, KAFKA_BROKERS_ENV, format!("{e:#}")))
}

/// Like [`connect_kafka`], but panics with its message when Kafka does not answer.
///
/// # Panics
///
/// When Kafka is not reachable; the message names the address and [`START_HINT`].
pub async fn require_kafka() {
    if let Err(e) = connect_kafka().await {
        panic!("{e:#}");
    }
}

/// Returns a Kafka admin client for [`kafka_brokers`] after checking Kafka answers
/// ([`require_kafka`]).
///
/// # Panics
///
/// When Kafka is not reachable (message names the address and [`START_HINT`]), or the client
/// cannot be created.
pub async fn require_kafka_admin() -> AdminClient<DefaultClientContext> {
    require_kafka().await;
    kafka_config().create().expect("creating a Kafka AdminClient from the test config")
}

/// Opens a multiplexed Redis connection to [`redis_url`] and checks it with `PING`; connecting
/// and every later response are bounded by [`CONNECT_TIMEOUT`].
///
/// # Errors
///
/// A "Redis is not reachable at …" error naming [`START_HINT`] when the URL is invalid, the
/// server does not accept the connection in time, or `PING` fails.
pub async fn connect_redis() -> anyhow::Result<MultiplexedConnection> {
    let url = redis_url();
    let fail = |cause: String| unreachable("Redis", &url, REDIS_URL_ENV, cause);
    let client = redis::Client::open(url.as_str()).map_err(|e| fail(format!("invalid URL: {e}")))?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(CONNECT_TIMEOUT));
    let connect = async {
        let mut con = client.get_multiplexed_async_connection_with_config(&config).await?;
        let pong: String = redis::cmd("PING").query_async(&mut con).await?;
        redis::RedisResult::Ok((con, pong))
    };
    let (con, pong) = tokio::time::timeout(CONNECT_TIMEOUT, connect)
        .await
        .map_err(|_| fail(format!("no answer within {CONNECT_TIMEOUT:?}")))?
        .map_err(|e| fail(e.to_string()))?;
    if pong != "PONG" {
        return Err(fail(format!("PING answered {pong:?}, not \"PONG\"")));
    }
    Ok(con)
}

/// Like [`connect_redis`], but panics with its message when Redis does not answer.
///
/// # Panics
///
/// When Redis is not reachable; the message names the URL and [`START_HINT`].
pub async fn require_redis() -> MultiplexedConnection {
    connect_redis().await.unwrap_or_else(|e| panic!("{e:#}"))
}

/// Opens a driver session to the Cassandra contact points [`scylla_hosts`], with connecting and
/// the initial metadata fetch bounded by [`CONNECT_TIMEOUT`] (the whole build by twice that).
///
/// # Errors
///
/// A "Cassandra is not reachable at …" error naming [`START_HINT`] when no session can be
/// established in time.
pub async fn connect_scylla() -> anyhow::Result<Session> {
    connect_scylla_at(&scylla_hosts()).await
}

/// Like [`connect_scylla`], for the Cassandra contact points `hosts`.
///
/// # Errors
///
/// As [`connect_scylla`].
pub async fn connect_scylla_at(hosts: &[String]) -> anyhow::Result<Session> {
    let addr = hosts.join(",");
    let fail = |cause: String| unreachable("Cassandra", &addr, SCYLLA_HOSTS_ENV, cause);
    // Resolve literal socket addresses up front so a typo fails here, clearly; anything else
    // (host names) is left to the driver.
    let builder = hosts.iter().fold(SessionBuilder::new(), |b, h| match h.parse::<SocketAddr>() {
        Ok(a) => b.known_node_addr(a),
        Err(_) => b.known_node(h),
    });
    let builder = builder.connection_timeout(CONNECT_TIMEOUT).metadata_request_clientside_timeout(CONNECT_TIMEOUT);
    tokio::time::timeout(CONNECT_TIMEOUT * 2, builder.build())
        .await
        .map_err(|_| fail(format!("no session within {:?}", CONNECT_TIMEOUT * 2)))?
        .map_err(|e| fail(e.to_string()))
}

/// Like [`connect_scylla`], but panics with its message when Cassandra does not answer.
///
/// # Panics
///
/// When Cassandra is not reachable; the message names the contact points and [`START_HINT`].
pub async fn require_scylla() -> Session {
    connect_scylla().await.unwrap_or_else(|e| panic!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_old_resources_of_exited_processes_are_abandoned() {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let old = now - MIN_AGE - Duration::from_secs(1);
        let me = std::process::id();
        assert!(!abandoned(Origin { pid: me, created: old }, now, MIN_AGE), "this process still runs");
        assert!(!abandoned(Origin { pid: me, created: old }, now, Duration::ZERO), "this process still runs");
        // pid_max on Linux is at most 2^22, so this pid never runs.
        let gone = 4_194_304 + 17;
        assert_eq!(abandoned(Origin { pid: gone, created: old }, now, MIN_AGE), cfg!(target_os = "linux"));
        let young = Origin { pid: gone, created: now - Duration::from_secs(5) };
        assert!(!abandoned(young, now, MIN_AGE), "too young");
        assert_eq!(abandoned(young, now, Duration::ZERO), cfg!(target_os = "linux"), "no age asked for");
    }

    #[test]
    fn a_unique_name_tells_who_made_it_and_when() {
        let name = unique_name("a_cass");
        for candidate in [name.clone(), format!("{name}.messages")] {
            let origin = unique_name_origin(&candidate).expect(&candidate);
            assert_eq!(origin.pid, std::process::id());
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
            assert!(now.saturating_sub(origin.created) < Duration::from_secs(60), "{candidate}: {origin:?}");
        }
        for other in ["qim.messages.v1", "__consumer_offsets", "x_1_2", "1a_1_2_3", "a_1_zz_3", "a_x_2_3", "_1_2_3"] {
            assert_eq!(unique_name_origin(other), None, "{other}");
        }
    }

    #[test]
    fn unique_names_differ_and_are_valid_identifiers() {
        let a = unique_name("smoke");
        let b = unique_name("smoke");
        assert_ne!(a, b);
        for name in [&a, &b] {
            assert!(name.starts_with("smoke_"), "{name}");
            assert!(name.len() <= 48, "{name}");
            assert!(name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'), "{name}");
        }
        assert!(unique_name("abcdefghijklmnop").len() <= 48);
    }

    #[test]
    #[should_panic(expected = "must be 1-16 chars")]
    fn unique_name_rejects_bad_prefix() {
        unique_name("Bad-Prefix");
    }

    #[test]
    fn lists_are_split_and_trimmed() {
        assert_eq!(split_list(" a:1, ,b:2 ,"), vec!["a:1", "b:2"]);
        assert!(split_list(" , ").is_empty());
    }

    #[test]
    fn unreachable_message_names_server_and_start_command() {
        let msg = unreachable("Redis", "redis://127.0.0.1:1/0", REDIS_URL_ENV, "refused").to_string();
        assert!(msg.starts_with("Redis is not reachable at redis://127.0.0.1:1/0: "), "{msg}");
        assert!(msg.contains("`deploy/local/stack up`"), "{msg}");
        assert!(msg.contains(REDIS_URL_ENV), "{msg}");
    }
}
