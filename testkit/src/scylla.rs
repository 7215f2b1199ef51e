//! Dropping test keyspaces: one by name ([`drop_keyspace`]) and those that finished test
//! processes left behind ([`sweep_leftover_keyspaces`]).
//!
//! A test binary has no hook to drop its keyspaces at exit, and a single-node Cassandra with a
//! small heap runs out of memory after a few hundred of them (each holds the full schema). So the
//! test command sweeps before its run (`qim-test-sweep`), and under `cargo test` the
//! first test of each process that makes keyspaces sweeps those of earlier processes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use backon::{ExponentialBuilder, Retryable};
use futures_util::StreamExt as _;
use scylla::client::session::Session;
use scylla::statement::Statement;

use crate::stack::{abandoned, unique_name_origin, Origin};

/// Reads the creator and creation time out of a generated test keyspace name: the store's suites'
/// `qim_test_<pid>_<nanos>`, or the end-to-end harness's `e2e_` [`unique_name`](crate::stack::unique_name)s;
/// `None` for any other name (a user's keyspace is never touched).
pub fn origin(name: &str) -> Option<Origin> {
    if let Some(rest) = name.strip_prefix("qim_test_") {
        let (pid, nanos) = rest.split_once('_')?;
        let nanos: u64 = nanos.parse().ok()?;
        return Some(Origin { pid: pid.parse().ok()?, created: Duration::from_nanos(nanos) });
    }
    // `e2e_<label>_<pid>_<millis hex>_<n>`: the end-to-end harness's unique names.
    unique_name_origin(name.strip_prefix("e2e_")?)
}

/// Bound on one `DROP KEYSPACE`: the server flushes and deletes every table, then the driver
/// awaits schema agreement, which takes well over an ordinary request's 30 s on a single node
/// that several test binaries load at once (the store's own schema changes use the same bound).
const DROP_TIMEOUT: Duration = Duration::from_secs(60);
/// How many times a drop is sent; `DROP KEYSPACE IF EXISTS` is idempotent, so sending it again
/// after a timeout whose drop did apply is harmless.
const DROP_ATTEMPTS: usize = 3;

/// How many drops a sweep has in flight. The server applies schema changes one at a time, but
/// most of a drop's 3.5 s here is the driver's wait for schema agreement, which overlaps.
const DROPS_AT_ONCE: usize = 8;

/// Drops `name` if it exists, waiting up to a minute per attempt and sending the drop again on
/// a failure.
///
/// # Errors
///
/// Every attempt failed (the last error, with the keyspace's name as context).
pub async fn drop_keyspace(session: &Session, name: &str) -> anyhow::Result<()> {
    let send = || async {
        let mut stmt = Statement::new(format!("DROP KEYSPACE IF EXISTS {name}"));
        stmt.set_request_timeout(Some(DROP_TIMEOUT));
        session.query_unpaged(stmt, ()).await
    };
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_times(DROP_ATTEMPTS - 1)
        .with_jitter();
    send.retry(backoff)
        .notify(|e, after| eprintln!("warning: dropping keyspace {name} failed ({e}); sending it again in {after:?}"))
        .await
        .with_context(|| format!("dropping keyspace {name}"))?;
    Ok(())
}

/// Drops every generated test keyspace whose process has exited and that is older than
/// `min_age` (tests pass [`MIN_AGE`](crate::stack::MIN_AGE)); returns how many were dropped.
/// Failures are reported on stderr and skipped: a sweep never fails a test.
pub async fn sweep_leftover_keyspaces(session: &Session, min_age: Duration) -> usize {
    let names = match session.query_unpaged("SELECT keyspace_name FROM system_schema.keyspaces", &[]).await {
        Ok(result) => match result.into_rows_result() {
            Ok(rows) => match rows.rows::<(String,)>() {
                Ok(rows) => rows.filter_map(Result::ok).map(|(n,)| n).collect::<Vec<_>>(),
                Err(e) => return skipped(&e),
            },
            Err(e) => return skipped(&e),
        },
        Err(e) => return skipped(&e),
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let leftovers = names.into_iter().filter(|name| origin(name).is_some_and(|o| abandoned(o, now, min_age)));
    let dropped = futures_util::stream::iter(leftovers)
        .map(|name| async move { drop_keyspace(session, &name).await })
        .buffer_unordered(DROPS_AT_ONCE)
        .filter_map(|outcome| async move {
            outcome.map_err(|e| eprintln!("warning: could not drop leftover test keyspace: {e:#}")).ok()
        })
        .count()
        .await;
    if dropped > 0 {
        eprintln!("dropped {dropped} leftover test keyspaces");
    }
    dropped
}

fn skipped(e: &dyn std::fmt::Display) -> usize {
    eprintln!("warning: leftover test keyspaces not swept: listing keyspaces failed: {e}");
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_reads_both_generated_forms_and_nothing_else() {
        assert_eq!(
            origin("qim_test_4242_1764650000000000000"),
            Some(Origin { pid: 4242, created: Duration::from_nanos(1_764_650_000_000_000_000) })
        );
        let e2e = crate::stack::unique_name("e2e_demo_x");
        let parsed = origin(&e2e).expect(&e2e);
        assert_eq!(parsed.pid, std::process::id());
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        assert!(now.saturating_sub(parsed.created) < Duration::from_secs(60), "{e2e}: {parsed:?}");
        for other in
            ["qim", "qim_test_", "qim_test_12", "qim_test_x_1", "e2e_", "e2e_1_2_3", "e2e_a_1_zz_3", "app_1_2_3"]
        {
            assert_eq!(origin(other), None, "{other}");
        }
    }
}
