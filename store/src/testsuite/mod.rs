//! The contract suites: one set of tests every `MessageStore`, `MailboxStore` and
//! `MembershipStore` backend runs.
//!
//! A backend provides a [`MessageHarness`] / [`MailboxHarness`] (fresh stores on a
//! [`ManualClock`], plus byte-level sabotage for the corruption tests) / [`MembershipHarness`]
//! and instantiates the suite with one line:
//!
//! ```text
//! qim_store::message_store_contract_suite!(my_backend::harness());
//! qim_store::mailbox_store_contract_suite!(my_backend::mailbox_harness());
//! qim_store::membership_store_contract_suite!(my_backend::membership_harness());
//! qim_store::seq_high_water_contract_suite!(my_backend::high_water_harness());
//! ```
//!
//! Tests use fresh tenant ids and shard ids, so backends that share one server between tests do
//! not collide.

pub mod differential;
pub mod fixtures;
pub mod high_water;
pub mod mailbox;
pub mod membership;
pub mod message;
pub mod private_redis;
#[cfg(feature = "scylla")]
pub mod scylla_keyspace;

use std::sync::Arc;

use async_trait::async_trait;

use crate::clock::ManualClock;
use crate::ids::{ConversationId, ConversationSeq, TenantId, UserId};
use crate::mailbox::{MailboxRetention, MailboxSeq};
use crate::retention::RetentionPolicy;
use crate::{MailboxStore, MembershipStore, MessageStore, SeqHighWater};

/// Opens message stores for the contract suite.
#[async_trait]
pub trait MessageHarness: Send + Sync {
    /// A store applying `policy` and reading time from `clock`. Stores opened by one harness may
    /// share state: tests isolate themselves by tenant.
    async fn open(&self, policy: RetentionPolicy, clock: Arc<ManualClock>) -> Arc<dyn MessageStore>;

    /// Deletes the stored record of `seq`, leaving its history index entry.
    async fn remove_record(
        &self,
        store: &Arc<dyn MessageStore>,
        tenant: TenantId,
        conversation: ConversationId,
        seq: ConversationSeq,
    );

    /// Replaces the stored record bytes of `seq`.
    async fn overwrite_record(
        &self,
        store: &Arc<dyn MessageStore>,
        tenant: TenantId,
        conversation: ConversationId,
        seq: ConversationSeq,
        bytes: Vec<u8>,
    );
}

/// Opens mailbox stores for the contract suite.
#[async_trait]
pub trait MailboxHarness: Send + Sync {
    /// A store whose dispatched entries live per `retention`, reading time from `clock`.
    async fn open(&self, retention: MailboxRetention, clock: Arc<ManualClock>) -> Arc<dyn MailboxStore>;

    /// Replaces the stored bytes of one event group.
    async fn overwrite_group(
        &self,
        store: &Arc<dyn MailboxStore>,
        tenant: TenantId,
        user: UserId,
        seq: MailboxSeq,
        bytes: Vec<u8>,
    );
}

/// Opens membership stores for the contract suite.
#[async_trait]
pub trait MembershipHarness: Send + Sync {
    /// A store. Stores opened by one harness may share state: tests isolate themselves by
    /// tenant.
    async fn open(&self) -> Arc<dyn MembershipStore>;
}

/// Opens seq high-water stores for the contract suite.
#[async_trait]
pub trait SeqHighWaterHarness: Send + Sync {
    /// A store. Stores opened by one harness share their durable state (as two processes
    /// sharing one database do): tests isolate themselves by tenant.
    async fn open(&self) -> Arc<dyn SeqHighWater>;
}

/// Emits one `#[tokio::test]` per seq high-water contract test, each calling the suite with the
/// harness expression `$harness`.
#[macro_export]
macro_rules! seq_high_water_contract_suite {
    ($harness:expr) => {
        $crate::__contract_tests!(
            high_water,
            $harness,
            unknown_conversations_read_zero_and_moves_read_back,
            a_move_from_a_stale_mark_is_refused,
            the_mark_never_moves_down,
            concurrent_moves_from_one_mark_land_once,
            concurrent_raises_leave_the_highest,
            large_marks_read_back_exactly,
        );
    };
}

/// Emits one `#[tokio::test]` per message-store contract test, each calling the suite with the
/// harness expression `$harness`.
#[macro_export]
macro_rules! message_store_contract_suite {
    ($harness:expr) => {
        $crate::__contract_tests!(
            message,
            $harness,
            reserve_allocates_increasing_seqs_per_conversation,
            reserve_replay_with_same_bytes_returns_first_commit,
            reserve_same_key_with_different_bytes_conflicts,
            reserve_from_member_refuses_a_non_member_before_issuing_anything,
            reserve_and_record_takes_a_send_to_recorded,
            load_commit_for_request_compares_bytes,
            states_move_forward_only_from_their_predecessor,
            outbox_and_commit_together_take_both_steps_in_order,
            step_with_wrong_message_or_unknown_key_fails,
            concurrent_reserves_never_share_a_seq,
            sends_in_flight_at_once_commit_each_once,
            committed_record_reads_back_exactly,
            scan_recoverable_commits_finds_unfinished_work,
            gc_committed_auxiliary_waits_for_the_ttl,
            history_pages_older_and_newer_from_an_anchor,
            history_page_byte_budget_admits_only_the_first_oversized,
            history_page_consults_the_authorizer_before_reading,
            history_page_refuses_missing_or_mismatched_records,
            history_never_returns_expired_records,
            gc_expired_history_removes_only_expired_records,
            conversation_summaries_count_unread_from_others,
            conversation_summaries_cap_beyond_the_precise_window,
            oversized_and_malformed_requests_are_refused,
            tenants_are_isolated,
        );
    };
}

/// Emits one `#[tokio::test]` per mailbox-store contract test, each calling the suite with the
/// harness expression `$harness`.
#[macro_export]
macro_rules! mailbox_store_contract_suite {
    ($harness:expr) => {
        $crate::__contract_tests!(
            mailbox,
            $harness,
            append_batch_stores_canonical_groups,
            append_batch_rejects_duplicate_ordinals_and_writes_nothing,
            append_batch_replay_is_identical,
            range_scan_edge_cases,
            range_scan_cuts_pages_only_at_seq_boundaries,
            truncate_before_is_monotonic_and_expires_cursors,
            expired_entries_raise_the_gap_instead_of_leaving_a_silent_hole,
            replayed_expired_entries_are_not_resurrected,
            corrupt_group_fails_closed,
            begin_dispatch_fixes_the_first_receipt,
            begin_dispatch_rejects_conflicts,
            begins_in_one_call_answer_like_one_by_one,
            chunks_write_entries_and_record_completion,
            chunk_batches_write_and_complete_like_single_chunks,
            watermark_never_passes_incomplete_work_or_moves_back,
            lanes_advanced_together_answer_like_one_by_one,
            duplicate_observations_hold_the_watermark_until_complete,
            a_source_hole_holds_the_lanes_it_touches_until_filled,
            gc_collects_only_dispatches_every_lane_passed,
            fenced_writes_in_the_shards_incarnation_act_like_unfenced_ones,
        );
    };
}

/// Emits one `#[tokio::test]` per membership-store contract test, each calling the suite with
/// the harness expression `$harness`.
#[macro_export]
macro_rules! membership_store_contract_suite {
    ($harness:expr) => {
        $crate::__contract_tests!(
            membership,
            $harness,
            add_and_remove_are_idempotent_and_counted,
            duplicates_within_one_call_count_once,
            is_member_follows_changes,
            pages_ascend_in_byte_order_after_the_cursor,
            limits_are_refused_and_write_nothing,
            tenants_are_isolated,
            conversations_are_isolated,
            ten_thousand_members_page_fully,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __contract_tests {
    ($suite:ident, $harness:expr, $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                let harness = $harness;
                $crate::testsuite::$suite::$name(&harness).await;
            }
        )+
    };
}
