//! Crashes at every state boundary of the commit, then a restart: the recovery loop completes
//! the commit exactly once in effect. The client's retry gets the same seq and message id;
//! Kafka may hold a duplicate record, never a different seq for the same key.
//!
//! In-process cases stop one commit at a failpoint (`return`) and restart the writer; the
//! binary case kills the real `qim-writer` process at a boundary (`return(abort)`, like
//! `kill -9`: nothing is flushed) and starts a new one. Failpoints are process-global, so the
//! in-process cases of one process run one at a time.
//!
//! A writer's recovery loop completes every stale commit of its store, not only its own test's:
//! the Scylla cases keep a keyspace of their own (no other test's writer finishes their
//! interrupted commit into another topic) and run one at a time across processes too (the
//! nextest test group `writer-crash-recovery`).

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use qim_store::clock::SystemClock;
use qim_store::ids::{ClientMessageId, ConversationId, TenantId, UserId};
use qim_store::message::{Commit, CommitKey, CommitState};
use qim_store::redis::{CommitLayout, RedisMessageStore};
use qim_store::scylla::ScyllaMessageStore;
use qim_store::testsuite::scylla_keyspace::shared_test_keyspace;
use qim_store::MessageStore;
use qim_testkit::ports::free_port;
use qim_writer::config::{Backend, WriterConfig};
use support::{create_topic, fresh, read_topic, send_body, spawn_writer, wait_ready, Client, Kind, TestWriter};

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

macro_rules! boundaries {
    ($($name:ident: $kind:ident $(in $layout:ident)?, $failpoint:literal, $left:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let layout = None $(.or(Some(CommitLayout::$layout)))?;
            crash_in_process(Kind::$kind, layout.unwrap_or_default(), $failpoint, CommitState::$left).await;
        }
    )*};
}

boundaries! {
    redis_crash_after_reserve: Redis, "writer::after_reserve", Reserved;
    redis_crash_after_record: Redis, "writer::after_record", Recorded;
    redis_crash_after_publish_before_outbox: Redis, "writer::after_publish", Recorded;
    redis_crash_after_outbox: Redis, "writer::after_outbox", Outboxed;
    redis_group_commit_layout_crash_after_reserve: Redis in InConversationSlot, "writer::after_reserve", Reserved;
    redis_group_commit_layout_crash_after_record: Redis in InConversationSlot, "writer::after_record", Recorded;
    redis_group_commit_layout_crash_after_publish_before_outbox:
        Redis in InConversationSlot, "writer::after_publish", Recorded;
    redis_group_commit_layout_crash_after_outbox: Redis in InConversationSlot, "writer::after_outbox", Outboxed;
    scylla_crash_after_reserve: Scylla, "writer::after_reserve", Reserved;
    scylla_crash_after_record: Scylla, "writer::after_record", Recorded;
    scylla_crash_after_publish_before_outbox: Scylla, "writer::after_publish", Recorded;
    scylla_crash_after_outbox: Scylla, "writer::after_outbox", Outboxed;
}

/// A store on the same data as `config`'s writer, to observe commit states.
async fn observer(config: &WriterConfig) -> Arc<dyn MessageStore> {
    match &config.backend {
        Backend::Redis { redis: r, .. } => {
            Arc::new(RedisMessageStore::open(r, config.policy, Arc::new(SystemClock)).await.unwrap())
        }
        Backend::Scylla(s) => {
            Arc::new(ScyllaMessageStore::connect(s, config.policy, Arc::new(SystemClock)).await.unwrap())
        }
    }
}

/// Which layout's hash holds the case's commit.
async fn commit_slot(config: &qim_store::redis::RedisConfig, c: &Case) -> CommitLayout {
    let store = RedisMessageStore::open(config, Default::default(), Arc::new(SystemClock)).await.unwrap();
    let [in_conversation, _claim] = store.group_commit_keys(&c.key, c.conversation);
    let client = redis::Client::open(config.url.as_str()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let (sender, conversation): (bool, bool) =
        redis::pipe().exists(store.commit_key(&c.key)).exists(&in_conversation).query_async(&mut con).await.unwrap();
    match (sender, conversation) {
        (true, false) => CommitLayout::InSenderSlot,
        (false, true) => CommitLayout::InConversationSlot,
        other => panic!("the commit is in neither or both slots: {other:?}"),
    }
}

/// Waits until the commit is COMMITTED (the recovery loop's work, no client involved).
async fn committed_by_recovery(store: &dyn MessageStore, key: &CommitKey) -> Commit {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let commit = store.load_commit(key).await.unwrap().expect("the commit exists");
        if commit.state == CommitState::Committed {
            return commit;
        }
        assert!(Instant::now() < deadline, "the recovery loop did not finish the commit: {commit:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

struct Case {
    tenant: TenantId,
    conversation: ConversationId,
    sender: UserId,
    key: CommitKey,
}

fn case() -> Case {
    let (tenant, conversation, sender) = (fresh(TenantId), fresh(ConversationId), fresh(UserId));
    let key = CommitKey { tenant, sender, client_message_id: ClientMessageId::new("crash-1").unwrap() };
    Case { tenant, conversation, sender, key }
}

/// The retry answers the recovered commit, and Kafka never holds another seq for the key.
async fn check_outcome(w: &Client, c: &Case, recovered: &Commit, topic: &str) {
    let (status, answer) =
        w.post("/v1/messages", &send_body(c.tenant, c.conversation, c.sender, "crash-1", "hi")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["conversation_seq"], recovered.intent.seq.0);
    assert_eq!(answer["message_id"], recovered.intent.message_id.to_hex());
    let published: Vec<_> = read_topic(topic)
        .into_iter()
        .filter(|r| {
            (r.tenant, r.sender, &r.client_message_id) == (c.key.tenant, c.key.sender, &c.key.client_message_id)
        })
        .collect();
    assert!(!published.is_empty(), "the recovered commit was published");
    for r in &published {
        assert_eq!((r.seq, r.message_id), (recovered.intent.seq, recovered.intent.message_id), "{published:?}");
    }
}

async fn crash_in_process(kind: Kind, layout: CommitLayout, failpoint: &str, left_in: CommitState) {
    let _serial = ONE_AT_A_TIME.lock().await;
    let topic = create_topic().await;
    let mut config = support::config(kind, &topic).await;
    config.commit_layout = layout;
    if let Backend::Scylla(shared) = &config.backend {
        config.backend = Backend::Scylla(shared_test_keyspace("writer_crash_recovery", shared).await);
    }
    let c = case();
    // The interrupted writer never recovers: its loop (1 s grace in tests) could otherwise finish
    // the commit between the interrupted send and the stop, when a loaded machine made the send
    // itself take over a second. Only the restarted writer is to drive it.
    let interrupted = WriterConfig { recovery_grace: Duration::from_secs(3600), ..config.clone() };
    let w = TestWriter::start(interrupted).await;
    fail::cfg(failpoint, "return").unwrap();
    let (status, answer) =
        w.post("/v1/messages", &send_body(c.tenant, c.conversation, c.sender, "crash-1", "hi")).await;
    fail::remove(failpoint);
    assert_eq!(status, 503, "the interrupted send is not acknowledged: {answer}");
    w.stop().await.unwrap();
    let store = observer(&config).await;
    let stopped = store.load_commit(&c.key).await.unwrap().expect("the reserve is durable");
    assert_eq!(stopped.state, left_in, "where the crash left the commit");
    if let Backend::Redis { redis, .. } = &config.backend {
        assert_eq!(commit_slot(redis, &c).await, layout, "the writer created the commit in its layout");
    }
    let w = TestWriter::start(config).await;
    let recovered = committed_by_recovery(store.as_ref(), &c.key).await;
    assert_eq!((recovered.intent.seq, recovered.intent.message_id), (stopped.intent.seq, stopped.intent.message_id));
    check_outcome(&w, &c, &recovered, &topic).await;
    w.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_killed_between_publish_and_outbox_recovers_after_restart() {
    let topic = create_topic().await;
    let config = support::config(Kind::Redis, &topic).await;
    let c = case();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut child = spawn_writer(&config, port, Some("writer::after_publish=return(abort)"));
    wait_ready(&base).await;
    support::Client::new(&base).add_members(c.tenant, c.conversation, &[c.sender]).await;
    let client = reqwest::Client::new();
    let send = client
        .post(format!("{base}/v1/messages"))
        .bearer_auth(support::operator_token(&c.tenant.to_hex()))
        .json(&send_body(c.tenant, c.conversation, c.sender, "crash-1", "hi"))
        .send()
        .await;
    assert!(send.is_err(), "the process died before answering: {send:?}");
    let status = tokio::task::spawn_blocking(move || child.wait()).await.unwrap().unwrap();
    assert!(!status.success(), "qim-writer aborted at the failpoint: {status:?}");
    let store = observer(&config).await;
    let stopped = store.load_commit(&c.key).await.unwrap().expect("the reserve is durable");
    assert_eq!(stopped.state, CommitState::Recorded, "published but not yet OUTBOXED");
    let mut child = spawn_writer(&config, port, None);
    wait_ready(&base).await;
    let recovered = committed_by_recovery(store.as_ref(), &c.key).await;
    check_outcome(&Client::new(&base), &c, &recovered, &topic).await;
    child.kill().unwrap();
    child.wait().unwrap();
}
