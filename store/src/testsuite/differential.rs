//! Differential testing of a `MailboxStore` against the memory reference: the same random
//! operations on both stores, on one manual clock, must give the same answers (values, or error
//! kinds and `CursorExpired` boundaries). A backend opens its store with [`retention()`] and the
//! clock from [`clock()`], runs [`compare_with_memory`] over a few seeds, then checks with
//! [`assert_every_path_reached`] that the runs exercised every outcome.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use super::fixtures::{fresh_tenant, user, T0};
use crate::clock::ManualClock;
use crate::ids::{ConversationId, ConversationSeq, EventId, MessageId, TenantId, UnixMillis, MILLIS_PER_DAY};
use crate::mailbox::{
    end_of_day, ChunkId, DispatchId, DispatchManifest, DispatchReceipt, LaneId, MailboxEntry, MailboxEvent,
    MailboxRetention, MailboxSeq, MessageRef, ShardEpoch, ShardId,
};
use crate::memory::MemoryMailboxStore;
use crate::message::MessageKind;
use crate::{MailboxStore, StoreError, StoreResult};

/// How often each `operation:outcome` was seen.
pub type Paths = BTreeMap<String, usize>;

const EPOCH: ShardEpoch = ShardEpoch(1);

/// The retention both stores run with (short, so runs cross expiries).
pub fn retention() -> MailboxRetention {
    MailboxRetention::days(3).expect("3 days is legal")
}

/// The clock both stores share, at the fixtures' start time.
pub fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(T0))
}

/// Every outcome a few hundred random steps reach; a run that misses one tested less than it
/// claims.
pub const EXPECTED_PATHS: &[&str] = &[
    "append_batch:ok",
    "append_batch:invalid_input",
    "append_batch:invariant_violation",
    "range_scan:ok",
    "range_scan:cursor_expired",
    "range_scan:invalid_input",
    "truncate_before:ok",
    "begin_dispatch:ok",
    "begin_dispatch:dispatch_conflict",
    "append_chunk:ok",
    "append_chunk:invalid_input",
    "append_chunk:conflict",
    "mark_chunk_completed:ok",
    "mark_chunk_completed:invalid_input",
    "advance_watermark:ok",
    "advance_watermark:conflict",
    "advance_watermark:invalid_input",
    "gc_completed_dispatches:ok",
    "gc_completed_dispatches:collected",
    "begin_dispatch:after_gc",
    "range_scan:groups",
    "final scan:ok",
];

/// Fails, listing what was reached, when `paths` misses one of [`EXPECTED_PATHS`].
#[track_caller]
pub fn assert_every_path_reached(paths: &Paths) {
    for path in EXPECTED_PATHS {
        assert!(paths.contains_key(*path), "the random runs never reached {path}: {paths:#?}");
    }
}

fn note(paths: &mut Paths, path: &str) {
    *paths.entry(path.to_owned()).or_default() += 1;
}

/// A small deterministic generator (SplitMix64). Kept rather than a `rand` generator: the
/// every-path-reached check of the Scylla differential run is tuned to this stream (with
/// ChaCha8 its ten runs never reached `advance_watermark:conflict`).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn seq(p: u64) -> MailboxSeq {
    MailboxSeq::new(EPOCH, p).unwrap()
}

/// Same values, or the same error kind (and the same earliest cursor).
#[track_caller]
fn same<T: PartialEq + std::fmt::Debug>(
    paths: &mut Paths,
    step: usize,
    what: &str,
    mem: StoreResult<T>,
    red: StoreResult<T>,
) {
    let outcome = match &mem {
        Ok(_) => "ok",
        Err(e) => e.kind().as_str(),
    };
    note(paths, &format!("{what}:{outcome}"));
    match (&mem, &red) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "step {step} {what}: values differ"),
        (Err(StoreError::CursorExpired { earliest: a }), Err(StoreError::CursorExpired { earliest: b })) => {
            assert_eq!(a, b, "step {step} {what}: earliest cursors differ")
        }
        (Err(a), Err(b)) => {
            assert_eq!(a.kind(), b.kind(), "step {step} {what}: memory {a} vs the store under test {b}")
        }
        _ => panic!("step {step} {what}: memory {mem:?} vs the store under test {red:?}"),
    }
}

fn message(tenant: TenantId, n: u8, created_at: UnixMillis) -> MessageRef {
    MessageRef {
        tenant,
        conversation: ConversationId([5; 16]),
        seq: ConversationSeq(u64::from(n) + 1),
        message_id: MessageId([n + 1; 16]),
        sender: user(999),
        kind: MessageKind::Normal,
        created_at,
    }
}

pub async fn compare_with_memory(
    store: &dyn MailboxStore,
    clock: Arc<ManualClock>,
    seed: u64,
    steps: usize,
    shard: ShardId,
    paths: &mut Paths,
) {
    let memory = MemoryMailboxStore::new(retention(), clock.clone());
    let (mem, red): (&dyn MailboxStore, &dyn MailboxStore) = (&memory, store);
    let tenant = fresh_tenant();
    let mut rng = Rng(seed);
    let manifests: Vec<DispatchManifest> = (0..4u8)
        .map(|n| {
            let m = message(tenant, n, T0.plus_millis(i64::from(n) * MILLIS_PER_DAY / 2));
            let recipients = (0..3).map(|_| user(1 + (rng.below(6) as u32))).collect();
            DispatchManifest::new(DispatchId { message_id: m.message_id, shard }, m, recipients)
        })
        .collect();
    let mut receipts: Vec<DispatchReceipt> = Vec::new();
    // Dispatches GC collected: observing one again must start afresh on both stores.
    let mut collected: HashSet<DispatchId> = HashSet::new();
    let now = |c: &ManualClock| crate::clock::Clock::now(c);
    for step in 0..steps {
        match rng.below(100) {
            0..=24 => {
                let n = 1 + rng.below(4);
                let mut batch = Vec::new();
                for _ in 0..n {
                    let days = rng.below(8) as i64;
                    let mut expires_at = end_of_day(now(&clock).plus_millis((days - 2) * MILLIS_PER_DAY));
                    if rng.below(40) == 0 {
                        expires_at = expires_at.plus_millis(1);
                    }
                    if rng.below(30) == 0 {
                        expires_at = end_of_day(now(&clock).plus_millis(rng.below(45) as i64 * MILLIS_PER_DAY));
                    }
                    let s = seq(1 + rng.below(40));
                    let ordinal = rng.below(3) as u16;
                    let mut event_id = [0u8; 16];
                    event_id[0] = rng.below(2) as u8;
                    event_id[8..].copy_from_slice(&s.as_u64().to_be_bytes());
                    batch.push(MailboxEntry {
                        tenant,
                        user: user(1 + rng.below(6) as u32),
                        seq: s,
                        expires_at,
                        event: MailboxEvent { ordinal, event_id: EventId(event_id), message: message(tenant, 9, T0) },
                    });
                }
                if rng.below(25) == 0 {
                    // More live days than the ledger holds: refused whole.
                    let (u, base) = (user(1 + rng.below(6) as u32), batch[0].clone());
                    batch.extend((1..=33).map(|d| MailboxEntry {
                        user: u,
                        seq: seq(d),
                        expires_at: end_of_day(now(&clock).plus_millis(d as i64 * MILLIS_PER_DAY)),
                        ..base.clone()
                    }));
                }
                same(paths, step, "append_batch", mem.append_batch(&batch).await, red.append_batch(&batch).await);
            }
            25..=44 => {
                let u = user(1 + rng.below(6) as u32);
                let after = seq(rng.below(45));
                let up_to = seq(rng.below(45));
                let max = rng.below(6) as usize;
                let a = mem.range_scan(tenant, u, after, up_to, max).await;
                if a.as_ref().is_ok_and(|p| p.groups.len() > 1) {
                    note(paths, "range_scan:groups");
                }
                same(paths, step, "range_scan", a, red.range_scan(tenant, u, after, up_to, max).await);
            }
            45..=49 => {
                let u = user(1 + rng.below(6) as u32);
                let through = seq(rng.below(30));
                same(
                    paths,
                    step,
                    "truncate_before",
                    mem.truncate_before(tenant, u, through).await,
                    red.truncate_before(tenant, u, through).await,
                );
            }
            50..=57 => clock.advance(rng.below(MILLIS_PER_DAY as u64) as i64),
            58..=67 => {
                let m = &manifests[rng.below(manifests.len() as u64) as usize];
                let offset = rng.below(30);
                let (a, b) = (mem.begin_dispatch(EPOCH, m, offset).await, red.begin_dispatch(EPOCH, m, offset).await);
                if let Ok(r) = &a {
                    receipts.push(*r);
                    if collected.remove(&m.id) {
                        note(paths, "begin_dispatch:after_gc");
                    }
                }
                same(paths, step, "begin_dispatch", a, b);
            }
            68..=77 => {
                let Some(r) = receipts.get(rng.below(receipts.len().max(1) as u64) as usize).copied() else {
                    continue;
                };
                let m = manifests.iter().find(|m| m.id == r.id).unwrap();
                let lane = if rng.below(4) == 0 {
                    LaneId::new(rng.below(64) as u8).unwrap()
                } else {
                    let u = m.recipients[rng.below(m.recipients.len() as u64) as usize];
                    crate::mailbox::lane_of(&tenant, &u)
                };
                let chunk = ChunkId { lane, index: rng.below(2) as u32 };
                let mut receipt = r;
                if rng.below(10) == 0 {
                    receipt.seq = seq(44);
                }
                if rng.below(2) == 0 {
                    same(
                        paths,
                        step,
                        "append_chunk",
                        mem.append_chunk(&receipt, m, chunk).await,
                        red.append_chunk(&receipt, m, chunk).await,
                    );
                } else {
                    same(
                        paths,
                        step,
                        "mark_chunk_completed",
                        mem.mark_chunk_completed(m.id, chunk).await,
                        red.mark_chunk_completed(m.id, chunk).await,
                    );
                }
                same(
                    paths,
                    step,
                    "chunk_completed",
                    mem.chunk_completed(m.id, chunk).await,
                    red.chunk_completed(m.id, chunk).await,
                );
            }
            78..=89 => {
                let lane = LaneId::new(rng.below(64) as u8).unwrap();
                let through = rng.below(30);
                same(
                    paths,
                    step,
                    "advance_watermark",
                    mem.advance_watermark(shard, lane, through).await,
                    red.advance_watermark(shard, lane, through).await,
                );
                same(
                    paths,
                    step,
                    "lane_watermark",
                    mem.lane_watermark(shard, lane).await,
                    red.lane_watermark(shard, lane).await,
                );
            }
            90..=93 => {
                let cutoff = now(&clock).0 - rng.below(MILLIS_PER_DAY as u64) as i64;
                let mut cutoff = cutoff;
                if rng.below(3) == 0 {
                    // Finish every begun dispatch, so whole lanes can pass and GC collect.
                    cutoff = now(&clock).0 + 1;
                    for m in &manifests {
                        let Some(r) = receipts.iter().find(|r| r.id == m.id).copied() else { continue };
                        for lane in LaneId::all() {
                            for index in 0..m.chunk_counts()[lane.get() as usize] {
                                let chunk = ChunkId { lane, index };
                                let (a, b) =
                                    (mem.append_chunk(&r, m, chunk).await, red.append_chunk(&r, m, chunk).await);
                                same(paths, step, "append_chunk", a, b);
                                let (a, b) = (
                                    mem.mark_chunk_completed(m.id, chunk).await,
                                    red.mark_chunk_completed(m.id, chunk).await,
                                );
                                same(paths, step, "mark_chunk_completed", a, b);
                            }
                        }
                    }
                }
                if rng.below(2) == 0 {
                    let through = rng.below(30);
                    for lane in LaneId::all() {
                        same(
                            paths,
                            step,
                            "advance_watermark",
                            mem.advance_watermark(shard, lane, through).await,
                            red.advance_watermark(shard, lane, through).await,
                        );
                    }
                }
                let a = mem.gc_completed_dispatches(shard, cutoff, 100).await;
                if a.as_ref().is_ok_and(|n| *n > 0) {
                    note(paths, "gc_completed_dispatches:collected");
                }
                same(paths, step, "gc_completed_dispatches", a, red.gc_completed_dispatches(shard, cutoff, 100).await);
                for m in &manifests {
                    let begun = receipts.iter().any(|r| r.id == m.id);
                    if begun && mem.dispatch_progress(m.id).await.unwrap().is_none() {
                        collected.insert(m.id);
                    }
                }
            }
            _ => {
                let m = &manifests[rng.below(manifests.len() as u64) as usize];
                same(
                    paths,
                    step,
                    "dispatch_progress",
                    mem.dispatch_progress(m.id).await,
                    red.dispatch_progress(m.id).await,
                );
            }
        }
    }
    for (i, m) in manifests.iter().enumerate() {
        same(paths, steps + i, "final progress", mem.dispatch_progress(m.id).await, red.dispatch_progress(m.id).await);
    }
    for n in 1..=6 {
        let mut after = seq(0);
        loop {
            let a = mem.range_scan(tenant, user(n), after, seq(50), 1000).await;
            let b = red.range_scan(tenant, user(n), after, seq(50), 1000).await;
            let earliest = match &a {
                Err(StoreError::CursorExpired { earliest }) => Some(*earliest),
                _ => None,
            };
            same(paths, steps, "final scan", a, b);
            match earliest {
                Some(e) if e > after => after = e,
                _ => break,
            }
        }
    }
}
