//! The archiver's schedule of conversations whose archived watermark is held up by a gap.
//!
//! The archived watermark (`<ns>:{c:..}:archived`, see [`super::message`]) is the highest seq
//! below which every record is archived or provably never existed. When the archiver can not
//! advance it yet (a record is not archived yet, or a missing seq is too young to be called a
//! hole), it schedules the conversation here to look again later, so the decision survives
//! a restart and a quiet conversation is not left with a watermark that never moves (its
//! records would then never leave the hot tier).
//!
//! | key | type | holds |
//! |-----|------|-------|
//! | `<ns>:{archivegaps:<shard>}` | ZSET | member = `<tenant><conversation>` (64 hex digits), score = when to look again (ms); the member's shard ([`IndexShard`]) |

use crate::redis::index_shard::IndexShard;
use crate::redis::RedisConnection;

use super::{connect, redis_error, RedisConfig};
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, TenantId, UnixMillis};

/// The gap schedule of one Redis namespace. Clones share one connection.
#[derive(Clone)]
pub struct ArchiveGaps {
    con: RedisConnection,
    namespace: String,
}

impl std::fmt::Debug for ArchiveGaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveGaps").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}

fn member(tenant: TenantId, conversation: ConversationId) -> String {
    format!("{}{}", tenant.to_hex(), conversation.to_hex())
}

fn parse_member(member: &str) -> StoreResult<(TenantId, ConversationId)> {
    let parsed = (member.len() == 64)
        .then(|| member.split_at(32))
        .and_then(|(t, c)| Some((TenantId::from_hex(t).ok()?, ConversationId::from_hex(c).ok()?)));
    parsed.ok_or_else(|| StoreError::CorruptEntry(format!("archive gap schedule holds malformed member {member:?}")))
}

impl ArchiveGaps {
    /// Connects to the namespace of `config`.
    pub async fn open(config: &RedisConfig) -> StoreResult<Self> {
        let con = connect(config).await?;
        Ok(Self { con, namespace: config.namespace.clone() })
    }

    /// The shard of the schedule that holds `member`.
    fn key_of(&self, member: &str) -> String {
        IndexShard::of(member).key(&self.namespace, "archivegaps")
    }

    /// Schedules a look at the conversation at `at`; an earlier existing schedule is kept.
    pub async fn schedule(&self, tenant: TenantId, conversation: ConversationId, at: UnixMillis) -> StoreResult<()> {
        let (mut con, member) = (self.con.clone(), member(tenant, conversation));
        redis::cmd("ZADD")
            .arg(self.key_of(&member))
            .arg("LT")
            .arg(at.0)
            .arg(member)
            .query_async::<i64>(&mut con)
            .await
            .map_err(|e| redis_error("scheduling an archive gap", e))?;
        Ok(())
    }

    /// Moves the conversation's look to `at`, earlier or later.
    pub async fn reschedule(&self, tenant: TenantId, conversation: ConversationId, at: UnixMillis) -> StoreResult<()> {
        let (mut con, member) = (self.con.clone(), member(tenant, conversation));
        redis::cmd("ZADD")
            .arg(self.key_of(&member))
            .arg(at.0)
            .arg(member)
            .query_async::<i64>(&mut con)
            .await
            .map_err(|e| redis_error("rescheduling an archive gap", e))?;
        Ok(())
    }

    /// Forgets the conversation (its watermark caught up with everything archived).
    pub async fn clear(&self, tenant: TenantId, conversation: ConversationId) -> StoreResult<()> {
        let (mut con, member) = (self.con.clone(), member(tenant, conversation));
        redis::cmd("ZREM")
            .arg(self.key_of(&member))
            .arg(member)
            .query_async::<i64>(&mut con)
            .await
            .map_err(|e| redis_error("clearing an archive gap", e))?;
        Ok(())
    }

    /// Up to `limit` conversations due at `now`, earliest first (up to `limit` from each shard,
    /// merged).
    pub async fn due(&self, now: UnixMillis, limit: usize) -> StoreResult<Vec<(TenantId, ConversationId)>> {
        let mut due: Vec<(String, f64)> = Vec::new();
        for shard in IndexShard::all() {
            let mut con = self.con.clone();
            let members: Vec<(String, f64)> = redis::cmd("ZRANGEBYSCORE")
                .arg(shard.key(&self.namespace, "archivegaps"))
                .arg("-inf")
                .arg(now.0)
                .arg("WITHSCORES")
                .arg("LIMIT")
                .arg(0)
                .arg(limit)
                .query_async(&mut con)
                .await
                .map_err(|e| redis_error("reading due archive gaps", e))?;
            due.extend(members);
        }
        due.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        due.iter().take(limit).map(|(m, _)| parse_member(m)).collect()
    }

    /// How many conversations are scheduled.
    pub async fn len(&self) -> StoreResult<u64> {
        let mut total = 0;
        for shard in IndexShard::all() {
            let mut con = self.con.clone();
            total += redis::cmd("ZCARD")
                .arg(shard.key(&self.namespace, "archivegaps"))
                .query_async::<u64>(&mut con)
                .await
                .map_err(|e| redis_error("counting archive gaps", e))?;
        }
        Ok(total)
    }

    /// When the conversation is scheduled, if it is.
    pub async fn scheduled_at(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
    ) -> StoreResult<Option<UnixMillis>> {
        let (mut con, member) = (self.con.clone(), member(tenant, conversation));
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(self.key_of(&member))
            .arg(member)
            .query_async(&mut con)
            .await
            .map_err(|e| redis_error("reading an archive gap", e))?;
        Ok(score.map(|s| UnixMillis(s as i64)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_round_trip_and_malformed_ones_fail_closed() {
        let (t, c) = (TenantId([0xab; 16]), ConversationId([0x01; 16]));
        assert_eq!(parse_member(&member(t, c)).unwrap(), (t, c));
        assert!(parse_member("nope").is_err());
        assert!(parse_member(&"g".repeat(64)).is_err());
    }
}
