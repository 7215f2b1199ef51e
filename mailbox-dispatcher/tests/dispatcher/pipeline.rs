//! One shard pipeline driven directly (no Kafka traffic: records are handed to it) over the
//! memory store, with one lane's chunk writes held back: the other lanes keep moving past a
//! 10 000-recipient record, the held lane's watermark never passes it, and a held-up shard stops
//! taking records once its window is full (bounded memory).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use qim_mailbox_dispatcher::config::KafkaConfig;
use qim_mailbox_dispatcher::kafka::AckedProducer;
use qim_mailbox_dispatcher::metrics::CONSUMER;
use qim_mailbox_dispatcher::worker::pipeline::{Pipeline, MAX_WINDOW_RECORDS};
use qim_mailbox_dispatcher::worker::steps::{Record, ShardContext};
use qim_runtime::kafka::consumer::{group_consumer_config, GroupContext};
use qim_store::clock::SystemClock;
use qim_store::codec::encode_manifest;
use qim_store::ids::{ConversationId, ConversationSeq, MessageId, TenantId, UnixMillis, UserId};
use qim_store::mailbox::{
    lane_of, ChunkId, DispatchId, DispatchManifest, DispatchProgress, DispatchReceipt, LaneId, LaneWatermark,
    MailboxEntry, MailboxPage, MailboxRetention, MailboxSeq, MessageRef, ShardEpoch, ShardFence, ShardId,
};
use qim_store::memory::MemoryMailboxStore;
use qim_store::message::MessageKind;
use qim_store::topic::dispatch_key;
use qim_store::{MailboxStore, StoreResult};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

const TENANT: TenantId = TenantId([4; 16]);
const HELD: u8 = 7;

/// The memory store, with chunk writes of lane [`HELD`] (or of every lane) waiting for a gate.
struct Gated {
    inner: MemoryMailboxStore,
    open: watch::Receiver<bool>,
    all_lanes: bool,
}

#[async_trait]
impl MailboxStore for Gated {
    async fn append_batch(&self, entries: &[MailboxEntry]) -> StoreResult<()> {
        self.inner.append_batch(entries).await
    }
    async fn begin_dispatch(&self, e: ShardEpoch, m: &DispatchManifest, o: u64) -> StoreResult<DispatchReceipt> {
        self.inner.begin_dispatch(e, m, o).await
    }
    async fn append_chunk(&self, r: &DispatchReceipt, m: &DispatchManifest, c: ChunkId) -> StoreResult<usize> {
        if self.all_lanes || c.lane.get() == HELD {
            let mut open = self.open.clone();
            open.wait_for(|o| *o).await.expect("the gate outlives the test");
        }
        self.inner.append_chunk(r, m, c).await
    }
    async fn mark_chunk_completed(&self, d: DispatchId, c: ChunkId) -> StoreResult<()> {
        self.inner.mark_chunk_completed(d, c).await
    }
    async fn chunk_completed(&self, d: DispatchId, c: ChunkId) -> StoreResult<bool> {
        self.inner.chunk_completed(d, c).await
    }
    async fn dispatch_progress(&self, d: DispatchId) -> StoreResult<Option<DispatchProgress>> {
        self.inner.dispatch_progress(d).await
    }
    async fn range_scan(
        &self,
        t: TenantId,
        u: UserId,
        a: MailboxSeq,
        b: MailboxSeq,
        n: usize,
    ) -> StoreResult<MailboxPage> {
        self.inner.range_scan(t, u, a, b, n).await
    }
    async fn truncate_before(&self, t: TenantId, u: UserId, s: MailboxSeq) -> StoreResult<MailboxSeq> {
        self.inner.truncate_before(t, u, s).await
    }
    async fn lane_watermark(&self, s: ShardId, l: LaneId) -> StoreResult<LaneWatermark> {
        self.inner.lane_watermark(s, l).await
    }
    async fn advance_watermark(&self, s: ShardId, l: LaneId, t: u64) -> StoreResult<LaneWatermark> {
        self.inner.advance_watermark(s, l, t).await
    }
    async fn gc_completed_dispatches(&self, s: ShardId, b: i64, n: usize) -> StoreResult<usize> {
        self.inner.gc_completed_dispatches(s, b, n).await
    }
}

fn user(n: u64) -> UserId {
    let mut b = [0u8; 16];
    b[8..].copy_from_slice(&n.to_be_bytes());
    UserId(b)
}

fn manifest(n: u64, recipients: impl Iterator<Item = u64>) -> DispatchManifest {
    let mut id = [7u8; 16];
    id[..8].copy_from_slice(&n.to_be_bytes());
    let mid = MessageId(id);
    let message = MessageRef {
        tenant: TENANT,
        conversation: ConversationId([1; 16]),
        seq: ConversationSeq(n + 1),
        message_id: mid,
        sender: user(0),
        kind: MessageKind::Normal,
        created_at: UnixMillis::now(),
    };
    DispatchManifest::new(DispatchId { message_id: mid, shard: ShardId(0) }, message, recipients.map(user).collect())
}

fn record(offset: u64, m: &DispatchManifest) -> Record {
    Record { offset, key: Some(dispatch_key(&m.id).to_vec()), value: Some(encode_manifest(m)), headers: Vec::new() }
}

/// A pipeline of shard 0 over `store`, and its input.
fn pipeline(store: Arc<dyn MailboxStore>, capacity: usize) -> (mpsc::Sender<Record>, CancellationToken) {
    let kafka = KafkaConfig {
        // Nothing listens there: the pipeline never needs Kafka for these records.
        brokers: "127.0.0.1:9".to_owned(),
        messages_topic: "m".to_owned(),
        dispatch_topic: "d".to_owned(),
        dlq_topic: "dlq".to_owned(),
        group: "pipeline-test".to_owned(),
    };
    let consumer = group_consumer_config(&kafka.brokers, "g")
        .create_with_context(GroupContext::new("shards", "d", CONSUMER))
        .unwrap();
    let ctx = Arc::new(ShardContext {
        store,
        producer: AckedProducer::new(&kafka.brokers).unwrap(),
        consumer: Arc::new(consumer),
        kafka,
        epoch: ShardEpoch(0),
        chunks_in_flight: 32,
        keep: Duration::from_secs(3600),
        advance_every: Duration::from_millis(100),
    });
    let (tx, rx) = mpsc::channel(capacity);
    let stop = CancellationToken::new();
    let fence = ShardFence { shard: ShardId(0), incarnation: String::new() };
    tokio::spawn(Pipeline::new(ctx, fence, CancellationToken::new(), stop.clone(), None).run(rx));
    (tx, stop)
}

async fn wait_for(what: &str, mut check: impl AsyncFnMut() -> bool) {
    for _ in 0..600 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lane_never_holds_up_the_others_nor_is_passed() {
    let (gate, open) = watch::channel(false);
    let memory = MemoryMailboxStore::new(MailboxRetention::default(), Arc::new(SystemClock));
    let store: Arc<dyn MailboxStore> = Arc::new(Gated { inner: memory.clone(), open, all_lanes: false });
    let (input, stop) = pipeline(Arc::clone(&store), 16);
    let big = manifest(0, 1..=10_000);
    let small = manifest(1, 20_000..20_050);
    input.send(record(0, &big)).await.unwrap();
    input.send(record(1, &small)).await.unwrap();

    let held = LaneId::new(HELD).unwrap();
    wait_for("every other lane to pass both records", async || {
        for lane in LaneId::all().filter(|l| *l != held) {
            if store.lane_watermark(ShardId(0), lane).await.unwrap().through != Some(1) {
                return false;
            }
        }
        true
    })
    .await;
    assert_eq!(store.lane_watermark(ShardId(0), held).await.unwrap().through, None, "the held lane is not passed");
    let seq = |o| MailboxSeq::from_offset(ShardEpoch(0), o).unwrap();
    for u in small.recipients.iter().filter(|u| lane_of(&TENANT, u) != held) {
        let page = store.range_scan(TENANT, *u, seq(0), seq(1), 10).await.unwrap();
        assert_eq!(page.groups.len(), 1, "{u} got its entry while lane {HELD} is held");
    }

    gate.send(true).unwrap();
    wait_for("the held lane to catch up", async || {
        store.lane_watermark(ShardId(0), held).await.unwrap().through == Some(1)
    })
    .await;
    for u in &big.recipients {
        let page = store.range_scan(TENANT, *u, MailboxSeq::origin(ShardEpoch(0)), seq(1), 10).await.unwrap();
        assert_eq!(page.groups.iter().map(|g| g.seq).collect::<Vec<_>>(), [seq(0)], "{u}");
    }
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_shard_stops_taking_records_when_its_window_is_full() {
    let (_gate, open) = watch::channel(false);
    let memory = MemoryMailboxStore::new(MailboxRetention::default(), Arc::new(SystemClock));
    let store: Arc<dyn MailboxStore> = Arc::new(Gated { inner: memory, open, all_lanes: true });
    let capacity = 4;
    let (input, stop) = pipeline(store, capacity);
    let mut accepted = 0usize;
    for offset in 0..(MAX_WINDOW_RECORDS + 100) as u64 {
        let m = manifest(offset, [offset * 10 + 1].into_iter());
        match tokio::time::timeout(Duration::from_millis(500), input.send(record(offset, &m))).await {
            Ok(sent) => {
                sent.unwrap();
                accepted += 1;
            }
            Err(_) => break,
        }
    }
    assert!(
        accepted <= MAX_WINDOW_RECORDS + capacity,
        "the shard took {accepted} records with nothing completing (window {MAX_WINDOW_RECORDS} + channel {capacity})"
    );
    assert!(accepted >= MAX_WINDOW_RECORDS, "it took only {accepted}");
    stop.cancel();
}
