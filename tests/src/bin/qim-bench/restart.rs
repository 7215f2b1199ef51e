//! `qim-bench restart`: how soon the writer serves after Redis lost everything, with a large
//! topic (DESIGN invariant 7: sends resume per conversation, not after a scan of the topic).
//!
//! The state a loss leaves: a topic of `--count` committed records over `--conversations`
//! conversations, the archiver's group `--tail` records behind its end, the sampled
//! conversations' records archived with their durable seq high-water marks, and a Redis
//! namespace that holds nothing. Measured:
//! - the writer's start (configuration to ready);
//! - the first send after it: a conversation with history revalidates its lease (scan the
//!   unarchived tail, read the conversation's recent records from the archive, write them back,
//!   raise the mark, install the lease);
//! - one send to each of `SAMPLE` other conversations, 32 in flight;
//! - against it, in the same run: one read of the whole topic, which is what a writer that
//!   rebuilt its state from the topic before serving had to do first (a lower bound of it: the
//!   scan alone, without writing anything to Redis).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt;
use qim_store::ids::{ConversationSeq, UnixMillis};
use qim_store::message::{MessageRecord, Publication, PublishedRecord};
use qim_store::redis::{RedisConfig, DEFAULT_LEASE_BLOCK};
use qim_store::retention::RetentionPolicy;
use qim_store::scylla::{migrate, open_session, ScyllaConfig, ScyllaMessageStore};
use qim_store::SeqHighWater;
use qim_writer::tail::TailScanner;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use qim_tests::latency::Latencies;

use super::{ms, Args};

/// Conversations sent to after the restart.
const SAMPLE: usize = 100;
/// Partitions of the benchmark topic.
const PARTITIONS: i32 = 8;

/// Stores the archiver group's offsets `tail` records (spread over the partitions) behind the
/// end of every partition.
fn commit_archiver_offsets(brokers: &str, topic: &str, group: &str, tail: u64) -> anyhow::Result<()> {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()?;
    let mut offsets = TopicPartitionList::new();
    let behind = (tail / PARTITIONS as u64) as i64;
    for p in 0..PARTITIONS {
        let (low, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10))?;
        offsets.add_partition_offset(topic, p, Offset::Offset((high - behind).max(low)))?;
    }
    consumer.commit(&offsets, CommitMode::Sync).context("committing the archiver group's offsets")?;
    Ok(())
}

/// Runs the measurement and prints it.
pub async fn run(args: &Args) -> anyhow::Result<serde_json::Value> {
    let brokers = std::env::var("QIM_BENCH_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned());
    let id = std::process::id();
    let policy = RetentionPolicy::with_default_days(30)?;
    let (topic, group, namespace) = (
        format!("qim.bench.restart.{id}"),
        format!("qim-bench-restart-archiver-{id}"),
        qim_testkit::stack::unique_name("qimbenchr"),
    );
    let scylla = ScyllaConfig {
        hosts: args.scylla_hosts.split(',').map(str::to_owned).collect(),
        keyspace: format!("qim_bench_restart_{id}"),
        local_dc: "datacenter1".to_owned(),
        replication_factor: 1,
    };
    let session = open_session(&scylla).await.context("connecting to cassandra (is the stack up?)")?;
    migrate(&session, &scylla).await?;
    super::writer::create_topic(&brokers, &topic).await.context("creating the benchmark topic")?;
    let conversations = args.conversations.max(SAMPLE + 1);
    let records = super::archiver::records(args.count, conversations, args.payload, &policy);
    let filling = Instant::now();
    super::archiver::fill_topic(&brokers, &topic, &records).await.context("filling the topic")?;
    let fill = filling.elapsed();
    commit_archiver_offsets(&brokers, &topic, &group, args.tail)?;

    // What the pipeline left durable for the sampled conversations: their archived records and
    // their marks (a lease block above their last seq, as the writer leased them).
    let archive = ScyllaMessageStore::connect(&scylla, policy, Arc::new(qim_store::clock::SystemClock)).await?;
    let sampled: Vec<&MessageRecord> = records
        .iter()
        .filter(|r| (u64::from_be_bytes(r.conversation.0[8..].try_into().unwrap()) as usize) <= SAMPLE)
        .collect();
    let published: Vec<PublishedRecord> = sampled
        .iter()
        .enumerate()
        .map(|(i, r)| PublishedRecord {
            record: (*r).clone(),
            publication: Publication { partition: 0, offset: i as i64 },
        })
        .collect();
    for batch in published.chunks(1_000) {
        archive.archive_records(batch, 64).await?;
    }
    let per_conversation = args.count / conversations as u64 + 1;
    let mark = per_conversation.div_ceil(DEFAULT_LEASE_BLOCK) * DEFAULT_LEASE_BLOCK;
    let targets: Vec<_> = {
        let mut seen = std::collections::BTreeSet::new();
        sampled.iter().filter(|r| seen.insert(r.conversation)).map(|r| (r.tenant, r.conversation)).collect()
    };
    for (t, c) in &targets {
        archive.raise_high_water(*t, *c, ConversationSeq(mark)).await?;
    }

    // Only members send: the sender joins each target in the durable table (the restarted
    // writer's cache is empty, so each first send also reads its membership from there).
    let members = qim_store::scylla::ScyllaMembershipStore::connect(&scylla).await?;
    for (t, c) in &targets {
        qim_store::MembershipStore::add_members(&members, *t, *c, &[qim_store::ids::UserId([7; 16])]).await?;
    }
    let redis = RedisConfig { url: args.redis_url(), namespace: namespace.clone() };
    let config = super::writer::writer_config(redis, scylla.clone(), &brokers, &topic, &group, args)?;
    let shutdown = CancellationToken::new();
    let starting = Instant::now();
    let writer = qim_writer::serve::start(config, shutdown.clone()).await?;
    let ready = starting.elapsed();
    let url = format!("http://{}/v1/messages", writer.addr);
    let http = reqwest::Client::new();
    let send = |n: usize| {
        let (http, url) = (http.clone(), url.clone());
        let (tenant, conversation) = targets[n];
        async move {
            let body = serde_json::json!({
                "tenant": tenant.to_hex(), "conversation": conversation.to_hex(), "sender": "07".repeat(16),
                "client_message_id": format!("after-restart-{n}"), "body": "x",
            });
            let began = Instant::now();
            let answer: serde_json::Value =
                http.post(&url).json(&body).send().await?.error_for_status()?.json().await?;
            let seq = answer["conversation_seq"].as_u64().context("a seq")?;
            anyhow::ensure!(seq > mark, "seq {seq} at or below the durable mark {mark}");
            anyhow::Ok(began.elapsed())
        }
    };
    let first = send(0).await?;
    let since_start = starting.elapsed();
    let sending = Instant::now();
    let latencies: Vec<Duration> = futures_util::stream::iter(1..targets.len())
        .map(send)
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    let rest = sending.elapsed();
    shutdown.cancel();
    writer.wait().await?;

    let scanning = Instant::now();
    let whole = TailScanner::new(&brokers, &topic, &format!("{group}-never-committed")).tail_since(scanning).await?;
    let scan = scanning.elapsed();

    let admin = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create::<rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext>>()?;
    admin.delete_topics(&[&topic], &rdkafka::admin::AdminOptions::new()).await?;
    if let Err(e) = session.query_unpaged(format!("DROP KEYSPACE IF EXISTS {}", scylla.keyspace), &[]).await {
        eprintln!("warning: could not drop benchmark keyspace {}: {e}", scylla.keyspace);
    }
    qim_testkit::redis::wipe_namespace(&args.redis_url(), &namespace).await?;

    let (p50, p99) = Latencies::of(&latencies).p50_p99();
    println!(
        "restart after a Redis loss: {} records on the topic over {conversations} conversations (filled in {:.1} s), \
         {} unarchived, {} per sampled conversation archived",
        args.count,
        fill.as_secs_f64(),
        args.tail,
        per_conversation
    );
    println!("  writer start to ready                           {:>9.1} ms", ms(ready));
    println!("  first send (revalidation, restore, lease)       {:>9.1} ms", ms(first));
    println!("  writer start to first accepted send             {:>9.1} ms", ms(since_start));
    println!(
        "  {} more conversations' first sends, 32 in flight {:>9.1} ms in all (p50 {:.1} ms, p99 {:.1} ms)",
        latencies.len(),
        ms(rest),
        ms(p50),
        ms(p99)
    );
    println!(
        "  against: reading the whole topic once          {:>9.1} ms ({} records; what a start that rebuilds from the topic reads first)",
        ms(scan),
        whole.scanned
    );
    Ok(serde_json::json!({
        "records": args.count, "conversations": conversations, "unarchived": args.tail,
        "ready_ms": ms(ready), "first_send_ms": ms(first), "start_to_first_send_ms": ms(since_start),
        "sample_sends": latencies.len(), "sample_ms": ms(rest), "sample_p50_ms": ms(p50), "sample_p99_ms": ms(p99),
        "whole_topic_scan_ms": ms(scan), "whole_topic_records": whole.scanned,
        "measured_at": UnixMillis::now().0,
    }))
}
