//! `qim-bench scylla`'s mailbox part: entries/s through `ScyllaMailboxStore` (records begun in
//! log order, every chunk written and completed, the 64 lane watermarks advanced page-wise)
//! against a raw loop of the same per-entry writes (one prepared `INSERT ... USING TTL` of an
//! event group per recipient) at the same concurrency, and how many LWTs each record cost.

use std::sync::Arc;

use qim_store::clock::SystemClock;
use qim_store::codec::encode_event_group;
use qim_store::ids::{ConversationId, ConversationSeq, MessageId, TenantId, UnixMillis, UserId};
use qim_store::mailbox::{
    ChunkId, DispatchId, DispatchManifest, LaneId, MailboxRetention, MailboxSeq, MessageRef, ShardEpoch, ShardId,
};
use qim_store::message::MessageKind;
use qim_store::scylla::mailbox::mailbox_table_ddl;
use qim_store::scylla::ScyllaMailboxStore;
use qim_store::MailboxStore;
use scylla::client::session::Session;
use scylla::statement::Consistency;

use super::{drive, Args, Measurement};

const EPOCH: ShardEpoch = ShardEpoch(1);
const TENANT: TenantId = TenantId([5; 16]);

fn user(n: u64) -> UserId {
    let mut b = [0u8; 16];
    b[8..].copy_from_slice(&n.to_be_bytes());
    UserId(b)
}

fn manifest(n: u64, recipients: u64) -> DispatchManifest {
    let mut id = [0u8; 16];
    id[8..].copy_from_slice(&n.to_be_bytes());
    let message = MessageRef {
        tenant: TENANT,
        conversation: ConversationId([1; 16]),
        seq: ConversationSeq(n + 1),
        message_id: MessageId(id),
        sender: user(u64::MAX),
        kind: MessageKind::Normal,
        created_at: UnixMillis::now(),
    };
    let dispatch = DispatchId { message_id: message.message_id, shard: ShardId(0) };
    DispatchManifest::new(dispatch, message, (0..recipients).map(user).collect())
}

/// A page of dispatches the way a shard worker runs it: each record begun in log order, then
/// every chunk of every record written and completed with at most `concurrency` in flight, then
/// every lane's watermark advanced once, page-wise, to the page's last offset.
async fn dispatch_page(
    store: &ScyllaMailboxStore,
    page: &[(DispatchManifest, u64)],
    concurrency: usize,
) -> anyhow::Result<()> {
    let mut receipts = Vec::with_capacity(page.len());
    for (m, offset) in page {
        receipts.push(store.begin_dispatch(EPOCH, m, *offset).await?);
    }
    let permits = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut chunks = tokio::task::JoinSet::new();
    for ((m, _), receipt) in page.iter().zip(receipts) {
        for lane in LaneId::all() {
            for index in 0..m.chunk_counts()[lane.get() as usize] {
                let (store, m, permits) = (store.clone(), m.clone(), Arc::clone(&permits));
                chunks.spawn(async move {
                    let _permit = permits.acquire_owned().await?;
                    let chunk = ChunkId { lane, index };
                    store.append_chunk(&receipt, &m, chunk).await?;
                    store.mark_chunk_completed(m.id, chunk).await?;
                    anyhow::Ok(())
                });
            }
        }
    }
    while let Some(done) = chunks.join_next().await {
        done??;
    }
    let last = page.last().map_or(0, |(_, offset)| *offset);
    let mut lanes = tokio::task::JoinSet::new();
    for lane in LaneId::all() {
        let store = store.clone();
        lanes.spawn(async move { store.advance_watermark(ShardId(0), lane, last).await.map(|_| ()) });
    }
    while let Some(done) = lanes.join_next().await {
        done??;
    }
    Ok(())
}

/// Runs the mailbox paths in keyspace `ks` (created by the caller) and returns the figures.
pub async fn measure(session: &Arc<Session>, ks: &str, args: &Args) -> anyhow::Result<serde_json::Value> {
    for ddl in mailbox_table_ddl(ks) {
        session.query_unpaged(ddl, &[]).await?;
    }
    let store =
        ScyllaMailboxStore::connect(Arc::clone(session), ks, MailboxRetention::default(), Arc::new(SystemClock))
            .await?;
    let recipients = 500u64;
    let dispatches = (args.count / recipients).max(1);
    // Warm-up, and each recipient's first entry of the day (registers the day: one LWT per user).
    dispatch_page(&store, &[(manifest(0, recipients), 0)], args.concurrency).await?;
    let registration_lwts = store.lwt_count();

    let before = store.lwt_count();
    let page: Vec<(DispatchManifest, u64)> = (1..=dispatches).map(|n| (manifest(n, recipients), n)).collect();
    let start = std::time::Instant::now();
    dispatch_page(&store, &page, args.concurrency).await?;
    let wall = start.elapsed();
    let hot_lwts = store.lwt_count() - before;
    let entries = dispatches * recipients;
    let through_store = entries as f64 / wall.as_secs_f64();

    let raw = raw_entries(session, ks, args, entries).await?;
    println!(
        "  {:<40} {:>10.0} {:>10.2} {:>10.2}",
        "raw prepared entry INSERT",
        raw.per_second,
        super::ms(raw.p50),
        super::ms(raw.p99)
    );
    println!(
        "  {:<40} {:>10.0} {:>10} {:>10}   ({dispatches} records × {recipients} recipients, one page)",
        "mailbox entries through the store", through_store, "-", "-"
    );
    println!("  ratio store/raw entries: {:.3}", through_store / raw.per_second);
    println!(
        "  LWTs on the dispatch path: {hot_lwts} for {dispatches} records ({:.3} per record); registering {recipients} users' first day: {registration_lwts}",
        hot_lwts as f64 / dispatches as f64
    );
    Ok(serde_json::json!({
        "raw_entries_per_second": raw.per_second, "store_entries_per_second": through_store,
        "store_over_raw": through_store / raw.per_second, "hot_path_lwts": hot_lwts, "records": dispatches,
        "first_day_registration_lwts": registration_lwts,
    }))
}

async fn raw_entries(session: &Arc<Session>, ks: &str, args: &Args, entries: u64) -> anyhow::Result<Measurement> {
    let mut insert = session
        .prepare(format!(
            "INSERT INTO {ks}.mailbox_entry (tenant_id, user_id, mailbox_seq, grp) VALUES (?, ?, ?, ?) USING TTL ?"
        ))
        .await?;
    insert.set_consistency(Consistency::LocalQuorum);
    let m = manifest(u64::MAX / 2, 1);
    let seq = MailboxSeq::new(EPOCH, 1).expect("small position");
    let group = encode_event_group(&qim_store::mailbox::EventGroup {
        tenant: TENANT,
        user: user(0),
        seq,
        expires_at: MailboxRetention::default().expires_at(m.message.created_at),
        events: vec![m.entry_for(user(0), seq, &MailboxRetention::default()).event],
    });
    let (insert, group) = (Arc::new(insert), Arc::new(group));
    let session = Arc::clone(session);
    drive(entries, args.concurrency, move |n| {
        let (session, insert, group) = (Arc::clone(&session), Arc::clone(&insert), Arc::clone(&group));
        async move {
            let values =
                (TENANT.0.to_vec(), user(n % 500).0.to_vec(), (1_000_000 + n) as i64, group.as_slice(), 2_678_400i32);
            session.execute_unpaged(&insert, values).await?;
            Ok(())
        }
    })
    .await
}
