//! `dlq list | show | redrive` of both services on a real run. After a workload converged, a
//! committed message and a dispatch record are copied into the archiver's and the dispatcher's
//! dead-letter topics as if refused for a cause since fixed (the original record with the
//! `qim-dlq-*` headers a refusal adds). Both are listed (and filtered), shown, re-driven with
//! `--dry-run` (nothing appended) and for real (the dispatch record first, while the router is
//! idle: a re-driven message makes it produce again): each lands on its source partition with a
//! `qim-redriven-from` header (and, with `--to`, on a topic of the operator's choosing), the
//! consumers absorb it (same rows, same receipt), and the checker accepts the run.

use std::time::Duration;

use qim_runtime::kafka::dlq::HEADER_REDRIVEN_FROM;
use qim_runtime::kafka::{dead_letter_headers, dead_letter_source};
use qim_tests::checker::{self, CheckInput};
use qim_tests::services::{run_command, Pipeline, PipelineEnv, ServiceBinaries, ServiceKind};
use qim_tests::workload::{self, Plan};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(10);

/// A record read back: (key, value, headers).
type Raw = (Option<Vec<u8>>, Option<Vec<u8>>, Vec<(String, Option<Vec<u8>>)>);

fn reader(brokers: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "qim-tests-dlq-reader")
        .set("enable.auto.commit", "false")
        .create()
        .expect("a reader")
}

/// The record at `topic`/`partition`/`offset`.
fn read_at(brokers: &str, topic: &str, partition: i32, offset: i64) -> Raw {
    let consumer = reader(brokers);
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(offset)).unwrap();
    consumer.assign(&tpl).unwrap();
    let m = consumer.poll(TIMEOUT).expect("a record within the timeout").expect("a readable record");
    let headers = m
        .headers()
        .map_or_else(Vec::new, |h| h.iter().map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec))).collect());
    (m.key().map(<[u8]>::to_vec), m.payload().map(<[u8]>::to_vec), headers)
}

/// The first partition of `topic` holding a record, with its (low, high) offsets.
fn a_partition_with_records(brokers: &str, topic: &str) -> (i32, i64, i64) {
    let consumer = reader(brokers);
    (0..64)
        .map_while(|p| consumer.fetch_watermarks(topic, p, TIMEOUT).ok().map(|(low, high)| (p, low, high)))
        .find(|(_, low, high)| high > low)
        .unwrap_or_else(|| panic!("{topic} holds no record"))
}

fn end_of(brokers: &str, topic: &str, partition: i32) -> i64 {
    reader(brokers).fetch_watermarks(topic, partition, TIMEOUT).expect("watermarks").1
}

/// Copies `topic`/`partition`/`offset` into `dlq` as a dead letter of `reason`; returns its offset.
async fn dead_letter_copy(brokers: &str, topic: &str, partition: i32, offset: i64, dlq: &str, reason: &str) -> i64 {
    let (key, value, headers) = read_at(brokers, topic, partition, offset);
    let original = headers.iter().map(|(k, v)| (k.as_str(), v.as_deref()));
    let source = dead_letter_source(topic, partition, offset);
    let headers = dead_letter_headers(original, reason, &source, "refused by a bug since fixed");
    let producer: FutureProducer = ClientConfig::new().set("bootstrap.servers", brokers).create().expect("a producer");
    let mut record = FutureRecord::to(dlq).headers(headers).partition(0);
    if let Some(key) = key.as_deref() {
        record = record.key(key);
    }
    if let Some(value) = value.as_deref() {
        record = record.payload(value);
    }
    producer.send(record, TIMEOUT).await.map_err(|(e, _)| e).expect("the copy is delivered").offset
}

/// `<service> dlq ARGS...` in the run's environment; its output.
async fn dlq(kind: ServiceKind, bins: &ServiceBinaries, env: &PipelineEnv, args: &[&str]) -> String {
    let all: Vec<&str> = std::iter::once("dlq").chain(args.iter().copied()).collect();
    let out = run_command(kind, bins, env, &all).await.unwrap_or_else(|e| panic!("dlq {args:?}: {e:#}"));
    println!("$ {} {}\n{out}", kind.name(), all.join(" "));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_shown_and_redriven_to_their_source() {
    let bins = ServiceBinaries::locate().expect("service binaries");
    let env = PipelineEnv::fresh("dlq").await.expect("a fresh run (is the stack up?)");
    let pipeline = Pipeline::start(&bins, &env).await.expect("the pipeline starts");
    let plan = Plan::generate(41, 40, 3, &[10], 0);
    let report = workload::run(pipeline.writer.base_url(), None, &plan, 4, true).await.expect("the workload runs");
    pipeline.converge(&report.acks, Duration::from_secs(90)).await.expect("converges");
    let brokers = env.kafka_brokers.as_str();

    let (mp, _, mhigh) = a_partition_with_records(brokers, &env.messages_topic);
    let archived =
        dead_letter_copy(brokers, &env.messages_topic, mp, mhigh - 1, &env.archiver_dlq_topic, "fixed_bug").await;
    let (dp, _, dhigh) = a_partition_with_records(brokers, &env.dispatch_topic);
    let dispatched =
        dead_letter_copy(brokers, &env.dispatch_topic, dp, dhigh - 1, &env.dispatcher_dlq_topic, "fixed_bug").await;

    // The dispatcher's first: the router is idle until a message is re-driven below.
    let out = dlq(ServiceKind::Dispatcher, &bins, &env, &["list"]).await;
    assert!(out.contains(&format!("0:{dispatched}\tfixed_bug\t{}/{dp}/{}", env.dispatch_topic, dhigh - 1)), "{out}");
    let out = dlq(ServiceKind::Dispatcher, &bins, &env, &["redrive", "--source", &env.dispatch_topic]).await;
    assert!(out.contains("re-drove 1 dead letters"), "{out}");
    assert_eq!(end_of(brokers, &env.dispatch_topic, dp), dhigh + 1, "back on its shard's partition");

    let out = dlq(ServiceKind::Archiver, &bins, &env, &["list"]).await;
    let source = format!("{}/{mp}/{}", env.messages_topic, mhigh - 1);
    assert!(out.contains(&format!("0:{archived}\tfixed_bug\t{source}\trefused by a bug since fixed")), "{out}");
    assert!(out.contains(&format!("1 dead letters in {} (1 in all)", env.archiver_dlq_topic)), "{out}");
    let out = dlq(ServiceKind::Archiver, &bins, &env, &["list", "--reason", "undecodable"]).await;
    assert!(out.contains("0 dead letters in"), "{out}");
    let shown = dlq(ServiceKind::Archiver, &bins, &env, &["show", &format!("0:{archived}")]).await;
    assert!(shown.contains("header qim-dlq-reason: fixed_bug") && shown.contains("value ("), "{shown}");

    let out = dlq(ServiceKind::Archiver, &bins, &env, &["redrive", "--reason", "fixed_bug", "--dry-run"]).await;
    assert!(out.contains("1 dead letters would be re-driven (dry run)"), "{out}");
    assert_eq!(end_of(brokers, &env.messages_topic, mp), mhigh, "a dry run appends nothing");
    let out = dlq(ServiceKind::Archiver, &bins, &env, &["redrive", "--reason", "fixed_bug"]).await;
    assert!(out.contains("re-drove 1 dead letters"), "{out}");
    assert_eq!(end_of(brokers, &env.messages_topic, mp), mhigh + 1, "appended to its source partition");
    let (key, value, headers) = read_at(brokers, &env.messages_topic, mp, mhigh);
    let (okey, ovalue, oheaders) = read_at(brokers, &env.messages_topic, mp, mhigh - 1);
    assert_eq!((&key, &value), (&okey, &ovalue), "the original record, byte for byte");
    let from = dead_letter_source(&env.archiver_dlq_topic, 0, archived);
    assert!(headers.contains(&(HEADER_REDRIVEN_FROM.to_owned(), Some(from.into_bytes()))), "{headers:?}");
    assert!(oheaders.iter().all(|h| headers.contains(h)), "its own headers kept: {headers:?}");
    assert!(!headers.iter().any(|(k, _)| k.starts_with("qim-dlq-")), "{headers:?}");

    // Or to a topic of the operator's choosing, partitioned by key.
    let elsewhere = qim_testkit::stack::unique_name("dlq_elsewhere");
    qim_testkit::kafka::require_topics(&[(elsewhere.as_str(), 1)]).await;
    let out = dlq(ServiceKind::Archiver, &bins, &env, &["redrive", "--reason", "fixed_bug", "--to", &elsewhere]).await;
    assert!(out.contains("re-drove 1 dead letters"), "{out}");
    let (key, value, headers) = read_at(brokers, &elsewhere, 0, 0);
    assert_eq!((key, value), (okey, ovalue), "the same record, in the chosen topic");
    assert!(headers.iter().any(|(k, _)| k == HEADER_REDRIVEN_FROM), "{headers:?}");

    // Both consumers absorb what came back: same rows, same receipt, the same mailboxes.
    pipeline.converge(&report.acks, Duration::from_secs(90)).await.expect("converges after the re-drives");
    pipeline.stop().await.expect("clean stop");
    let input = CheckInput::new(env.clone(), &plan, report.acks.clone(), report.retries_mismatched);
    let verdict = checker::check(&input).await.expect("the checker reads everything");
    println!("{verdict}");
    assert!(verdict.is_ok(), "{verdict}");
    assert_eq!(verdict.counts.mailbox_entries, verdict.counts.expected_mailbox_entries);
}
