//! Small helpers shared by the Scylla modules: driver errors → [`StoreError`], LWT outcomes read
//! by column name, and the session every module uses.
//!
//! - Any driver failure (connection, timeout, server error) is [`StoreError::Unavailable`], the
//!   only retryable kind.
//! - A value that does not have the type our schema gives it is [`StoreError::CorruptEntry`].
//! - An LWT result is read by the `[applied]` column's name: when the condition fails, the server
//!   appends the row's current columns, and which ones differs between servers and statements.

use std::time::Duration;

use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::errors::{DbError, ExecutionError, RequestAttemptError, WriteType};
use scylla::policies::load_balancing::DefaultPolicy;
use scylla::response::query_result::QueryResult;
use scylla::statement::{Consistency, SerialConsistency};
use scylla::value::{CqlValue, Row};

use super::config::ScyllaConfig;
use crate::error::{StoreError, StoreResult};

/// Bound on opening a connection and on the initial metadata fetch.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The server-side bound on a metadata request of the control connection (ScyllaDB honours it,
/// Cassandra ignores it): below [`CONNECT_TIMEOUT`], the client's bound on the same requests,
/// so the server reports its own, more telling timeout first. The driver's default (30 s) sits
/// above the client's bound, and the driver warns about that on every start.
pub const METADATA_SERVERSIDE_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one request (an LWT under contention may take several Paxos rounds).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Whether `error` is Paxos giving up on a CAS (its outcome unknown), which the same CAS sent
/// again settles.
pub(crate) fn paxos_timed_out(error: &ExecutionError) -> bool {
    matches!(
        error,
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(
            DbError::WriteTimeout { write_type: WriteType::Cas, .. },
            _
        ))
    )
}

/// A random pause before a CAS is sent again after contention: 10–50 ms, longer with every
/// attempt up to 8×, so contending processes drift apart.
pub(crate) async fn contention_pause(attempt: usize) {
    // uuid's v4 is the store's random source already (no other RNG dependency for this).
    let jitter = u64::from(uuid::Uuid::new_v4().as_u128() as u8) % 40;
    let factor = 1u64 << attempt.min(3);
    tokio::time::sleep(std::time::Duration::from_millis((10 + jitter) * factor)).await;
}

/// Maps a driver failure to `Unavailable`, naming what was being done.
pub(crate) fn unavailable(what: impl Into<String>, err: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::unavailable(what, err)
}

/// Maps a row whose values do not decode to our schema's types to `CorruptEntry`.
pub(crate) fn corrupt(what: &str, err: impl std::fmt::Display) -> StoreError {
    StoreError::CorruptEntry(format!("{what}: {err}"))
}

/// Opens a session to `config.hosts`: LOCAL_QUORUM and LOCAL_SERIAL by default, requests routed
/// to `config.local_dc` only (no silent DC failover), connecting bounded by
/// [`CONNECT_TIMEOUT`]. Creates and changes nothing.
pub async fn open_session(config: &ScyllaConfig) -> StoreResult<Session> {
    let policy = DefaultPolicy::builder().prefer_datacenter(config.local_dc.clone()).permit_dc_failover(false).build();
    let profile = ExecutionProfile::builder()
        .consistency(Consistency::LocalQuorum)
        .serial_consistency(Some(SerialConsistency::LocalSerial))
        .load_balancing_policy(policy)
        .request_timeout(Some(REQUEST_TIMEOUT))
        .build();
    let builder = SessionBuilder::new()
        .known_nodes(&config.hosts)
        .default_execution_profile_handle(profile.into_handle())
        .connection_timeout(CONNECT_TIMEOUT)
        .metadata_request_clientside_timeout(CONNECT_TIMEOUT)
        .metadata_request_serverside_timeout(METADATA_SERVERSIDE_TIMEOUT);
    let hosts = config.hosts.join(",");
    match tokio::time::timeout(CONNECT_TIMEOUT * 2, builder.build()).await {
        Ok(Ok(session)) => Ok(session),
        Ok(Err(e)) => Err(unavailable(format!("connecting to Scylla/Cassandra at {hosts}"), e)),
        Err(_) => Err(StoreError::Unavailable {
            message: format!("connecting to Scylla/Cassandra at {hosts}: no session within {:?}", CONNECT_TIMEOUT * 2),
            source: None,
        }),
    }
}

/// One LWT answer: whether it applied, and the row the server returned with it.
pub(crate) struct LwtOutcome {
    applied: bool,
    names: Vec<String>,
    row: Row,
}

impl LwtOutcome {
    /// Reads an LWT result by column name.
    pub(crate) fn read(what: &str, result: QueryResult) -> StoreResult<Self> {
        let rows = result.into_rows_result().map_err(|e| corrupt(what, format!("an LWT returned no rows: {e}")))?;
        let names: Vec<String> = rows.column_specs().iter().map(|s| s.name().to_owned()).collect();
        let row: Row = rows.single_row().map_err(|e| corrupt(what, format!("an LWT returned not one row: {e}")))?;
        let idx = names.iter().position(|n| n == "[applied]").ok_or_else(|| corrupt(what, "no [applied] column"))?;
        let applied = match row.columns.get(idx) {
            Some(Some(CqlValue::Boolean(b))) => *b,
            other => return Err(corrupt(what, format!("[applied] is {other:?}, not a boolean"))),
        };
        Ok(Self { applied, names, row })
    }

    /// Whether the condition held and the write happened.
    pub(crate) fn applied(&self) -> bool {
        self.applied
    }

    fn value(&self, name: &str) -> Option<&CqlValue> {
        let idx = self.names.iter().position(|n| n == name)?;
        self.row.columns.get(idx)?.as_ref()
    }

    /// The current `bigint` column `name` of the row, if the server returned it non-null.
    pub(crate) fn bigint(&self, what: &str, name: &str) -> StoreResult<Option<i64>> {
        match self.value(name) {
            None => Ok(None),
            Some(CqlValue::BigInt(v)) => Ok(Some(*v)),
            Some(other) => Err(corrupt(what, format!("{name} is {other:?}, not a bigint"))),
        }
    }

    /// The current `text` column `name` of the row, if the server returned it non-null.
    pub(crate) fn text(&self, what: &str, name: &str) -> StoreResult<Option<String>> {
        match self.value(name) {
            None => Ok(None),
            Some(CqlValue::Text(v)) => Ok(Some(v.clone())),
            Some(other) => Err(corrupt(what, format!("{name} is {other:?}, not text"))),
        }
    }

    /// The current `blob` column `name` of the row, if the server returned it non-null.
    pub(crate) fn blob(&self, what: &str, name: &str) -> StoreResult<Option<Vec<u8>>> {
        match self.value(name) {
            None => Ok(None),
            Some(CqlValue::Blob(v)) => Ok(Some(v.clone())),
            Some(other) => Err(corrupt(what, format!("{name} is {other:?}, not a blob"))),
        }
    }
}
