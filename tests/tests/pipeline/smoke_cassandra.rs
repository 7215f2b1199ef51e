//! Smoke test of the Cassandra the stack provides: lightweight transactions (`IF NOT EXISTS`,
//! `IF v = ?` under `LOCAL_SERIAL`) and TTLs, through the scylla 1.x driver.
//!
//! Needs Cassandra at `QIM_TEST_SCYLLA_HOSTS` (default 127.0.0.1:9042); fails, never skips,
//! when it is missing: start it with `deploy/local/stack up`.

use anyhow::{bail, ensure, Context as _};
use qim_tests::stack;
use scylla::client::session::Session;
use scylla::response::query_result::QueryResult;
use scylla::statement::SerialConsistency;
use scylla::value::{CqlValue, Row};

#[tokio::test]
async fn lwt_and_ttl_round_trip() -> anyhow::Result<()> {
    let session = stack::require_scylla().await;

    // Replicate in whatever DC the node reports (the local stack names it `datacenter1`).
    let (dc,) = session
        .query_unpaged("SELECT data_center FROM system.local", &[])
        .await
        .context("reading the local data center")?
        .into_rows_result()?
        .single_row::<(String,)>()
        .context("system.local must have exactly one row")?;

    let ks = stack::unique_name("smoke_cql");
    session
        .query_unpaged(
            format!(
                "CREATE KEYSPACE {ks} WITH replication = \
                 {{'class': 'NetworkTopologyStrategy', '{dc}': 1}}"
            ),
            &[],
        )
        .await
        .with_context(|| format!("creating keyspace {ks} in data center {dc}"))?;

    let outcome = exercise(&session, &ks).await;

    if let Err(e) = session.query_unpaged(format!("DROP KEYSPACE IF EXISTS {ks}"), &[]).await {
        eprintln!("warning: could not drop keyspace {ks}: {e}");
    }
    outcome
}

/// Runs the LWT and TTL checks in the (fresh, empty) keyspace `ks`.
async fn exercise(session: &Session, ks: &str) -> anyhow::Result<()> {
    session
        .query_unpaged(format!("CREATE TABLE {ks}.kv (k text PRIMARY KEY, v text)"), &[])
        .await
        .with_context(|| format!("creating table {ks}.kv"))?;

    // (a) Lightweight transactions.
    let mut insert = session
        .prepare(format!("INSERT INTO {ks}.kv (k, v) VALUES (?, ?) IF NOT EXISTS"))
        .await
        .context("preparing INSERT IF NOT EXISTS")?;
    insert.set_serial_consistency(Some(SerialConsistency::LocalSerial));

    let first = lwt(session.execute_unpaged(&insert, ("k1", "v1")).await?)?;
    ensure!(first == (true, None), "first INSERT IF NOT EXISTS: got (applied, v) = {first:?}, want (true, None)");
    let second = lwt(session.execute_unpaged(&insert, ("k1", "v2")).await?)?;
    ensure!(
        second == (false, Some("v1".to_owned())),
        "repeated INSERT IF NOT EXISTS: got (applied, v) = {second:?}, \
         want (false, Some(\"v1\")): the existing row"
    );

    let mut update = session
        .prepare(format!("UPDATE {ks}.kv SET v = ? WHERE k = ? IF v = ?"))
        .await
        .context("preparing conditional UPDATE")?;
    update.set_serial_consistency(Some(SerialConsistency::LocalSerial));

    let matched = lwt(session.execute_unpaged(&update, ("v2", "k1", "v1")).await?)?;
    ensure!(
        matched == (true, None),
        "UPDATE IF v = 'v1' on v = 'v1': got (applied, v) = {matched:?}, want (true, None)"
    );
    let mismatched = lwt(session.execute_unpaged(&update, ("v3", "k1", "v1")).await?)?;
    ensure!(
        mismatched == (false, Some("v2".to_owned())),
        "UPDATE IF v = 'v1' on v = 'v2': got (applied, v) = {mismatched:?}, \
         want (false, Some(\"v2\"))"
    );

    let (v,) = session
        .query_unpaged(format!("SELECT v FROM {ks}.kv WHERE k = ?"), ("k1",))
        .await?
        .into_rows_result()?
        .single_row::<(String,)>()
        .context("k1 must exist after the LWTs")?;
    ensure!(v == "v2", "k1 holds {v:?} after the LWTs, want \"v2\"");

    // (b) TTL.
    session
        .query_unpaged(format!("INSERT INTO {ks}.kv (k, v) VALUES (?, ?) USING TTL 3600"), ("k2", "ephemeral"))
        .await
        .context("INSERT USING TTL 3600")?;
    let (ttl,) = session
        .query_unpaged(format!("SELECT TTL(v) FROM {ks}.kv WHERE k = ?"), ("k2",))
        .await?
        .into_rows_result()?
        .single_row::<(Option<i32>,)>()
        .context("k2 must exist right after its insert")?;
    let ttl = ttl.context("TTL(v) is null: the TTL was not stored")?;
    ensure!((3501..=3600).contains(&ttl), "TTL(v) = {ttl}, want in (3500, 3600]");
    Ok(())
}

/// Reads an LWT result: whether it was applied, and the current `v` the server returns when it
/// was not (the condition failed, so the row's columns follow `[applied]`).
///
/// Columns are found by name in the result's column specs, not by position or a fixed tuple
/// type: a failed condition returns `[applied]` plus the row's current columns.
fn lwt(result: QueryResult) -> anyhow::Result<(bool, Option<String>)> {
    let rows = result.into_rows_result().context("an LWT must return rows")?;
    let specs = rows.column_specs();
    let (applied_idx, _) = specs.get_by_name("[applied]").context("LWT result has no [applied] column")?;
    let v_idx = specs.get_by_name("v").map(|(i, _)| i);
    let row: Row = rows.single_row().context("an LWT on one partition returns one row")?;

    let applied = match row.columns.get(applied_idx) {
        Some(Some(CqlValue::Boolean(b))) => *b,
        other => bail!("[applied] is {other:?}, not a boolean"),
    };
    let v = match v_idx.map(|i| &row.columns[i]) {
        None | Some(None) => None,
        Some(Some(CqlValue::Text(s))) => Some(s.clone()),
        Some(other) => bail!("v is {other:?}, not text"),
    };
    Ok((applied, v))
}
