//! One connection type for both Redis topologies: a single node (or a primary behind a fixed
//! address) and a Redis Cluster, chosen by the form of the URL ([`Topology`]).
//!
//! redis-rs gives the two different types (`ConnectionManager`, `cluster_async::ClusterConnection`);
//! [`RedisConnection`] joins them behind `aio::ConnectionLike`, so every script, command and
//! pipeline of the store is written once. What differs is routing: a cluster connection sends a
//! command to the node of its first key's slot and follows `MOVED`/`ASK`, but refuses a pipeline
//! whose commands span slots, so [`RedisConnection::split_by_slot`] is how the store's batches
//! are grouped before they are sent.
//!
//! Scripts: an `EVALSHA` answered `NOSCRIPT` is sent again at once as `EVAL` of the script's
//! source ([`super::script_sources`]), to the same node by the same keys.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Arg, Cmd, Pipeline, RedisFuture, Value};

use crate::error::StoreError;

use super::script_sources::{eval_of, is_noscript};
use super::{CONNECTION_TIMEOUT, RESPONSE_TIMEOUT};

/// The URL scheme of a cluster: `redis+cluster://host:port,host:port,...` (the seed nodes; any
/// one reachable node is enough, the rest of the cluster is discovered from it).
pub const CLUSTER_SCHEME: &str = "redis+cluster://";

/// How many times the cluster client re-sends a request that met a topology change (`MOVED`,
/// `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, a dropped connection) before it fails as `Unavailable`.
/// With its exponential waits (up to [`CLUSTER_MAX_RETRY_WAIT`] each) this spans a replica's
/// election after a master died (a few seconds with `cluster-node-timeout` 2 s).
const CLUSTER_RETRIES: u32 = 10;
const CLUSTER_MAX_RETRY_WAIT: Duration = Duration::from_millis(1_000);

/// Which Redis a URL names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One server: `redis://[user:password@]host:port[/db]`.
    Single(String),
    /// A Redis Cluster, by its seed nodes: `redis+cluster://host:port,host:port` or several
    /// `redis://` URLs separated by commas. Always database 0 (a cluster has no other).
    Cluster(Vec<String>),
}

impl Topology {
    /// Parses a Redis URL in one of the two forms; the error says what is wrong with it.
    pub fn parse(url: &str) -> Result<Self, String> {
        let url = url.trim();
        let seeds: Vec<String> = if let Some(rest) = url.strip_prefix(CLUSTER_SCHEME) {
            let (credentials, hosts) = match rest.rsplit_once('@') {
                Some((c, h)) => (format!("{c}@"), h),
                None => (String::new(), rest),
            };
            hosts.split(',').map(|h| format!("redis://{credentials}{}", h.trim())).collect()
        } else if url.contains(',') {
            url.split(',').map(|u| u.trim().to_owned()).collect()
        } else {
            redis::Client::open(url).map_err(|e| format!("is not a Redis URL: {e}"))?;
            return Ok(Topology::Single(url.to_owned()));
        };
        if seeds.iter().any(|s| s.trim_start_matches("redis://").is_empty()) {
            return Err("a cluster URL lists an empty seed node".into());
        }
        for seed in &seeds {
            let info = redis::IntoConnectionInfo::into_connection_info(seed.as_str())
                .map_err(|e| format!("seed node {seed:?} is not a Redis URL: {e}"))?;
            if info.redis_settings().db() != 0 {
                return Err(format!(
                    "seed node {seed:?} names database {}: a cluster has only 0",
                    info.redis_settings().db()
                ));
            }
        }
        Ok(Topology::Cluster(seeds))
    }

    /// Whether this is a cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Topology::Cluster(_))
    }
}

/// A multiplexed, self-reconnecting connection to either topology; clones share it.
#[derive(Clone)]
pub enum RedisConnection {
    /// One server ([`Topology::Single`]).
    Single(ConnectionManager),
    /// A Redis Cluster ([`Topology::Cluster`]); commands go to their slot's master.
    Cluster(Arc<ClusterLink>),
}

/// How long after one rebuild of a cluster connection the next may start.
const REBUILD_SPACING: Duration = Duration::from_secs(2);

/// The cluster client's connection, replaced by a fresh one from the seed nodes when requests
/// time out. redis-rs 1.8's cluster connection can stay in a slot refresh that never completes
/// after a master dies under load (seen here: every request of a busy dispatcher timed out for
/// minutes after a failover the cluster finished in 4 s, while another process's connection
/// recovered at once); a new connection reads the slot map afresh.
pub struct ClusterLink {
    client: ClusterClient,
    current: RwLock<ClusterConnection>,
    rebuilding: AtomicBool,
    last_rebuild: Mutex<Instant>,
}

impl ClusterLink {
    fn connection(&self) -> ClusterConnection {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// After a request timed out: connects anew in the background (at most one rebuild at a
    /// time, [`REBUILD_SPACING`] apart) and swaps the new connection in; requests in flight
    /// keep the old one.
    fn rebuild_soon(self: &Arc<Self>) {
        let due = self.last_rebuild.lock().unwrap_or_else(PoisonError::into_inner).elapsed() >= REBUILD_SPACING;
        if !due || self.rebuilding.swap(true, Ordering::AcqRel) {
            return;
        }
        let link = Arc::clone(self);
        tokio::spawn(async move {
            match link.client.get_async_connection().await {
                Ok(fresh) => {
                    *link.current.write().unwrap_or_else(PoisonError::into_inner) = fresh;
                    tracing::warn!("redis cluster connection rebuilt after a request timed out");
                }
                Err(error) => tracing::warn!(%error, "rebuilding the redis cluster connection failed"),
            }
            *link.last_rebuild.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
            link.rebuilding.store(false, Ordering::Release);
        });
    }
}

impl RedisConnection {
    /// Connects to what `url` names. Does not check that the servers are of that topology:
    /// [`check_topology`] does.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        match Topology::parse(url).map_err(|e| StoreError::InvalidInput(format!("redis url {url:?} {e}")))? {
            Topology::Single(url) => {
                let client = redis::Client::open(url.as_str())
                    .map_err(|e| StoreError::InvalidInput(format!("redis url {url:?}: {e}")))?;
                let settings = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_connection_timeout(Some(CONNECTION_TIMEOUT));
                ConnectionManager::new_with_config(client, settings)
                    .await
                    .map(RedisConnection::Single)
                    .map_err(|e| StoreError::unavailable(format!("connecting to redis at {url}"), e))
            }
            Topology::Cluster(seeds) => {
                let client = ClusterClient::builder(seeds.clone())
                    .connection_timeout(CONNECTION_TIMEOUT)
                    .response_timeout(RESPONSE_TIMEOUT)
                    .retries(CLUSTER_RETRIES)
                    .max_retry_wait(CLUSTER_MAX_RETRY_WAIT.as_millis() as u64)
                    .build()
                    .map_err(|e| StoreError::InvalidInput(format!("redis cluster url {url:?}: {e}")))?;
                let connected = client.get_async_connection().await.map(|connection| {
                    RedisConnection::Cluster(Arc::new(ClusterLink {
                        client: client.clone(),
                        current: RwLock::new(connection),
                        rebuilding: AtomicBool::new(false),
                        last_rebuild: Mutex::new(Instant::now()),
                    }))
                });
                connected.map_err(|e| {
                    if e.to_string().contains("cluster support disabled") {
                        StoreError::InvalidInput(format!(
                            "the Redis URL {url:?} names a cluster, but its seed nodes are single servers \
                             (cluster support disabled): give one node as redis://host:port (QIM_REDIS_URL)"
                        ))
                    } else {
                        StoreError::unavailable(format!("connecting to the redis cluster at {}", seeds.join(",")), e)
                    }
                })
            }
        }
    }

    /// One command, as given.
    async fn send(&mut self, cmd: &Cmd) -> redis::RedisResult<Value> {
        match self {
            RedisConnection::Single(c) => c.req_packed_command(cmd).await,
            RedisConnection::Cluster(link) => {
                let result = link.connection().req_packed_command(cmd).await;
                if result.as_ref().is_err_and(redis::RedisError::is_timeout) {
                    link.rebuild_soon();
                }
                result
            }
        }
    }

    /// Whether commands go through the cluster client.
    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisConnection::Cluster(_))
    }

    /// Fails with one line naming the setting when the servers are not of the topology the
    /// URL names: a single-node URL at a node of a cluster would otherwise meet a `MOVED` reply
    /// for most keys. (The other way round fails in [`RedisConnection::open`]: the cluster client
    /// reads the slot map first, which a single server refuses.)
    pub async fn check_topology(&mut self, url: &str) -> Result<(), StoreError> {
        if self.is_cluster() {
            return Ok(());
        }
        let info: String = redis::cmd("INFO")
            .arg("cluster")
            .query_async(self)
            .await
            .map_err(|e| StoreError::unavailable(format!("asking redis at {url} for its topology"), e))?;
        if info.lines().any(|l| l.trim() == "cluster_enabled:1") {
            return Err(StoreError::InvalidInput(format!(
                "the Redis URL {url:?} names one node of a Redis Cluster: list the cluster's nodes as \
                 {CLUSTER_SCHEME}host:port,host:port (QIM_REDIS_URL)"
            )));
        }
        Ok(())
    }

    /// Splits `commands` into groups a connection of this topology sends as one pipeline each:
    /// one group on a single node; one per hash tag on a cluster (its client refuses a
    /// pipeline whose keys span slots, and re-sends the whole pipeline on a redirect; two tags
    /// that share a slot just make two groups). Each group lists the indexes of its commands in
    /// their original order.
    pub fn split_by_slot(&self, commands: &[Cmd]) -> Vec<Vec<usize>> {
        if !self.is_cluster() {
            return vec![(0..commands.len()).collect()];
        }
        let mut groups: Vec<(Option<Vec<u8>>, Vec<usize>)> = Vec::new();
        for (i, cmd) in commands.iter().enumerate() {
            let tag = first_key(cmd).map(|k| hash_tag(&k).to_vec());
            match groups.iter_mut().find(|(t, _)| *t == tag) {
                Some((_, members)) => members.push(i),
                None => groups.push((tag, vec![i])),
            }
        }
        groups.into_iter().map(|(_, members)| members).collect()
    }
}

/// The key a cluster routes `cmd` by: the first key of `EVAL`/`EVALSHA`/`FCALL`, else the
/// first argument (every command the store pipelines names its key first).
pub(crate) fn first_key(cmd: &Cmd) -> Option<Vec<u8>> {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .filter_map(|a| match a {
            Arg::Simple(bytes) => Some(bytes),
            _ => None,
        })
        .collect();
    let name = args.first()?;
    let scripted = [&b"EVAL"[..], b"EVALSHA", b"FCALL", b"EVAL_RO", b"EVALSHA_RO"];
    if scripted.iter().any(|s| name.eq_ignore_ascii_case(s)) {
        let keys: usize = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
        return if keys == 0 { None } else { args.get(3).map(|k| k.to_vec()) };
    }
    args.get(1).map(|k| k.to_vec())
}

/// The part of `key` Redis Cluster hashes: the text between the first `{` and the next `}` when
/// that is not empty, else the whole key.
pub(crate) fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// Sends `commands` as one pipeline per group of [`RedisConnection::split_by_slot`], the groups
/// at once, and returns every command's reply in the order given; a command the server refused
/// is a `Value::ServerError` among them. `Err` when any group's round trip failed (then any
/// subset of the commands may have taken effect). Returns the replies and the round trips made.
pub(crate) async fn pipeline_by_slot(
    con: &RedisConnection,
    commands: &[Cmd],
) -> redis::RedisResult<(Vec<Value>, usize)> {
    let groups = con.split_by_slot(commands);
    let trips = groups.len();
    let sends = groups.iter().map(|group| {
        let mut pipe = redis::pipe();
        for &i in group {
            pipe.add_command(commands[i].clone());
        }
        let mut con = con.clone();
        async move { pipe.ignore_errors().query_async::<Vec<Value>>(&mut con).await }
    });
    let answers = futures_util::future::try_join_all(sends).await?;
    let mut replies: Vec<Option<Value>> = vec![None; commands.len()];
    for (group, values) in groups.iter().zip(answers) {
        if values.len() != group.len() {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "pipeline reply count",
                format!("{} replies to a pipeline of {}", values.len(), group.len()),
            )));
        }
        for (&i, value) in group.iter().zip(values) {
            replies[i] = Some(value);
        }
    }
    Ok((replies.into_iter().map(|r| r.unwrap_or(Value::Nil)).collect(), trips))
}

/// [`pipeline_by_slot`] for commands that must all succeed: the first refused command's error,
/// or every reply parsed as `T`.
pub(crate) async fn query_by_slot<T: redis::FromRedisValue>(
    con: &RedisConnection,
    commands: &[Cmd],
) -> redis::RedisResult<Vec<T>> {
    let (values, _) = pipeline_by_slot(con, commands).await?;
    values
        .into_iter()
        .map(|value| match value {
            Value::ServerError(e) => Err(e.into()),
            value => redis::from_redis_value(value).map_err(redis::RedisError::from),
        })
        .collect()
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let result = self.send(cmd).await;
            // The `EVAL` (a copy of the script's source) is built only for a lost script.
            if !is_noscript(&result) {
                return result;
            }
            match eval_of(cmd) {
                Some(eval) => self.send(&eval).await,
                None => result,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConnection::Single(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConnection::Cluster(link) => Box::pin(async move {
                let result = link.connection().req_packed_commands(pipeline, offset, count).await;
                if result.as_ref().is_err_and(redis::RedisError::is_timeout) {
                    link.rebuild_soon();
                }
                result
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConnection::Single(c) => c.get_db(),
            RedisConnection::Cluster(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_form_names_the_topology() {
        assert_eq!(
            Topology::parse("redis://127.0.0.1:6379/1"),
            Ok(Topology::Single("redis://127.0.0.1:6379/1".into()))
        );
        assert_eq!(
            Topology::parse("redis+cluster://127.0.0.1:7301,127.0.0.1:7302"),
            Ok(Topology::Cluster(vec!["redis://127.0.0.1:7301".into(), "redis://127.0.0.1:7302".into()]))
        );
        assert_eq!(
            Topology::parse("redis+cluster://u:p@10.0.0.1:7000,10.0.0.2:7000"),
            Ok(Topology::Cluster(vec!["redis://u:p@10.0.0.1:7000".into(), "redis://u:p@10.0.0.2:7000".into()]))
        );
        assert_eq!(
            Topology::parse("redis://a:1, redis://b:2"),
            Ok(Topology::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()]))
        );
        assert!(Topology::parse("redis+cluster://127.0.0.1:7301").unwrap().is_cluster());
    }

    #[test]
    fn commands_are_grouped_by_the_hash_tag_of_their_first_key() {
        assert_eq!(hash_tag(b"qim:{c:ab}:seq"), b"c:ab");
        assert_eq!(hash_tag(b"qim:{}:x"), b"qim:{}:x");
        assert_eq!(hash_tag(b"plain"), b"plain");
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg("sha").arg(2).arg("qim:{c:1}:seq").arg("qim:{c:1}:idx").arg("argv");
        assert_eq!(first_key(&evalsha), Some(b"qim:{c:1}:seq".to_vec()));
        assert_eq!(
            first_key(redis::cmd("ZADD").arg("qim:{recovery:3}").arg(1).arg("m")),
            Some(b"qim:{recovery:3}".to_vec())
        );
        let mut no_keys = redis::cmd("EVAL");
        no_keys.arg("return 1").arg(0);
        assert_eq!(first_key(&no_keys), None);
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        assert!(Topology::parse("http://x").unwrap_err().contains("is not a Redis URL"));
        assert!(Topology::parse("redis://a:1/2,redis://b:2").unwrap_err().contains("database 2"));
        assert!(Topology::parse("redis+cluster://").unwrap_err().contains("empty seed"));
        assert!(Topology::parse("redis://a:1,nonsense").unwrap_err().contains("\"nonsense\""));
    }
}
