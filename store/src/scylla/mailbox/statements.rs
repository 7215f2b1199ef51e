//! Every prepared statement of the mailbox store, prepared once by `connect`.
//!
//! Plain statements run at `LOCAL_QUORUM`; the two LWTs (retention meta only) at `LOCAL_SERIAL`.

use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};

use crate::error::StoreError;

/// The prepared statements, one field per statement.
#[derive(Debug)]
pub(super) struct Statements {
    pub(super) entry_insert: PreparedStatement,
    pub(super) entry_range: PreparedStatement,
    pub(super) meta_select: PreparedStatement,
    pub(super) meta_insert_lwt: PreparedStatement,
    pub(super) meta_update_lwt: PreparedStatement,
    pub(super) bucket_insert: PreparedStatement,
    pub(super) bucket_retire: PreparedStatement,
    pub(super) bucket_select_day: PreparedStatement,
    pub(super) legacy_bucket_select_day: PreparedStatement,
    pub(super) floor_select: PreparedStatement,
    pub(super) floor_trim: PreparedStatement,
    pub(super) floor_gap: PreparedStatement,
    pub(super) dispatch_select: PreparedStatement,
    pub(super) dispatch_head: PreparedStatement,
    pub(super) dispatch_insert: PreparedStatement,
    pub(super) obs_insert: PreparedStatement,
    pub(super) obs_select: PreparedStatement,
    pub(super) chunk_insert: PreparedStatement,
    pub(super) chunk_select_one: PreparedStatement,
    pub(super) chunk_select_lane: PreparedStatement,
    pub(super) chunk_select_all: PreparedStatement,
    pub(super) source_insert: PreparedStatement,
    pub(super) source_select_one: PreparedStatement,
    pub(super) source_range: PreparedStatement,
    pub(super) source_bucket_insert: PreparedStatement,
    pub(super) source_bucket_range: PreparedStatement,
    pub(super) collected_insert: PreparedStatement,
    pub(super) collected_select: PreparedStatement,
    pub(super) wm_select_lane: PreparedStatement,
    pub(super) wm_select_all: PreparedStatement,
    pub(super) wm_update: PreparedStatement,
    pub(super) gc_cursor_select: PreparedStatement,
    pub(super) gc_claim: PreparedStatement,
    pub(super) gc_through: PreparedStatement,
    pub(super) pending_insert: PreparedStatement,
    pub(super) pending_select: PreparedStatement,
}

async fn prepare(session: &Session, ks: &str, cql: &str, lwt: bool) -> Result<PreparedStatement, StoreError> {
    let text = cql.replace("{ks}", ks);
    let mut p = session
        .prepare(text.clone())
        .await
        .map_err(|e| StoreError::unavailable(format!("preparing `{text}` (did the mailbox migration run?)"), e))?;
    p.set_consistency(Consistency::LocalQuorum);
    if lwt {
        p.set_serial_consistency(Some(SerialConsistency::LocalSerial));
    }
    Ok(p)
}

impl Statements {
    pub(super) async fn prepare_all(session: &Session, ks: &str) -> Result<Self, StoreError> {
        let p = |cql: &'static str| prepare(session, ks, cql, false);
        Ok(Self {
            entry_insert: p("INSERT INTO {ks}.mailbox_entry (tenant_id, user_id, mailbox_seq, grp) \
                VALUES (?, ?, ?, ?) USING TTL ?")
            .await?,
            entry_range: p("SELECT mailbox_seq, grp FROM {ks}.mailbox_entry \
                WHERE tenant_id = ? AND user_id = ? AND mailbox_seq > ? AND mailbox_seq <= ? LIMIT ?")
            .await?,
            meta_select: p("SELECT format_version, ledger_generation, active_ledger FROM {ks}.mailbox_retention_meta \
                WHERE tenant_id = ? AND user_id = ?")
            .await?,
            meta_insert_lwt: prepare(
                session,
                ks,
                "INSERT INTO {ks}.mailbox_retention_meta \
                 (tenant_id, user_id, format_version, ledger_generation, active_ledger) \
                 VALUES (?, ?, ?, ?, ?) IF NOT EXISTS",
                true,
            )
            .await?,
            meta_update_lwt: prepare(
                session,
                ks,
                "UPDATE {ks}.mailbox_retention_meta SET format_version = ?, ledger_generation = ?, active_ledger = ? \
                 WHERE tenant_id = ? AND user_id = ? IF ledger_generation = ?",
                true,
            )
            .await?,
            bucket_insert: p("INSERT INTO {ks}.mailbox_retention_bucket_v3 \
                (tenant_id, user_id, expiry_day, epoch, max_seq, expires_at) VALUES (?, ?, ?, ?, ?, ?) \
                USING TIMESTAMP ?")
            .await?,
            bucket_retire: p("INSERT INTO {ks}.mailbox_retention_bucket_v3 \
                (tenant_id, user_id, expiry_day, epoch, max_seq, expires_at) VALUES (?, ?, ?, ?, ?, ?) \
                USING TTL ? AND TIMESTAMP ?")
            .await?,
            bucket_select_day: p("SELECT epoch, max_seq, expires_at FROM {ks}.mailbox_retention_bucket_v3 \
                WHERE tenant_id = ? AND user_id = ? AND expiry_day = ?")
            .await?,
            legacy_bucket_select_day: p("SELECT epoch, max_seq, expires_at FROM {ks}.mailbox_retention_bucket_v2 \
                WHERE tenant_id = ? AND user_id = ? AND expiry_day = ?")
            .await?,
            floor_select: p("SELECT trim, gap FROM {ks}.mailbox_floor WHERE tenant_id = ? AND user_id = ?").await?,
            floor_trim: p(
                "UPDATE {ks}.mailbox_floor USING TIMESTAMP ? SET trim = ? WHERE tenant_id = ? AND user_id = ?",
            )
            .await?,
            floor_gap: p("UPDATE {ks}.mailbox_floor USING TIMESTAMP ? SET gap = ? WHERE tenant_id = ? AND user_id = ?")
                .await?,
            dispatch_select: p(
                "SELECT manifest, canonical_offset, mailbox_seq, lane_chunks, generation FROM {ks}.mailbox_dispatch \
                WHERE shard = ? AND message_id = ?",
            )
            .await?,
            dispatch_head: p(
                "SELECT canonical_offset, mailbox_seq, lane_chunks, generation FROM {ks}.mailbox_dispatch \
                WHERE shard = ? AND message_id = ?",
            )
            .await?,
            dispatch_insert: p("INSERT INTO {ks}.mailbox_dispatch \
                (shard, message_id, manifest, canonical_offset, mailbox_seq, lane_chunks, generation) \
                VALUES (?, ?, ?, ?, ?, ?, ?) \
                USING TTL ? AND TIMESTAMP ?")
            .await?,
            obs_insert: p("INSERT INTO {ks}.mailbox_dispatch_observation \
                (shard, message_id, generation, observed_offset, observed_at) VALUES (?, ?, ?, ?, ?) USING TTL ?")
            .await?,
            obs_select: p("SELECT observed_offset, observed_at FROM {ks}.mailbox_dispatch_observation \
                WHERE shard = ? AND message_id = ? AND generation = ?")
            .await?,
            chunk_insert: p(
                "INSERT INTO {ks}.mailbox_dispatch_chunk (shard, message_id, generation, lane, chunk_index) \
                VALUES (?, ?, ?, ?, ?) USING TTL ?",
            )
            .await?,
            chunk_select_one: p("SELECT chunk_index FROM {ks}.mailbox_dispatch_chunk \
                WHERE shard = ? AND message_id = ? AND generation = ? AND lane = ? AND chunk_index = ?")
            .await?,
            chunk_select_lane: p("SELECT chunk_index FROM {ks}.mailbox_dispatch_chunk \
                WHERE shard = ? AND message_id = ? AND generation = ? AND lane = ?")
            .await?,
            chunk_select_all: p("SELECT lane, chunk_index FROM {ks}.mailbox_dispatch_chunk \
                WHERE shard = ? AND message_id = ? AND generation = ?")
            .await?,
            source_insert: p("INSERT INTO {ks}.mailbox_dispatch_source \
                (shard, bucket, observed_offset, message_id, generation) VALUES (?, ?, ?, ?, ?) USING TTL ?")
            .await?,
            source_select_one: p("SELECT message_id, generation FROM {ks}.mailbox_dispatch_source \
                WHERE shard = ? AND bucket = ? AND observed_offset = ?")
            .await?,
            source_range: p("SELECT observed_offset, message_id, generation FROM {ks}.mailbox_dispatch_source \
                WHERE shard = ? AND bucket = ? AND observed_offset > ? AND observed_offset <= ? LIMIT ?")
            .await?,
            source_bucket_insert: p("INSERT INTO {ks}.mailbox_source_bucket (shard, bucket) VALUES (?, ?) USING TTL ?")
                .await?,
            source_bucket_range: p("SELECT bucket FROM {ks}.mailbox_source_bucket \
                WHERE shard = ? AND bucket >= ? AND bucket <= ?")
            .await?,
            collected_insert: p("INSERT INTO {ks}.mailbox_dispatch_collected (shard, message_id, generation) \
                VALUES (?, ?, ?) USING TTL ? AND TIMESTAMP ?")
            .await?,
            collected_select: p("SELECT generation FROM {ks}.mailbox_dispatch_collected \
                WHERE shard = ? AND message_id = ?")
            .await?,
            wm_select_lane: p("SELECT through FROM {ks}.mailbox_lane_watermark WHERE shard = ? AND lane = ?").await?,
            wm_select_all: p("SELECT lane, through FROM {ks}.mailbox_lane_watermark WHERE shard = ?").await?,
            wm_update: p("UPDATE {ks}.mailbox_lane_watermark USING TIMESTAMP ? SET through = ? \
                WHERE shard = ? AND lane = ?")
            .await?,
            gc_cursor_select: p("SELECT claimed, through FROM {ks}.mailbox_gc_cursor WHERE shard = ?").await?,
            gc_claim: p("UPDATE {ks}.mailbox_gc_cursor USING TIMESTAMP ? SET claimed = ? WHERE shard = ?").await?,
            gc_through: p("UPDATE {ks}.mailbox_gc_cursor USING TIMESTAMP ? SET through = ? WHERE shard = ?").await?,
            pending_insert: p("INSERT INTO {ks}.mailbox_gc_pending (shard, observed_offset, message_id, generation) \
                VALUES (?, ?, ?, ?) USING TTL ?")
            .await?,
            pending_select: p("SELECT observed_offset, message_id, generation FROM {ks}.mailbox_gc_pending \
                WHERE shard = ? LIMIT ?")
            .await?,
        })
    }
}
