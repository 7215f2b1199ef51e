//! The dispatcher binary is killed with SIGKILL in the middle of a fan-out and restarted: every
//! recipient ends with exactly one entry per dispatch, at the seq of its first offset (nothing
//! lost, doubled or renumbered), and while both runs work, every sampled lane watermark is
//! backed by durable entries of every record at or below it (a watermark never passes
//! unfinished work).

use crate::support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use qim_store::ids::{ConversationId, TenantId, UserId};
use qim_store::mailbox::{lane_of, shard_of, DispatchId, DispatchManifest, LaneId, MailboxSeq, ShardId};
use qim_store::MailboxStore;
use support::{
    free_port, fresh, mailbox_of, mailboxes_of, message, wait_for, wait_healthy, wait_while_progressing, watermarks,
    Fixture, Kind, EPOCH, SHARDS,
};

/// One produced dispatch: where it landed and what it carries.
struct Sent {
    offset: u64,
    manifest: DispatchManifest,
}

/// Per shard, the records in offset order.
type Log = HashMap<ShardId, Vec<Sent>>;

fn users_of(tenant: TenantId, shard: ShardId, n: usize) -> Vec<UserId> {
    std::iter::repeat_with(|| fresh(UserId)).filter(|u| shard_of(&tenant, u, SHARDS) == shard).take(n).collect()
}

async fn produce(f: &Fixture, tenant: TenantId, per_shard: usize, recipients: usize) -> Log {
    let mut log = Log::new();
    for shard in (0..SHARDS).map(ShardId) {
        for _ in 0..per_shard {
            let users = users_of(tenant, shard, recipients);
            let record = message(tenant, fresh(ConversationId), 1, users[0]);
            let id = DispatchId { message_id: record.message_id, shard };
            let m = DispatchManifest::new(id, qim_mailbox_dispatcher::router::route::message_ref(&record), users);
            let offset = f.produce_dispatch(&m).await;
            log.entry(shard).or_default().push(Sent { offset, manifest: m });
        }
    }
    log
}

/// Reads one shard's watermarks, then checks that every record at or below each lane's
/// watermark has its entries (a few recipients of that lane per record). Returns how many
/// (lane, record) pairs it checked.
async fn check_sample(store: &dyn MailboxStore, tenant: TenantId, shard: ShardId, sent: &[Sent]) -> usize {
    let wms = watermarks(store, shard).await;
    let mut checked = 0;
    for (lane, wm) in LaneId::all().zip(wms) {
        let Some(wm) = wm else { continue };
        for s in sent.iter().filter(|s| s.offset <= wm) {
            let seq = MailboxSeq::from_offset(EPOCH, s.offset).unwrap();
            for u in s.manifest.recipients.iter().filter(|u| lane_of(&tenant, u) == lane).take(2) {
                let got = mailbox_of(store, tenant, *u).await;
                assert_eq!(
                    got,
                    vec![(seq, s.manifest.id.message_id)],
                    "lane {} of shard {} is at {wm} but offset {} is not written for {u}",
                    lane.get(),
                    shard.0,
                    s.offset
                );
            }
            checked += 1;
        }
    }
    checked
}

fn all_passed(wms: &[Option<u64>], last: u64) -> bool {
    wms.iter().all(|w| w.is_some_and(|w| w >= last))
}

async fn killed_mid_fan_out_then_restarted(kind: Kind) {
    let began = std::time::Instant::now();
    let f = Fixture::new(kind).await;
    let store = f.mailbox().await;
    let tenant = fresh(TenantId);
    let (per_shard, recipients) = match kind {
        Kind::Redis => (4, 1500),
        Kind::Scylla => (2, 1000),
    };
    let log = Arc::new(produce(&f, tenant, per_shard, recipients).await);

    // Sample watermarks against entries for as long as the test runs.
    let stop = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (store, log, stop, samples) =
            (Arc::clone(&store), Arc::clone(&log), Arc::clone(&stop), Arc::clone(&samples));
        tokio::spawn(async move {
            let mut shard = 0u16;
            while !stop.load(Ordering::Relaxed) {
                let s = ShardId(shard % SHARDS);
                samples.fetch_add(check_sample(store.as_ref(), tenant, s, &log[&s]).await, Ordering::Relaxed);
                shard += 1;
            }
        })
    };

    let port = free_port();
    let mut first = f.spawn(port);
    wait_for("the fan-out to start (a lane watermark to move)", Duration::from_secs(120), || {
        let store = Arc::clone(&store);
        async move {
            for shard in (0..SHARDS).map(ShardId) {
                if watermarks(store.as_ref(), shard).await.iter().any(Option::is_some) {
                    return true;
                }
            }
            false
        }
    })
    .await;
    first.kill().expect("SIGKILL");
    first.wait().unwrap();
    let mut unfinished = 0;
    for (shard, sent) in log.iter() {
        if !all_passed(&watermarks(store.as_ref(), *shard).await, sent.last().unwrap().offset) {
            unfinished += 1;
        }
    }
    eprintln!("{kind:?}: killed with {unfinished} of {SHARDS} shards unfinished at {:?}", began.elapsed());
    assert!(unfinished > 0, "the kill came too late to interrupt the fan-out");

    let port = free_port();
    let mut second = f.spawn(port);
    wait_healthy(port).await;
    // The debug binary shares two cores with the sampler, the other backend's run and its server:
    // it gets as long as its watermarks keep moving.
    let (stall, cap) = (Duration::from_secs(120), Duration::from_secs(900));
    wait_while_progressing("every lane of every shard to pass its last record", stall, cap, || {
        let (store, log) = (Arc::clone(&store), Arc::clone(&log));
        async move {
            let (mut done, mut progress) = (true, 0);
            for (shard, sent) in log.iter() {
                let wms = watermarks(store.as_ref(), *shard).await;
                done &= all_passed(&wms, sent.last().unwrap().offset);
                progress += wms.iter().flatten().sum::<u64>();
            }
            (done, progress)
        }
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    sampler.await.expect("no sample found a watermark past unwritten entries");
    assert!(samples.load(Ordering::Relaxed) > 0, "the sampler checked nothing");

    let metrics = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.unwrap().text().await.unwrap();
    let exported = qim_testkit::metrics::Exposition::parse(&metrics).has("qim_dispatcher_entries_written_total", &[]);
    assert!(exported, "the second dispatcher exports its entry counter: {metrics}");
    second.kill().unwrap();
    second.wait().unwrap();

    for (shard, sent) in log.iter() {
        for s in sent {
            let seq = MailboxSeq::from_offset(EPOCH, s.offset).unwrap();
            for (u, got) in mailboxes_of(store.as_ref(), tenant, s.manifest.recipients.iter().copied()).await {
                assert_eq!(got, vec![(seq, s.manifest.id.message_id)], "{u} of shard {}", shard.0);
            }
        }
    }
    eprintln!("{kind:?}: {} lane-record pairs sampled while running", samples.load(Ordering::Relaxed));
}

both_backends!(killed_mid_fan_out_then_restarted);
