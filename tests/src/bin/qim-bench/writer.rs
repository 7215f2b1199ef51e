//! `qim-bench writer`: commits/s and latency through the writer (HTTP → committer → Redis →
//! Kafka, acknowledged at COMMITTED) against a raw loop of the same primitives (one `EVALSHA`
//! with a commit's writes, one produce, await the delivery report), measured in one run.
//!
//! Phases: the raw loop at `--concurrency` and the writer at `--concurrency` (its peak), in
//! [`ROUNDS`] interleaved rounds; then the writer paced at half that peak for a few seconds (open
//! loop: a send is started on schedule whether or not earlier ones finished), whose p99 is the
//! latency target. Each peak path also reports its CPU per operation: this process (the bench's
//! HTTP client and the in-process writer), the Redis server and the Kafka broker (whatever else
//! they did meanwhile counts too), which contention hardly changes; and the writer's mean time
//! per commit stage, from its own `/metrics`.
//!
//! Two more paths per round estimate what a writer could reach: the HTTP hop alone
//! ([`super::http_hop`]: the same client against axum with the writer's JSON shapes, answering at
//! once), and the raw loop with a second `EVALSHA` after the delivery (a send durable before and
//! after its publication, as the state machine needs). If each path keeps the same cores
//! saturated and costs the same per send at any rate, time per send adds up, so a writer whose
//! sends cost exactly the raw loop plus the hop would reach at most `1 / (1/raw + 1/hop)`, and one
//! with the second write `1 / (1/settled + 1/hop)`: the ceilings printed beside the ratio, with a
//! cross-check from CPU per send. The raw scripts keep every key in the conversation's slot, so
//! they run on a Redis Cluster too (`--cluster`: the local stack's cluster, its Redis CPU summed
//! over all nodes); the store keeps a commit in its sender's slot, which costs it more scripts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use qim_store::ids::{ConversationId, TenantId, UserId};
use qim_store::redis::RedisConfig;
use qim_store::retention::RetentionPolicy;
use qim_store::scylla::{migrate, open_session, ScyllaConfig};
use qim_writer::config::{Backend, WriterConfig};
use qim_writer::publisher::ProducerTuning;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::ClientConfig;
use tokio_util::sync::CancellationToken;

use super::path_costs::{kafka_pid, Cpu, Totals};
use super::stages::Stages;
use super::{drive, ms, Args, Measurement};

/// The raw Redis primitive: a commit's writes in one script.
const RAW_SCRIPT: &str = r#"
local seq = redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], seq, ARGV[2])
redis.call('ZADD', KEYS[4], seq, seq)
return seq
"#;

/// The second write of a durable send, after its delivery: the commit marked done.
const RAW_SETTLE_SCRIPT: &str = r#"
redis.call('SET', KEYS[1], ARGV[1])
return 1
"#;

/// How long the paced phase runs.
const PACED_FOR: Duration = Duration::from_secs(10);

/// Creates `topic` with 8 partitions, ready to use.
pub async fn create_topic(brokers: &str, topic: &str) -> anyhow::Result<()> {
    qim_testkit::kafka::create_topics_with(ClientConfig::new().set("bootstrap.servers", brokers), &[(topic, 8)]).await
}

/// Deletes `topic`.
pub async fn delete_topic(brokers: &str, topic: &str) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", brokers).create()?;
    admin.delete_topics(&[topic], &AdminOptions::new()).await?;
    Ok(())
}

/// A producer with the writer's own settings ([`qim_writer::publisher::producer_config`], tuned
/// as `tuning`), warmed up (metadata and producer id fetched) so no measured send waits for its
/// start.
pub async fn producer(brokers: &str, topic: &str, tuning: ProducerTuning) -> anyhow::Result<FutureProducer> {
    let producer: FutureProducer = qim_writer::publisher::producer_config(brokers, tuning).create()?;
    producer
        .send(FutureRecord::to(topic).key("warm-up").payload("warm-up"), Timeout::Never)
        .await
        .map_err(|(e, _)| anyhow::anyhow!("warming the raw producer up: {e}"))?;
    Ok(producer)
}

/// What a raw send does after its delivery report.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum AfterDelivery {
    /// Nothing: the raw loop the writer is measured against.
    Nothing,
    /// A second `EVALSHA` marking the commit done: the least a send costs whose state is durable
    /// both before its publication and after it, as the writer's must be.
    Settle,
}

/// One `EVALSHA` holding a commit's writes, one produce, await its delivery report (then
/// `after`); at `--concurrency`.
pub async fn raw_loop(
    args: &Args,
    conn: &qim_store::redis::RedisConnection,
    producer: &FutureProducer,
    topic: &str,
    namespace: &str,
    first: u64,
    after: AfterDelivery,
) -> anyhow::Result<Measurement> {
    let script = Arc::new(redis::Script::new(RAW_SCRIPT));
    let settle_script = Arc::new(redis::Script::new(RAW_SETTLE_SCRIPT));
    let payload = Arc::new(vec![b'x'; args.payload + 150]);
    let (ns, topic, conversations) = (Arc::new(namespace.to_owned()), Arc::new(topic.to_owned()), args.conversations);
    let (conn, producer) = (conn.clone(), producer.clone());
    drive(args.count, args.concurrency, move |i| {
        let n = first + i;
        let (mut conn, script, settle_script, payload, ns, topic, producer) = (
            conn.clone(),
            script.clone(),
            settle_script.clone(),
            payload.clone(),
            ns.clone(),
            topic.clone(),
            producer.clone(),
        );
        async move {
            let tag = format!("{ns}:{{raw{}}}", n % conversations as u64);
            let commit = format!("{tag}:commit:{n}");
            let _: i64 = script
                .key(format!("{tag}:seq"))
                .key(&commit)
                .key(format!("{tag}:rec"))
                .key(format!("{tag}:idx"))
                .arg(payload.as_slice())
                .arg(payload.as_slice())
                .invoke_async(&mut conn)
                .await?;
            let key = tag.into_bytes();
            producer
                .send(FutureRecord::to(&topic).key(&key).payload(payload.as_slice()), Timeout::Never)
                .await
                .map_err(|(e, _)| anyhow::anyhow!("raw produce: {e}"))?;
            if after == AfterDelivery::Settle {
                let _: i64 = settle_script.key(&commit).arg(payload.as_slice()).invoke_async(&mut conn).await?;
            }
            Ok(())
        }
    })
    .await
}

/// This run's tenant: its conversations are new to the archive's seq high-water marks, which
/// outlive runs in the shared keyspace (a conversation marked by an earlier run would have every
/// first send revalidate its lease by reading the topic's tail back).
fn bench_tenant() -> TenantId {
    let mut id = [9; 16];
    id[12..].copy_from_slice(&std::process::id().to_be_bytes());
    TenantId(id)
}

fn send_body(n: u64, conversations: usize, payload: &str) -> serde_json::Value {
    let mut conversation = [0u8; 16];
    conversation[12..].copy_from_slice(&((n % conversations as u64) as u32).to_be_bytes());
    serde_json::json!({
        "tenant": bench_tenant().to_hex(), "conversation": ConversationId(conversation).to_hex(),
        "sender": UserId([7; 16]).to_hex(),
        "client_message_id": format!("bench-{n}"), "body": payload,
    })
}

/// Makes the bench's sender a member of every conversation it sends to: only members may send.
/// Their cache is filled by the warm-up's first sends (the writer asks the durable table once per
/// conversation); the measured sends are checked within their seq allocation.
async fn join_sender(base: &str, conversations: usize) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    for n in 0..conversations as u64 {
        let conversation = send_body(n, conversations, "")["conversation"].as_str().unwrap_or_default().to_owned();
        let url = format!("{base}/v1/tenants/{}/conversations/{conversation}/members/add", bench_tenant().to_hex());
        let r = http.post(url).json(&serde_json::json!({ "users": [UserId([7; 16]).to_hex()] })).send().await?;
        anyhow::ensure!(r.status() == 200, "adding the sender answered {}", r.status());
    }
    Ok(())
}

async fn send(http: &reqwest::Client, url: &str, body: &serde_json::Value) -> anyhow::Result<()> {
    let r = http.post(url).json(body).send().await?;
    // The body is read whole either way: a connection is reused only once its response was.
    let (status, text) = (r.status(), r.text().await?);
    anyhow::ensure!(status == 200, "the writer answered {status}: {text}");
    Ok(())
}

async fn http_sends(args: &Args, url: &str, first: u64) -> anyhow::Result<Measurement> {
    let http = reqwest::Client::new();
    let (url, payload, conversations) =
        (Arc::new(url.to_owned()), Arc::new("x".repeat(args.payload)), args.conversations);
    drive(args.count, args.concurrency, move |i| {
        let (http, url, payload) = (http.clone(), url.clone(), payload.clone());
        async move { send(&http, &url, &send_body(first + i, conversations, &payload)).await }
    })
    .await
}

/// Sends in flight at most in the paced phase: a stall of the machine (an AOF rewrite's fork,
/// a JVM pause) would otherwise pile up a connection per due send until the process runs out
/// of file descriptors. A send that waits for a slot still counts from when it was due.
const PACED_IN_FLIGHT: usize = 1024;

/// Starts a send every `1/rate` seconds for [`PACED_FOR`]; latency of each from when it was due.
async fn writer_paced(args: &Args, url: &str, rate: f64, first: u64) -> anyhow::Result<Measurement> {
    let http = reqwest::Client::new();
    let interval = Duration::from_secs_f64(1.0 / rate.max(1.0));
    let total = (PACED_FOR.as_secs_f64() * rate) as u64;
    let start = Instant::now();
    let slots = Arc::new(tokio::sync::Semaphore::new(PACED_IN_FLIGHT));
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        let due = start + interval.mul_f64(i as f64);
        tokio::time::sleep_until(due.into()).await;
        let slot = Arc::clone(&slots).acquire_owned().await?;
        let (http, url, body) =
            (http.clone(), url.to_owned(), send_body(first + i, args.conversations, &"x".repeat(args.payload)));
        tasks.push(tokio::spawn(async move {
            let sent = send(&http, &url, &body).await.map(|()| due.elapsed());
            drop(slot);
            sent
        }));
    }
    let mut latencies = Vec::with_capacity(tasks.len());
    for t in tasks {
        latencies.push(t.await??);
    }
    Ok(Measurement::new(&latencies, start.elapsed()))
}

/// Interleaved rounds of the paths (`--count` sends each, split among the rounds), so load from
/// elsewhere on a shared machine falls on all alike.
const ROUNDS: u64 = 3;

/// The paths measured in each round; the discriminant indexes their totals.
#[derive(Clone, Copy)]
enum Path {
    /// [`raw_loop`] with nothing after the delivery.
    Raw = 0,
    /// Sends through the writer, answered at COMMITTED.
    Writer = 1,
    /// Sends to [`super::http_hop`], answered at once.
    HttpHop = 2,
    /// [`raw_loop`] with a second `EVALSHA` after the delivery.
    Settled = 3,
}

const PATHS: [Path; 4] = [Path::Raw, Path::Writer, Path::HttpHop, Path::Settled];

/// The first send index of the warm-up and of the paced phase: far above the `2 × --count`
/// indexes the rounds use (raw sends and settled raw sends take separate ranges), so no phase
/// replays another's client message ids or commit keys.
const WARM_UP_FIRST: u64 = 1 << 40;
const PACED_FIRST: u64 = 1 << 41;

/// A p99 bucket bound as printed: `≤20` (ms), `>last` past the last bound, `n/a` without buckets.
fn bucket_text(bound_ms: Option<f64>) -> String {
    match bound_ms {
        Some(b) if b.is_finite() => format!("≤{b}"),
        Some(_) => ">last".to_owned(),
        None => "n/a".to_owned(),
    }
}

/// The writer the benchmarks run in process: Redis hot tier `redis` over `archive`, publishing to
/// `topic`, its unarchived tail ending at `archiver_group`'s offsets, tuned by `args` (the producer,
/// the commit layout, group commit); port 0, 30-day retention.
pub fn writer_config(
    redis: RedisConfig,
    archive: ScyllaConfig,
    brokers: &str,
    topic: &str,
    archiver_group: &str,
    args: &Args,
) -> anyhow::Result<WriterConfig> {
    Ok(WriterConfig {
        backend: Backend::Redis { redis, archive },
        kafka_brokers: brokers.to_owned(),
        producer: args.producer(),
        messages_topic: topic.to_owned(),
        archiver_group: archiver_group.to_owned(),
        seq_lease_block: qim_store::redis::DEFAULT_LEASE_BLOCK,
        commit_layout: args.commit_layout(),
        group_commit: args.group_commit,
        policy: RetentionPolicy::with_default_days(30)?,
        hot_window_days: 7,
        http_addr: "127.0.0.1:0".parse()?,
        max_body_bytes: 65_536,
        max_in_flight: 1024,
        recovery_grace: Duration::from_secs(30),
        recovery_interval: Duration::from_secs(5),
        auth: qim_runtime::auth::AuthConfig::disabled(),
        log: qim_runtime::telemetry::LogSettings::text("warn"),
        startup_timeout: Duration::from_secs(60),
    })
}

/// Runs the phases and prints the comparison.
pub async fn run(args: &Args) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(args.count < WARM_UP_FIRST / 2, "--count must stay below {}", WARM_UP_FIRST / 2);
    let brokers = std::env::var("QIM_BENCH_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned());
    let id = std::process::id();
    let (topic, namespace) = (format!("qim.bench.writer.{id}"), qim_testkit::stack::unique_name("qimbenchw"));
    create_topic(&brokers, &topic).await.context("creating the benchmark topic (is the stack up?)")?;
    // The writer reads older history from the archive: a migrated single-node keyspace.
    let archive = ScyllaConfig {
        hosts: args.scylla_hosts.split(',').map(str::to_owned).collect(),
        keyspace: "qim_bench_writer".to_owned(),
        local_dc: "datacenter1".to_owned(),
        replication_factor: 1,
    };
    let session = open_session(&archive).await.context("connecting to cassandra (is the stack up?)")?;
    migrate(&session, &archive).await?;
    let redis = RedisConfig { url: args.redis_url(), namespace: namespace.clone() };
    let config = writer_config(redis, archive.clone(), &brokers, &topic, &format!("{topic}.archiver"), args)?;
    let shutdown = CancellationToken::new();
    let writer = qim_writer::serve::start(config, shutdown.clone()).await?;
    let url = format!("http://{}/v1/messages", writer.addr);
    join_sender(&format!("http://{}", writer.addr), args.conversations).await?;
    let metrics_url = format!("http://{}/metrics", writer.addr);
    let raw_ns = qim_testkit::stack::unique_name("qimbenchwraw");
    let raw_conn = qim_store::redis::connect(&RedisConfig { url: args.redis_url(), namespace: raw_ns.clone() }).await?;
    let raw_producer = producer(&brokers, &topic, args.producer()).await?;
    let warm = Args { count: args.concurrency as u64 * 10, ..args.clone() };
    let hop = super::http_hop::HttpHop::start(shutdown.clone()).await?;
    let hop_url = format!("http://{}/v1/messages", hop.addr);
    for after in [AfterDelivery::Nothing, AfterDelivery::Settle] {
        raw_loop(&warm, &raw_conn, &raw_producer, &topic, &raw_ns, WARM_UP_FIRST, after).await?;
    }
    http_sends(&warm, &url, WARM_UP_FIRST).await?;
    http_sends(&warm, &hop_url, WARM_UP_FIRST).await?;
    let mut redis_cpu = super::redis_server::RedisServers::connect(&args.redis_url()).await?;
    let kafka = kafka_pid();
    let http = reqwest::Client::new();
    let stages_before = Stages::read(&http, &metrics_url).await?;
    let per_round = (args.count / ROUNDS).max(args.concurrency as u64);
    let round = Args { count: per_round, ..args.clone() };
    let mut totals: [Totals; 4] = Default::default();
    for r in 0..ROUNDS {
        // Each round starts with another path, so what one path leaves behind (an AOF rewrite,
        // a compaction) does not always fall on the same successor.
        for k in 0..PATHS.len() {
            let path = PATHS[(r as usize + k) % PATHS.len()];
            let before = Cpu::now(&mut redis_cpu, kafka).await?;
            let (first, settled) = (r * per_round, (ROUNDS + r) * per_round);
            let m = match path {
                Path::Raw => {
                    raw_loop(&round, &raw_conn, &raw_producer, &topic, &raw_ns, first, AfterDelivery::Nothing).await?
                }
                Path::Writer => http_sends(&round, &url, first).await?,
                Path::HttpHop => http_sends(&round, &hop_url, first).await?,
                Path::Settled => {
                    raw_loop(&round, &raw_conn, &raw_producer, &topic, &raw_ns, settled, AfterDelivery::Settle).await?
                }
            };
            let cpu = Cpu::now(&mut redis_cpu, kafka).await?.since(&before);
            totals[path as usize].add(per_round, &m, cpu);
        }
    }
    let [raw, peak, hop_alone, settled] = totals;
    let stages_after = Stages::read(&http, &metrics_url).await?;
    let paced = writer_paced(args, &url, peak.per_second() / 2.0, PACED_FIRST).await?;
    let paced_stages = Stages::read(&http, &metrics_url).await?.since(&stages_after);
    let stages = stages_after.since(&stages_before);
    shutdown.cancel();
    writer.wait().await?;
    hop.wait().await?;
    qim_testkit::redis::wipe_namespace(&args.redis_url(), &namespace).await?;
    qim_testkit::redis::wipe_namespace(&args.redis_url(), &raw_ns).await?;
    delete_topic(&brokers, &topic).await?;

    let ratio = peak.per_second() / raw.per_second();
    println!(
        "writer: {} sends, concurrency {}, {} conversations, {}-byte bodies, redis backend ({}, Redis CPU over {} servers, \
         commits in the {:?} layout, group commit {}), kafka acks=all, {ROUNDS} interleaved rounds",
        per_round * ROUNDS,
        args.concurrency,
        args.conversations,
        args.payload,
        args.topology(),
        redis_cpu.servers(),
        args.commit_layout,
        if args.group_commit { "on" } else { "off" },
    );
    println!(
        "  {:<44} {:>8} {:>8} {:>8} {:>11} {:>11} {:>11}",
        "", "per sec", "p50 ms", "p99 ms", "proc µs/op", "redis µs/op", "kafka µs/op"
    );
    let kafka_text = |t: &Totals| t.kafka_micros().map_or("n/a".to_owned(), |k| format!("{k:.1}"));
    let row = |name: &str, t: &Totals| {
        println!(
            "  {:<44} {:>8.0} {:>8.2} {:>8.2} {:>11.1} {:>11.1} {:>11}",
            name,
            t.per_second(),
            t.p50(),
            t.p99(),
            t.micros(t.cpu.process),
            t.micros(t.cpu.redis.cpu),
            kafka_text(t)
        );
    };
    row("raw loop: EVALSHA + produce + await delivery", &raw);
    row("writer at peak (HTTP → COMMITTED)", &peak);
    row("HTTP hop alone (same client, answered at once)", &hop_alone);
    row("raw loop + a second EVALSHA after delivery", &settled);
    println!(
        "  {:<44} {:>8.0} {:>8.2} {:>8.2}",
        "writer paced at half its peak",
        paced.per_second,
        ms(paced.p50),
        ms(paced.p99)
    );
    for (name, t) in [("raw loop", &raw), ("writer at peak", &peak)] {
        let profile: Vec<String> =
            t.redis_profile(8).iter().map(|(c, calls, us)| format!("{c} {calls:.2}×/{us:.1}")).collect();
        let aof = t.aof_bytes_per_op().map_or("n/a (an AOF rewrite in every round)".to_owned(), |b| {
            format!("{b:.0} bytes ({:.1}× the {}-byte body)", b / args.payload as f64, args.payload)
        });
        println!("  {name}, per send: AOF {aof}; Redis command time (calls/µs): {}", profile.join(", "));
    }
    let shown: Vec<String> = stages.iter().map(|f| format!("{} {:.2}", f.name, f.mean_ms)).collect();
    println!("  writer at peak, mean ms per stage: {}", shown.join(", "));
    let shown: Vec<String> =
        paced_stages.iter().map(|f| format!("{} {:.2}/{}", f.name, f.mean_ms, bucket_text(f.p99_bound_ms))).collect();
    println!("  writer paced, mean/p99 bucket ms per stage: {}", shown.join(", "));
    // Assuming each path keeps the same cores saturated and costs the same per send at any rate,
    // time per send adds up: 1/rate(a then b) = 1/rate(a) + 1/rate(b). The CPU figures give a
    // second estimate that does not assume saturation.
    let combined = |a: &Totals, b: &Totals| 1.0 / (1.0 / a.per_second() + 1.0 / b.per_second()) / raw.per_second();
    let (ceiling, durable_ceiling) = (combined(&raw, &hop_alone), combined(&settled, &hop_alone));
    let by_cpu = raw.total_micros() / (settled.total_micros() + hop_alone.total_micros());
    println!("  ratio writer/raw: {ratio:.3} (target ≥ 0.5); p99 at half peak: {:.2} ms (target < 20)", ms(paced.p99));
    println!(
        "  ceiling of the ratio, by rates: {ceiling:.3} for a send costing one raw iteration plus the HTTP hop, \
         {durable_ceiling:.3} with the second EVALSHA (by CPU per send: {by_cpu:.3})"
    );
    Ok(serde_json::json!({
        "count": per_round * ROUNDS, "concurrency": args.concurrency, "rounds": ROUNDS,
        "topology": args.topology(), "redis_servers": redis_cpu.servers(),
        "raw_per_second": raw.per_second(), "raw_p50_ms": raw.p50(), "raw_p99_ms": raw.p99(),
        "writer_per_second": peak.per_second(), "writer_p50_ms": peak.p50(), "writer_p99_ms": peak.p99(),
        "ratio": ratio, "paced_per_second": paced.per_second,
        "http_hop_per_second": hop_alone.per_second(), "http_hop_process_cpu_us": hop_alone.micros(hop_alone.cpu.process),
        "ratio_ceiling": ceiling, "settled_per_second": settled.per_second(),
        "ratio_ceiling_durable": durable_ceiling, "ratio_ceiling_durable_by_cpu": by_cpu,
        "paced_p50_ms": ms(paced.p50), "paced_p99_ms": ms(paced.p99),
        "raw_process_cpu_us": raw.micros(raw.cpu.process), "raw_redis_cpu_us": raw.micros(raw.cpu.redis.cpu),
        "raw_kafka_cpu_us": raw.kafka_micros(),
        "writer_process_cpu_us": peak.micros(peak.cpu.process), "writer_redis_cpu_us": peak.micros(peak.cpu.redis.cpu),
        "writer_kafka_cpu_us": peak.kafka_micros(),
        "raw_aof_bytes_per_send": raw.aof_bytes_per_op(), "writer_aof_bytes_per_send": peak.aof_bytes_per_op(),
        "writer_redis_profile": peak.redis_profile(12).iter().map(|(c, calls, us)| (c.clone(), serde_json::json!({"calls": calls, "usec": us}))).collect::<serde_json::Map<_, _>>(),
        "writer_stage_mean_ms": stages.iter().map(|f| (f.name.clone(), serde_json::json!(f.mean_ms))).collect::<serde_json::Map<_, _>>(),
        "paced_stage_p99_bound_ms": paced_stages.iter().map(|f| (f.name.clone(), serde_json::json!(f.p99_bound_ms))).collect::<serde_json::Map<_, _>>(),
    }))
}
