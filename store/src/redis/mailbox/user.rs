//! One user's mailbox: canonical groups, the retention meta (trim, expired-gap boundary, ledger)
//! and its optimistic check-and-set, range reads and trimming.
//!
//! The ledger math runs here, in Rust, over [`RetentionLedger`]; the scripts only apply a result
//! when the meta generation is still the one it was computed from (else the caller re-reads and
//! recomputes). Every script that changes the meta writes a fresh random generation, never a
//! counter: after Redis rolled back, a counter could come back with other contents, while a
//! random generation names the one write that made it. So the store keeps the metas it wrote
//! last ([`MetaCache`]) and plans a user's next commit on the cached meta without reading it: a
//! commit whose generation still matches applies to exactly that meta; one that does not answers
//! `retry`, and the user is read and planned again. Range reads only need the trim and the gap
//! unchanged since the cursor was checked against them.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::redis::connection::{pipeline_by_slot, query_by_slot};
use crate::redis::script_sources::{eval_of, is_noscript};
use crate::redis::RedisConnection;
use redis::Value;

use super::keys::{seq8, UserKeys};
use super::reply::{bulk, status};
use super::{redis_err, COMMIT, MAX_ATTEMPTS, SCAN, TRIM};
use crate::codec::{encode_event_group, RetentionLedger};
use crate::error::{StoreError, StoreResult};
use crate::ids::{TenantId, UnixMillis, UserId, MILLIS_PER_DAY};
use crate::mailbox::{EventGroup, MailboxPage, MailboxSeq};

/// Most groups one scan script returns.
const SCAN_BATCH: usize = 256;
/// Most per-user commits in flight for one batch once the pipelined first attempt left some to
/// redo.
const MAX_IN_FLIGHT: usize = 32;
/// Group keys outlive the latest live bucket by this much, so a Redis clock ahead of the
/// injected one can not drop a group its ledger still counts as live.
const KEY_SLACK_MILLIS: i64 = MILLIS_PER_DAY;

/// Most users whose meta [`MetaCache`] keeps (a few hundred bytes each).
const CACHED_METAS: usize = 65_536;

/// The metas this store wrote last, by user (see the module docs): a hit saves the read before a
/// commit, a stale entry costs one `retry`.
pub(super) struct MetaCache(quick_cache::sync::Cache<(TenantId, UserId), Meta>);

impl Default for MetaCache {
    fn default() -> Self {
        Self(quick_cache::sync::Cache::new(CACHED_METAS))
    }
}

/// A generation to write: random, decimal, never `"0"` (a missing meta), below 2^62 so an earlier
/// release's `HINCRBY` of it stays a number.
fn fresh_gen() -> String {
    let (high, _) = uuid::Uuid::new_v4().as_u64_pair();
    ((high >> 2) | 1).to_string()
}

/// A snapshot of one user's meta.
#[derive(Clone, Debug)]
pub(super) struct Meta {
    /// The generation it was read or written at (`"0"` when the meta does not exist).
    gen: String,
    exists: bool,
    trim: Option<MailboxSeq>,
    gap: Option<MailboxSeq>,
    ledger: RetentionLedger,
}

fn corrupt_meta(keys: &UserKeys, field: &str, why: impl std::fmt::Display) -> StoreError {
    StoreError::CorruptEntry(format!("mailbox meta {} field {field}: {why}", keys.meta))
}

fn parse_seq(keys: &UserKeys, field: &str, raw: Option<Vec<u8>>) -> StoreResult<Option<MailboxSeq>> {
    let Some(raw) = raw else { return Ok(None) };
    let text = std::str::from_utf8(&raw).map_err(|e| corrupt_meta(keys, field, e))?;
    let n: u64 = text.parse().map_err(|e| corrupt_meta(keys, field, e))?;
    MailboxSeq::from_u64(n).map(Some).ok_or_else(|| corrupt_meta(keys, field, "bit 63 is set"))
}

fn meta_command(keys: &UserKeys) -> redis::Cmd {
    let mut cmd = redis::cmd("HMGET");
    cmd.arg(&keys.meta).arg("gen").arg("trim").arg("gap").arg("ledger");
    cmd
}

fn parse_meta(keys: &UserKeys, mut fields: Vec<Option<Vec<u8>>>) -> StoreResult<Meta> {
    if fields.len() != 4 {
        return Err(corrupt_meta(keys, "*", format!("HMGET answered {} fields", fields.len())));
    }
    let ledger = fields.pop().flatten();
    let gap = fields.pop().flatten();
    let trim = fields.pop().flatten();
    let gen = fields.pop().flatten();
    let (gen, exists) = match gen {
        Some(g) => {
            let g = String::from_utf8(g).map_err(|e| corrupt_meta(keys, "gen", e))?;
            if g.parse::<u64>().is_err() {
                return Err(corrupt_meta(keys, "gen", format!("{g:?} is not a number")));
            }
            (g, true)
        }
        None => ("0".to_owned(), false),
    };
    let ledger = match ledger {
        Some(bytes) => RetentionLedger::decode(&bytes)?,
        None => RetentionLedger::default(),
    };
    Ok(Meta { gen, exists, trim: parse_seq(keys, "trim", trim)?, gap: parse_seq(keys, "gap", gap)?, ledger })
}

async fn read_meta(conn: &mut RedisConnection, keys: &UserKeys) -> StoreResult<Meta> {
    let fields: Vec<Option<Vec<u8>>> =
        meta_command(keys).query_async(conn).await.map_err(|e| redis_err("reading mailbox meta", e))?;
    parse_meta(keys, fields)
}

/// What one user's commit writes.
struct Plan {
    /// The new gap, when it rose.
    gap: Option<MailboxSeq>,
    ledger: Vec<u8>,
    /// The meta once the commit applied (its generation the one the commit writes).
    after: Meta,
    /// When the latest live bucket expires (`None`: no bucket is live).
    live_until: Option<UnixMillis>,
    /// `(seq, expiry, blob)` of every live group.
    writes: Vec<(MailboxSeq, UnixMillis, Vec<u8>)>,
}

impl Plan {
    fn new(meta: &Meta, gap: Option<MailboxSeq>, ledger: RetentionLedger) -> Self {
        Self {
            gap: if gap != meta.gap { gap } else { None },
            ledger: ledger.encode(),
            live_until: ledger.items().iter().map(|i| i.expiry).max(),
            after: Meta { gen: fresh_gen(), exists: true, trim: meta.trim, gap, ledger },
            writes: Vec::new(),
        }
    }

    /// How long (ms, from `now` on the injected clock) the user's group keys must live at least:
    /// until the latest live bucket expires, plus [`KEY_SLACK_MILLIS`] for clock skew.
    fn keep_millis(&self, now: UnixMillis) -> Option<i64> {
        self.live_until.map(|until| until.0.saturating_sub(now.0).max(0).saturating_add(KEY_SLACK_MILLIS))
    }
}

/// The memory backend's `write_groups` for one user: expired buckets raise the gap, expired
/// groups raise the gap and are not written, live ones are registered in the ledger.
fn plan(meta: &Meta, groups: &[EventGroup], now: UnixMillis) -> StoreResult<Plan> {
    let mut ledger = meta.ledger.clone();
    let mut gap = meta.gap;
    if let Some(expired) = ledger.take_expired(now) {
        gap = gap.max(MailboxSeq::from_u64(expired));
    }
    let mut writes = Vec::new();
    for g in groups {
        if g.expires_at <= now {
            gap = gap.max(Some(g.seq));
        } else {
            ledger.register(g.seq.as_u64(), g.expires_at).map_err(StoreError::InvariantViolation)?;
            writes.push((g.seq, g.expires_at, encode_event_group(g)));
        }
    }
    Ok(Plan { writes, ..Plan::new(meta, gap, ledger) })
}

/// The `EVALSHA` applying `plan` if the meta is still at `gen` (`mailbox_commit.lua`).
fn commit_command(keys: &UserKeys, gen: &str, plan: &Plan, now: UnixMillis) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(COMMIT.get_hash()).arg(4).arg(&keys.meta).arg(&keys.groups).arg(&keys.seqs).arg(&keys.exp);
    cmd.arg(gen).arg(&plan.after.gen);
    cmd.arg(plan.gap.map_or(String::new(), |g| g.as_u64().to_string())).arg(&plan.ledger).arg(now.0);
    cmd.arg(plan.keep_millis(now).map_or(String::new(), |ms| ms.to_string()));
    for (seq, expiry, blob) in &plan.writes {
        cmd.arg(&seq8(*seq)[..]).arg(expiry.0).arg(blob);
    }
    cmd
}

/// A commit script's answer: `true` when applied, `false` when the meta moved (re-read and retry).
fn committed(reply: Value) -> StoreResult<bool> {
    match status(reply)?.0.as_str() {
        "ok" => Ok(true),
        "retry" => Ok(false),
        other => Err(StoreError::CorruptEntry(format!("mailbox commit answered {other:?}"))),
    }
}

/// Applies `plan` if the meta is still at `gen`; `false` when it moved (re-read and retry). A
/// script the server lost (a flush, a restart, a failover) is sent again as `EVAL` of its source.
async fn commit(
    conn: &mut RedisConnection,
    keys: &UserKeys,
    gen: &str,
    plan: &Plan,
    now: UnixMillis,
) -> StoreResult<bool> {
    let cmd = commit_command(keys, gen, plan, now);
    let mut reply = cmd.query_async::<Value>(conn).await;
    if is_noscript(&reply) {
        if let Some(eval) = eval_of(&cmd) {
            reply = eval.query_async::<Value>(conn).await;
        }
    }
    committed(reply.map_err(|e| redis_err("committing a mailbox batch", e))?)
}

/// Writes canonical `groups` (any users): every user's meta is planned first (on the meta this
/// store wrote last, else read), so a ledger overflow anywhere writes nothing; then one
/// check-and-set script per user, all in one pipeline (one per node on a cluster). A user whose
/// meta moved in between is re-read and re-planned, on its own (a concurrent writer could then
/// still make that user's ledger overflow after other users of the batch were written).
pub(super) async fn write_groups(
    conn: &mut RedisConnection,
    ns: &str,
    metas: &Arc<MetaCache>,
    groups: Vec<EventGroup>,
    now: UnixMillis,
) -> StoreResult<()> {
    let mut by_user: BTreeMap<(TenantId, UserId), Vec<EventGroup>> = BTreeMap::new();
    for g in groups {
        by_user.entry((g.tenant, g.user)).or_default().push(g);
    }
    if by_user.is_empty() {
        return Ok(());
    }
    let users: Vec<((TenantId, UserId), UserKeys, Vec<EventGroup>)> =
        by_user.into_iter().map(|((t, u), gs)| ((t, u), UserKeys::new(ns, &t, &u), gs)).collect();
    // A plan on a cached meta that fails (a ledger overflow) is made again on the stored meta: the
    // cache may be behind it.
    let mut planned: Vec<Option<(String, Plan)>> = users
        .iter()
        .map(|(user, _, gs)| metas.0.get(user).and_then(|meta| Some((meta.gen.clone(), plan(&meta, gs, now).ok()?))))
        .collect();
    let unplanned: Vec<usize> = (0..users.len()).filter(|&i| planned[i].is_none()).collect();
    if !unplanned.is_empty() {
        let reads: Vec<redis::Cmd> = unplanned.iter().map(|&i| meta_command(&users[i].1)).collect();
        let read: Vec<Vec<Option<Vec<u8>>>> =
            query_by_slot(conn, &reads).await.map_err(|e| redis_err("reading mailbox meta", e))?;
        if read.len() != reads.len() {
            return Err(StoreError::CorruptEntry(format!("{} meta replies for {} users", read.len(), reads.len())));
        }
        for (&i, fields) in unplanned.iter().zip(read) {
            let meta = parse_meta(&users[i].1, fields)?;
            planned[i] = Some((meta.gen.clone(), plan(&meta, &users[i].2, now)?));
        }
    }
    let planned: Vec<(String, Plan)> = planned.into_iter().flatten().collect();
    // Every user's commit in one pipeline (one per node on a cluster). A user whose meta moved
    // since it was read, or whose script the server lost, is committed again on its own below
    // (re-read and re-planned; the connection reloads a lost script).
    let commands: Vec<redis::Cmd> =
        users.iter().zip(&planned).map(|((_, keys, _), (gen, p))| commit_command(keys, gen, p, now)).collect();
    let (replies, _) =
        pipeline_by_slot(conn, &commands).await.map_err(|e| redis_err("committing mailbox batches", e))?;
    let mut first_err = None;
    let mut again = Vec::new();
    for (((user, keys, gs), (gen, p)), reply) in users.into_iter().zip(planned).zip(replies) {
        match reply {
            Value::ServerError(e) if e.kind() == Some(redis::ServerErrorKind::NoScript) => {
                again.push((user, keys, gs, Some((gen, p))));
            }
            Value::ServerError(e) => {
                metas.0.remove(&user);
                first_err.get_or_insert(redis_err("committing a mailbox batch", e.into()));
            }
            reply => match committed(reply) {
                Ok(true) => metas.0.insert(user, p.after),
                Ok(false) => {
                    metas.0.remove(&user);
                    again.push((user, keys, gs, None));
                }
                Err(e) => {
                    metas.0.remove(&user);
                    first_err.get_or_insert(e);
                }
            },
        }
    }
    // Several in flight on the multiplexed connection. Dropping this future aborts the commits
    // not yet sent; each one that ran is whole.
    let mut tasks = tokio::task::JoinSet::new();
    for (user, keys, gs, first) in again {
        if tasks.len() >= MAX_IN_FLIGHT {
            if let Some(done) = tasks.join_next().await {
                keep_first_error(&mut first_err, done);
            }
        }
        let (mut conn, metas) = (conn.clone(), Arc::clone(metas));
        tasks.spawn(async move {
            let after = commit_user(&mut conn, &keys, &gs, first, now).await?;
            metas.0.insert(user, after);
            Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        keep_first_error(&mut first_err, done);
    }
    first_err.map_or(Ok(()), Err)
}

fn keep_first_error(first: &mut Option<StoreError>, done: Result<StoreResult<()>, tokio::task::JoinError>) {
    let err = match done {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
        Err(join) => StoreError::Unavailable {
            message: "a mailbox commit task was cancelled".into(),
            source: Some(Box::new(join)),
        },
    };
    first.get_or_insert(err);
}

/// Commits one user's groups: the `first` plan if given (at its generation), then re-reading
/// and re-planning while the meta moves. Answers the meta the commit left.
async fn commit_user(
    conn: &mut RedisConnection,
    keys: &UserKeys,
    groups: &[EventGroup],
    first: Option<(String, Plan)>,
    now: UnixMillis,
) -> StoreResult<Meta> {
    if let Some((gen, plan)) = first {
        if commit(conn, keys, &gen, &plan, now).await? {
            return Ok(plan.after);
        }
    }
    for _ in 1..MAX_ATTEMPTS {
        let meta = read_meta(conn, keys).await?;
        let p = plan(&meta, groups, now)?;
        if commit(conn, keys, &meta.gen, &p, now).await? {
            return Ok(p.after);
        }
    }
    Err(contended(keys))
}

fn contended(keys: &UserKeys) -> StoreError {
    StoreError::Unavailable {
        message: format!("mailbox meta {} kept changing for {MAX_ATTEMPTS} attempts", keys.meta),
        source: None,
    }
}

/// `range_scan` after the argument checks (same epoch, `max_items >= 1`, `after <= up_to`).
pub(super) async fn scan(
    conn: &mut RedisConnection,
    keys: &UserKeys,
    (tenant, user): (TenantId, UserId),
    after: MailboxSeq,
    up_to: MailboxSeq,
    max_items: usize,
    now: UnixMillis,
) -> StoreResult<MailboxPage> {
    'attempt: for _ in 0..MAX_ATTEMPTS {
        let meta = read_meta(conn, keys).await?;
        if !meta.exists {
            return Ok(MailboxPage { groups: Vec::new(), covered: up_to });
        }
        let mut gap = meta.gap;
        let mut ledger = meta.ledger.clone();
        if let Some(expired) = ledger.take_expired(now) {
            // Lazy inspection: the expired buckets' highest seqs become the gap boundary.
            gap = gap.max(MailboxSeq::from_u64(expired));
            let p = Plan::new(&meta, gap, ledger);
            if !commit(conn, keys, &meta.gen, &p, now).await? {
                continue 'attempt;
            }
        }
        if let Some(boundary) = meta.trim.max(gap) {
            if after < boundary {
                return Err(StoreError::CursorExpired { earliest: boundary });
            }
        }
        let decimal = |s: Option<MailboxSeq>| s.map_or(String::new(), |s| s.as_u64().to_string());
        let (trim_text, gap_text) = (decimal(meta.trim), decimal(gap));
        let mut groups: Vec<EventGroup> = Vec::new();
        let mut items = 0usize;
        let mut cursor = after;
        loop {
            let want = (max_items - items).min(SCAN_BATCH);
            let reply: Value = SCAN
                .key(&keys.meta)
                .key(&keys.seqs)
                .key(&keys.groups)
                .arg(&trim_text)
                .arg(&gap_text)
                .arg(&seq8(cursor)[..])
                .arg(&seq8(up_to)[..])
                .arg(want)
                .invoke_async(conn)
                .await
                .map_err(|e| redis_err("reading mailbox groups", e))?;
            let (code, rest) = status(reply)?;
            match code.as_str() {
                "ok" => {}
                "retry" => continue 'attempt,
                other => return Err(StoreError::CorruptEntry(format!("mailbox scan answered {other:?}"))),
            }
            if rest.len() % 2 != 0 {
                return Err(StoreError::CorruptEntry("mailbox scan answered an odd list".into()));
            }
            let found = rest.len() / 2;
            let mut it = rest.into_iter();
            while let (Some(s), Some(blob)) = (it.next(), it.next()) {
                let seq = bulk(s)
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .and_then(|b| MailboxSeq::from_u64(u64::from_be_bytes(b)))
                    .ok_or_else(|| StoreError::CorruptEntry(format!("mailbox index {} holds a bad seq", keys.seqs)))?;
                let bytes = bulk(blob).ok_or_else(|| {
                    StoreError::CorruptEntry(format!("mailbox group at {seq} is indexed but has no blob"))
                })?;
                let group = crate::rules::accept_group(&bytes, seq, tenant, user, now)?;
                items += group.events.len();
                cursor = seq;
                groups.push(group);
                if items >= max_items {
                    return Ok(MailboxPage { groups, covered: seq });
                }
            }
            if found < want {
                return Ok(MailboxPage { groups, covered: up_to });
            }
        }
    }
    Err(contended(keys))
}

/// `truncate_before`: raises the trim monotonically and removes every group at or below it.
pub(super) async fn truncate(
    conn: &mut RedisConnection,
    keys: &UserKeys,
    through: MailboxSeq,
) -> StoreResult<MailboxSeq> {
    for _ in 0..MAX_ATTEMPTS {
        let meta = read_meta(conn, keys).await?;
        let trim = meta.trim.map_or(through, |t| t.max(through));
        if meta.exists && meta.trim == Some(trim) {
            return Ok(trim);
        }
        let reply: Value = TRIM
            .key(&keys.meta)
            .key(&keys.groups)
            .key(&keys.seqs)
            .key(&keys.exp)
            .arg(&meta.gen)
            .arg(trim.as_u64().to_string())
            .arg(&seq8(trim)[..])
            .arg(fresh_gen())
            .invoke_async(conn)
            .await
            .map_err(|e| redis_err("trimming a mailbox", e))?;
        match status(reply)?.0.as_str() {
            "ok" => return Ok(trim),
            "retry" => continue,
            other => return Err(StoreError::CorruptEntry(format!("mailbox trim answered {other:?}"))),
        }
    }
    Err(contended(keys))
}
