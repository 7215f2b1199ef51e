//! Rows of one partition written as unlogged batches: a user's mailbox entries of one call, a
//! dispatch's completed chunks, the archive's record, index and expiry rows. A single-partition
//! batch reaches the replicas as one mutation (one commitlog entry, applied atomically and in
//! isolation), so a batch of rows costs the server about what one row does, where one request
//! per row paid the coordinator, the commitlog sync and the replica write every time. Rows of
//! different partitions never share a batch: a multi-partition unlogged batch only moves the
//! fan-out onto the coordinator.

use futures_util::future::try_join_all;
use scylla::client::session::Session;
use scylla::errors::ExecutionError;
use scylla::serialize::row::SerializeRow;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::Consistency;

use crate::error::{StoreError, StoreResult};

/// Most rows in one batch. Cassandra warns about batches over `batch_size_warn_threshold` (5 KiB
/// by default; the local stack sets 256 KiB) and refuses them over `batch_size_fail_threshold`
/// (50 KiB by default): 16 mailbox entries (a group blob and its key, about 150–200 bytes each),
/// chunk rows, or archive index and expiry rows stay under the default warning. Rows with large
/// blobs are also bounded by bytes ([`BLOB_BYTES_PER_BATCH`]).
pub(crate) const ROWS_PER_BATCH: usize = 16;

/// Most blob bytes in one batch of rows that carry blobs (archived records): well under the
/// default `batch_size_fail_threshold`. A row whose blob alone is larger goes as a plain request,
/// which the threshold does not apply to.
pub(crate) const BLOB_BYTES_PER_BATCH: usize = 32 * 1024;

/// Writes `rows`, all of one partition, with `statement` (an idempotent same-value write): one
/// plain request for a single row, otherwise batches of at most [`ROWS_PER_BATCH`] rows, all in
/// flight at once. Ok once every row is written; on an error some rows may be written, which a
/// retry of the same rows overwrites with the same values.
pub(crate) async fn write_partition<V: SerializeRow>(
    session: &Session,
    statement: &PreparedStatement,
    rows: &[V],
    what: &'static str,
) -> StoreResult<()> {
    try_join_all(rows.chunks(ROWS_PER_BATCH).map(|chunk| async move {
        write_rows(session, statement, chunk).await.map_err(|e| StoreError::unavailable(what, e))
    }))
    .await?;
    Ok(())
}

/// Writes `rows`, all of one partition, with `statement` in one request: a plain execution for
/// one row, an unlogged batch (at LOCAL_QUORUM, idempotent) for more. The caller bounds their
/// number and size ([`ROWS_PER_BATCH`], [`BLOB_BYTES_PER_BATCH`]).
pub(crate) async fn write_rows<V: SerializeRow>(
    session: &Session,
    statement: &PreparedStatement,
    rows: &[V],
) -> Result<(), ExecutionError> {
    match rows {
        [] => Ok(()),
        [row] => session.execute_unpaged(statement, row).await.map(drop),
        _ => session.batch(&unlogged(statement, rows.len()), rows).await.map(drop),
    }
}

/// An unlogged batch of `n` executions of `statement`, at the consistency every mailbox and
/// archive write uses.
fn unlogged(statement: &PreparedStatement, n: usize) -> Batch {
    let mut batch = Batch::new(BatchType::Unlogged);
    batch.set_consistency(Consistency::LocalQuorum);
    batch.set_serial_consistency(None);
    batch.set_is_idempotent(true);
    for _ in 0..n {
        batch.append_statement(statement.clone());
    }
    batch
}
