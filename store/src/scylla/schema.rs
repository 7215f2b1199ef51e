//! The Scylla backend's schema, and the pure decisions migration and readiness make about it.
//!
//! # Tables (all in the configured keyspace)
//!
//! | table | key | holds |
//! |---|---|---|
//! | `message_commit` | `((tenant_id, sender_id, client_message_id))` | canonical request blob (stable identity), canonical commit blob, `state` (LWT condition), `created_at`, `committed_at` |
//! | `conversation_sequence` | `((tenant_id, conversation_id))` | `last_seq`: the highest seq ever issued, and `last_created_at`: the `created_at` issued with it (the conversation's clock); moved together, only by CAS |
//! | `message_record` | `((tenant_id, conversation_id, seq_bucket), conversation_seq)` | canonical `MessageRecord` blob; per-row TTL = remaining retention |
//! | `history_index` | `((tenant_id, conversation_id), conversation_seq)` | `expires_at` (null: never); `published_partition`/`published_offset`: where the archiver read the record in `qim.messages.v1` (null when `put_record` wrote it); same TTL as its record |
//! | `history_bucket` | `((tenant_id, conversation_id), seq_bucket)` | `max_expires_at`: an upper bound of the expiry of every record that can appear in the bucket (`i64::MAX`: never); highest value wins by write timestamp; TTL = that bound |
//! | `history_floor` | `((tenant_id, conversation_id))` | `floor_bucket`: no bucket below it can hold a live record; `pin`; both moved only by LWT |
//! | `commit_recovery` | `((hour_bucket), created_at, tenant_id, sender_id, client_message_id)` | one entry per reservation attempt at a position (`created_at`: the reservation's time, later moved forward while it stays unfinished), written before the reserve LWT without TTL; given a TTL only once its commit finished |
//! | `commit_recovery_cursor` | `((scope))` | `swept`: every recovery entry positioned below it is finished; highest value wins by write timestamp |
//! | `history_expiry` | `((hour_bucket), expires_at, tenant_id, conversation_id, conversation_seq)` | one entry per expiring record, for the observable expiry count; TTL = record TTL + 1 h |
//! | `conversation_member` | `((tenant_id, conversation_id), user_id)` | one row per member of a conversation (no TTL; removed by row `DELETE`); see [`super::membership`] |
//! | `seq_high_water` | `((tenant_id, conversation_id))` | `high_water`: every seq the Redis hot tier ever issued in the conversation is at or below it; `holder`: the Redis process that may issue up to it ([`crate::SeqHighWater`]); no TTL, never deleted; moved only by LWT |
//!
//! Ids are 16-byte blobs (no UUID type); every `u64` bound to a `bigint` goes through
//! [`crate::codec::u64_to_i64`]. Tables keep the default `default_time_to_live = 0`: expiry is
//! always a per-row TTL written with the row, never a table setting and never a `DELETE`.
//!
//! `history_expiry` is not in seed 000's table list: seed 000 leaves the "bounded, observable"
//! expiry count of `gc_expired_history` open, and without an expiry-ordered index that count
//! would need a full-table scan.
//!
//! `history_bucket` and `history_floor` are not in seed 000's table list either: without them a
//! history read walks `history_index` from seq 0 through every TTL-expired entry of the
//! conversation, and past 100 000 of them the server refuses the read
//! (`tombstone_failure_threshold`). See `message/buckets.rs` for how they bound every read.
//! `commit_recovery_cursor` is not in seed 000's table list: it is what lets the recovery scan
//! pass finished entries for good (see `message/recovery.rs`).

use std::collections::HashMap;

/// Every table this backend creates and readiness requires, in creation order.
pub const TABLES: [&str; 11] = [
    "message_commit",
    "conversation_sequence",
    "message_record",
    "history_index",
    "commit_recovery",
    "history_expiry",
    "history_bucket",
    "history_floor",
    "commit_recovery_cursor",
    "conversation_member",
    "seq_high_water",
];

/// Seqs per `message_record` partition (`seq_bucket = seq / SEQ_BUCKET_SIZE`), so one busy
/// conversation never grows one partition without bound.
pub const SEQ_BUCKET_SIZE: u64 = 1024;

/// Milliseconds per `hour_bucket` of `commit_recovery` and `history_expiry`.
pub const HOUR_MILLIS: i64 = 60 * 60 * 1000;

/// The hour bucket of a time (rounding down).
pub const fn hour_bucket(millis: i64) -> i64 {
    millis.div_euclid(HOUR_MILLIS)
}

/// The `CREATE TABLE IF NOT EXISTS` statements, fully qualified with `keyspace` (already
/// validated by [`super::config::validate_keyspace`]), in [`TABLES`] order. Tables written only
/// with TTLs and same-value upserts (never a delete or a null) get a short `gc_grace_seconds`:
/// their expired cells need no repair window, and long-lived tombstones would slow reads.
pub fn create_tables(keyspace: &str) -> Vec<String> {
    let bodies = [
        "message_commit (tenant_id blob, sender_id blob, client_message_id text, request_blob blob, \
         commit_blob blob, state int, created_at bigint, committed_at bigint, \
         PRIMARY KEY ((tenant_id, sender_id, client_message_id)))",
        "conversation_sequence (tenant_id blob, conversation_id blob, last_seq bigint, last_created_at bigint, \
         PRIMARY KEY ((tenant_id, conversation_id)))",
        "message_record (tenant_id blob, conversation_id blob, seq_bucket bigint, conversation_seq bigint, \
         record_blob blob, PRIMARY KEY ((tenant_id, conversation_id, seq_bucket), conversation_seq)) WITH gc_grace_seconds = 3600",
        "history_index (tenant_id blob, conversation_id blob, conversation_seq bigint, expires_at bigint, \
         published_partition int, published_offset bigint, \
         PRIMARY KEY ((tenant_id, conversation_id), conversation_seq)) WITH gc_grace_seconds = 3600",
        "commit_recovery (hour_bucket bigint, created_at bigint, tenant_id blob, sender_id blob, \
         client_message_id text, PRIMARY KEY ((hour_bucket), created_at, tenant_id, sender_id, client_message_id)) WITH gc_grace_seconds = 3600",
        "history_expiry (hour_bucket bigint, expires_at bigint, tenant_id blob, conversation_id blob, \
         conversation_seq bigint, PRIMARY KEY ((hour_bucket), expires_at, tenant_id, conversation_id, conversation_seq)) WITH gc_grace_seconds = 3600",
        "history_bucket (tenant_id blob, conversation_id blob, seq_bucket bigint, max_expires_at bigint, \
         PRIMARY KEY ((tenant_id, conversation_id), seq_bucket)) WITH gc_grace_seconds = 3600",
        "history_floor (tenant_id blob, conversation_id blob, floor_bucket bigint, pin bigint, \
         PRIMARY KEY ((tenant_id, conversation_id)))",
        "commit_recovery_cursor (scope int, swept bigint, PRIMARY KEY ((scope)))",
        // Membership is removed by row deletes: keep the default gc_grace_seconds (repair window).
        "conversation_member (tenant_id blob, conversation_id blob, user_id blob, \
         PRIMARY KEY ((tenant_id, conversation_id), user_id))",
        // Never deleted, never TTL'd; moved only by LWT.
        "seq_high_water (tenant_id blob, conversation_id blob, high_water bigint, holder text, \
         PRIMARY KEY ((tenant_id, conversation_id)))",
    ];
    bodies.iter().map(|b| format!("CREATE TABLE IF NOT EXISTS {keyspace}.{b}")).collect()
}

/// A table as its `CREATE TABLE` statement declares it: the one source of what `migrate` may
/// add to an existing table and what `readiness` expects.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TableShape {
    /// The table's name (without keyspace).
    pub name: String,
    /// Every column with its CQL type, in declaration order.
    pub columns: Vec<(String, String)>,
    /// The primary key's columns (partition and clustering).
    pub key: Vec<String>,
}

impl TableShape {
    /// The columns `migrate` may add to an existing table that lacks them: the regular
    /// (non-key) columns, which CQL always allows to be null.
    pub fn addable_columns(&self) -> impl Iterator<Item = &(String, String)> {
        self.columns.iter().filter(|(name, _)| !self.key.contains(name))
    }
}

/// Splits at top-level commas (not inside `(...)` or `<...>`).
fn split_top_level(body: &str) -> Vec<&str> {
    let (mut depth, mut start, mut parts) = (0i32, 0, Vec::new());
    for (i, c) in body.char_indices() {
        match c {
            '(' | '<' => depth += 1,
            ')' | '>' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(body[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(body[start..].trim());
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// Reads a `CREATE TABLE IF NOT EXISTS <ks>.<name> (<col> <type>, ..., PRIMARY KEY (...)) ...`
/// statement back into its shape; `None` when it is not of that form.
pub fn table_shape(ddl: &str) -> Option<TableShape> {
    let after = ddl.split_once("IF NOT EXISTS ")?.1;
    let open = after.find('(')?;
    let name = after[..open].trim().rsplit('.').next()?.to_owned();
    let mut depth = 0;
    let close = after[open..].char_indices().find_map(|(i, c)| {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        (depth == 0).then_some(open + i)
    })?;
    let (mut columns, mut key) = (Vec::new(), Vec::new());
    for item in split_top_level(&after[open + 1..close]) {
        if let Some(pk) = item.strip_prefix("PRIMARY KEY") {
            key = pk.split([',', '(', ')']).map(str::trim).filter(|k| !k.is_empty()).map(str::to_owned).collect();
        } else {
            let (col, ty) = item.split_once(char::is_whitespace)?;
            columns.push((col.to_owned(), ty.trim().to_owned()));
        }
    }
    (!key.is_empty() && key.iter().all(|k| columns.iter().any(|(c, _)| c == k))).then_some(TableShape {
        name,
        columns,
        key,
    })
}

/// Which CQL server answers: the DDL differs (`TABLETS` is a syntax error on Cassandra).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Flavour {
    /// ScyllaDB: keyspaces are created with tablets disabled (LWT needs vnodes).
    Scylla,
    /// Apache Cassandra.
    Cassandra,
}

/// Decides the server flavour from what was read: the column names of `system.local` and the
/// table names of `system_schema`. Scylla has both `system.local.supported_features` and
/// `system_schema.scylla_keyspaces`; Cassandra has neither. Anything in between is refused:
/// the flavour is detected, never assumed.
pub fn detect_flavour(system_local_columns: &[String], system_schema_tables: &[String]) -> Result<Flavour, String> {
    let features = system_local_columns.iter().any(|c| c == "supported_features");
    let scylla_keyspaces = system_schema_tables.iter().any(|t| t == "scylla_keyspaces");
    match (features, scylla_keyspaces) {
        (true, true) => Ok(Flavour::Scylla),
        (false, false) if !system_local_columns.is_empty() => Ok(Flavour::Cassandra),
        (false, false) => Err("system.local has no columns: can not tell the server flavour".to_owned()),
        (f, s) => Err(format!(
            "ambiguous server flavour: system.local.supported_features present={f}, \
             system_schema.scylla_keyspaces present={s}"
        )),
    }
}

/// The `CREATE KEYSPACE IF NOT EXISTS` statement for `flavour`.
pub fn create_keyspace(flavour: Flavour, keyspace: &str, dc: &str, rf: u32) -> String {
    let dc = dc.replace('\'', "''");
    let base = format!(
        "CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = \
         {{'class': 'NetworkTopologyStrategy', '{dc}': {rf}}} AND durable_writes = true"
    );
    match flavour {
        Flavour::Scylla => format!("{base} AND TABLETS = {{'enabled': false}}"),
        Flavour::Cassandra => base,
    }
}

/// Checks a keyspace's replication map (as read from `system_schema.keyspaces`) against the
/// configuration: NetworkTopologyStrategy with exactly `rf` replicas in `dc`.
pub fn check_replication(replication: &HashMap<String, String>, dc: &str, rf: u32) -> Result<(), String> {
    let class = replication.get("class").map(String::as_str).unwrap_or("");
    if !class.ends_with("NetworkTopologyStrategy") {
        return Err(format!("replication class is {class:?}, want NetworkTopologyStrategy"));
    }
    match replication.get(dc) {
        None => Err(format!("replication names no replicas in data centre {dc:?}: {replication:?}")),
        Some(found) if found.trim() == rf.to_string() => Ok(()),
        Some(found) => Err(format!("replication factor in {dc:?} is {found}, the configuration says {rf}")),
    }
}

/// Checks that the configured local data centre is one the cluster's nodes report (`dcs`, as
/// the driver sees them). Requests are pinned to that DC without failover, so a misspelt DC
/// would otherwise surface as opaque "no node to ask" errors.
pub fn check_dc(dcs: &[String], dc: &str) -> Result<(), String> {
    if dcs.iter().any(|d| d == dc) {
        return Ok(());
    }
    let mut known = dcs.to_vec();
    known.sort();
    known.dedup();
    Err(format!("data centre {dc:?} is not in the cluster (its nodes are in {known:?})"))
}

/// A keyspace's row of `system_schema.scylla_keyspaces` (ScyllaDB only), as read by
/// `SELECT storage_type, initial_tablets FROM system_schema.scylla_keyspaces WHERE keyspace_name = ?`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ScyllaKeyspaceRow {
    /// `storage_type`; `None` when the cell is null.
    pub storage_type: Option<String>,
    /// `initial_tablets`; not null exactly when the keyspace is tablet-based (the rule the scylla
    /// driver applies).
    pub initial_tablets: Option<i32>,
}

/// The only `storage_type` an existing `scylla_keyspaces` row may carry (seed 000).
pub const VNODES_STORAGE_TYPE: &str = "vnodes";

/// Decides, on ScyllaDB, whether a keyspace is vnodes-based (LWT does not work on tablets) from
/// its `system_schema.scylla_keyspaces` row (`None`: no row). Seed 000's rule, which fails closed:
///
/// - no row: vnodes (ScyllaDB 6.2 writes no row for a vnodes keyspace, and this backend creates
///   its keyspace with `TABLETS = {'enabled': false}`);
/// - a row: only an explicit `storage_type` of exactly [`VNODES_STORAGE_TYPE`], with no
///   `initial_tablets`, passes. A null `storage_type`, `tablets`, any other value (including
///   another spelling) or an `initial_tablets` (tablets, whatever the storage type says) is
///   refused: an existing keyspace is never guessed to be usable, and never altered.
///
/// Pure, so that its Scylla-only branches are unit-tested: the local stack runs Apache
/// Cassandra 5, which has no `scylla_keyspaces` table (`migrate` and `readiness` never call this
/// there), so no test against a server reaches them.
pub fn check_vnodes(keyspace: &str, row: Option<&ScyllaKeyspaceRow>) -> Result<(), String> {
    let Some(row) = row else {
        return Ok(());
    };
    let refuse = |what: String| {
        Err(format!(
            "keyspace {keyspace} has a system_schema.scylla_keyspaces row with {what}; only storage_type = \
             '{VNODES_STORAGE_TYPE}' (or no row) is accepted: lightweight transactions need vnodes"
        ))
    };
    match (row.storage_type.as_deref(), row.initial_tablets) {
        (_, Some(tablets)) => refuse(format!("initial_tablets = {tablets} (tablets)")),
        (Some(VNODES_STORAGE_TYPE), None) => Ok(()),
        (None, None) => refuse("a null storage_type".to_owned()),
        (Some(other), None) => refuse(format!("storage_type = {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn cassandra_is_detected() {
        let local = names(&["key", "bootstrapped", "data_center", "release_version", "tokens"]);
        let schema = names(&["keyspaces", "tables", "columns"]);
        assert_eq!(detect_flavour(&local, &schema), Ok(Flavour::Cassandra));
    }

    #[test]
    fn scylla_is_detected() {
        let local = names(&["key", "data_center", "supported_features", "tokens"]);
        let schema = names(&["keyspaces", "tables", "scylla_keyspaces"]);
        assert_eq!(detect_flavour(&local, &schema), Ok(Flavour::Scylla));
    }

    #[test]
    fn mixed_or_empty_answers_are_refused() {
        let local = names(&["key", "supported_features"]);
        assert!(detect_flavour(&local, &names(&["keyspaces"])).is_err());
        assert!(detect_flavour(&names(&["key"]), &names(&["scylla_keyspaces"])).is_err());
        assert!(detect_flavour(&[], &[]).is_err());
    }

    #[test]
    fn tablets_clause_only_on_scylla() {
        let s = create_keyspace(Flavour::Scylla, "qim", "dc1", 3);
        assert!(s.ends_with("AND TABLETS = {'enabled': false}"), "{s}");
        assert!(s.contains("'dc1': 3"), "{s}");
        let c = create_keyspace(Flavour::Cassandra, "qim", "dc1", 3);
        assert!(!c.to_uppercase().contains("TABLETS"), "{c}");
        assert!(c.starts_with("CREATE KEYSPACE IF NOT EXISTS qim "), "{c}");
    }

    #[test]
    fn replication_must_match_exactly() {
        let map = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
        };
        let nts = "org.apache.cassandra.locator.NetworkTopologyStrategy";
        assert_eq!(check_replication(&map(&[("class", nts), ("dc1", "3")]), "dc1", 3), Ok(()));
        assert!(check_replication(&map(&[("class", nts), ("dc1", "1")]), "dc1", 3).is_err());
        assert!(check_replication(&map(&[("class", nts), ("dc2", "3")]), "dc1", 3).is_err());
        let simple = "org.apache.cassandra.locator.SimpleStrategy";
        assert!(check_replication(&map(&[("class", simple), ("replication_factor", "3")]), "dc1", 3).is_err());
    }

    #[test]
    fn the_local_dc_must_exist() {
        let dcs = names(&["dc1", "dc2", "dc1"]);
        assert_eq!(check_dc(&dcs, "dc2"), Ok(()));
        let err = check_dc(&dcs, "dc3").unwrap_err();
        assert!(err.contains("\"dc3\"") && err.contains("[\"dc1\", \"dc2\"]"), "{err}");
        assert!(check_dc(&[], "dc1").is_err());
    }

    fn row(storage_type: Option<&str>, initial_tablets: Option<i32>) -> ScyllaKeyspaceRow {
        ScyllaKeyspaceRow { storage_type: storage_type.map(str::to_owned), initial_tablets }
    }

    /// Scylla-only (Cassandra 5, our local server, has no `scylla_keyspaces`): tested here only.
    #[test]
    fn no_row_or_an_explicit_vnodes_row_passes_on_scylla() {
        assert_eq!(check_vnodes("qim", None), Ok(()), "ScyllaDB 6.2 writes no row for a vnodes keyspace");
        assert_eq!(check_vnodes("qim", Some(&row(Some("vnodes"), None))), Ok(()));
    }

    /// Scylla-only, as above: every other row fails closed, naming the keyspace and what it holds.
    #[test]
    fn any_other_scylla_keyspaces_row_is_refused() {
        let refused = [
            (row(None, None), "a null storage_type"),
            (row(Some("tablets"), None), "storage_type = \"tablets\""),
            (row(Some("LOCAL"), None), "storage_type = \"LOCAL\""),
            (row(Some("VNODES"), None), "storage_type = \"VNODES\""),
            (row(Some(" vnodes"), None), "storage_type = \" vnodes\""),
            (row(Some(""), None), "storage_type = \"\""),
            (row(None, Some(0)), "initial_tablets = 0"),
            (row(Some("vnodes"), Some(8)), "initial_tablets = 8"),
        ];
        for (r, what) in refused {
            let err = check_vnodes("qim", Some(&r)).unwrap_err();
            assert!(err.starts_with("keyspace qim has a system_schema.scylla_keyspaces row with "), "{err}");
            assert!(err.contains(what), "{r:?}: {err}");
            assert!(err.contains("lightweight transactions need vnodes"), "{err}");
        }
    }

    #[test]
    fn every_table_is_created_in_the_keyspace() {
        let ddl = create_tables("ks");
        assert_eq!(ddl.len(), TABLES.len());
        for (stmt, table) in ddl.iter().zip(TABLES) {
            assert!(stmt.starts_with(&format!("CREATE TABLE IF NOT EXISTS ks.{table} (")), "{stmt}");
        }
    }

    #[test]
    fn hour_buckets_round_down() {
        assert_eq!(hour_bucket(0), 0);
        assert_eq!(hour_bucket(HOUR_MILLIS - 1), 0);
        assert_eq!(hour_bucket(HOUR_MILLIS), 1);
        assert_eq!(hour_bucket(-1), -1);
    }

    #[test]
    fn every_table_reads_back_into_its_shape() {
        let ddl: Vec<String> =
            create_tables("ks").into_iter().chain(crate::scylla::mailbox::mailbox_table_ddl("ks")).collect();
        for stmt in &ddl {
            let shape = table_shape(stmt).unwrap_or_else(|| panic!("unreadable DDL: {stmt}"));
            assert!(!shape.key.is_empty() && shape.columns.len() > shape.key.len() - 1, "{shape:?}");
        }
        let commit = table_shape(&create_tables("ks")[0]).unwrap();
        assert_eq!(commit.name, "message_commit");
        assert_eq!(commit.key, vec!["tenant_id", "sender_id", "client_message_id"]);
        let addable: Vec<&str> = commit.addable_columns().map(|(c, _)| c.as_str()).collect();
        assert_eq!(addable, vec!["request_blob", "commit_blob", "state", "created_at", "committed_at"]);
        assert!(commit.columns.contains(&("committed_at".to_owned(), "bigint".to_owned())));
    }

    #[test]
    fn malformed_ddl_has_no_shape() {
        assert_eq!(table_shape("CREATE TABLE t (a int)"), None, "no IF NOT EXISTS");
        assert_eq!(table_shape("CREATE TABLE IF NOT EXISTS ks.t (a int)"), None, "no primary key");
        assert_eq!(table_shape("CREATE TABLE IF NOT EXISTS ks.t (a int, PRIMARY KEY (b))"), None, "key not a column");
    }
}
