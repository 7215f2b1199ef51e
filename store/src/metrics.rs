//! The metrics the store emits itself (through the `metrics` facade; a service installs the
//! exporter). Labels are fixed, low-cardinality values.

/// Seq lease steps, by `step`: `first` (a conversation's first lease), `revalidated` (after
/// Redis lost state), `extend_early` (in the background), `extend_blocking` (a send waited).
pub const SEQ_LEASES: &str = "qim_store_seq_leases_total";
/// Seqs a revalidation jumped over: an upper bound of the holes a Redis loss left.
pub const SEQ_LEASE_SKIPPED: &str = "qim_store_seq_lease_skipped_total";
/// Seqs issued and then left unused because the request key turned out to hold another commit
/// (its claim was lost with Redis state): each one is a hole.
pub const SEQ_ABANDONED: &str = "qim_store_seq_abandoned_total";
/// Records written back into the hot tier from durable copies after Redis lost state.
pub const RECORDS_RESTORED: &str = "qim_store_hot_tier_records_restored_total";
/// COMMITTED commits written back with them (so retries get their first answer).
pub const COMMITS_RESTORED: &str = "qim_store_hot_tier_commits_restored_total";
/// Membership cache fills from the durable membership table, by `outcome` (`filled`, `raced`).
pub const MEMBERSHIP_CACHE_FILLS: &str = "qim_store_membership_cache_fills_total";

/// Registers the descriptions of the store's metrics with the installed recorder.
pub fn describe() {
    use metrics::describe_counter;
    describe_counter!(SEQ_LEASES, "Seq lease steps of the Redis hot tier, by step.");
    describe_counter!(SEQ_LEASE_SKIPPED, "Seqs a lease revalidation jumped over after Redis lost state.");
    describe_counter!(SEQ_ABANDONED, "Seqs issued and left unused because their request key held another commit.");
    describe_counter!(RECORDS_RESTORED, "Records written back into the hot tier after Redis lost state.");
    describe_counter!(COMMITS_RESTORED, "COMMITTED commits written back into the hot tier after Redis lost state.");
    describe_counter!(MEMBERSHIP_CACHE_FILLS, "Membership cache fills from the durable membership table, by outcome.");
}
