//! The mailbox tables: `CREATE TABLE IF NOT EXISTS` statements with a `{ks}` placeholder.
//!
//! Only the migration path runs them (never [`super::ScyllaMailboxStore::connect`]). Every
//! statement is valid on both ScyllaDB and Apache Cassandra 5: no `TABLETS`, no `tombstone_gc`.

/// The placeholder every statement of [`MAILBOX_TABLES`] carries for the keyspace name.
pub const KEYSPACE_PLACEHOLDER: &str = "{ks}";

/// Every mailbox table, `CREATE TABLE IF NOT EXISTS {ks}.…`; see the module docs of
/// [`super`] for what each row means and why each guarantee holds.
pub const MAILBOX_TABLES: &[&str] = &[
    // One whole event group per (user, seq); TTL = remaining life of the group (+ slack), set on
    // every write. The 33-day default only keeps ScyllaDB from warning about a TWCS table without
    // one (`restrict_twcs_without_default_ttl`).
    "CREATE TABLE IF NOT EXISTS {ks}.mailbox_entry (\
        tenant_id blob, user_id blob, mailbox_seq bigint, grp blob, \
        PRIMARY KEY ((tenant_id, user_id), mailbox_seq)) \
        WITH CLUSTERING ORDER BY (mailbox_seq ASC) \
        AND compaction = {'class': 'TimeWindowCompactionStrategy', \
        'compaction_window_unit': 'DAYS', 'compaction_window_size': 1} \
        AND gc_grace_seconds = 86400 AND default_time_to_live = 2851200",
    // Per-user retention ledger: the set of live expiry days. Changed only by LWT.
    "CREATE TABLE IF NOT EXISTS {ks}.mailbox_retention_meta (\
        tenant_id blob, user_id blob, format_version int, ledger_generation bigint, active_ledger blob, \
        PRIMARY KEY ((tenant_id, user_id)))",
    // Bucket proofs: highest seq written into one expiry day (per epoch). Last-write-wins with
    // the seq as write timestamp, so the highest seq wins. No TTL while the ledger lists the
    // day; the registration that drops the day gives its rows a short one.
    "CREATE TABLE IF NOT EXISTS {ks}.mailbox_retention_bucket_v3 (\
        tenant_id blob, user_id blob, expiry_day bigint, epoch int, max_seq bigint, expires_at bigint, \
        PRIMARY KEY ((tenant_id, user_id), expiry_day, epoch))",
    // The bucket proofs of metas in the legacy format 4 (earlier builds): the same rows with a
    // TTL of the day's expiry plus 60 days. Read only for such metas; never written.
    "CREATE TABLE IF NOT EXISTS {ks}.mailbox_retention_bucket_v2 (\
        tenant_id blob, user_id blob, expiry_day bigint, epoch int, max_seq bigint, expires_at bigint, \
        PRIMARY KEY ((tenant_id, user_id), expiry_day, epoch))",
    // Trim and expired-gap boundary: two independent cells, each written with the seq as write
    // timestamp, so each only ever rises. No TTL (they keep answering CursorExpired).
    "CREATE TABLE IF NOT EXISTS {ks}.mailbox_floor (\
        tenant_id blob, user_id blob, trim bigint, gap bigint, \
        PRIMARY KEY ((tenant_id, user_id)))",
    // The first receipt of a dispatch's newest generation. The write timestamp grows with the
    // generation and falls with the observed offset, so the lowest (first) observation of the
    // newest generation wins whatever the arrival order.
    "CREATE TABLE IF NOT EXISTS {ks}.mailbox_dispatch (\
        shard int, message_id blob, manifest blob, canonical_offset bigint, mailbox_seq bigint, \
        lane_chunks blob, generation int, \
        PRIMARY KEY ((shard, message_id)))",
    // Every offset a dispatch was observed at (replays rewrite identical rows).
    "CREATE TABLE IF NOT EXISTS {ks}.mailbox_dispatch_observation (\
        shard int, message_id blob, generation int, observed_offset bigint, observed_at bigint, \
        PRIMARY KEY ((shard, message_id), generation, observed_offset))",
    // Durable chunk completions.
    "CREATE TABLE IF NOT EXISTS {ks}.mailbox_dispatch_chunk (\
        shard int, message_id blob, generation int, lane int, chunk_index bigint, \
        PRIMARY KEY ((shard, message_id), generation, lane, chunk_index))",
    // The shard log: which dispatch was observed at each offset, partitioned by offset bucket.
    "CREATE TABLE IF NOT EXISTS {ks}.mailbox_dispatch_source (\
        shard int, bucket bigint, observed_offset bigint, message_id blob, generation int, \
        PRIMARY KEY ((shard, bucket), observed_offset)) \
        WITH CLUSTERING ORDER BY (observed_offset ASC)",
    // Which source buckets of a shard hold observations.
    "CREATE TABLE IF NOT EXISTS {ks}.mailbox_source_bucket (\
        shard int, bucket bigint, \
        PRIMARY KEY ((shard), bucket))",
    // GC markers: every generation of the dispatch up to this one is forgotten.
    "CREATE TABLE IF NOT EXISTS {ks}.mailbox_dispatch_collected (\
        shard int, message_id blob, generation int, \
        PRIMARY KEY ((shard, message_id)))",
    // Lane watermarks; the offset is the write timestamp, so the highest offset wins.
    "CREATE TABLE IF NOT EXISTS {ks}.mailbox_lane_watermark (\
        shard int, lane int, through bigint, \
        PRIMARY KEY ((shard), lane))",
    // Where GC reads the shard log: `claimed` (written before a pass reads) and `through` (every
    // source at or below it was examined); each cell's offset is its write timestamp.
    "CREATE TABLE IF NOT EXISTS {ks}.mailbox_gc_cursor (\
        shard int, claimed bigint, through bigint, \
        PRIMARY KEY ((shard)))",
    // Generations started at or below GC's claim (replays of old offsets): GC reads these too.
    "CREATE TABLE IF NOT EXISTS {ks}.mailbox_gc_pending (\
        shard int, observed_offset bigint, message_id blob, generation int, \
        PRIMARY KEY ((shard), observed_offset))",
];

/// The table names [`MAILBOX_TABLES`] creates, in order.
pub fn mailbox_table_names() -> Vec<&'static str> {
    MAILBOX_TABLES
        .iter()
        .filter_map(|ddl| ddl.split("{ks}.").nth(1).and_then(|rest| rest.split([' ', '(']).next()))
        .collect()
}

/// [`MAILBOX_TABLES`] with `{ks}` replaced by `keyspace`.
pub fn mailbox_table_ddl(keyspace: &str) -> Vec<String> {
    MAILBOX_TABLES.iter().map(|s| s.replace(KEYSPACE_PLACEHOLDER, keyspace)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_is_an_idempotent_create_in_the_keyspace() {
        for ddl in mailbox_table_ddl("ks_x") {
            assert!(ddl.starts_with("CREATE TABLE IF NOT EXISTS ks_x.mailbox_"), "{ddl}");
            assert!(!ddl.contains("{ks}"), "{ddl}");
            assert!(!ddl.to_uppercase().contains("TABLETS"), "{ddl}");
        }
        let names = mailbox_table_names();
        assert_eq!(names.len(), MAILBOX_TABLES.len());
        assert!(names.iter().all(|n| n.starts_with("mailbox_") && !n.contains(['(', ' '])), "{names:?}");
    }
}
