//! Writer ids: each writer instance holds a number in `0..WRITER_IDS` leased in Redis, which it
//! puts into every message id it mints, so two instances never mint the same id without asking
//! anyone per message (seed 000's writer-id leases).
//!
//! # Key layout
//!
//! | key | type | holds |
//! |-----|------|-------|
//! | `<ns>:{writerids}:<n>` | string | the holder's token (random per acquisition), with a TTL of the lease's life |
//!
//! One hash tag for all of them: a writer touches its key once per renewal (a third of the
//! lease's life), never per message.
//!
//! # The rules
//!
//! - An id is taken with `SET NX PX`, trying numbers from a random one on: the first free one.
//! - A renewal extends the TTL only while the key still holds this holder's token
//!   (`writer_id_renew.lua`); a key gone or holding another token means the id was lost (its TTL
//!   ran out while this process could not reach Redis, or Redis lost its data), and the holder
//!   takes a new one.
//! - The holder counts the lease valid until `sent + life − margin`, `sent` being when the last
//!   successful renewal (or the acquisition) was *sent*: its own view ends before Redis's TTL
//!   can, whatever the delay of the reply. Outside that, [`WriterIdLease::current`] refuses
//!   ("fenced"): a process cut off from Redis for longer than the lease mints no ids another
//!   process may be minting with the same number.
//! - TTLs run on Redis's clock, never the writers' (their clocks may be seconds apart).

use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::Script;

use super::{connect_checked, redis_error, RedisConfig, RedisConnection};
use crate::error::{StoreError, StoreResult};

/// How many writer ids there are: ten bits of a message id.
pub const WRITER_IDS: u16 = 1024;
/// How long a lease lives without a renewal, by default.
pub const DEFAULT_WRITER_ID_LIFE: Duration = Duration::from_secs(15);

static RENEW: LazyLock<Script> = LazyLock::new(|| super::script(include_str!("scripts/writer_id_renew.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| super::script(include_str!("scripts/writer_id_release.lua")));

/// A writer instance's number, `0..WRITER_IDS`, unique among the instances holding one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WriterId(pub u16);

impl std::fmt::Display for WriterId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What a renewal did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// The lease is extended.
    Held(WriterId),
    /// The id had been lost; this one is held now.
    Replaced {
        /// The id that was lost.
        lost: WriterId,
        /// The id now held.
        now: WriterId,
    },
}

#[derive(Debug)]
struct Held {
    id: WriterId,
    token: String,
    valid_until: Instant,
}

/// A writer id held in Redis (see the module docs). Renew it every third of its life
/// ([`Self::renew_every`]); release it at shutdown.
pub struct WriterIdLease {
    con: RedisConnection,
    ns: String,
    life: Duration,
    held: Mutex<Held>,
}

impl std::fmt::Debug for WriterIdLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterIdLease").field("namespace", &self.ns).field("held", &self.held).finish_non_exhaustive()
    }
}

impl WriterIdLease {
    /// Connects to Redis and takes a free writer id for `life`; `Unavailable` when Redis does
    /// not answer or all [`WRITER_IDS`] are held.
    pub async fn acquire(config: &RedisConfig, life: Duration) -> StoreResult<Self> {
        if life < Duration::from_secs(1) {
            return Err(StoreError::InvalidInput(format!("a writer id lease of {life:?} is shorter than 1 s")));
        }
        let con = connect_checked(config).await?;
        let ns = config.namespace.clone();
        let held = take_free(&con, &ns, life).await?;
        Ok(Self { con, ns, life, held: Mutex::new(held) })
    }

    /// How often to renew: a third of the lease's life, so two renewals may fail in a row.
    pub fn renew_every(&self) -> Duration {
        self.life / 3
    }

    /// The id, while the lease is valid in this process's view; `Unavailable` once it may have
    /// run out in Redis (fenced until a renewal takes it again or a new one).
    pub fn current(&self) -> StoreResult<WriterId> {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if Instant::now() < held.valid_until {
            Ok(held.id)
        } else {
            Err(StoreError::Unavailable {
                message: format!("writer id {} is not renewed: minting no message ids until it is", held.id),
                source: None,
            })
        }
    }

    /// Extends the lease; if it was lost, takes a new id. An error (Redis unreachable) leaves
    /// the lease to run out in this process's view at the same moment as in Redis's.
    pub async fn renew(&self) -> StoreResult<Renewal> {
        let (id, token) = {
            let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            (held.id, held.token.clone())
        };
        let sent = Instant::now();
        let mut invocation = RENEW.key(key(&self.ns, id));
        invocation.arg(&token).arg(millis(self.life));
        let renewed: i64 = invocation
            .invoke_async(&mut self.con.clone())
            .await
            .map_err(|e| redis_error(&format!("renewing writer id {id}"), e))?;
        if renewed == 1 {
            let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            if held.token == token {
                held.valid_until = sent + valid_for(self.life);
            }
            return Ok(Renewal::Held(id));
        }
        // Lost: fenced at once, then a new id.
        self.held.lock().unwrap_or_else(PoisonError::into_inner).valid_until = sent;
        let next = take_free(&self.con, &self.ns, self.life).await?;
        let now = next.id;
        *self.held.lock().unwrap_or_else(PoisonError::into_inner) = next;
        Ok(Renewal::Replaced { lost: id, now })
    }

    /// Gives the id back (only if still this holder's), so another instance may take it at
    /// once; this lease is fenced from then on.
    pub async fn release(&self) -> StoreResult<()> {
        let (id, token) = {
            let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            held.valid_until = Instant::now();
            (held.id, held.token.clone())
        };
        let mut invocation = RELEASE.key(key(&self.ns, id));
        invocation.arg(&token);
        let _: i64 = invocation
            .invoke_async(&mut self.con.clone())
            .await
            .map_err(|e| redis_error(&format!("releasing writer id {id}"), e))?;
        Ok(())
    }
}

/// How long after sending a successful renewal (or the acquisition) a lease of `life` counts as
/// valid here: its life less a margin for Redis's clock running a little faster than ours.
fn valid_for(life: Duration) -> Duration {
    life - life / 10
}

/// `<ns>:{writerids}:<n>`.
fn key(ns: &str, id: WriterId) -> String {
    format!("{ns}:{{writerids}}:{}", id.0)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Takes the first free id from a random one on, with a fresh token.
async fn take_free(con: &RedisConnection, ns: &str, life: Duration) -> StoreResult<Held> {
    // uuid's v4 is the crate's random source already (no other RNG dependency for this).
    let token = uuid::Uuid::new_v4().simple().to_string();
    let start = (uuid::Uuid::new_v4().as_u128() % u128::from(WRITER_IDS)) as u16;
    for step in 0..WRITER_IDS {
        let id = WriterId((start + step) % WRITER_IDS);
        let sent = Instant::now();
        let taken: Option<String> = redis::cmd("SET")
            .arg(key(ns, id))
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(millis(life))
            .query_async(&mut con.clone())
            .await
            .map_err(|e| redis_error(&format!("taking writer id {id}"), e))?;
        if taken.is_some() {
            return Ok(Held { id, token, valid_until: sent + valid_for(life) });
        }
    }
    Err(StoreError::Unavailable { message: format!("all {WRITER_IDS} writer ids are held"), source: None })
}
