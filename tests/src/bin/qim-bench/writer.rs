//! `qim-bench writer`: commits/s and latency through the writer (HTTP → committer → Redis →
//! Kafka, acknowledged at COMMITTED) against a raw loop of the same primitives (one `EVALSHA`
//! with a commit's writes, one produce, await the delivery report), measured in one run.
//!
//! Three phases: the raw loop at `--concurrency`; the writer at `--concurrency` (its peak); the
//! writer paced at half that peak for a few seconds (open loop: a send is started on schedule
//! whether or not earlier ones finished), whose p99 is the latency target.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use qim_store::redis::RedisConfig;
use qim_store::retention::RetentionPolicy;
use qim_store::scylla::{migrate, open_session, ScyllaConfig};
use qim_writer::config::{Backend, WriterConfig};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::ClientConfig;
use tokio_util::sync::CancellationToken;

use super::{drive, ms, Args, Measurement};

/// The raw Redis primitive: a commit's writes in one script.
const RAW_SCRIPT: &str = r#"
local seq = redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], seq, ARGV[2])
redis.call('ZADD', KEYS[4], seq, seq)
return seq
"#;

/// How long the paced phase runs.
const PACED_FOR: Duration = Duration::from_secs(10);

/// Creates `topic` with 8 partitions.
pub async fn create_topic(brokers: &str, topic: &str) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", brokers).create()?;
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    for r in admin.create_topics([&NewTopic::new(topic, 8, TopicReplication::Fixed(1))], &opts).await? {
        r.map_err(|(t, e)| anyhow::anyhow!("creating {t}: {e}"))?;
    }
    Ok(())
}

/// Deletes `topic`.
pub async fn delete_topic(brokers: &str, topic: &str) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", brokers).create()?;
    admin.delete_topics(&[topic], &AdminOptions::new()).await?;
    Ok(())
}

/// The same producer settings as the writer's: idempotent, acks=all.
pub fn producer(brokers: &str) -> anyhow::Result<FutureProducer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "1")
        .set("compression.type", "lz4")
        .create()?)
}

/// The writer's floor: per send one `EVALSHA` with a commit's writes, one produce, and its
/// delivery report.
pub async fn raw_loop(args: &Args, brokers: &str, topic: &str, namespace: &str) -> anyhow::Result<Measurement> {
    let config = RedisConfig { url: args.redis_url.clone(), namespace: namespace.to_owned() };
    let conn = qim_store::redis::connect(&config).await?;
    let producer = producer(brokers)?;
    let script = Arc::new(redis::Script::new(RAW_SCRIPT));
    let payload = Arc::new(vec![b'x'; args.payload + 150]);
    let (ns, topic, conversations) = (Arc::new(namespace.to_owned()), Arc::new(topic.to_owned()), args.conversations);
    drive(args.count, args.concurrency, move |n| {
        let (mut conn, script, payload, ns, topic, producer) =
            (conn.clone(), script.clone(), payload.clone(), ns.clone(), topic.clone(), producer.clone());
        async move {
            let tag = format!("{ns}:{{raw{}}}", n % conversations as u64);
            let _: i64 = script
                .key(format!("{tag}:seq"))
                .key(format!("{ns}:{{rawk{n}}}:commit"))
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
            Ok(())
        }
    })
    .await
}

fn send_body(n: u64, conversations: usize, payload: &str) -> serde_json::Value {
    let mut conversation = [0u8; 16];
    conversation[12..].copy_from_slice(&((n % conversations as u64) as u32).to_be_bytes());
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    serde_json::json!({
        "tenant": hex(&[9; 16]), "conversation": hex(&conversation), "sender": hex(&[7; 16]),
        "client_message_id": format!("bench-{n}"), "body": payload,
    })
}

async fn send(http: &reqwest::Client, url: &str, body: &serde_json::Value) -> anyhow::Result<()> {
    let r = http.post(url).json(body).send().await?;
    anyhow::ensure!(r.status() == 200, "the writer answered {}: {}", r.status(), r.text().await.unwrap_or_default());
    Ok(())
}

async fn writer_peak(args: &Args, url: &str, first: u64) -> anyhow::Result<Measurement> {
    let http = reqwest::Client::new();
    let (url, payload, conversations) =
        (Arc::new(url.to_owned()), Arc::new("x".repeat(args.payload)), args.conversations);
    drive(args.count, args.concurrency, move |i| {
        let (http, url, payload) = (http.clone(), url.clone(), payload.clone());
        async move { send(&http, &url, &send_body(first + i, conversations, &payload)).await }
    })
    .await
}

/// Starts a send every `1/rate` seconds for [`PACED_FOR`]; latency of each.
async fn writer_paced(args: &Args, url: &str, rate: f64, first: u64) -> anyhow::Result<Measurement> {
    let http = reqwest::Client::new();
    let interval = Duration::from_secs_f64(1.0 / rate.max(1.0));
    let total = (PACED_FOR.as_secs_f64() * rate) as u64;
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        tokio::time::sleep_until((start + interval.mul_f64(i as f64)).into()).await;
        let (http, url, body) =
            (http.clone(), url.to_owned(), send_body(first + i, args.conversations, &"x".repeat(args.payload)));
        tasks.push(tokio::spawn(async move {
            let began = Instant::now();
            send(&http, &url, &body).await.map(|()| began.elapsed())
        }));
    }
    let mut latencies = Vec::with_capacity(tasks.len());
    for t in tasks {
        latencies.push(t.await??);
    }
    Ok(Measurement::new(latencies, start.elapsed()))
}

/// Runs the three phases and prints the comparison.
pub async fn run(args: &Args) -> anyhow::Result<serde_json::Value> {
    let brokers = std::env::var("QIM_BENCH_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned());
    let id = std::process::id();
    let (topic, namespace) = (format!("qim.bench.writer.{id}"), format!("qimbenchw{id}"));
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
    let config = WriterConfig {
        backend: Backend::Redis {
            redis: RedisConfig { url: args.redis_url.clone(), namespace: namespace.clone() },
            archive: archive.clone(),
        },
        kafka_brokers: brokers.clone(),
        messages_topic: topic.clone(),
        policy: RetentionPolicy::with_default_days(30)?,
        hot_window_days: 7,
        http_addr: "127.0.0.1:0".parse()?,
        max_body_bytes: 65_536,
        max_in_flight: 1024,
        recovery_grace: Duration::from_secs(30),
        recovery_interval: Duration::from_secs(5),
        api_token: None,
        log: "warn".to_owned(),
    };
    let shutdown = CancellationToken::new();
    let writer = qim_writer::serve::start(config, shutdown.clone()).await?;
    let url = format!("http://{}/v1/messages", writer.addr);
    let warm = Args { count: args.concurrency as u64 * 10, ..args.clone() };
    raw_loop(&warm, &brokers, &topic, &format!("{namespace}raw")).await?;
    writer_peak(&warm, &url, 50_000_000).await?;

    let raw = raw_loop(args, &brokers, &topic, &format!("{namespace}raw")).await?;
    let peak = writer_peak(args, &url, 0).await?;
    let paced = writer_paced(args, &url, peak.per_second / 2.0, 10_000_000).await?;
    shutdown.cancel();
    writer.wait().await?;
    let conn = qim_store::redis::connect(&RedisConfig { url: args.redis_url.clone(), namespace: "qim".into() }).await?;
    super::redis::cleanup(conn, &namespace).await?;
    delete_topic(&brokers, &topic).await?;

    let ratio = peak.per_second / raw.per_second;
    println!(
        "writer: {} sends, concurrency {}, {} conversations, {}-byte bodies, redis backend, kafka acks=all",
        args.count, args.concurrency, args.conversations, args.payload
    );
    println!("  {:<44} {:>10} {:>10} {:>10}", "", "per sec", "p50 ms", "p99 ms");
    let row = |name: &str, m: &Measurement| {
        println!("  {:<44} {:>10.0} {:>10.2} {:>10.2}", name, m.per_second, ms(m.p50), ms(m.p99));
    };
    row("raw loop: EVALSHA + produce + await delivery", &raw);
    row("writer at peak (HTTP → COMMITTED)", &peak);
    row("writer paced at half its peak", &paced);
    println!("  ratio writer/raw: {ratio:.3} (target ≥ 0.5); p99 at half peak: {:.2} ms (target < 20)", ms(paced.p99));
    Ok(serde_json::json!({
        "count": args.count, "concurrency": args.concurrency,
        "raw_per_second": raw.per_second, "raw_p99_ms": ms(raw.p99),
        "writer_per_second": peak.per_second, "writer_p50_ms": ms(peak.p50), "writer_p99_ms": ms(peak.p99),
        "ratio": ratio, "paced_per_second": paced.per_second,
        "paced_p50_ms": ms(paced.p50), "paced_p99_ms": ms(paced.p99),
    }))
}
