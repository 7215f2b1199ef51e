//! Explicit migration and readiness of the Scylla backend's schema.
//!
//! Startup order (DESIGN invariant 6): [`migrate`] → connect/prepare
//! ([`super::ScyllaMessageStore::connect`]) → [`readiness`]; any failure stops the service.
//!
//! Why each guarantee holds:
//! - **Nothing changes schema at connect time**: only [`migrate`] issues DDL; connecting opens a
//!   session and prepares statements (which fails against a missing schema instead of creating
//!   it).
//! - **Replication comes from the configuration, never from a guess, and is never altered**: a
//!   new keyspace is created with `NetworkTopologyStrategy {dc: rf}`; an existing one is read
//!   back from `system_schema.keyspaces` and must match, or migration refuses. There is no
//!   `ALTER KEYSPACE` anywhere. The keyspace is verified again after creation, so two migrations
//!   racing with different RFs can not both succeed.
//! - **Server flavour is detected, not assumed**: `TABLETS = {'enabled': false}` (LWT needs
//!   vnodes on Scylla) is added only when [`detect_flavour`] says Scylla, and on Scylla an
//!   existing or new keyspace must read back as vnodes-based ([`check_vnodes`]: no
//!   `system_schema.scylla_keyspaces` row, or one with an explicit `storage_type = 'vnodes'`;
//!   a null or any other storage type, or `initial_tablets`, is refused).
//! - **The local DC is real**: requests are pinned to `config.local_dc` without failover, so a
//!   DC no node reports is refused up front, by name.
//! - **Idempotent**: keyspace and tables use `IF NOT EXISTS`; a second run verifies and changes
//!   nothing.
//! - **Tables only grow by known nullable columns**: each table's shape is read back from its
//!   own `CREATE TABLE` statement ([`table_shape`]); an existing table lacking one of its regular
//!   columns gets exactly that `ALTER TABLE ... ADD`; a column of another type or a different
//!   primary key is refused, never altered or dropped.
//! - **Readiness reads the schema itself**: a session, or prepared statements, prove nothing.

use std::collections::HashMap;

use scylla::client::session::Session;
use scylla::statement::{Consistency, Statement};

use super::config::ScyllaConfig;
use super::cql::{corrupt, unavailable};
use super::mailbox::mailbox_table_ddl;
use super::schema::{
    check_dc, check_replication, check_vnodes, create_keyspace, create_tables, detect_flavour, table_shape, Flavour,
    ScyllaKeyspaceRow, TableShape,
};
use crate::error::{StoreError, StoreResult};

/// What readiness found wrong; empty means ready.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Readiness {
    /// One line per missing or mismatched piece of schema.
    pub problems: Vec<String>,
}

impl Readiness {
    /// Whether the keyspace and every table exist with the configured replication.
    pub fn is_ready(&self) -> bool {
        self.problems.is_empty()
    }
}

async fn column_of_strings(session: &Session, what: &str, cql: &str, values: &[&str]) -> StoreResult<Vec<String>> {
    let mut stmt = Statement::new(cql);
    stmt.set_consistency(Consistency::LocalOne);
    let rows = session
        .query_unpaged(stmt, values)
        .await
        .map_err(|e| unavailable(what.to_owned(), e))?
        .into_rows_result()
        .map_err(|e| corrupt(what, e))?;
    let out = rows.rows::<(String,)>().map_err(|e| corrupt(what, e))?;
    out.map(|r| r.map(|(s,)| s).map_err(|e| corrupt(what, e))).collect()
}

/// Reads what [`detect_flavour`] needs from the connected node and decides.
pub async fn read_flavour(session: &Session) -> StoreResult<Flavour> {
    let local = column_of_strings(
        session,
        "reading system.local's columns",
        "SELECT column_name FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ?",
        &["system", "local"],
    )
    .await?;
    let schema_tables = column_of_strings(
        session,
        "reading system_schema's tables",
        "SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?",
        &["system_schema"],
    )
    .await?;
    detect_flavour(&local, &schema_tables).map_err(StoreError::InvariantViolation)
}

/// The replication map of `keyspace`, or `None` when it does not exist.
async fn read_replication(session: &Session, keyspace: &str) -> StoreResult<Option<HashMap<String, String>>> {
    const WHAT: &str = "reading system_schema.keyspaces";
    let mut stmt = Statement::new("SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = ?");
    stmt.set_consistency(Consistency::LocalOne);
    let rows = session
        .query_unpaged(stmt, (keyspace,))
        .await
        .map_err(|e| unavailable(WHAT, e))?
        .into_rows_result()
        .map_err(|e| corrupt(WHAT, e))?;
    let row = rows.maybe_first_row::<(HashMap<String, String>,)>().map_err(|e| corrupt(WHAT, e))?;
    Ok(row.map(|(m,)| m))
}

/// On Scylla, whether `keyspace` is vnodes-based: reads its `system_schema.scylla_keyspaces`
/// row and lets [`check_vnodes`] decide (no row, or an explicit `storage_type = 'vnodes'`, and
/// nothing else). Always fine on Cassandra, which has no tablets and no such table; so against
/// our local Cassandra this never reads the table, and the decision is covered by
/// [`check_vnodes`]'s unit tests only.
async fn vnodes_problem(session: &Session, flavour: Flavour, keyspace: &str) -> StoreResult<Option<String>> {
    if flavour == Flavour::Cassandra {
        return Ok(None);
    }
    const WHAT: &str = "reading system_schema.scylla_keyspaces";
    let mut stmt = Statement::new(
        "SELECT storage_type, initial_tablets FROM system_schema.scylla_keyspaces WHERE keyspace_name = ?",
    );
    stmt.set_consistency(Consistency::LocalOne);
    let rows = session
        .query_unpaged(stmt, (keyspace,))
        .await
        .map_err(|e| unavailable(WHAT, e))?
        .into_rows_result()
        .map_err(|e| corrupt(WHAT, e))?;
    let row = rows.maybe_first_row::<(Option<String>, Option<i32>)>().map_err(|e| corrupt(WHAT, e))?;
    let row = row.map(|(storage_type, initial_tablets)| ScyllaKeyspaceRow { storage_type, initial_tablets });
    Ok(check_vnodes(keyspace, row.as_ref()).err())
}

/// Whether the configured local DC is one the driver sees (see [`check_dc`]).
fn dc_problem(session: &Session, config: &ScyllaConfig) -> Option<String> {
    let state = session.get_cluster_state();
    let dcs: Vec<String> = state.get_nodes_info().iter().filter_map(|n| n.datacenter.clone()).collect();
    check_dc(&dcs, &config.local_dc).err()
}

fn refuse(config: &ScyllaConfig, reason: String) -> StoreError {
    StoreError::InvariantViolation(format!(
        "keyspace {} does not match the configuration ({reason}); refusing to migrate: \
         replication is never altered by the application",
        config.keyspace
    ))
}

async fn ddl(session: &Session, cql: String) -> StoreResult<()> {
    let mut stmt = Statement::new(cql.clone());
    stmt.set_consistency(Consistency::LocalQuorum);
    session.query_unpaged(stmt, ()).await.map_err(|e| unavailable(format!("running `{cql}`"), e))?;
    Ok(())
}

/// Creates or verifies the keyspace and every table of the Scylla backend (see the module
/// docs). Fails with `InvariantViolation` when an existing keyspace's replication differs from
/// `config`, and with `Unavailable` when the cluster can not be reached.
pub async fn migrate(session: &Session, config: &ScyllaConfig) -> StoreResult<()> {
    super::config::validate_keyspace(&config.keyspace).map_err(StoreError::InvalidInput)?;
    if let Some(problem) = dc_problem(session, config) {
        return Err(refuse(config, problem));
    }
    let flavour = read_flavour(session).await?;
    let (ks, dc, rf) = (&config.keyspace, &config.local_dc, config.replication_factor);
    match read_replication(session, ks).await? {
        Some(existing) => {
            check_replication(&existing, dc, rf).map_err(|r| refuse(config, r))?;
            if let Some(problem) = vnodes_problem(session, flavour, ks).await? {
                return Err(refuse(config, problem));
            }
        }
        None => {
            ddl(session, create_keyspace(flavour, ks, dc, rf)).await?;
            await_agreement(session).await?;
            let created = read_replication(session, ks)
                .await?
                .ok_or_else(|| StoreError::InvariantViolation(format!("keyspace {ks} is missing after CREATE")))?;
            check_replication(&created, dc, rf).map_err(|r| refuse(config, r))?;
            if let Some(problem) = vnodes_problem(session, flavour, ks).await? {
                return Err(refuse(config, problem));
            }
        }
    }
    for stmt in create_tables(ks).into_iter().chain(mailbox_table_ddl(ks)) {
        ddl(session, stmt.clone()).await?;
        let shape = table_shape(&stmt)
            .ok_or_else(|| StoreError::InvariantViolation(format!("the backend's own DDL is unreadable: {stmt}")))?;
        add_missing_columns(session, config, &shape).await?;
    }
    await_agreement(session).await?;
    let state = readiness(session, config).await?;
    if !state.is_ready() {
        return Err(StoreError::InvariantViolation(format!(
            "schema of {ks} is not ready after migration: {}",
            state.problems.join("; ")
        )));
    }
    Ok(())
}

/// The columns (name → type) an existing table has.
async fn read_columns(session: &Session, ks: &str, table: &str) -> StoreResult<HashMap<String, String>> {
    let what = format!("reading the columns of {ks}.{table}");
    let mut stmt = Statement::new(
        "SELECT column_name, type FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ?",
    );
    stmt.set_consistency(Consistency::LocalOne);
    let rows = session
        .query_unpaged(stmt, (ks, table))
        .await
        .map_err(|e| unavailable(what.clone(), e))?
        .into_rows_result()
        .map_err(|e| corrupt(&what, e))?;
    let out = rows.rows::<(String, String)>().map_err(|e| corrupt(&what, e))?;
    out.map(|r| r.map_err(|e| corrupt(&what, e))).collect()
}

/// What is wrong with an existing table against its shape: a column of another type, a missing
/// key column (never repaired), or missing regular columns (which [`migrate`] adds).
fn column_problems(shape: &TableShape, existing: &HashMap<String, String>) -> (Vec<String>, Vec<(String, String)>) {
    let (mut refuse, mut add) = (Vec::new(), Vec::new());
    for (column, ty) in &shape.columns {
        match existing.get(column) {
            Some(found) if found != ty => {
                refuse.push(format!("column {}.{column} is {found}, the backend needs {ty}", shape.name))
            }
            Some(_) => {}
            None if shape.key.contains(column) => {
                refuse.push(format!("table {} lacks key column {column}: its primary key differs", shape.name))
            }
            None => add.push((column.clone(), ty.clone())),
        }
    }
    (refuse, add)
}

/// Adds to an existing table only the known nullable (regular) columns it lacks; a column of
/// another type or a different key is refused, never altered.
async fn add_missing_columns(session: &Session, config: &ScyllaConfig, shape: &TableShape) -> StoreResult<()> {
    let existing = read_columns(session, &config.keyspace, &shape.name).await?;
    let (refuse_reasons, add) = column_problems(shape, &existing);
    if let Some(problem) = refuse_reasons.into_iter().next() {
        return Err(refuse(config, problem));
    }
    for (column, ty) in add {
        ddl(session, format!("ALTER TABLE {}.{} ADD {column} {ty}", config.keyspace, shape.name)).await?;
    }
    Ok(())
}

async fn await_agreement(session: &Session) -> StoreResult<()> {
    session.await_schema_agreement().await.map_err(|e| unavailable("awaiting schema agreement", e))?;
    Ok(())
}

/// Re-reads the schema: the keyspace exists with the configured replication (and, on Scylla,
/// vnodes), every table of the backend exists and has each of its columns. `Unavailable` only when the cluster can not be
/// asked.
pub async fn readiness(session: &Session, config: &ScyllaConfig) -> StoreResult<Readiness> {
    if let Some(problem) = dc_problem(session, config) {
        return Ok(Readiness { problems: vec![problem] });
    }
    let flavour = read_flavour(session).await?;
    let mut problems = Vec::new();
    match read_replication(session, &config.keyspace).await? {
        None => problems.push(format!("keyspace {} does not exist (run the migration)", config.keyspace)),
        Some(map) => {
            if let Err(reason) = check_replication(&map, &config.local_dc, config.replication_factor) {
                problems.push(format!("keyspace {}: {reason}", config.keyspace));
            }
            problems.extend(vnodes_problem(session, flavour, &config.keyspace).await?);
            let tables = column_of_strings(
                session,
                "reading system_schema.tables",
                "SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?",
                &[&config.keyspace],
            )
            .await?;
            for stmt in create_tables(&config.keyspace).into_iter().chain(mailbox_table_ddl(&config.keyspace)) {
                let Some(shape) = table_shape(&stmt) else {
                    problems.push(format!("the backend's own DDL is unreadable: {stmt}"));
                    continue;
                };
                if !tables.contains(&shape.name) {
                    problems
                        .push(format!("table {}.{} does not exist (run the migration)", config.keyspace, shape.name));
                    continue;
                }
                let existing = read_columns(session, &config.keyspace, &shape.name).await?;
                let (wrong, missing) = column_problems(&shape, &existing);
                problems.extend(wrong);
                problems.extend(missing.into_iter().map(|(c, _)| {
                    format!("column {}.{}.{c} does not exist (run the migration)", config.keyspace, shape.name)
                }));
            }
        }
    }
    Ok(Readiness { problems })
}
