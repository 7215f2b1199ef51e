//! Every CQL statement of the message store, prepared once at connect time.
//!
//! Consistency is set per statement, so it is visible next to the CQL:
//! - LWTs (`IF NOT EXISTS`, `IF last_seq = ? AND last_created_at = ?`, `IF state = ?`, `IF request_blob = ? AND
//!   commit_blob = ?`, `IF floor_bucket = ? AND pin = ?`, `IF high_water = ? AND holder = ?`): the first facts,
//!   ordered state transitions, recovery fences, the history floor and the seq high-water mark; LOCAL_QUORUM plus serial consistency
//!   LOCAL_SERIAL.
//! - Everything else (same-value upserts, reads, scans): LOCAL_QUORUM, no serial consistency;
//!   the upserts are marked idempotent, so the driver may retry them.
//!
//! `USING TTL ?` binds 0 for rows that never expire (CQL's "no TTL").

use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};

use crate::error::{StoreError, StoreResult};

/// Rows fetched per page by the scans.
pub(super) const SCAN_PAGE_SIZE: i32 = 256;

/// The prepared statements (see the module docs for their consistency).
pub(super) struct Statements {
    pub select_commit: PreparedStatement,
    pub insert_commit: PreparedStatement,
    pub takeover_commit: PreparedStatement,
    pub advance_commit: PreparedStatement,
    pub finish_commit: PreparedStatement,
    pub commit_row_ttl: PreparedStatement,
    pub insert_recovery: PreparedStatement,
    pub scan_recovery: PreparedStatement,
    pub select_recovery_cursor: PreparedStatement,
    pub advance_recovery_cursor: PreparedStatement,
    pub fence_absent: PreparedStatement,
    pub fence_gone: PreparedStatement,
    pub init_seq: PreparedStatement,
    pub cas_seq: PreparedStatement,
    pub insert_record: PreparedStatement,
    pub insert_index: PreparedStatement,
    pub insert_archived_index: PreparedStatement,
    pub published_desc: PreparedStatement,
    pub records_at: PreparedStatement,
    pub select_high_water: PreparedStatement,
    pub init_high_water: PreparedStatement,
    pub cas_high_water: PreparedStatement,
    pub insert_expiry: PreparedStatement,
    pub index_asc: PreparedStatement,
    pub index_desc: PreparedStatement,
    pub records_range: PreparedStatement,
    pub scan_expiry: PreparedStatement,
    pub insert_bucket: PreparedStatement,
    pub buckets_asc: PreparedStatement,
    pub buckets_desc: PreparedStatement,
    pub select_floor: PreparedStatement,
    pub insert_floor: PreparedStatement,
    pub cas_floor: PreparedStatement,
    pub select_last_seq: PreparedStatement,
}

enum Kind {
    /// A lightweight transaction.
    Lwt,
    /// A same-value upsert: safe to retry.
    Upsert,
    /// A read.
    Read,
}

async fn prepare(session: &Session, kind: Kind, cql: String) -> StoreResult<PreparedStatement> {
    let mut stmt = session.prepare(cql.clone()).await.map_err(|e| StoreError::Unavailable {
        message: format!("preparing `{cql}` (has the schema been migrated?)"),
        source: Some(Box::new(e)),
    })?;
    stmt.set_consistency(Consistency::LocalQuorum);
    match kind {
        Kind::Lwt => {
            stmt.set_serial_consistency(Some(SerialConsistency::LocalSerial));
            stmt.set_is_idempotent(false);
        }
        Kind::Upsert => {
            stmt.set_serial_consistency(None);
            stmt.set_is_idempotent(true);
        }
        Kind::Read => {
            stmt.set_serial_consistency(None);
            stmt.set_is_idempotent(true);
            stmt.set_page_size(SCAN_PAGE_SIZE);
        }
    }
    Ok(stmt)
}

const COMMIT_KEY: &str = "tenant_id = ? AND sender_id = ? AND client_message_id = ?";

impl Statements {
    /// Prepares every statement against tables of `ks` (an already validated name).
    pub(super) async fn prepare(session: &Session, ks: &str) -> StoreResult<Self> {
        use Kind::{Lwt, Read, Upsert};
        let index = |order: &str| {
            format!(
                "SELECT conversation_seq, expires_at FROM {ks}.history_index WHERE tenant_id = ? AND \
                 conversation_id = ? AND conversation_seq > ? AND conversation_seq < ? \
                 ORDER BY conversation_seq {order} LIMIT ?"
            )
        };
        let buckets = |order: &str| {
            format!(
                "SELECT seq_bucket, max_expires_at FROM {ks}.history_bucket WHERE tenant_id = ? AND \
                 conversation_id = ? AND seq_bucket >= ? AND seq_bucket <= ? ORDER BY seq_bucket {order} LIMIT ?"
            )
        };
        Ok(Self {
            select_commit: prepare(
                session,
                Read,
                format!("SELECT request_blob, commit_blob FROM {ks}.message_commit WHERE {COMMIT_KEY}"),
            )
            .await?,
            insert_commit: prepare(
                session,
                Lwt,
                format!(
                    "INSERT INTO {ks}.message_commit (tenant_id, sender_id, client_message_id, request_blob, \
                     commit_blob, state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS"
                ),
            )
            .await?,
            takeover_commit: prepare(
                session,
                Lwt,
                format!(
                    "UPDATE {ks}.message_commit SET request_blob = ?, commit_blob = ?, state = ?, created_at = ?, \
                     committed_at = null WHERE {COMMIT_KEY} IF request_blob = ? AND commit_blob = ?"
                ),
            )
            .await?,
            advance_commit: prepare(
                session,
                Lwt,
                format!("UPDATE {ks}.message_commit SET commit_blob = ?, state = ? WHERE {COMMIT_KEY} IF state = ?"),
            )
            .await?,
            finish_commit: prepare(
                session,
                Lwt,
                format!(
                    "UPDATE {ks}.message_commit USING TTL ? SET request_blob = ?, commit_blob = ?, state = ?, \
                     created_at = ?, committed_at = ? WHERE {COMMIT_KEY} IF state = ?"
                ),
            )
            .await?,
            // After the COMMITTED LWT: the same values as a whole row with the TTL, so the row
            // marker the reserve INSERT left (no TTL) expires with the columns (seed 000: never
            // `UPDATE ... USING TTL` alone on rows that must vanish whole).
            commit_row_ttl: prepare(
                session,
                Upsert,
                format!(
                    "INSERT INTO {ks}.message_commit (tenant_id, sender_id, client_message_id, request_blob, \
                     commit_blob, state, created_at, committed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
                ),
            )
            .await?,
            insert_recovery: prepare(
                session,
                Upsert,
                format!(
                    "INSERT INTO {ks}.commit_recovery (hour_bucket, created_at, tenant_id, sender_id, \
                     client_message_id) VALUES (?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?"
                ),
            )
            .await?,
            select_recovery_cursor: prepare(
                session,
                Read,
                format!("SELECT swept FROM {ks}.commit_recovery_cursor WHERE scope = ?"),
            )
            .await?,
            advance_recovery_cursor: prepare(
                session,
                Upsert,
                format!("UPDATE {ks}.commit_recovery_cursor USING TIMESTAMP ? SET swept = ? WHERE scope = ?"),
            )
            .await?,
            // Fences of a recovery entry whose reservation never showed up: a row its reserve LWT
            // can no longer apply over, which reads as gone (no commit) and is taken over by the
            // next reserve of the key.
            fence_absent: prepare(
                session,
                Lwt,
                format!(
                    "INSERT INTO {ks}.message_commit (tenant_id, sender_id, client_message_id, request_blob) \
                     VALUES (?, ?, ?, ?) IF NOT EXISTS USING TTL ?"
                ),
            )
            .await?,
            fence_gone: prepare(
                session,
                Lwt,
                format!(
                    "UPDATE {ks}.message_commit USING TTL ? SET request_blob = ?, commit_blob = null \
                     WHERE {COMMIT_KEY} IF request_blob = ? AND commit_blob = ?"
                ),
            )
            .await?,
            scan_recovery: prepare(
                session,
                Read,
                format!(
                    "SELECT created_at, tenant_id, sender_id, client_message_id FROM {ks}.commit_recovery \
                     WHERE hour_bucket = ? AND created_at >= ? AND created_at < ?"
                ),
            )
            .await?,
            init_seq: prepare(
                session,
                Lwt,
                format!(
                    "INSERT INTO {ks}.conversation_sequence (tenant_id, conversation_id, last_seq, last_created_at) \
                     VALUES (?, ?, ?, ?) IF NOT EXISTS"
                ),
            )
            .await?,
            cas_seq: prepare(
                session,
                Lwt,
                format!(
                    "UPDATE {ks}.conversation_sequence SET last_seq = ?, last_created_at = ? \
                     WHERE tenant_id = ? AND conversation_id = ? IF last_seq = ? AND last_created_at = ?"
                ),
            )
            .await?,
            insert_record: prepare(
                session,
                Upsert,
                format!(
                    "INSERT INTO {ks}.message_record (tenant_id, conversation_id, seq_bucket, conversation_seq, \
                     record_blob) VALUES (?, ?, ?, ?, ?) USING TTL ?"
                ),
            )
            .await?,
            insert_index: prepare(
                session,
                Upsert,
                format!(
                    "INSERT INTO {ks}.history_index (tenant_id, conversation_id, conversation_seq, expires_at) \
                     VALUES (?, ?, ?, ?) USING TTL ?"
                ),
            )
            .await?,
            insert_archived_index: prepare(
                session,
                Upsert,
                format!(
                    "INSERT INTO {ks}.history_index (tenant_id, conversation_id, conversation_seq, expires_at, \
                     published_partition, published_offset) VALUES (?, ?, ?, ?, ?, ?) USING TTL ?"
                ),
            )
            .await?,
            published_desc: prepare(
                session,
                Read,
                format!(
                    "SELECT conversation_seq, expires_at, published_partition, published_offset FROM \
                     {ks}.history_index WHERE tenant_id = ? AND conversation_id = ? AND conversation_seq > ? \
                     AND conversation_seq < ? ORDER BY conversation_seq DESC LIMIT ?"
                ),
            )
            .await?,
            records_at: prepare(
                session,
                Read,
                format!(
                    "SELECT conversation_seq, record_blob FROM {ks}.message_record WHERE tenant_id = ? AND \
                     conversation_id = ? AND seq_bucket = ? AND conversation_seq IN ?"
                ),
            )
            .await?,
            select_high_water: prepare(
                session,
                Read,
                format!(
                    "SELECT high_water, holder FROM {ks}.seq_high_water WHERE tenant_id = ? AND conversation_id = ?"
                ),
            )
            .await?,
            init_high_water: prepare(
                session,
                Lwt,
                format!(
                    "INSERT INTO {ks}.seq_high_water (tenant_id, conversation_id, high_water, holder) \
                     VALUES (?, ?, ?, ?) IF NOT EXISTS"
                ),
            )
            .await?,
            cas_high_water: prepare(
                session,
                Lwt,
                format!(
                    "UPDATE {ks}.seq_high_water SET high_water = ?, holder = ? WHERE tenant_id = ? AND \
                     conversation_id = ? IF high_water = ? AND holder IN (?, ?)"
                ),
            )
            .await?,
            insert_expiry: prepare(
                session,
                Upsert,
                format!(
                    "INSERT INTO {ks}.history_expiry (hour_bucket, expires_at, tenant_id, conversation_id, \
                     conversation_seq) VALUES (?, ?, ?, ?, ?) USING TTL ?"
                ),
            )
            .await?,
            index_asc: prepare(session, Read, index("ASC")).await?,
            index_desc: prepare(session, Read, index("DESC")).await?,
            records_range: prepare(
                session,
                Read,
                format!(
                    "SELECT conversation_seq, record_blob FROM {ks}.message_record WHERE tenant_id = ? AND \
                     conversation_id = ? AND seq_bucket = ? AND conversation_seq >= ? AND conversation_seq <= ?"
                ),
            )
            .await?,
            scan_expiry: prepare(
                session,
                Read,
                format!(
                    "SELECT expires_at FROM {ks}.history_expiry WHERE hour_bucket = ? AND expires_at > ? \
                     AND expires_at <= ? LIMIT ?"
                ),
            )
            .await?,
            // The bound is written with a value-derived timestamp, so the highest bound wins.
            insert_bucket: prepare(
                session,
                Upsert,
                format!(
                    "INSERT INTO {ks}.history_bucket (tenant_id, conversation_id, seq_bucket, max_expires_at) \
                     VALUES (?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?"
                ),
            )
            .await?,
            buckets_asc: prepare(session, Read, buckets("ASC")).await?,
            buckets_desc: prepare(session, Read, buckets("DESC")).await?,
            select_floor: prepare(
                session,
                Read,
                format!("SELECT floor_bucket, pin FROM {ks}.history_floor WHERE tenant_id = ? AND conversation_id = ?"),
            )
            .await?,
            insert_floor: prepare(
                session,
                Lwt,
                format!(
                    "INSERT INTO {ks}.history_floor (tenant_id, conversation_id, floor_bucket, pin) \
                     VALUES (?, ?, ?, ?) IF NOT EXISTS"
                ),
            )
            .await?,
            cas_floor: prepare(
                session,
                Lwt,
                format!(
                    "UPDATE {ks}.history_floor SET floor_bucket = ?, pin = ? WHERE tenant_id = ? AND \
                     conversation_id = ? IF floor_bucket = ? AND pin = ?"
                ),
            )
            .await?,
            select_last_seq: prepare(
                session,
                Read,
                format!("SELECT last_seq FROM {ks}.conversation_sequence WHERE tenant_id = ? AND conversation_id = ?"),
            )
            .await?,
        })
    }
}
