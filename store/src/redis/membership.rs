//! `MembershipStore` on Redis.
//!
//! # Key layout
//!
//! | key | type | holds |
//! |-----|------|-------|
//! | `<ns>:{c:<tenant><conversation>}:members` | ZSET | member = the raw 16-byte user id, score = 0 |
//!
//! `<ns>` is [`RedisConfig::namespace`]; ids are 32 lowercase hex digits. The hash tag is the
//! conversation's, the same as every key of [`super::RedisMessageStore`] for that conversation,
//! so a future script may check membership next to the history in one slot.
//!
//! # Why each guarantee holds
//!
//! - **Exact counts, atomically**: every method is one single-key command. `add_members` is
//!   `ZADD NX` (its reply counts the members that were not in the set; a user listed twice in one
//!   call is added and counted once), `remove_members` is `ZREM` (its reply counts the members
//!   that were in the set). Concurrent calls never both count one user.
//! - **Byte order**: all scores are 0, so `ZRANGEBYLEX` orders members by `memcmp` (unsigned
//!   bytes, the order of [`UserId`]'s `Ord`); a page is `ZRANGEBYLEX key (<after> + LIMIT 0 n`
//!   (or `-` without a cursor).
//! - **Nothing written on refusal**: sizes are checked before any command is sent.
//! - **Fail closed**: a member that is not 16 bytes, a score that is not 0, pages that do not
//!   ascend strictly past the cursor, or a key of another type are `CorruptEntry`.
//! - The set has no Redis TTL (membership does not expire); Redis drops the key when its last
//!   member is removed.

use crate::redis::RedisConnection;
use async_trait::async_trait;

use super::{connect_checked, redis_error, RedisConfig};
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, TenantId, UserId};
use crate::membership_store::{check_member_batch, check_page_limit, MembershipStore};

/// A transport or server error: a key of the wrong type is corrupt data, the rest `Unavailable`.
fn redis_err(what: &str, err: redis::RedisError) -> StoreError {
    if err.code() == Some("WRONGTYPE") {
        return StoreError::CorruptEntry(format!("{what}: {err}"));
    }
    redis_error(what, err)
}

/// `MembershipStore` on Redis (see the module docs). Cheap to clone; clones share one
/// multiplexed connection.
#[derive(Clone)]
pub struct RedisMembershipStore {
    con: RedisConnection,
    ns: String,
}

impl std::fmt::Debug for RedisMembershipStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisMembershipStore").field("namespace", &self.ns).finish_non_exhaustive()
    }
}

impl RedisMembershipStore {
    /// Connects to Redis (checking it answers) and opens the store in `config`'s namespace.
    /// `InvalidInput` for a bad namespace or URL, `Unavailable` when Redis does not answer.
    pub async fn open(config: &RedisConfig) -> StoreResult<Self> {
        Ok(Self { con: connect_checked(config).await?, ns: config.namespace.clone() })
    }

    /// The set holding a conversation's members (for tests and tools that inspect it).
    pub fn members_key(&self, tenant: TenantId, conversation: ConversationId) -> String {
        format!("{}:{{c:{}{}}}:members", self.ns, tenant.to_hex(), conversation.to_hex())
    }
}

/// The 16-byte user id a stored member holds, or `CorruptEntry`.
fn decode_member(key: &str, member: &[u8]) -> StoreResult<UserId> {
    let bytes: [u8; 16] = member.try_into().map_err(|_| {
        StoreError::CorruptEntry(format!("{key}: a member of {} bytes is not a 16-byte user id", member.len()))
    })?;
    Ok(UserId(bytes))
}

fn members_arg(users: &[UserId]) -> impl Iterator<Item = &[u8]> {
    users.iter().map(|u| &u.0[..])
}

#[async_trait]
impl MembershipStore for RedisMembershipStore {
    async fn add_members(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        users: &[UserId],
    ) -> StoreResult<usize> {
        check_member_batch(users)?;
        let key = self.members_key(tenant, conversation);
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(&key).arg("NX");
        for member in members_arg(users) {
            cmd.arg(0).arg(member);
        }
        cmd.query_async(&mut self.con.clone()).await.map_err(|e| redis_err(&format!("adding members to {key}"), e))
    }

    async fn remove_members(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        users: &[UserId],
    ) -> StoreResult<usize> {
        check_member_batch(users)?;
        let key = self.members_key(tenant, conversation);
        let mut cmd = redis::cmd("ZREM");
        cmd.arg(&key);
        for member in members_arg(users) {
            cmd.arg(member);
        }
        cmd.query_async(&mut self.con.clone()).await.map_err(|e| redis_err(&format!("removing members from {key}"), e))
    }

    async fn is_member(&self, tenant: TenantId, conversation: ConversationId, user: UserId) -> StoreResult<bool> {
        let key = self.members_key(tenant, conversation);
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(&key)
            .arg(&user.0[..])
            .query_async(&mut self.con.clone())
            .await
            .map_err(|e| redis_err(&format!("reading a member of {key}"), e))?;
        match score {
            None => Ok(false),
            Some(0.0) => Ok(true),
            Some(s) => Err(StoreError::CorruptEntry(format!("{key}: member {user} has score {s}, not 0"))),
        }
    }

    async fn members_page(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        after: Option<UserId>,
        limit: usize,
    ) -> StoreResult<Vec<UserId>> {
        check_page_limit(limit)?;
        let key = self.members_key(tenant, conversation);
        let min: Vec<u8> = match after {
            None => b"-".to_vec(),
            Some(u) => [&b"("[..], &u.0[..]].concat(),
        };
        let raw: Vec<Vec<u8>> = redis::cmd("ZRANGEBYLEX")
            .arg(&key)
            .arg(min)
            .arg("+")
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut self.con.clone())
            .await
            .map_err(|e| redis_err(&format!("reading members of {key}"), e))?;
        if raw.len() > limit {
            return Err(StoreError::CorruptEntry(format!("{key}: {} members for a page of {limit}", raw.len())));
        }
        let mut out = Vec::with_capacity(raw.len());
        let mut previous = after;
        for member in &raw {
            let user = decode_member(&key, member)?;
            if previous.is_some_and(|p| p >= user) {
                return Err(StoreError::CorruptEntry(format!(
                    "{key}: members are not in byte order past the cursor (a score other than 0?)"
                )));
            }
            previous = Some(user);
            out.push(user);
        }
        Ok(out)
    }
}
