//! A test's Redis key namespace, deleted at once.
//!
//! Every qim Redis key starts with its store's namespace and a colon, so `<namespace>:*` is all
//! of one test's (or one run's) state, and nobody else's on the shared server. A Redis Cluster
//! (`redis+cluster://host:port,...`, or several `redis://` URLs separated by commas, the two
//! forms `qim_store::redis::Topology` reads) is walked master by master.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use redis::aio::MultiplexedConnection;

use crate::stack::{abandoned, unique_name_origin};

/// Keys one `SCAN` call walks (SCAN's default is 10: one round trip per 10 keys of the database).
const SCAN_COUNT: usize = 10_000;
/// Most keys one `UNLINK` takes (bounds the command's size; a test's namespace is far smaller).
const UNLINK_MOST: usize = 100_000;
/// The scheme of a cluster URL (as `qim_store::redis::Topology` reads it).
const CLUSTER_SCHEME: &str = "redis+cluster://";

/// Deletes every key of `namespace` (`<namespace>:*`); returns how many. The keyspace is walked
/// first (SCAN, never KEYS: the shared server may hold millions of keys) and the keys are then
/// unlinked in one `UNLINK` (up to 100 000 keys), so services still running see Redis lose all
/// of it at one instant, as a flush or a restart on an empty disk would: keys deleted batch by
/// batch over seconds would leave them half a state, which they rightly refuse as corrupt.
/// On a cluster each master's keys go in one pipeline of single-key `UNLINK`s (a multi-key
/// command must stay in one slot), one master after another.
///
/// # Errors
///
/// Redis does not answer.
pub async fn wipe_namespace(url: &str, namespace: &str) -> anyhow::Result<usize> {
    let pattern = format!("{namespace}:*");
    let Some(seed) = cluster_seed(url) else {
        let mut con = connect(url).await?;
        let keys = scan(&mut con, &pattern).await?;
        let mut unlinked = 0;
        for chunk in keys.chunks(UNLINK_MOST) {
            unlinked += redis::cmd("UNLINK").arg(chunk).query_async::<usize>(&mut con).await?;
        }
        return Ok(unlinked);
    };
    let mut unlinked = 0;
    for master in cluster_masters(&seed).await? {
        let mut con = connect(&master).await?;
        let keys = scan(&mut con, &pattern).await?;
        for chunk in keys.chunks(UNLINK_MOST) {
            let mut pipe = redis::pipe();
            for key in chunk {
                pipe.cmd("UNLINK").arg(key);
            }
            let counts: Vec<usize> = pipe.query_async(&mut con).await?;
            unlinked += counts.iter().sum::<usize>();
        }
    }
    Ok(unlinked)
}

/// Deletes the keys of every namespace named by [`unique_name`](crate::stack::unique_name)
/// whose process has exited and that is older than `min_age` (the pipeline runs', the
/// benchmarks', the tests'), on the server or on every master of the cluster at `url`; returns
/// how many namespaces. Other keys are never touched. The keyspace is walked once (`SCAN`), each
/// batch's leftover keys unlinked as they are found: nobody uses them any more. Failures are
/// reported on stderr and skipped: a sweep never fails a test.
pub async fn sweep_leftover_namespaces(url: &str, min_age: Duration) -> usize {
    let masters = match cluster_seed(url) {
        Some(seed) => match cluster_masters(&seed).await {
            Ok(masters) => masters,
            Err(e) => return sweep_skipped(url, &e),
        },
        None => vec![url.to_owned()],
    };
    let mut swept = BTreeSet::new();
    for master in masters {
        if let Err(e) = sweep_server(&master, min_age, &mut swept).await {
            sweep_skipped(&master, &e);
        }
    }
    if !swept.is_empty() {
        eprintln!("deleted the keys of {} leftover redis namespaces at {url}", swept.len());
    }
    swept.len()
}

/// [`sweep_leftover_namespaces`] on one server; adds the namespaces it deleted keys of to
/// `swept`.
async fn sweep_server(url: &str, min_age: Duration, swept: &mut BTreeSet<String>) -> anyhow::Result<()> {
    let mut con = connect(url).await?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) =
            redis::cmd("SCAN").arg(cursor).arg("COUNT").arg(SCAN_COUNT).query_async(&mut con).await?;
        let (mut pipe, mut leftovers) = (redis::pipe(), 0);
        for key in batch {
            let Some((namespace, _)) = key.split_once(':') else { continue };
            if unique_name_origin(namespace).is_some_and(|origin| abandoned(origin, now, min_age)) {
                swept.insert(namespace.to_owned());
                // One key per UNLINK: the keys of one batch may lie in several cluster slots.
                pipe.cmd("UNLINK").arg(&key).ignore();
                leftovers += 1;
            }
        }
        if leftovers > 0 {
            pipe.query_async::<()>(&mut con).await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

fn sweep_skipped(url: &str, e: &anyhow::Error) -> usize {
    eprintln!("warning: leftover redis namespaces at {url} not swept: {e:#}");
    0
}

/// How many keys matching `pattern` each master of the cluster at `url`
/// (`redis+cluster://host:port,...`) holds, by the master's `redis://host:port`.
///
/// # Errors
///
/// `url` is not a cluster URL, or a node does not answer.
pub async fn keys_per_master(url: &str, pattern: &str) -> anyhow::Result<Vec<(String, usize)>> {
    let seed = cluster_seed(url).with_context(|| format!("{url:?} is not a cluster url"))?;
    let mut held = Vec::new();
    for master in cluster_masters(&seed).await? {
        let mut con = connect(&master).await?;
        let keys = scan(&mut con, pattern).await?;
        held.push((master, keys.len()));
    }
    Ok(held)
}

/// The `redis://` URL of the first seed node when `url` names a cluster
/// (`redis+cluster://host:port,...` or `redis://...,redis://...`), else `None`.
pub fn cluster_seed(url: &str) -> Option<String> {
    let url = url.trim();
    if let Some(hosts) = url.strip_prefix(CLUSTER_SCHEME) {
        let hosts = hosts.rsplit_once('@').map_or(hosts, |(_, h)| h);
        return Some(format!("redis://{}", hosts.split(',').next().unwrap_or_default().trim()));
    }
    url.contains(',').then(|| url.split(',').next().unwrap_or_default().trim().to_owned())
}

/// The `redis://host:port` of every master of the cluster `seed` belongs to (`CLUSTER NODES`).
///
/// # Errors
///
/// The seed does not answer, or is not a cluster node.
pub async fn cluster_masters(seed: &str) -> anyhow::Result<Vec<String>> {
    cluster_nodes(seed, |flags| flags.split(',').any(|f| f == "master")).await
}

/// Every server of the deployment at `url`, as a `redis://` URL each: the one server of a
/// `redis://` URL, or every live node (masters and replicas) of a cluster URL's cluster. What a benchmark reads each server's `INFO` from.
///
/// # Errors
///
/// A cluster's seed does not answer, or is not a cluster node.
pub async fn servers(url: &str) -> anyhow::Result<Vec<String>> {
    match cluster_seed(url) {
        Some(seed) => cluster_nodes(&seed, |_| true).await,
        None => Ok(vec![url.to_owned()]),
    }
}

/// The `redis://host:port` of every node of the cluster `seed` belongs to that is not failed and
/// whose `CLUSTER NODES` flags `keep` accepts.
async fn cluster_nodes(seed: &str, keep: impl Fn(&str) -> bool) -> anyhow::Result<Vec<String>> {
    let mut con = connect(seed).await?;
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut con).await?;
    Ok(nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let address = fields.nth(1)?;
            let flags = fields.next()?;
            let live = !flags.contains("fail") && keep(flags);
            let host_port = address.split('@').next()?;
            live.then(|| format!("redis://{host_port}"))
        })
        .collect())
}

async fn connect(url: &str) -> anyhow::Result<MultiplexedConnection> {
    let client = redis::Client::open(url).with_context(|| format!("redis url {url:?}"))?;
    client.get_multiplexed_async_connection().await.with_context(|| format!("connecting to {url}"))
}

/// Every key matching `pattern` on one server, sorted and distinct.
async fn scan(con: &mut MultiplexedConnection, pattern: &str) -> anyhow::Result<Vec<String>> {
    let (mut cursor, mut keys) = (0u64, Vec::<String>::new());
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query_async(con)
            .await?;
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    keys.sort_unstable();
    keys.dedup();
    Ok(keys)
}

/// [`wipe_namespace`] from synchronous code (a `Drop` guard, a test without a runtime): runs it on
/// a runtime of its own.
///
/// # Errors
///
/// Redis does not answer.
pub fn wipe_namespace_blocking(url: &str, namespace: &str) -> anyhow::Result<usize> {
    let (url, namespace) = (url.to_owned(), namespace.to_owned());
    // A thread of its own: the caller may be on a runtime, which can not be blocked on.
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(wipe_namespace(&url, &namespace))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the namespace wipe panicked"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_cluster_forms_name_their_first_seed_and_a_single_server_none() {
        assert_eq!(
            cluster_seed("redis+cluster://127.0.0.1:7301,127.0.0.1:7302").as_deref(),
            Some("redis://127.0.0.1:7301")
        );
        assert_eq!(cluster_seed("redis+cluster://u:p@h:1,h:2").as_deref(), Some("redis://h:1"));
        assert_eq!(cluster_seed("redis://h:1, redis://h:2").as_deref(), Some("redis://h:1"));
        assert_eq!(cluster_seed("redis://127.0.0.1:6379/0"), None);
    }
}
