//! `kill -9` of the `qim-archiver` binary in the middle of a batch (a failpoint holds a batch
//! after its rows are written and before its offset is stored), then a restart: nothing is
//! lost, nothing is doubled, every row is the record as produced, and every archived
//! watermark reaches the end of its conversation.

use crate::support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use qim_store::clock::SystemClock;
use qim_store::codec::encode_record;
use qim_store::ids::ConversationSeq;
use qim_store::redis::RedisMessageStore;
use qim_store::retention::RetentionPolicy;
use support::*;

const CONVERSATIONS: u64 = 30;
const PER_CONVERSATION: u64 = 100;
const PARTITIONS: i32 = 3;

fn spawn(env: &[(String, String)], failpoints: Option<&str>, log: &str) -> Child {
    let log = std::fs::File::create(log).expect("a log file");
    let mut command = Command::new(env!("CARGO_BIN_EXE_qim-archiver"));
    command.arg("run").env_clear().envs(env.iter().cloned()).stdout(log.try_clone().unwrap()).stderr(log);
    if let Some(f) = failpoints {
        command.env("FAILPOINTS", f);
    }
    command.stdin(Stdio::null()).spawn().expect("starting qim-archiver")
}

fn tail(path: &str) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_nine_mid_batch_then_restart_loses_and_doubles_nothing() {
    let policy = RetentionPolicy::with_default_days(30).unwrap();
    let (topic, dlq) = (create_topic("a_kill", PARTITIONS).await, create_topic("a_kill_dlq", 1).await);
    let conversations: Vec<_> = (0..CONVERSATIONS).map(|_| conversation(PER_CONVERSATION, &policy)).collect();
    let all: Vec<_> = conversations.iter().flatten().cloned().collect();
    produce(&topic, &all).await;

    let mut config = config(&topic, &dlq, policy).await;
    config.batch.max_records = 100;
    let ks = config.scylla.keyspace.clone();
    let env = binary_env(&config);
    let dir = std::env::temp_dir();
    let (log1, log2) = (dir.join(unique("akill_1")), dir.join(unique("akill_2")));
    let (log1, log2) = (log1.to_str().unwrap(), log2.to_str().unwrap());
    // The fourth partition batch sleeps after its rows are durable, before its offset is stored.
    let mut first = spawn(&env, Some("archiver::after_archive=3*off->sleep(120000)"), log1);
    let store = archive(policy).await;
    let session = store.session();
    let count = || async {
        let mut n = 0;
        for c in &conversations {
            n += index_rows(session, &ks, c[0].tenant, c[0].conversation).await;
        }
        n
    };
    // Wait until rows exist and stop changing: the process is parked inside a batch.
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut last, mut stable_since) = (0, Instant::now());
    loop {
        assert!(Instant::now() < deadline, "the archiver never reached the failpoint:\n{}", tail(log1));
        assert!(first.try_wait().unwrap().is_none(), "the archiver exited early:\n{}", tail(log1));
        let n = count().await;
        if n != last {
            (last, stable_since) = (n, Instant::now());
        } else if n > 0 && stable_since.elapsed() > Duration::from_secs(4) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let committed_before: i64 = committed(&config.group, &topic, PARTITIONS).values().sum();
    first.kill().expect("kill -9");
    first.wait().unwrap();
    eprintln!("killed with {last} rows archived and {committed_before} records committed");
    assert!(
        (last as i64) > committed_before,
        "the kill must land with archived but uncommitted records (mid-batch): {last} archived, {committed_before} committed"
    );

    let mut second = spawn(&env, None, log2);
    let total = (CONVERSATIONS * PER_CONVERSATION) as i64;
    wait_for("every offset committed after the restart", Duration::from_secs(120), || async {
        committed(&config.group, &topic, PARTITIONS).values().sum::<i64>() == total
    })
    .await;
    second.kill().unwrap();
    second.wait().unwrap();

    for c in &conversations {
        assert_eq!(index_rows(session, &ks, c[0].tenant, c[0].conversation).await, PER_CONVERSATION as usize);
    }
    for r in &all {
        let s = stored(session, &ks, r).await.unwrap_or_else(|| panic!("seq {} lost", r.seq));
        assert_eq!(s.blob, encode_record(r), "seq {} stored as produced", r.seq);
    }
    let redis = config.hot_tier.as_ref().unwrap();
    let hot = RedisMessageStore::open(redis, policy, std::sync::Arc::new(SystemClock)).await.unwrap();
    for c in &conversations {
        let w = hot.record_archived_watermark(c[0].tenant, c[0].conversation, ConversationSeq(0)).await.unwrap();
        assert_eq!(w.0, PER_CONVERSATION, "watermark of {}", c[0].conversation);
    }
    let dlq_end = {
        let consumer: rdkafka::consumer::BaseConsumer =
            rdkafka::ClientConfig::new().set("bootstrap.servers", brokers()).create().unwrap();
        rdkafka::consumer::Consumer::fetch_watermarks(&consumer, &dlq, 0, Duration::from_secs(10)).unwrap().1
    };
    assert_eq!(dlq_end, 0, "nothing was dead-lettered");
}
