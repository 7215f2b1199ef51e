//! The contract suites against the memory backend (the reference implementation).

use std::sync::Arc;

use async_trait::async_trait;
use qim_store::clock::ManualClock;
use qim_store::ids::{ConversationId, ConversationSeq, TenantId, UserId};
use qim_store::mailbox::{MailboxRetention, MailboxSeq};
use qim_store::memory::{MemoryMailboxStore, MemoryMembershipStore, MemoryMessageStore};
use qim_store::retention::RetentionPolicy;
use qim_store::testsuite::{MailboxHarness, MembershipHarness, MessageHarness};
use qim_store::{MailboxStore, MembershipStore, MessageStore};

/// Opens memory stores and keeps a typed handle to each, for sabotage.
#[derive(Default)]
struct Memory {
    messages: std::sync::Mutex<Vec<MemoryMessageStore>>,
    mailboxes: std::sync::Mutex<Vec<MemoryMailboxStore>>,
}

impl Memory {
    /// The typed store behind `store` (harness stores are opened one per test).
    fn message(&self) -> MemoryMessageStore {
        self.messages.lock().unwrap().last().cloned().expect("a store was opened")
    }

    fn mailbox(&self) -> MemoryMailboxStore {
        self.mailboxes.lock().unwrap().last().cloned().expect("a store was opened")
    }
}

#[async_trait]
impl MessageHarness for Memory {
    async fn open(&self, policy: RetentionPolicy, clock: Arc<ManualClock>) -> Arc<dyn MessageStore> {
        let store = MemoryMessageStore::new(policy, clock);
        self.messages.lock().unwrap().push(store.clone());
        Arc::new(store)
    }

    async fn remove_record(
        &self,
        _: &Arc<dyn MessageStore>,
        tenant: TenantId,
        conversation: ConversationId,
        seq: ConversationSeq,
    ) {
        self.message().sabotage_remove_record(tenant, conversation, seq);
    }

    async fn overwrite_record(
        &self,
        _: &Arc<dyn MessageStore>,
        tenant: TenantId,
        conversation: ConversationId,
        seq: ConversationSeq,
        bytes: Vec<u8>,
    ) {
        self.message().sabotage_overwrite_record(tenant, conversation, seq, bytes);
    }
}

#[async_trait]
impl MailboxHarness for Memory {
    async fn open(&self, retention: MailboxRetention, clock: Arc<ManualClock>) -> Arc<dyn MailboxStore> {
        let store = MemoryMailboxStore::new(retention, clock);
        self.mailboxes.lock().unwrap().push(store.clone());
        Arc::new(store)
    }

    async fn overwrite_group(
        &self,
        _: &Arc<dyn MailboxStore>,
        tenant: TenantId,
        user: UserId,
        seq: MailboxSeq,
        bytes: Vec<u8>,
    ) {
        self.mailbox().sabotage_overwrite_group(tenant, user, seq, bytes);
    }
}

#[async_trait]
impl MembershipHarness for Memory {
    async fn open(&self) -> Arc<dyn MembershipStore> {
        Arc::new(MemoryMembershipStore::new())
    }
}

mod message {
    use super::*;
    qim_store::message_store_contract_suite!(Memory::default());
}

mod mailbox {
    use super::*;
    qim_store::mailbox_store_contract_suite!(Memory::default());
}

mod membership {
    use super::*;
    qim_store::membership_store_contract_suite!(Memory::default());
}

/// Memory high-water stores opened by one harness share their marks (like processes sharing a
/// database).
#[derive(Default)]
struct MemoryMarks(Arc<qim_store::memory::MemorySeqHighWater>);

#[async_trait]
impl qim_store::testsuite::SeqHighWaterHarness for MemoryMarks {
    async fn open(&self) -> Arc<dyn qim_store::SeqHighWater> {
        self.0.clone()
    }
}

mod high_water {
    use super::*;
    qim_store::seq_high_water_contract_suite!(MemoryMarks::default());
}
