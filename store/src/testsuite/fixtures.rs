//! Builders and helpers shared by the contract suites.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::clock::ManualClock;
use crate::error::{StoreError, StoreResult};
use crate::ids::{ClientMessageId, ConversationId, MessageId, TenantId, UnixMillis, UserId};
use crate::message::{CommitKey, CommitRequest, MessageKind, MessageRecord, Publication, PublishedRecord};
use crate::retention::RetentionClass;
use crate::HistoryAuthorizer;

/// A fixed, realistic start time for manual clocks (2026-09-21).
pub const T0: UnixMillis = UnixMillis(1_790_000_000_000);

static COUNTER: AtomicU64 = AtomicU64::new(1);

/// 16 bytes no other call in this process (or, with high probability, any other) returns.
pub fn fresh_bytes() -> [u8; 16] {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&(nanos ^ u64::from(std::process::id()).rotate_left(32)).to_be_bytes());
    out[8..].copy_from_slice(&n.to_be_bytes());
    out
}

/// A tenant no other test uses.
pub fn fresh_tenant() -> TenantId {
    TenantId(fresh_bytes())
}

/// A conversation id no other test uses.
pub fn fresh_conversation() -> ConversationId {
    ConversationId(fresh_bytes())
}

/// A message id no other call returns.
pub fn fresh_message_id() -> MessageId {
    MessageId(fresh_bytes())
}

/// A user id made from a small number (readable in failures).
pub fn user(n: u32) -> UserId {
    let mut b = [0u8; 16];
    b[12..].copy_from_slice(&n.to_be_bytes());
    UserId(b)
}

/// A manual clock at [`T0`].
pub fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(T0))
}

/// A Normal, Default-retention request.
pub fn request(
    tenant: TenantId,
    sender: UserId,
    client_id: &str,
    conversation: ConversationId,
    payload: &[u8],
) -> CommitRequest {
    CommitRequest {
        key: CommitKey {
            tenant,
            sender,
            client_message_id: ClientMessageId::new(client_id).expect("test client ids are valid"),
        },
        conversation,
        kind: MessageKind::Normal,
        retention: RetentionClass::Default,
        payload: payload.to_vec(),
    }
}

/// Admits only the listed (tenant, conversation, viewer) triples and counts its calls.
#[derive(Default)]
pub struct MembershipAuthorizer {
    members: Mutex<HashSet<(TenantId, ConversationId, UserId)>>,
    calls: AtomicUsize,
}

impl MembershipAuthorizer {
    /// Admits `viewer` to `conversation`.
    pub fn admit(&self, tenant: TenantId, conversation: ConversationId, viewer: UserId) {
        self.members.lock().expect("authorizer lock").insert((tenant, conversation, viewer));
    }

    /// How many times it was consulted.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl HistoryAuthorizer for MembershipAuthorizer {
    async fn authorize_history(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        viewer: UserId,
    ) -> StoreResult<()> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.members.lock().expect("authorizer lock").contains(&(tenant, conversation, viewer)) {
            Ok(())
        } else {
            Err(StoreError::Forbidden(format!("{viewer} is not a member of {conversation}")))
        }
    }
}

/// Asserts that `result` failed with `kind`, naming `context` otherwise.
#[track_caller]
/// `records` as published: partition 0, offset = seq (what tests archive).
pub fn published(records: &[MessageRecord]) -> Vec<PublishedRecord> {
    records
        .iter()
        .map(|r| PublishedRecord {
            record: r.clone(),
            publication: Publication { partition: 0, offset: i64::try_from(r.seq.0).unwrap_or(i64::MAX) },
        })
        .collect()
}

pub fn assert_kind<T: std::fmt::Debug>(result: StoreResult<T>, kind: crate::ErrorKind, context: &str) {
    match result {
        Err(e) => assert_eq!(e.kind(), kind, "{context}: expected {kind:?}, got {e}"),
        Ok(v) => panic!("{context}: expected {kind:?}, got Ok({v:?})"),
    }
}
