//! What tests and tools may look at or break in a Redis message store: the names of its keys,
//! and sabotage of single records (for the invariant checker's own tests). Not for services.

use super::keys::{aux_member_in_conversation, aux_shard, expiry_shard};
use super::scripts::query;
use super::RedisMessageStore;
use crate::error::StoreResult;
use crate::ids::{ConversationId, ConversationSeq, MessageId, TenantId};
use crate::message::CommitKey;
use crate::redis::index_shard::IndexShard;

impl RedisMessageStore {
    /// The counter of the highest seq issued in a conversation.
    pub fn seq_key(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.keys.seq(tenant, conversation)
    }

    /// The HASH holding a conversation's record blobs (field = seq in decimal).
    #[doc(hidden)]
    pub fn record_key(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.keys.records(tenant, conversation)
    }

    /// The ZSET history index of a conversation (member = score = seq).
    #[doc(hidden)]
    pub fn index_key(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.keys.index(tenant, conversation)
    }

    /// The hot-tier lower bound of a conversation (seqs at or below it were trimmed).
    #[doc(hidden)]
    pub fn lower_bound_key(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.keys.lower_bound(tenant, conversation)
    }

    /// The seq lease of a conversation (`<serving>:<through>:<start>`; see [`super::lease`]).
    #[doc(hidden)]
    pub fn lease_key(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.keys.lease(tenant, conversation)
    }

    /// The hash of one commit (`req`, `commit`).
    #[doc(hidden)]
    pub fn commit_key(&self, key: &CommitKey) -> String {
        self.keys.commit(key)
    }

    /// Where the group-commit layout keeps the commit of `key` (in `conversation`'s slot), and
    /// its claim of `key` (in the sender's).
    #[doc(hidden)]
    pub fn group_commit_keys(&self, key: &CommitKey, conversation: ConversationId) -> [String; 2] {
        [self.keys.commit_in_conversation(key, conversation), self.keys.sender_claim(key)]
    }

    /// The group-commit layout's `{recovery}`/`{commitgc}` member of one reservation (see
    /// `keys::aux_member_in_conversation`).
    #[doc(hidden)]
    pub fn group_commit_aux_member(key: &CommitKey, conversation: ConversationId, message_id: MessageId) -> String {
        aux_member_in_conversation(key, conversation, message_id)
    }

    /// Every shard of the recovery index (`{recovery:<shard>}`).
    #[doc(hidden)]
    pub fn recovery_keys(&self) -> Vec<String> {
        IndexShard::all().map(|s| self.keys.recovery(s)).collect()
    }

    /// Every shard of the index of COMMITTED commits (`{commitgc:<shard>}`).
    #[doc(hidden)]
    pub fn commit_gc_keys(&self) -> Vec<String> {
        IndexShard::all().map(|s| self.keys.commit_gc(s)).collect()
    }

    /// The shards of `{recovery}` and `{commitgc}` that hold `member`.
    #[doc(hidden)]
    pub fn aux_keys_of(&self, member: &str) -> [String; 2] {
        let shard = aux_shard(member);
        [self.keys.recovery(shard), self.keys.commit_gc(shard)]
    }

    /// The shard of `{msghistorygc}` that holds `member`.
    #[doc(hidden)]
    pub fn history_gc_key_of(&self, member: &str) -> String {
        self.keys.history_gc(expiry_shard(member))
    }

    /// Every shard of the hot-tier expiry index (`{msghistorygc:<shard>}`).
    #[doc(hidden)]
    pub fn history_gc_keys(&self) -> Vec<String> {
        IndexShard::all().map(|s| self.keys.history_gc(s)).collect()
    }

    /// Test sabotage: removes a record blob, leaving its index entry.
    #[doc(hidden)]
    pub async fn sabotage_remove_record(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        seq: ConversationSeq,
    ) -> StoreResult<()> {
        let cmd = redis::cmd("HDEL").arg(self.keys.records(tenant, conversation)).arg(seq.0).clone();
        query::<i64>(&self.con, "sabotage: removing a record", &cmd).await.map(drop)
    }

    /// Test sabotage: replaces a record blob with `bytes`.
    #[doc(hidden)]
    pub async fn sabotage_overwrite_record(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        seq: ConversationSeq,
        bytes: Vec<u8>,
    ) -> StoreResult<()> {
        let cmd = redis::cmd("HSET").arg(self.keys.records(tenant, conversation)).arg(seq.0).arg(bytes).clone();
        query::<i64>(&self.con, "sabotage: overwriting a record", &cmd).await.map(drop)
    }
}
