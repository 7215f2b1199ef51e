//! A test's Redis key namespace, deleted at once.
//!
//! Every qim Redis key starts with its store's namespace and a colon, so `<namespace>:*` is all
//! of one test's (or one run's) state, and nobody else's on the shared server.

use anyhow::Context;

/// Keys one `SCAN` call walks (SCAN's default is 10: one round trip per 10 keys of the database).
const SCAN_COUNT: usize = 10_000;
/// Most keys one `UNLINK` takes (bounds the command's size; a test's namespace is far smaller).
const UNLINK_MOST: usize = 100_000;

/// Deletes every key of `namespace` (`<namespace>:*`); returns how many. The keyspace is walked
/// first (SCAN, never KEYS: the shared server may hold millions of keys) and the keys are then
/// unlinked in one `UNLINK` (up to 100 000 keys), so services still running see Redis lose all
/// of it at one instant, as a flush or a restart on an empty disk would: keys deleted batch by
/// batch over seconds would leave them half a state, which they rightly refuse as corrupt.
///
/// # Errors
///
/// Redis does not answer.
pub async fn wipe_namespace(url: &str, namespace: &str) -> anyhow::Result<usize> {
    let client = redis::Client::open(url).with_context(|| format!("redis url {url:?}"))?;
    let mut con = client.get_multiplexed_async_connection().await.with_context(|| format!("connecting to {url}"))?;
    let pattern = format!("{namespace}:*");
    let (mut cursor, mut keys) = (0u64, Vec::<String>::new());
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query_async(&mut con)
            .await?;
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    keys.sort_unstable();
    keys.dedup();
    let mut unlinked = 0;
    for chunk in keys.chunks(UNLINK_MOST) {
        unlinked += redis::cmd("UNLINK").arg(chunk).query_async::<usize>(&mut con).await?;
    }
    Ok(unlinked)
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
