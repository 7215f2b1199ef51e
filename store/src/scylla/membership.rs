//! `MembershipStore` on Scylla/Cassandra.
//!
//! # Table
//!
//! `conversation_member (tenant_id blob, conversation_id blob, user_id blob,
//! PRIMARY KEY ((tenant_id, conversation_id), user_id))`: one partition per conversation, one
//! row per member, created by [`super::migrate()`] and checked by [`super::readiness()`] with the
//! other tables (see [`super::schema`]). Rows have no TTL; a removal is a row `DELETE`, so the
//! table keeps the default `gc_grace_seconds` (the repair window of those tombstones).
//!
//! # Why each guarantee holds
//!
//! - **Membership itself is exact**: adds are same-value upserts, removals row deletes, all at
//!   LOCAL_QUORUM, and all writes of one call carry one client-side write timestamp
//!   (`USING TIMESTAMP`, microseconds, strictly increasing per store). So a driver retry
//!   rewrites the same cells at the same timestamp (truly idempotent), and calls made one after
//!   the other through one store apply in that order even within one microsecond or across a
//!   wall-clock step back. Between processes, last-write-wins follows their wall clocks.
//! - **Byte order**: `user_id` is a `blob` clustering column, which both servers order by
//!   unsigned bytes (the order of [`UserId`]'s `Ord`); a page is `user_id > ? LIMIT ?` (no
//!   cursor: the partition's start), read in driver pages of [`READ_PAGE_SIZE`].
//! - **Nothing written on refusal**: sizes are checked before anything is sent.
//! - **Removals cover failed adds**: `remove_members` deletes every listed user, member or not,
//!   so an earlier add that failed after reaching some replica can not surface later through
//!   repair or hints.
//! - **Fail closed**: a stored `user_id` that is not 16 bytes, or a page that does not ascend
//!   strictly past the cursor, is `CorruptEntry`.
//!
//! # Counts are informational (read, then write; no LWT)
//!
//! `add_members` returns how many listed users were not members, and `remove_members` how many
//! were, as read at LOCAL_QUORUM just before the write (duplicates within one call count once).
//! The read and the write are not atomic: two concurrent adds of one new user may both count
//! it, and an add racing a removal may count against a state the other call changes next. An
//! exact count needs a conditional write per user (`INSERT ... IF NOT EXISTS`, one Paxos round
//! each: up to 1 000 per call), which membership counts are not worth; a conditional batch would
//! not help, as it applies all or nothing. The membership itself is never affected by the race.
//!
//! # Limits
//!
//! - A call's users are handled in chunks of [`CHUNK`] (the default
//!   `max_clustering_key_restrictions_per_query` of ScyllaDB bounds an `IN` list at 100; one
//!   partition per chunk keeps each unlogged batch a single mutation far below the batch size
//!   warning). Chunks go one after another: a call that fails part way may have applied some of
//!   them. Repeating it is safe (idempotent), but then counts only what the failed call had not
//!   yet applied.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use scylla::client::session::Session;
use scylla::response::PagingState;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::Consistency;

use super::config::ScyllaConfig;
use super::cql::{corrupt, open_session, unavailable};
use super::migrate::{readiness, Readiness};
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, TenantId, UserId};
use crate::membership_store::{check_member_batch, check_page_limit, MembershipStore};

/// Users per read (`IN` list), unlogged batch and delete.
pub const CHUNK: usize = 100;
/// Rows per driver page when reading members.
pub const READ_PAGE_SIZE: i32 = 1000;

struct Statements {
    present: PreparedStatement,
    insert: PreparedStatement,
    delete: PreparedStatement,
    select_one: PreparedStatement,
    page_first: PreparedStatement,
    page_after: PreparedStatement,
}

async fn prepare(session: &Session, cql: String) -> StoreResult<PreparedStatement> {
    let mut stmt = session.prepare(cql.clone()).await.map_err(|e| StoreError::Unavailable {
        message: format!("preparing `{cql}` (has the schema been migrated?)"),
        source: Some(Box::new(e)),
    })?;
    stmt.set_consistency(Consistency::LocalQuorum);
    stmt.set_serial_consistency(None);
    stmt.set_is_idempotent(true);
    stmt.set_page_size(READ_PAGE_SIZE);
    Ok(stmt)
}

impl Statements {
    async fn prepare(session: &Session, ks: &str) -> StoreResult<Self> {
        const TABLE: &str = "conversation_member";
        const PARTITION: &str = "tenant_id = ? AND conversation_id = ?";
        Ok(Self {
            present: prepare(session, format!("SELECT user_id FROM {ks}.{TABLE} WHERE {PARTITION} AND user_id IN ?"))
                .await?,
            insert: prepare(
                session,
                format!(
                    "INSERT INTO {ks}.{TABLE} (tenant_id, conversation_id, user_id) VALUES (?, ?, ?) USING TIMESTAMP ?"
                ),
            )
            .await?,
            delete: prepare(
                session,
                format!("DELETE FROM {ks}.{TABLE} USING TIMESTAMP ? WHERE {PARTITION} AND user_id IN ?"),
            )
            .await?,
            select_one: prepare(session, format!("SELECT user_id FROM {ks}.{TABLE} WHERE {PARTITION} AND user_id = ?"))
                .await?,
            page_first: prepare(session, format!("SELECT user_id FROM {ks}.{TABLE} WHERE {PARTITION} LIMIT ?")).await?,
            page_after: prepare(
                session,
                format!("SELECT user_id FROM {ks}.{TABLE} WHERE {PARTITION} AND user_id > ? LIMIT ?"),
            )
            .await?,
        })
    }
}

struct Inner {
    session: Arc<Session>,
    config: ScyllaConfig,
    st: Statements,
    /// The last write timestamp this store used (microseconds since the epoch).
    last_timestamp: AtomicI64,
}

/// `MembershipStore` on Scylla/Cassandra (see the module docs). Cheap to clone; clones share
/// the session and the write-timestamp sequence.
#[derive(Clone)]
pub struct ScyllaMembershipStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ScyllaMembershipStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScyllaMembershipStore").field("keyspace", &self.inner.config.keyspace).finish_non_exhaustive()
    }
}

impl ScyllaMembershipStore {
    /// Opens a session to `config` and prepares every statement. Changes no schema: against a
    /// keyspace that was never migrated this fails (`Unavailable`, naming the statement).
    pub async fn connect(config: &ScyllaConfig) -> StoreResult<Self> {
        let session = open_session(config).await?;
        Self::with_session(session, config).await
    }

    /// Like [`Self::connect`], on an open session (owned, or shared with other stores).
    pub async fn with_session(session: impl Into<Arc<Session>>, config: &ScyllaConfig) -> StoreResult<Self> {
        super::config::validate_keyspace(&config.keyspace).map_err(StoreError::InvalidInput)?;
        let session = session.into();
        let st = Statements::prepare(&session, &config.keyspace).await?;
        Ok(Self { inner: Arc::new(Inner { session, config: config.clone(), st, last_timestamp: AtomicI64::new(0) }) })
    }

    /// Re-reads the schema (keyspace, replication, tables): see [`super::readiness`].
    pub async fn readiness(&self) -> StoreResult<Readiness> {
        readiness(&self.inner.session, &self.inner.config).await
    }

    /// The driver session (for tests and tools that inspect rows directly).
    pub fn session(&self) -> &Session {
        &self.inner.session
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &ScyllaConfig {
        &self.inner.config
    }

    /// A write timestamp: the wall clock in microseconds, but always above the last one this
    /// store used.
    fn next_timestamp(&self) -> i64 {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64);
        let previous = self
            .inner
            .last_timestamp
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| Some(now.max(last + 1)))
            .unwrap_or_else(|last| last);
        now.max(previous + 1)
    }

    /// How many of `chunk` (distinct users) are members now.
    async fn count_present(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        chunk: &[UserId],
    ) -> StoreResult<usize> {
        let what = format!("reading members of conversation {conversation}");
        let ids: Vec<&[u8]> = chunk.iter().map(|u| &u.0[..]).collect();
        let rows = self.read_all(&what, &self.inner.st.present, (&tenant.0[..], &conversation.0[..], ids)).await?;
        for user in &rows {
            if !chunk.contains(user) {
                return Err(corrupt(&what, format!("the server returned {user}, which was not asked for")));
            }
        }
        Ok(rows.len())
    }

    /// Every row of a read, page by page, as user ids.
    async fn read_all(
        &self,
        what: &str,
        stmt: &PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow,
    ) -> StoreResult<Vec<UserId>> {
        let mut out = Vec::new();
        let mut paging = PagingState::start();
        loop {
            let (result, next) = self
                .inner
                .session
                .execute_single_page(stmt, &values, paging)
                .await
                .map_err(|e| unavailable(what.to_owned(), e))?;
            let rows = result.into_rows_result().map_err(|e| corrupt(what, e))?;
            for row in rows.rows::<(Vec<u8>,)>().map_err(|e| corrupt(what, e))? {
                let (bytes,) = row.map_err(|e| corrupt(what, e))?;
                let id: [u8; 16] = bytes.as_slice().try_into().map_err(|_| {
                    corrupt(what, format!("a user_id of {} bytes is not a 16-byte user id", bytes.len()))
                })?;
                out.push(UserId(id));
            }
            match next.into_paging_control_flow() {
                std::ops::ControlFlow::Continue(state) => paging = state,
                std::ops::ControlFlow::Break(()) => return Ok(out),
            }
        }
    }
}

/// The distinct users of one call, in byte order.
fn distinct(users: &[UserId]) -> Vec<UserId> {
    let mut out = users.to_vec();
    out.sort_unstable();
    out.dedup();
    out
}

#[async_trait]
impl MembershipStore for ScyllaMembershipStore {
    /// Reads which of the users are members, then upserts all of them (one unlogged batch per
    /// chunk, in one partition). The count is informational: see the module docs.
    async fn add_members(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        users: &[UserId],
    ) -> StoreResult<usize> {
        check_member_batch(users)?;
        let timestamp = self.next_timestamp();
        let (t, c) = (&tenant.0[..], &conversation.0[..]);
        let mut added = 0;
        for chunk in distinct(users).chunks(CHUNK) {
            added += chunk.len() - self.count_present(tenant, conversation, chunk).await?;
            let mut batch = Batch::new(BatchType::Unlogged);
            batch.set_consistency(Consistency::LocalQuorum);
            batch.set_serial_consistency(None);
            batch.set_is_idempotent(true);
            for _ in chunk {
                batch.append_statement(self.inner.st.insert.clone());
            }
            let values: Vec<_> = chunk.iter().map(|u| (t, c, &u.0[..], timestamp)).collect();
            self.inner
                .session
                .batch(&batch, values)
                .await
                .map_err(|e| unavailable(format!("adding members to conversation {conversation}"), e))?;
        }
        Ok(added)
    }

    /// Reads which of the users are members, then deletes every listed user's row (members or
    /// not: see the module docs). The count is informational.
    async fn remove_members(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        users: &[UserId],
    ) -> StoreResult<usize> {
        check_member_batch(users)?;
        let timestamp = self.next_timestamp();
        let mut removed = 0;
        for chunk in distinct(users).chunks(CHUNK) {
            removed += self.count_present(tenant, conversation, chunk).await?;
            let ids: Vec<&[u8]> = chunk.iter().map(|u| &u.0[..]).collect();
            self.inner
                .session
                .execute_unpaged(&self.inner.st.delete, (timestamp, &tenant.0[..], &conversation.0[..], ids))
                .await
                .map_err(|e| unavailable(format!("removing members from conversation {conversation}"), e))?;
        }
        Ok(removed)
    }

    async fn is_member(&self, tenant: TenantId, conversation: ConversationId, user: UserId) -> StoreResult<bool> {
        let what = format!("reading member {user} of conversation {conversation}");
        let rows =
            self.read_all(&what, &self.inner.st.select_one, (&tenant.0[..], &conversation.0[..], &user.0[..])).await?;
        match rows.as_slice() {
            [] => Ok(false),
            [found] if *found == user => Ok(true),
            other => Err(corrupt(&what, format!("the server returned {other:?}"))),
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
        let what = format!("reading members of conversation {conversation}");
        let n = i32::try_from(limit).map_err(|_| StoreError::InvalidInput(format!("page limit {limit}")))?;
        let (t, c) = (&tenant.0[..], &conversation.0[..]);
        let rows = match after {
            None => self.read_all(&what, &self.inner.st.page_first, (t, c, n)).await?,
            Some(a) => self.read_all(&what, &self.inner.st.page_after, (t, c, &a.0[..], n)).await?,
        };
        if rows.len() > limit {
            return Err(corrupt(&what, format!("{} rows for a page of {limit}", rows.len())));
        }
        let mut previous = after;
        for user in &rows {
            if previous.is_some_and(|p| p >= *user) {
                return Err(corrupt(&what, "members are not in byte order past the cursor"));
            }
            previous = Some(*user);
        }
        Ok(rows)
    }
}
