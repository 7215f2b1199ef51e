//! Rows of one partition written as unlogged batches: a user's mailbox entries of one call, a
//! dispatch's completed chunks. A single-partition batch reaches the replicas as one mutation
//! (one commitlog entry, applied atomically and in isolation), so a batch of rows costs the
//! server about what one row does, where one request per row paid the coordinator, the
//! commitlog sync and the replica write every time. Rows of different partitions never share a
//! batch: a multi-partition unlogged batch only moves the fan-out onto the coordinator.

use futures_util::future::try_join_all;
use scylla::client::session::Session;
use scylla::serialize::row::SerializeRow;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::Consistency;

use super::db;
use crate::error::StoreResult;

/// Most rows in one batch. Cassandra warns about batches over `batch_size_warn_threshold` (5 KiB
/// by default; the local stack sets 256 KiB) and refuses them over `batch_size_fail_threshold`
/// (50 KiB by default): 16 mailbox entries (a group blob and its key, about 150–200 bytes each)
/// or chunk rows stay under the default warning.
pub(super) const ROWS_PER_BATCH: usize = 16;

/// Writes `rows`, all of one partition, with `statement` (an idempotent same-value write): one
/// plain request for a single row, otherwise batches of at most [`ROWS_PER_BATCH`] rows, all in
/// flight at once. Ok once every row is written; on an error some rows may be written, which a
/// retry of the same rows overwrites with the same values.
pub(super) async fn write_partition<V: SerializeRow>(
    session: &Session,
    statement: &PreparedStatement,
    rows: &[V],
    what: &'static str,
) -> StoreResult<()> {
    if let [row] = rows {
        session.execute_unpaged(statement, row).await.map_err(db(what))?;
        return Ok(());
    }
    try_join_all(rows.chunks(ROWS_PER_BATCH).map(|chunk| async move {
        let batch = unlogged(statement, chunk.len());
        session.batch(&batch, chunk).await.map_err(db(what))
    }))
    .await?;
    Ok(())
}

/// An unlogged batch of `n` executions of `statement`, at the consistency every mailbox
/// statement uses.
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
