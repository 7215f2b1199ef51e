//! A conversation's members cached in Redis in front of the durable membership table (DESIGN
//! invariant 9: membership is durable outside Redis; Redis may cache it). See
//! [`crate::tiered::TieredMembershipStore`] for how reads and changes use it.
//!
//! # Key layout (the conversation's hash tag, like every key of that conversation)
//!
//! | key | type | holds |
//! |-----|------|-------|
//! | `<ns>:{c:<tenant><conversation>}:members` | ZSET | member = the raw 16-byte user id, score 0 |
//! | `<ns>:{c:<tenant><conversation>}:memberscached` | string | the copy of the data (`serving_prelude.lua`) the set was filled in (TTL [`CACHE_TTL_MILLIS`]) |
//! | `<ns>:{c:<tenant><conversation>}:membersgen` | string | generation: incremented by every change |
//! | `<ns>:{c:<tenant><conversation>}:membersfill` | string | the id of the fill under way, for fills of more than one part (TTL [`CACHE_TTL_MILLIS`]) |
//!
//! # Why the cache never serves a stale answer for long
//!
//! - A cache is trusted only while its marker names the Redis process now serving: after a
//!   restart, a failover or a restore of an older snapshot it names another one, so the cache is
//!   filled again from the durable table; after a flush or lost keys the marker is gone.
//! - A change is written to the durable table first, then to the cache
//!   (`membership_changed.lua`), which also moves the generation. A fill carries the generation
//!   its reader saw *before* reading the durable table, and lands only if it is unchanged, so a
//!   fill that read the table before a change can not overwrite the change's cache update. A
//!   fill of many members is written in parts; a fill that begins while another is under way
//!   takes it over (the other's later parts are refused), so parts of two fills never mix.
//! - If the cache update after a durable change fails (Redis unreachable), the change is still
//!   durable and the caller gets the error (and retries); a cache that missed an update is
//!   dropped at the latest when its marker expires.

use std::sync::LazyLock;

use crate::redis::RedisConnection;
use redis::{Script, Value};

use super::{connect_checked, redis_error, serving_script, RedisConfig};
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, TenantId, UserId};

/// How long a filled cache is trusted at most (Redis's clock): bounds how long a cache that
/// missed an update (its write failed after the durable change) can serve.
pub const CACHE_TTL_MILLIS: u64 = 10 * 60 * 1000;

/// The suffix of a conversation's cached member set (the key layout above).
pub(crate) const MEMBERS_SUFFIX: &str = "members";
/// The suffix of a conversation's cache marker.
pub(crate) const MEMBERS_CACHED_SUFFIX: &str = "memberscached";

/// Members per fill script call.
const FILL_CHUNK: usize = 2_000;

static CACHED: LazyLock<Script> = LazyLock::new(|| serving_script(include_str!("scripts/membership_cached.lua")));
static FILL: LazyLock<Script> = LazyLock::new(|| serving_script(include_str!("scripts/membership_fill.lua")));
static CHANGED: LazyLock<Script> = LazyLock::new(|| serving_script(include_str!("scripts/membership_changed.lua")));

/// A cached answer, or the generation a fill must find unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cached<T> {
    /// The cache is valid and answered.
    Hit(T),
    /// The cache is missing or invalid.
    Miss {
        /// The cache's generation when it was found missing.
        generation: String,
    },
}

/// The member cache (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct RedisMembershipCache {
    con: RedisConnection,
    ns: String,
}

impl std::fmt::Debug for RedisMembershipCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisMembershipCache").field("namespace", &self.ns).finish_non_exhaustive()
    }
}

fn decode_user(member: &[u8]) -> StoreResult<UserId> {
    let bytes: [u8; 16] = member.try_into().map_err(|_| {
        StoreError::CorruptEntry(format!("a cached member of {} bytes is not a 16-byte user id", member.len()))
    })?;
    Ok(UserId(bytes))
}

fn status(reply: &Value) -> Option<(&[u8], &[Value])> {
    match reply {
        Value::Array(items) => match items.split_first() {
            Some((Value::BulkString(s), rest)) => Some((s.as_slice(), rest)),
            Some((Value::SimpleString(s), rest)) => Some((s.as_bytes(), rest)),
            _ => None,
        },
        _ => None,
    }
}

fn unexpected(what: &str, reply: &Value) -> StoreError {
    StoreError::InvariantViolation(format!("{what}: unexpected script reply {reply:?}"))
}

impl RedisMembershipCache {
    /// Connects to Redis (checking it answers) and opens the cache in `config`'s namespace.
    pub async fn open(config: &RedisConfig) -> StoreResult<Self> {
        Ok(Self { con: connect_checked(config).await?, ns: config.namespace.clone() })
    }

    fn keys(&self, tenant: TenantId, conversation: ConversationId) -> [String; 4] {
        let tag = format!("{}:{{c:{}{}}}", self.ns, tenant.to_hex(), conversation.to_hex());
        [
            format!("{tag}:{MEMBERS_SUFFIX}"),
            format!("{tag}:{MEMBERS_CACHED_SUFFIX}"),
            format!("{tag}:membersgen"),
            format!("{tag}:membersfill"),
        ]
    }

    async fn run(&self, what: &str, script: &Script, keys: &[String], args: &[&[u8]]) -> StoreResult<Value> {
        let mut invocation = script.prepare_invoke();
        for k in keys {
            invocation.key(k);
        }
        for a in args {
            invocation.arg(*a);
        }
        invocation.invoke_async(&mut self.con.clone()).await.map_err(|e| redis_error(what, e))
    }

    fn miss<T>(what: &str, reply: &Value, rest: &[Value]) -> StoreResult<Cached<T>> {
        let generation = match rest.first() {
            Some(Value::BulkString(g)) => String::from_utf8_lossy(g).into_owned(),
            Some(Value::Int(g)) => g.to_string(),
            _ => return Err(unexpected(what, reply)),
        };
        Ok(Cached::Miss { generation })
    }

    /// Whether `user` is a member, if the cache is valid.
    pub async fn is_member(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        user: UserId,
    ) -> StoreResult<Cached<bool>> {
        let what = "reading the member cache";
        let reply = self.run(what, &CACHED, &self.keys(tenant, conversation), &[b"is_member", &user.0]).await?;
        match status(&reply) {
            Some((b"hit", [Value::Int(n)])) => Ok(Cached::Hit(*n == 1)),
            Some((b"miss", rest)) => Self::miss(what, &reply, rest),
            _ => Err(unexpected(what, &reply)),
        }
    }

    /// Members strictly after `after`, ascending, at most `limit`, if the cache is valid.
    pub async fn members_page(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        after: Option<UserId>,
        limit: usize,
    ) -> StoreResult<Cached<Vec<UserId>>> {
        let what = "reading the member cache";
        let cursor = after.map_or(Vec::new(), |u| u.0.to_vec());
        let limit = limit.to_string();
        let args: [&[u8]; 3] = [b"page", &cursor, limit.as_bytes()];
        let reply = self.run(what, &CACHED, &self.keys(tenant, conversation), &args).await?;
        match status(&reply) {
            Some((b"hit", members)) => {
                let mut out = Vec::with_capacity(members.len());
                for m in members {
                    let Value::BulkString(bytes) = m else { return Err(unexpected(what, &reply)) };
                    out.push(decode_user(bytes)?);
                }
                Ok(Cached::Hit(out))
            }
            Some((b"miss", rest)) => Self::miss(what, &reply, rest),
            _ => Err(unexpected(what, &reply)),
        }
    }

    /// Fills the cache with `members` (every member, as just read from the durable table) if
    /// its generation is still `generation`; `false` when a change raced the read (nothing was
    /// trusted: the next read fills again).
    pub async fn fill(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        generation: &str,
        members: &[UserId],
    ) -> StoreResult<bool> {
        let keys = self.keys(tenant, conversation);
        let ttl = CACHE_TTL_MILLIS.to_string();
        let chunks: Vec<&[UserId]> = if members.is_empty() { vec![&[]] } else { members.chunks(FILL_CHUNK).collect() };
        let last = chunks.len() - 1;
        let fill_id = uuid::Uuid::new_v4().simple().to_string();
        for (i, chunk) in chunks.into_iter().enumerate() {
            let part: &[u8] = match (i, i == last) {
                (0, true) => b"only",
                (0, false) => b"first",
                (_, true) => b"last",
                _ => b"more",
            };
            let mut args: Vec<&[u8]> = vec![generation.as_bytes(), part, ttl.as_bytes(), fill_id.as_bytes()];
            args.extend(chunk.iter().map(|u| &u.0[..]));
            let reply = self.run("filling the member cache", &FILL, &keys, &args).await?;
            match status(&reply) {
                Some((b"filled", _)) => {}
                Some((b"raced", _)) => return Ok(false),
                _ => return Err(unexpected("filling the member cache", &reply)),
            }
        }
        Ok(true)
    }

    /// Applies a change that is already durable: `added` or removed `users`.
    pub async fn changed(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        added: bool,
        users: &[UserId],
    ) -> StoreResult<()> {
        let op: &[u8] = if added { b"add" } else { b"remove" };
        let mut args: Vec<&[u8]> = vec![op];
        args.extend(users.iter().map(|u| &u.0[..]));
        let reply = self.run("updating the member cache", &CHANGED, &self.keys(tenant, conversation), &args).await?;
        match status(&reply) {
            Some((b"ok", _)) => Ok(()),
            _ => Err(unexpected("updating the member cache", &reply)),
        }
    }
}
