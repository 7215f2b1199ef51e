//! What losing Redis state does to the whole pipeline (DESIGN invariants 1, 2, 7, 8, 9), on
//! isolated runs of the harness with the three real services:
//!
//! - the topic's retention dropped a conversation's records, then Redis lost every key and the
//!   writer restarted: the next sends get seqs above every acknowledged one, the archive keeps
//!   every original, and the members still read history and receive mailbox entries without
//!   being added again;
//! - Redis restored from an older snapshot (counters and leases rolled back) under a steady send
//!   load: no seq issued twice, and the checker accepts;
//! - the three services started at once against a Redis that does not answer for a while: all
//!   become ready.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use qim_store::testsuite::private_redis::PrivateRedis;
use qim_tests::faults::{self, Load, Shape};
use qim_tests::services::{wipe_redis_namespace, Pipeline, PipelineEnv, Service, ServiceBinaries, ServiceKind};
use qim_tests::workload::{self, Ack, Plan, PlannedSend};
use rdkafka::admin::AdminOptions;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

/// The highest acknowledged seq of every conversation.
fn highest(acks: &[Ack]) -> HashMap<String, u64> {
    let mut top: HashMap<String, u64> = HashMap::new();
    for a in acks {
        let h = top.entry(a.conversation.clone()).or_default();
        *h = (*h).max(a.conversation_seq);
    }
    top
}

/// What a topic's retention does to old records: Kafka's own `DeleteRecords` up to the end of
/// every partition of the run's messages topic.
async fn delete_every_record(env: &PipelineEnv) {
    let consumer: BaseConsumer = qim_tests::stack::kafka_config()
        .set("bootstrap.servers", &env.kafka_brokers)
        .set("group.id", "qim-tests-delete-records")
        .create()
        .expect("a consumer");
    let metadata = consumer.fetch_metadata(Some(&env.messages_topic), Duration::from_secs(10)).expect("metadata");
    let mut ends = TopicPartitionList::new();
    for p in metadata.topics()[0].partitions() {
        let (_, high) =
            consumer.fetch_watermarks(&env.messages_topic, p.id(), Duration::from_secs(10)).expect("watermarks");
        ends.add_partition_offset(&env.messages_topic, p.id(), Offset::Offset(high)).unwrap();
    }
    let admin = env.kafka_admin().expect("an admin client");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let deleted = admin.delete_records(&ends, &opts).await.expect("DeleteRecords");
    for e in deleted.elements() {
        assert!(e.error().is_ok(), "deleting records of partition {}: {:?}", e.partition(), e.error());
        let (low, high) =
            consumer.fetch_watermarks(&env.messages_topic, e.partition(), Duration::from_secs(10)).unwrap();
        assert_eq!(low, high, "partition {} still holds records", e.partition());
    }
}

async fn get_json(url: &str) -> serde_json::Value {
    let r = reqwest::get(url).await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert!(r.status().is_success(), "GET {url}: {}", r.status());
    r.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_topic_forgot_and_redis_lost_everything_no_seq_is_reissued() {
    let bins = ServiceBinaries::locate().expect("service binaries");
    let env = PipelineEnv::fresh("redisloss").await.expect("a fresh run (is the stack up?)");
    let mut pipeline = Pipeline::start(&bins, &env).await.expect("the pipeline starts");
    let plan = Plan::generate(0x5eed, 40, 3, &[6], 0);
    let first = workload::run(pipeline.writer.base_url(), None, &plan, 4, true).await.expect("the workload runs");
    pipeline.converge(&first.acks, Duration::from_secs(90)).await.expect("archived and dispatched");
    let before = highest(&first.acks);

    delete_every_record(&env).await;
    pipeline.writer.terminate().await.expect("the writer stops");
    let wiped = wipe_redis_namespace(&env).await.expect("wiping Redis");
    assert!(wiped > 50, "the run's Redis state is gone ({wiped} keys)");
    let started = Instant::now();
    pipeline.writer.restart(&[]).await.expect("the writer restarts");
    let ready_in = started.elapsed();

    // One more send to every conversation; nobody is added again (no conversations in the plan).
    let sends: Vec<PlannedSend> = plan
        .conversations
        .iter()
        .enumerate()
        .map(|(i, c)| PlannedSend {
            conversation: c.id.clone(),
            sender: c.members[0].clone(),
            client_message_id: format!("after-loss-{i}"),
            body: format!("after the loss {i}"),
            retention: "default".to_owned(),
            retry: false,
        })
        .collect();
    let more = Plan { tenant: plan.tenant.clone(), conversations: Vec::new(), sends };
    let second = workload::run(pipeline.writer.base_url(), None, &more, 2, true).await.expect("sends after the loss");
    for a in &second.acks {
        let top = before[&a.conversation];
        assert!(
            a.conversation_seq > top,
            "seq {} of {} reissued (it had reached {top})",
            a.conversation_seq,
            a.conversation
        );
    }
    let all: Vec<Ack> = first.acks.iter().chain(&second.acks).cloned().collect();
    // The topic holds only the new records now; wait for them to be archived and dispatched.
    pipeline.converge(&second.acks, Duration::from_secs(90)).await.expect("the new sends converge");

    for c in &plan.conversations {
        // Every original is still in the archive and served, with the new one, to a member who
        // was never added again.
        let served: HashMap<String, u64> =
            workload::history(pipeline.writer.base_url(), &plan.tenant, &c.id, &c.members[1])
                .await
                .unwrap()
                .into_iter()
                .collect();
        for a in all.iter().filter(|a| a.conversation == c.id) {
            assert_eq!(served.get(&a.message_id), Some(&a.conversation_seq), "history of {} lost {a:?}", c.id);
        }
        // And receives the new message in its mailbox.
        let new = second.acks.iter().find(|a| a.conversation == c.id).unwrap();
        let url = format!(
            "{}/v1/tenants/{}/users/{}/mailbox?limit=1000",
            env.base_url(ServiceKind::Dispatcher),
            plan.tenant,
            c.members[1]
        );
        let mailbox = get_json(&url).await;
        let delivered = mailbox["entries"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|e| e["events"].as_array().unwrap().iter())
            .any(|e| e["message"]["message_id"].as_str() == Some(new.message_id.as_str()));
        assert!(delivered, "{} did not receive {} in its mailbox: {mailbox}", c.members[1], new.message_id);
    }
    // The archiver ran throughout: what it archived and what it refused are in its counters.
    let metrics = pipeline.metrics(ServiceKind::Archiver).await.expect("the archiver's metrics");
    let archived = metrics.sum("qim_archiver_records_total", &[("outcome", "archived")]);
    assert!(archived >= all.len() as f64, "the archiver archived every send ({archived} of {})", all.len());
    let refused = metrics.sum("qim_archiver_dead_letters_total", &[("reason", "conflicting_record")]);
    assert_eq!(refused, 0.0, "no record conflicted with an archived one");
    println!(
        "redis loss: {} messages before, {} after, writer ready {ready_in:?} after its restart, \
         seqs resumed above the durable marks in all {} conversations",
        first.acks.len(),
        second.acks.len(),
        plan.conversations.len()
    );
    pipeline.stop().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_restored_from_an_older_snapshot_under_load_reissues_no_seq() {
    let mut redis = PrivateRedis::start();
    let bins = ServiceBinaries::locate().expect("service binaries");
    let mut env = PipelineEnv::fresh("snapshot").await.expect("a fresh run (is the stack up?)");
    env.redis_url = redis.url();
    let p = Pipeline::start(&bins, &env).await.expect("the pipeline starts");
    let plan = Plan::generate(0x5a95, 2_000, 12, &[8], 10);
    let shape = Shape { batch: 10, concurrency: 4, pause: Duration::from_millis(50) };
    let load = Load::start(p.writer.base_url(), &plan, shape).await.expect("the load starts");
    let wait_for_more = |from: u64, what: &'static str| {
        let load = &load;
        async move {
            let deadline = Instant::now() + Duration::from_secs(120);
            while load.acked() < from + 100 {
                assert!(Instant::now() < deadline, "no progress within 120 s {what}");
                if load.is_finished() {
                    return Err(what);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(())
        }
    };
    let mut progress = wait_for_more(0, "before the snapshot").await;
    let snapshot = redis.snapshot();
    let at_snapshot = load.acked();
    if progress.is_ok() {
        progress = wait_for_more(at_snapshot, "after the snapshot").await;
    }
    redis.restore(&snapshot);
    let at_restore = load.acked();
    if progress.is_ok() {
        progress = wait_for_more(at_restore, "after the restore").await;
    }
    if let Err(what) = progress {
        let outcome = load.stop().await.map(|r| r.acks.len());
        panic!("the load ended {what}: {outcome:?}");
    }
    let report = load.stop().await.expect("every send is acknowledged");
    let reissued = faults::reissued_seqs(&report);
    assert!(reissued.is_empty(), "seqs issued twice: {reissued:?}");
    p.converge(&report.acks, Duration::from_secs(180)).await.expect("the pipeline converges");
    println!(
        "snapshot restore: {} messages, {} acknowledged between the snapshot and the restore (rolled back in Redis)",
        report.acks.len(),
        at_restore - at_snapshot
    );
    faults::verify("snapshot restore", &env, &plan, &report, 0, 1)
        .await
        .expect("zero lost, zero logical duplicates, every invariant holds");
    p.stop().await.expect("every service stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_three_services_start_at_once_against_a_redis_that_does_not_answer_yet() {
    let redis = PrivateRedis::start();
    let bins = ServiceBinaries::locate().expect("service binaries");
    let mut env = PipelineEnv::fresh("busyredis").await.expect("a fresh run (is the stack up?)");
    env.redis_url = redis.url();
    // Redis answers nothing for 12 s (its clients' replies time out after 5 s).
    let pause = std::process::Command::new("redis-cli")
        .args(["-u", &redis.url(), "CLIENT", "PAUSE", "12000", "ALL"])
        .output()
        .expect("redis-cli");
    assert!(pause.status.success(), "CLIENT PAUSE: {pause:?}");
    let began = Instant::now();
    let (writer, archiver, dispatcher) = tokio::join!(
        Service::start(ServiceKind::Writer, &bins, &env, &[]),
        Service::start(ServiceKind::Archiver, &bins, &env, &[]),
        Service::start(ServiceKind::Dispatcher, &bins, &env, &[]),
    );
    let took = began.elapsed();
    let services = [
        writer.expect("the writer starts"),
        archiver.expect("the archiver starts"),
        dispatcher.expect("the dispatcher starts"),
    ];
    assert!(took >= Duration::from_secs(10), "the services waited for Redis ({took:?})");
    for s in &services {
        let log = std::fs::read_to_string(s.log_path()).unwrap();
        assert!(log.contains("start-up step failed; retrying"), "{} waited for Redis: {log}", s.kind());
    }
    println!("busy redis: the writer, the archiver and the dispatcher were ready {took:?} after they started at once");
    let [writer, archiver, dispatcher] = services;
    Pipeline::from_services(writer, archiver, dispatcher, &env).stop().await.expect("every service stops cleanly");
}
