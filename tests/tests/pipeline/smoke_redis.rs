//! Smoke test of the Redis the stack provides: a Lua script run through `redis::Script`, whose
//! `invoke_async` sends `EVALSHA` and falls back to loading the script on `NOSCRIPT`. The script
//! text names the test's keys, so its SHA is one the server has never seen: no `SCRIPT FLUSH`,
//! which would empty the cache of every other test on the shared server.
//!
//! Needs Redis at `QIM_TEST_REDIS_URL` (default redis://127.0.0.1:6379/0); fails, never skips,
//! when it is missing: start it with `deploy/local/stack up`.

use anyhow::{ensure, Context as _};
use qim_tests::stack;
use redis::aio::MultiplexedConnection;

/// Stores ARGV[1] at KEYS[1], adds ARGV[2] to the counter at KEYS[2] and returns the new count.
const SCRIPT: &str = r"
redis.call('SET', KEYS[1], ARGV[1])
return redis.call('INCRBY', KEYS[2], ARGV[2])
";

#[tokio::test]
async fn script_invoke_falls_back_on_noscript_then_hits_evalsha() -> anyhow::Result<()> {
    let mut con = stack::require_redis().await;
    let prefix = stack::unique_name("smoke_redis");
    let keys = [format!("{prefix}:last"), format!("{prefix}:count")];

    let script = redis::Script::new(&format!("-- {prefix}\n{SCRIPT}"));
    let outcome = exercise(&mut con, &script, &keys).await;

    if let Err(e) = redis::cmd("DEL").arg(&keys).query_async::<i64>(&mut con).await {
        eprintln!("warning: could not delete {keys:?}: {e}");
    }
    outcome
}

/// Runs the checks of `script` (never run before) using the (absent) keys `last` and `count`.
async fn exercise(
    con: &mut MultiplexedConnection,
    script: &redis::Script,
    [last, count]: &[String; 2],
) -> anyhow::Result<()> {
    let sha = script.get_hash().to_owned();

    // A new script: the first EVALSHA must miss.
    ensure!(script_exists(con, &sha).await? == 0, "script {sha} is cached before its first use");

    // EVALSHA -> NOSCRIPT -> SCRIPT LOAD -> EVALSHA.
    let n: i64 = script
        .key(last)
        .key(count)
        .arg("first")
        .arg(5)
        .invoke_async(con)
        .await
        .context("first invocation (NOSCRIPT fallback)")?;
    ensure!(n == 5, "first invocation returned {n}, want 5");
    ensure!(script_exists(con, &sha).await? == 1, "script {sha} not cached after the NOSCRIPT fallback loaded it");

    // The script is cached now, so this EVALSHA hits.
    let n: i64 = script
        .key(last)
        .key(count)
        .arg("second")
        .arg(7)
        .invoke_async(con)
        .await
        .context("second invocation (EVALSHA hit)")?;
    ensure!(n == 12, "second invocation returned {n}, want 5 + 7 = 12");

    let (stored, counter): (String, i64) =
        redis::pipe().get(last).get(count).query_async(con).await.context("reading back the script's writes")?;
    ensure!(stored == "second", "{last} holds {stored:?}, want \"second\"");
    ensure!(counter == 12, "{count} holds {counter}, want 12");
    Ok(())
}

/// `SCRIPT EXISTS sha`: 1 when the server has the script cached, 0 when not.
async fn script_exists(con: &mut MultiplexedConnection, sha: &str) -> anyhow::Result<i64> {
    let exists: Vec<i64> =
        redis::cmd("SCRIPT").arg("EXISTS").arg(sha).query_async(con).await.context("SCRIPT EXISTS")?;
    ensure!(exists.len() == 1, "SCRIPT EXISTS answered {exists:?}");
    Ok(exists[0])
}
