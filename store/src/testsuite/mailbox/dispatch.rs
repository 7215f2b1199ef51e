//! Dispatch bookkeeping in the contract suite: receipts, chunk writes and completions, lane
//! watermarks and their collection.

use super::*;
use crate::mailbox::{DispatchReceipt, ShardFence};

/// The first observation fixes the seq; a later duplicate reuses it.
pub async fn begin_dispatch_fixes_the_first_receipt(h: &dyn MailboxHarness) {
    let (store, _) = open(h).await;
    let m = manifest(fresh_tenant(), fresh_shard(), vec![user(1), user(2)]);
    let first = store.begin_dispatch(EPOCH, &m, 10).await.unwrap();
    assert_eq!(
        (first.seq, first.canonical_offset, first.observed_offset, first.duplicate),
        (MailboxSeq::from_offset(EPOCH, 10).unwrap(), 10, 10, false)
    );
    let again = store.begin_dispatch(EPOCH, &m, 10).await.unwrap();
    assert_eq!(again, first, "the same observation is idempotent");
    let dup = store.begin_dispatch(EPOCH, &m, 15).await.unwrap();
    assert_eq!((dup.seq, dup.canonical_offset, dup.observed_offset, dup.duplicate), (first.seq, 10, 15, true));
    let progress = store.dispatch_progress(m.id).await.unwrap().expect("begun");
    assert_eq!((progress.receipt, progress.max_observed_offset, &progress.manifest), (first, 15, &m));
    assert!(progress.completed.is_empty());
}

/// A different manifest under one id, or another dispatch at an observed offset, is refused.
pub async fn begin_dispatch_rejects_conflicts(h: &dyn MailboxHarness) {
    let (store, _) = open(h).await;
    let (t, shard) = (fresh_tenant(), fresh_shard());
    let m = manifest(t, shard, vec![user(1), user(2)]);
    store.begin_dispatch(EPOCH, &m, 10).await.unwrap();
    let changed = DispatchManifest::new(m.id, m.message.clone(), vec![user(1), user(3)]);
    assert_kind(
        store.begin_dispatch(EPOCH, &changed, 11).await,
        ErrorKind::DispatchConflict,
        "same id, other recipients",
    );
    let other = manifest(t, shard, vec![user(1)]);
    assert_kind(
        store.begin_dispatch(EPOCH, &other, 10).await,
        ErrorKind::DispatchConflict,
        "two dispatches at one offset",
    );
    let empty = DispatchManifest { recipients: vec![], ..manifest(t, shard, vec![user(1)]) };
    assert_kind(store.begin_dispatch(EPOCH, &empty, 12).await, ErrorKind::InvalidInput, "no recipients");
    let progress = store.dispatch_progress(m.id).await.unwrap().unwrap();
    assert_eq!(progress.max_observed_offset, 10, "refused observations left no trace");
}

/// Observations begun in one call get what one call each would give them, in order: a duplicate
/// after its first observation reuses its receipt, and a refused observation refuses only
/// itself.
pub async fn begins_in_one_call_answer_like_one_by_one(h: &dyn MailboxHarness) {
    let (store, _) = open(h).await;
    let (t, shard) = (fresh_tenant(), fresh_shard());
    let fence = ShardFence { shard, incarnation: store.shard_incarnation(shard).await.unwrap() };
    let (a, b, g) = (
        manifest(t, shard, vec![user(1)]),
        manifest(t, shard, vec![user(2), user(3)]),
        manifest(t, shard, vec![user(4)]),
    );
    let changed_b = DispatchManifest::new(b.id, b.message.clone(), vec![user(5)]);
    let other_shard = manifest(t, ShardId(shard.0.wrapping_add(1)), vec![user(6)]);
    let empty = DispatchManifest { recipients: vec![], ..manifest(t, shard, vec![user(7)]) };
    let at_a = manifest(t, shard, vec![user(8)]);
    let begins = [
        DispatchBegin { manifest: &a, observed_offset: 10 },
        DispatchBegin { manifest: &b, observed_offset: 11 },
        DispatchBegin { manifest: &a, observed_offset: 12 },
        DispatchBegin { manifest: &changed_b, observed_offset: 13 },
        DispatchBegin { manifest: &other_shard, observed_offset: 14 },
        DispatchBegin { manifest: &empty, observed_offset: 15 },
        DispatchBegin { manifest: &at_a, observed_offset: 10 },
        DispatchBegin { manifest: &g, observed_offset: 16 },
    ];
    let mut answers = store.begin_dispatches_fenced(&fence, EPOCH, &begins).await.unwrap().into_iter();
    let mut next = || answers.next().expect("one answer per observation");
    let first_a = next().unwrap();
    assert_eq!((first_a.canonical_offset, first_a.duplicate), (10, false));
    assert_eq!(first_a.seq, MailboxSeq::from_offset(EPOCH, 10).unwrap());
    let first_b = next().unwrap();
    assert_eq!((first_b.canonical_offset, first_b.duplicate), (11, false));
    let dup_a = next().unwrap();
    assert_eq!(
        (dup_a.seq, dup_a.canonical_offset, dup_a.observed_offset, dup_a.duplicate),
        (first_a.seq, 10, 12, true)
    );
    assert_kind(next(), ErrorKind::DispatchConflict, "same id, other recipients");
    assert_kind(next(), ErrorKind::InvalidInput, "another shard than the fence's");
    assert_kind(next(), ErrorKind::InvalidInput, "no recipients");
    assert_kind(next(), ErrorKind::DispatchConflict, "two dispatches at one offset");
    let first_g = next().unwrap();
    assert_eq!((first_g.canonical_offset, first_g.duplicate), (16, false));
    assert!(answers.next().is_none(), "no more answers than observations");

    let a_progress = store.dispatch_progress(a.id).await.unwrap().expect("a begun");
    assert_eq!((a_progress.receipt, a_progress.max_observed_offset), (first_a, 12));
    let b_progress = store.dispatch_progress(b.id).await.unwrap().expect("b begun");
    assert_eq!((b_progress.receipt, b_progress.max_observed_offset, &b_progress.manifest), (first_b, 11, &b));
    for refused in [&other_shard, &empty, &at_a] {
        assert_eq!(store.dispatch_progress(refused.id).await.unwrap(), None, "a refused observation wrote nothing");
    }
    let again = store.begin_dispatches_fenced(&fence, EPOCH, &begins[..3]).await.unwrap();
    let again: Vec<DispatchReceipt> = again.into_iter().map(Result::unwrap).collect();
    assert_eq!(again, vec![first_a, first_b, dup_a], "beginning them again is harmless");
    assert!(store.begin_dispatches_fenced(&fence, EPOCH, &[]).await.unwrap().is_empty(), "nothing to begin");
}

/// Chunks write one entry per recipient at the canonical seq; completion is separate and
/// durable.
pub async fn chunks_write_entries_and_record_completion(h: &dyn MailboxHarness) {
    let (store, _) = open(h).await;
    let t = fresh_tenant();
    let recipients: Vec<UserId> = (1..=40).map(user).collect();
    let m = manifest(t, fresh_shard(), recipients.clone());
    let receipt = store.begin_dispatch(EPOCH, &m, 3).await.unwrap();
    let counts = m.chunk_counts();
    let busy = LaneId::all().find(|l| counts[l.get() as usize] > 0).unwrap();
    let idle = LaneId::all().find(|l| counts[l.get() as usize] == 0).unwrap();
    let chunk = ChunkId { lane: busy, index: 0 };
    assert!(!store.chunk_completed(m.id, chunk).await.unwrap());
    let written = store.append_chunk(&receipt, &m, chunk).await.unwrap();
    assert_eq!(written, m.lane_recipients(busy).len());
    assert!(!store.chunk_completed(m.id, chunk).await.unwrap(), "writing is not completing");
    store.mark_chunk_completed(m.id, chunk).await.unwrap();
    store.mark_chunk_completed(m.id, chunk).await.unwrap();
    assert!(store.chunk_completed(m.id, chunk).await.unwrap());
    assert_kind(
        store.append_chunk(&receipt, &m, ChunkId { lane: idle, index: 0 }).await,
        ErrorKind::InvalidInput,
        "chunk of an empty lane",
    );
    assert_kind(
        store.mark_chunk_completed(m.id, ChunkId { lane: busy, index: 9 }).await,
        ErrorKind::InvalidInput,
        "undeclared chunk",
    );
    let forged = DispatchManifest::new(m.id, m.message.clone(), vec![user(1)]);
    assert_kind(
        store.append_chunk(&receipt, &forged, chunk).await,
        ErrorKind::DispatchConflict,
        "manifest differs from the begun one",
    );
    for l in LaneId::all() {
        complete_lane(store.as_ref(), &receipt, &m, l).await;
    }
    let progress = store.dispatch_progress(m.id).await.unwrap().unwrap();
    assert!(progress.is_complete());
    for u in recipients {
        let page = store.range_scan(t, u, origin(), top(), 10).await.unwrap();
        assert_eq!(page.groups.len(), 1, "exactly one entry for {u}");
        assert_eq!(page.groups[0].seq, receipt.seq);
        assert_eq!(page.groups[0].events[0].message, m.message);
    }
}

/// Many chunks of several dispatches (two shards) written and marked in one call each: every
/// recipient gets exactly the entry of its dispatch, every chunk is complete, a replay of the
/// batch changes nothing; a batch that starts with a forged manifest, a stale receipt or an
/// undeclared chunk is refused before anything of it is written; the same chunk under the first
/// receipt and a duplicate observation's is written once.
pub async fn chunk_batches_write_and_complete_like_single_chunks(h: &dyn MailboxHarness) {
    let (store, _) = open(h).await;
    let t = fresh_tenant();
    let (shard_a, shard_b) = (fresh_shard(), fresh_shard());
    let shared: Vec<UserId> = users_in_lane(t, lane(5), 3);
    let mut dispatches = Vec::new();
    for (n, shard) in [shard_a, shard_a, shard_b].into_iter().enumerate() {
        let mut recipients: Vec<UserId> = (0..30).map(|i| user(1000 * (n as u32 + 1) + i)).collect();
        recipients.extend(&shared);
        let m = manifest(t, shard, recipients);
        let receipt = store.begin_dispatch(EPOCH, &m, 20 + n as u64).await.unwrap();
        dispatches.push((m, receipt));
    }
    let mut writes = Vec::new();
    for (m, receipt) in &dispatches {
        for l in LaneId::all() {
            for index in 0..m.chunk_counts()[l.get() as usize] {
                writes.push(crate::ChunkWrite { receipt, manifest: m, chunk: ChunkId { lane: l, index } });
            }
        }
    }
    let marks: Vec<(DispatchId, ChunkId)> = writes.iter().map(|w| (w.receipt.id, w.chunk)).collect();

    let (m0, r0) = &dispatches[0];
    let forged = DispatchManifest::new(m0.id, m0.message.clone(), vec![user(1)]);
    let mut bad = vec![crate::ChunkWrite { receipt: r0, manifest: &forged, chunk: writes[0].chunk }];
    bad.extend(&writes);
    assert_kind(store.append_chunks(&bad).await, ErrorKind::DispatchConflict, "a forged manifest in the batch");
    let stale = crate::mailbox::DispatchReceipt { seq: seq(4444), ..*r0 };
    let mut bad = vec![crate::ChunkWrite { receipt: &stale, manifest: m0, chunk: writes[0].chunk }];
    bad.extend(&writes);
    assert_kind(store.append_chunks(&bad).await, ErrorKind::Conflict, "a receipt that is not the canonical one");
    let idle = LaneId::all().find(|l| m0.chunk_counts()[l.get() as usize] == 0).unwrap();
    let mut bad = vec![crate::ChunkWrite { receipt: r0, manifest: m0, chunk: ChunkId { lane: idle, index: 0 } }];
    bad.extend(&writes);
    assert_kind(store.append_chunks(&bad).await, ErrorKind::InvalidInput, "a chunk of an empty lane");
    for u in &shared {
        let page = store.range_scan(t, *u, origin(), top(), 10).await.unwrap();
        assert!(page.groups.is_empty(), "a refused batch wrote nothing for {u}");
    }
    let repeated = [writes[0], crate::ChunkWrite { receipt: r0, manifest: &forged, chunk: writes[0].chunk }];
    assert_kind(
        store.append_chunks(&repeated).await,
        ErrorKind::DispatchConflict,
        "a chunk repeated with a forged manifest",
    );
    assert!(store.append_chunks(&[writes[0], writes[0]]).await.is_ok(), "an exact repeat is harmless");
    let again = store.begin_dispatch(EPOCH, m0, 90).await.unwrap();
    assert!(again.duplicate && again.seq == r0.seq, "a later observation reuses the first receipt's seq");
    let observed_twice = [writes[0], crate::ChunkWrite { receipt: &again, ..writes[0] }];
    assert!(
        store.append_chunks(&observed_twice).await.is_ok(),
        "one chunk under the first observation's receipt and a duplicate's is one write"
    );

    let entries: usize = dispatches.iter().map(|(m, _)| m.recipients.len()).sum();
    assert_eq!(store.append_chunks(&writes).await.unwrap(), entries);
    assert_eq!(store.append_chunks(&writes).await.unwrap(), entries, "a replayed batch writes the same entries");
    for (dispatch, chunk) in &marks {
        assert!(!store.chunk_completed(*dispatch, *chunk).await.unwrap(), "writing is not completing");
    }
    let mut undeclared = vec![(m0.id, ChunkId { lane: idle, index: 0 })];
    undeclared.extend(&marks);
    assert_kind(store.mark_chunks_completed(&undeclared).await, ErrorKind::InvalidInput, "an undeclared chunk");
    for (dispatch, chunk) in &marks {
        assert!(!store.chunk_completed(*dispatch, *chunk).await.unwrap(), "a refused mark marked nothing");
    }
    store.mark_chunks_completed(&marks).await.unwrap();
    store.mark_chunks_completed(&marks).await.unwrap();
    for (m, receipt) in &dispatches {
        let progress = store.dispatch_progress(m.id).await.unwrap().unwrap();
        assert!(progress.is_complete(), "every chunk of {:?} complete", m.id);
        for u in &m.recipients {
            let page = store.range_scan(t, *u, origin(), top(), 10).await.unwrap();
            let here: Vec<_> = page.groups.iter().filter(|g| g.seq == receipt.seq).collect();
            assert_eq!(here.len(), 1, "one entry of {:?} for {u}", m.id);
            assert_eq!(here[0].events.len(), 1);
            assert_eq!(here[0].events[0].message, m.message);
        }
    }
    for u in &shared {
        let page = store.range_scan(t, *u, origin(), top(), 10).await.unwrap();
        let want: Vec<MailboxSeq> = {
            let mut seqs: Vec<MailboxSeq> = dispatches.iter().map(|(_, r)| r.seq).collect();
            seqs.sort();
            seqs
        };
        assert_eq!(page.groups.iter().map(|g| g.seq).collect::<Vec<_>>(), want, "{u} has one entry per dispatch");
    }
}

/// A lane's watermark stops before the first incomplete dispatch and never moves back.
pub async fn watermark_never_passes_incomplete_work_or_moves_back(h: &dyn MailboxHarness) {
    let (store, _) = open(h).await;
    let (t, shard) = (fresh_tenant(), fresh_shard());
    let (l, other) = (lane(5), lane(6));
    let members = users_in_lane(t, l, 2);
    let a = manifest(t, shard, vec![members[0]]);
    let b = manifest(t, shard, vec![members[1]]);
    let ra = store.begin_dispatch(EPOCH, &a, 1).await.unwrap();
    let rb = store.begin_dispatch(EPOCH, &b, 2).await.unwrap();
    assert_eq!(store.lane_watermark(shard, l).await.unwrap().through, None);
    complete_lane(store.as_ref(), &rb, &b, l).await;
    assert_kind(store.advance_watermark(shard, l, 2).await, ErrorKind::Conflict, "offset 1 incomplete");
    assert_eq!(store.lane_watermark(shard, l).await.unwrap().through, None);
    assert_eq!(store.advance_watermark(shard, other, 2).await.unwrap().through, Some(2), "lanes without work pass");
    complete_lane(store.as_ref(), &ra, &a, l).await;
    assert_kind(store.advance_watermark(shard, l, 4).await, ErrorKind::InvalidInput, "nothing observed at 4");
    assert_eq!(store.advance_watermark(shard, l, 1).await.unwrap().through, Some(1));
    assert_eq!(store.advance_watermark(shard, l, 2).await.unwrap().through, Some(2));
    assert_eq!(store.advance_watermark(shard, l, 1).await.unwrap().through, Some(2), "never backwards");
    assert_eq!(store.lane_watermark(shard, l).await.unwrap().through, Some(2));
}

/// Several lanes advanced in one call answer, lane by lane, what `advance_watermark` would:
/// complete lanes move, an incomplete one is `Conflict` and stays, a target nothing was
/// observed at is `InvalidInput`, a target below the watermark changes nothing.
pub async fn lanes_advanced_together_answer_like_one_by_one(h: &dyn MailboxHarness) {
    let (store, _) = open(h).await;
    let (t, shard) = (fresh_tenant(), fresh_shard());
    let (done, held, idle, ahead) = (lane(1), lane(2), lane(3), lane(4));
    let a = manifest(t, shard, vec![users_in_lane(t, done, 1)[0], users_in_lane(t, held, 1)[0]]);
    let b = manifest(t, shard, vec![users_in_lane(t, done, 2)[1], users_in_lane(t, ahead, 1)[0]]);
    let ra = store.begin_dispatch(EPOCH, &a, 10).await.unwrap();
    let rb = store.begin_dispatch(EPOCH, &b, 11).await.unwrap();
    complete_lane(store.as_ref(), &ra, &a, done).await;
    complete_lane(store.as_ref(), &rb, &b, done).await;
    complete_lane(store.as_ref(), &rb, &b, ahead).await;
    assert_eq!(store.advance_watermark(shard, ahead, 11).await.unwrap().through, Some(11));
    let results =
        store.advance_watermarks(shard, &[(done, 11), (held, 11), (idle, 10), (ahead, 10), (lane(5), 12)]).await;
    assert_eq!(results.len(), 5, "one result per target");
    let mut results = results.into_iter();
    assert_eq!(results.next().unwrap().unwrap().through, Some(11), "a complete lane moves");
    assert_kind(results.next().unwrap(), ErrorKind::Conflict, "lane with offset 10 incomplete");
    assert_eq!(results.next().unwrap().unwrap().through, Some(10), "a lane without work moves");
    assert_eq!(results.next().unwrap().unwrap().through, Some(11), "never backwards");
    assert_kind(results.next().unwrap(), ErrorKind::InvalidInput, "nothing observed at 12");
    assert_eq!(store.lane_watermark(shard, done).await.unwrap().through, Some(11));
    assert_eq!(store.lane_watermark(shard, held).await.unwrap().through, None);
    assert_eq!(store.lane_watermark(shard, idle).await.unwrap().through, Some(10));
    assert_eq!(store.lane_watermark(shard, lane(5)).await.unwrap().through, None);
    complete_lane(store.as_ref(), &ra, &a, held).await;
    let results = store.advance_watermarks(shard, &[(held, 11), (idle, 11)]).await;
    let moved: Vec<Option<u64>> = results.into_iter().map(|r| r.unwrap().through).collect();
    assert_eq!(moved, vec![Some(11), Some(11)]);
}

/// A duplicate's later offset is a source like any other: the watermark passes it only when the
/// canonical dispatch's lane work is complete.
pub async fn duplicate_observations_hold_the_watermark_until_complete(h: &dyn MailboxHarness) {
    let (store, _) = open(h).await;
    let (t, shard, l) = (fresh_tenant(), fresh_shard(), lane(9));
    let members = users_in_lane(t, l, 2);
    let a = manifest(t, shard, vec![members[0]]);
    let b = manifest(t, shard, vec![members[1]]);
    let ra = store.begin_dispatch(EPOCH, &a, 1).await.unwrap();
    let rb = store.begin_dispatch(EPOCH, &b, 2).await.unwrap();
    store.begin_dispatch(EPOCH, &a, 3).await.unwrap();
    complete_lane(store.as_ref(), &rb, &b, l).await;
    assert_kind(store.advance_watermark(shard, l, 3).await, ErrorKind::Conflict, "dispatch a incomplete");
    complete_lane(store.as_ref(), &ra, &a, l).await;
    assert_eq!(store.advance_watermark(shard, l, 3).await.unwrap().through, Some(3));
    let page = store.range_scan(t, members[0], origin(), top(), 10).await.unwrap();
    assert_eq!(page.groups.iter().map(|g| g.seq).collect::<Vec<_>>(), vec![ra.seq], "the duplicate added no entry");
}

/// Only dispatches that every lane's watermark passed, and that were not seen recently, go.
pub async fn gc_collects_only_dispatches_every_lane_passed(h: &dyn MailboxHarness) {
    let (store, clock) = open(h).await;
    let (t, shard) = (fresh_tenant(), fresh_shard());
    let m = manifest(t, shard, (1..=10).map(user).collect());
    let r = store.begin_dispatch(EPOCH, &m, 1).await.unwrap();
    for l in LaneId::all() {
        complete_lane(store.as_ref(), &r, &m, l).await;
    }
    clock.advance(1000);
    let later = crate::clock::Clock::now(clock.as_ref()).0 + 1;
    assert_eq!(store.gc_completed_dispatches(shard, later, 100).await.unwrap(), 0, "watermarks have not passed it");
    for l in LaneId::all() {
        store.advance_watermark(shard, l, 1).await.unwrap();
    }
    assert_eq!(store.gc_completed_dispatches(shard, T0.0 - 1, 100).await.unwrap(), 0, "seen after the cutoff");
    assert_eq!(store.gc_completed_dispatches(shard, later, 100).await.unwrap(), 1);
    assert_eq!(store.dispatch_progress(m.id).await.unwrap(), None);
}

/// Seed 000's source-hole gate on any backend (the contract suite runs it without a fault).
pub async fn a_source_hole_holds_the_lanes_it_touches_until_filled(h: &dyn MailboxHarness) {
    let (store, _) = open(h).await;
    source_hole_holds_lanes_until_filled(store.as_ref(), async {}).await;
}

/// What [`source_hole_holds_lanes_until_filled`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceHoleFigures {
    /// Lanes the hole held below its offset while the sources after it were complete.
    pub held: usize,
    /// Lanes that went past the hole (it had no unfinished work in them).
    pub passed: usize,
}

/// Seed 000's source-hole gate: dispatches observed at offsets 10, 11 and 12 of one shard; the
/// ones at 10 and 12 finish all their lanes, the one at 11 only one of three (a hole in the
/// shard's completed sources). Advancing all 64 lanes to 12 leaves the two lanes with unfinished
/// work at 11 below it (`Conflict`), however complete the source after it is, and takes every
/// other lane to 12. Once the hole is filled the held lanes reach 12 too, and every recipient
/// reads all three entries. `during` runs once the hole is made, before any lane advances: the
/// three-node gate kills a Cassandra node there.
pub async fn source_hole_holds_lanes_until_filled(
    store: &dyn MailboxStore,
    during: impl std::future::Future<Output = ()>,
) -> SourceHoleFigures {
    let (t, shard) = (fresh_tenant(), fresh_shard());
    let (done, held) = ([lane(1), lane(4)], [lane(2), lane(3)]);
    let in_lane = |l: LaneId| users_in_lane(t, l, 1)[0];
    let everyone: Vec<UserId> = [done[0], held[0], held[1], done[1]].into_iter().map(in_lane).collect();
    let before = manifest(t, shard, everyone.clone());
    let hole = manifest(t, shard, vec![in_lane(held[0]), in_lane(held[1]), in_lane(done[1])]);
    let after = manifest(t, shard, everyone.clone());
    let receipts = [
        store.begin_dispatch(EPOCH, &before, 10).await.expect("begin at 10"),
        store.begin_dispatch(EPOCH, &hole, 11).await.expect("begin at 11"),
        store.begin_dispatch(EPOCH, &after, 12).await.expect("begin at 12"),
    ];
    for (receipt, m) in [(&receipts[0], &before), (&receipts[2], &after)] {
        for l in LaneId::all() {
            complete_lane(store, receipt, m, l).await;
        }
    }
    complete_lane(store, &receipts[1], &hole, done[1]).await;
    during.await;

    let targets: Vec<(LaneId, u64)> = LaneId::all().map(|l| (l, 12)).collect();
    let results = store.advance_watermarks(shard, &targets).await;
    assert_eq!(results.len(), targets.len(), "one result per lane");
    let mut figures = SourceHoleFigures { held: 0, passed: 0 };
    for ((l, _), result) in targets.iter().zip(results) {
        if held.contains(l) {
            assert_kind(result, ErrorKind::Conflict, "a lane with unfinished work at offset 11");
            let through = store.lane_watermark(shard, *l).await.expect("read a held lane").through;
            assert!(through.is_none_or(|w| w < 11), "lane {} passed the hole: {through:?}", l.get());
            figures.held += 1;
        } else {
            assert_eq!(result.expect("a lane without unfinished work advances").through, Some(12));
            figures.passed += 1;
        }
    }
    for l in held {
        complete_lane(store, &receipts[1], &hole, l).await;
    }
    let results = store.advance_watermarks(shard, &held.map(|l| (l, 12))).await;
    let moved: Vec<Option<u64>> =
        results.into_iter().map(|r| r.expect("the filled hole lets lanes pass").through).collect();
    assert_eq!(moved, vec![Some(12), Some(12)]);
    for l in LaneId::all() {
        assert_eq!(store.lane_watermark(shard, l).await.expect("read a lane").through, Some(12));
    }
    for (i, u) in everyone.iter().enumerate() {
        let page = store.range_scan(t, *u, origin(), top(), 10).await.expect("range_scan");
        let mut want = vec![receipts[0].seq, receipts[2].seq];
        if i > 0 {
            want.insert(1, receipts[1].seq);
        }
        assert_eq!(page.groups.iter().map(|g| g.seq).collect::<Vec<_>>(), want, "entries of recipient {i}");
    }
    figures
}
