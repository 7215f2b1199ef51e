//! `qim-bench archiver`: records/s of the archiver draining a pre-filled topic (decode, validate,
//! archive at LOCAL_QUORUM, archived watermarks in Redis, offsets stored) against a raw loop of
//! the same prepared inserts per record (`message_record`, then `history_index` and
//! `history_expiry`), measured in one run on one server.
//!
//! The archiver's rate is taken from its own `qim_archiver_records_total` counter between the
//! first and the last record archived, so group join and startup do not count against it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use qim_archiver::config::{ArchiverConfig, BatchLimits};
use qim_runtime::kafka::messages::message_record;
use qim_store::ids::{ClientMessageId, ConversationId, ConversationSeq, MessageId, TenantId, UnixMillis, UserId};
use qim_store::message::{MessageKind, MessageRecord};
use qim_store::redis::RedisConfig;
use qim_store::retention::{RetentionClass, RetentionPolicy};
use qim_store::scylla::schema::{hour_bucket, SEQ_BUCKET_SIZE};
use qim_store::scylla::{migrate, open_session, ScyllaConfig};
use qim_store::topic::encode_message;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::FutureProducer;
use rdkafka::ClientConfig;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::Consistency;
use tokio_util::sync::CancellationToken;

use qim_tests::services::Exposition;

use super::{drive, ms, Args, Measurement};

const PARTITIONS: i32 = 8;

/// `n` default-retention records over `conversations` conversations of one fresh tenant, seqs
/// ascending per conversation, as the writer would publish them.
pub fn records(n: u64, conversations: usize, payload: usize, policy: &RetentionPolicy) -> Vec<MessageRecord> {
    let tenant = TenantId(uuid_like(u128::from(n) ^ (u128::from(std::process::id()) << 64)));
    let now = UnixMillis::now();
    (0..n)
        .map(|i| {
            let c = i % conversations as u64;
            let mut conversation = [0u8; 16];
            conversation[8..].copy_from_slice(&c.to_be_bytes());
            MessageRecord {
                tenant,
                conversation: ConversationId(conversation),
                seq: ConversationSeq(i / conversations as u64 + 1),
                message_id: MessageId(uuid_like(u128::from(i) << 1)),
                sender: UserId([7; 16]),
                client_message_id: ClientMessageId::new(format!("bench-{i}")).expect("a valid id"),
                kind: MessageKind::Normal,
                retention: RetentionClass::Default,
                created_at: now,
                expires_at: policy.expires_at(RetentionClass::Default, now),
                payload: vec![b'x'; payload],
            }
        })
        .collect()
}

/// 16 bytes from a counter and the clock (distinct per run and per record).
fn uuid_like(seed: u128) -> [u8; 16] {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    (seed ^ nanos.rotate_left(17)).to_be_bytes()
}

/// Produces `records` to `topic` as the writer would (idempotent, `acks=all`), all queued at once.
pub async fn fill_topic(brokers: &str, topic: &str, records: &[MessageRecord]) -> anyhow::Result<()> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "1000000")
        .create()?;
    let mut pending = Vec::with_capacity(records.len());
    for r in records {
        let m = encode_message(r);
        pending
            .push(producer.send_result(message_record(topic, &m)).map_err(|(e, _)| anyhow::anyhow!("queueing: {e}"))?);
    }
    for p in pending {
        p.await?.map_err(|(e, _)| anyhow::anyhow!("delivering: {e}"))?;
    }
    Ok(())
}

/// The archive's three inserts, prepared as the store prepares them.
pub struct Inserts {
    record: PreparedStatement,
    index: PreparedStatement,
    expiry: PreparedStatement,
}

/// Prepares the archive's three inserts in keyspace `ks`.
pub async fn prepare(session: &Session, ks: &str) -> anyhow::Result<Inserts> {
    let prepare = |cql: String| async move {
        let mut s = session.prepare(cql).await?;
        s.set_consistency(Consistency::LocalQuorum);
        s.set_is_idempotent(true);
        anyhow::Ok(s)
    };
    Ok(Inserts {
        record: prepare(format!(
            "INSERT INTO {ks}.message_record (tenant_id, conversation_id, seq_bucket, conversation_seq, record_blob) \
             VALUES (?, ?, ?, ?, ?) USING TTL ?"
        ))
        .await?,
        index: prepare(format!(
            "INSERT INTO {ks}.history_index (tenant_id, conversation_id, conversation_seq, expires_at) \
             VALUES (?, ?, ?, ?) USING TTL ?"
        ))
        .await?,
        expiry: prepare(format!(
            "INSERT INTO {ks}.history_expiry (hour_bucket, expires_at, tenant_id, conversation_id, conversation_seq) \
             VALUES (?, ?, ?, ?, ?) USING TTL ?"
        ))
        .await?,
    })
}

/// The raw loop: per record its record row, then its index and expiry rows together.
pub async fn raw_loop(
    session: Arc<Session>,
    inserts: Arc<Inserts>,
    records: Arc<Vec<MessageRecord>>,
    concurrency: usize,
) -> anyhow::Result<Measurement> {
    drive(records.len() as u64, concurrency, move |i| {
        let (session, inserts, records) = (session.clone(), inserts.clone(), records.clone());
        async move {
            let r = &records[i as usize];
            let (t, c, seq) = (&r.tenant.0[..], &r.conversation.0[..], r.seq.0 as i64);
            let expires = r.expires_at.map_or(0, |e| e.0);
            let ttl = ((expires - UnixMillis::now().0 + 999) / 1000).max(1) as i32;
            let blob = qim_store::codec::encode_record(r);
            let bucket = (r.seq.0 / SEQ_BUCKET_SIZE) as i64;
            session.execute_unpaged(&inserts.record, (t, c, bucket, seq, &blob, ttl)).await?;
            let (a, b) = tokio::join!(
                session.execute_unpaged(&inserts.index, (t, c, seq, expires, ttl)),
                session.execute_unpaged(&inserts.expiry, (hour_bucket(expires), expires, t, c, seq, ttl + 3600)),
            );
            a?;
            b?;
            Ok(())
        }
    })
    .await
}

/// Records archived so far, from the archiver's `/metrics`.
async fn archived(http: &reqwest::Client, addr: std::net::SocketAddr) -> anyhow::Result<u64> {
    let text = http.get(format!("http://{addr}/metrics")).send().await?.text().await?;
    let archived = Exposition::parse(&text).sum(qim_archiver::metrics::RECORDS, &[("outcome", "archived")]);
    Ok(archived as u64)
}

/// Starts the archiver on the pre-filled topic and measures records/s from its first archived
/// record to its last.
async fn drain(config: ArchiverConfig, total: u64) -> anyhow::Result<f64> {
    let shutdown = CancellationToken::new();
    let running = qim_archiver::serve::start(config, shutdown.clone()).await?;
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(600);
    let (mut first, mut started) = (None, Instant::now());
    loop {
        let n = archived(&http, running.addr).await?;
        if first.is_none() && n > 0 {
            (first, started) = (Some(n), Instant::now());
        }
        if n >= total {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the archiver archived only {n} of {total} records in 10 min");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    shutdown.cancel();
    running.wait().await?;
    Ok((total - first.unwrap_or(0)) as f64 / elapsed.max(0.001))
}

/// Fills the topic, runs the raw loop and the archiver, prints the comparison.
pub async fn run(args: &Args) -> anyhow::Result<serde_json::Value> {
    let brokers = std::env::var("QIM_BENCH_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned());
    let id = std::process::id();
    let policy = RetentionPolicy::with_default_days(30)?;
    let hosts: Vec<String> = args.scylla_hosts.split(',').map(|h| h.trim().to_owned()).collect();
    let probe = scylla::client::session_builder::SessionBuilder::new()
        .known_nodes(&hosts)
        .build()
        .await
        .context("connecting to Cassandra/ScyllaDB (is the stack up?)")?;
    let (dc,) = probe
        .query_unpaged("SELECT data_center FROM system.local", &[])
        .await?
        .into_rows_result()?
        .single_row::<(String,)>()?;
    let scylla =
        ScyllaConfig { hosts, keyspace: format!("qim_bench_archiver_{id}"), local_dc: dc, replication_factor: 1 };
    let session = open_session(&scylla).await?;
    migrate(&session, &scylla).await.context("creating the benchmark keyspace")?;
    let (topic, dlq, namespace) = (
        format!("qim.bench.archiver.{id}"),
        format!("qim.bench.archiver.dlq.{id}"),
        qim_testkit::stack::unique_name("qimbencha"),
    );
    qim_testkit::kafka::create_topics_with(
        ClientConfig::new().set("bootstrap.servers", &brokers),
        &[(&topic, PARTITIONS), (&dlq, 1)],
    )
    .await
    .context("creating the benchmark topics")?;
    let drained = records(args.count, args.conversations, args.payload, &policy);
    fill_topic(&brokers, &topic, &drained).await.context("filling the topic")?;

    let session = Arc::new(session);
    let inserts = Arc::new(prepare(&session, &scylla.keyspace).await?);
    let warm = Arc::new(records(args.concurrency as u64 * 10, args.conversations, args.payload, &policy));
    raw_loop(session.clone(), inserts.clone(), warm, args.concurrency).await?;
    let raw_records = Arc::new(records(args.count, args.conversations, args.payload, &policy));
    let raw = raw_loop(session.clone(), inserts, raw_records, args.concurrency).await?;

    let config = ArchiverConfig {
        scylla: scylla.clone(),
        hot_tier: Some(RedisConfig { url: args.redis_url(), namespace: namespace.clone() }),
        policy,
        hot_window_days: 7,
        kafka_brokers: brokers.clone(),
        messages_topic: topic.clone(),
        dlq_topic: dlq.clone(),
        group: format!("qim-bench-archiver-{id}"),
        batch: BatchLimits {
            max_records: 1000,
            max_wait: Duration::from_millis(20),
            write_concurrency: args.concurrency,
        },
        hole_grace: Duration::from_secs(600),
        trim_interval: Duration::from_secs(30),
        http_addr: "127.0.0.1:0".parse()?,
        log: qim_runtime::telemetry::LogSettings::text("warn"),
        startup_timeout: std::time::Duration::from_secs(30),
    };
    let archiver = drain(config, args.count).await?;

    qim_testkit::redis::wipe_namespace(&args.redis_url(), &namespace).await?;
    if let Err(e) = session.query_unpaged(format!("DROP KEYSPACE IF EXISTS {}", scylla.keyspace), &[]).await {
        eprintln!("warning: could not drop benchmark keyspace {}: {e}", scylla.keyspace);
    }
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", &brokers).create()?;
    admin.delete_topics(&[&topic, &dlq], &AdminOptions::new()).await?;

    let ratio = archiver / raw.per_second;
    println!(
        "archiver: {} records over {} conversations, {}-byte payloads, {PARTITIONS} partitions, write concurrency {}",
        args.count, args.conversations, args.payload, args.concurrency
    );
    println!("  {:<58} {:>10} {:>10} {:>10}", "", "per sec", "p50 ms", "p99 ms");
    println!(
        "  {:<58} {:>10.0} {:>10.2} {:>10.2}",
        "raw loop: record row, then index + expiry rows (LOCAL_QUORUM)",
        raw.per_second,
        ms(raw.p50),
        ms(raw.p99)
    );
    println!("  {:<58} {:>10.0}", "archiver draining the topic (watermarks on, Redis)", archiver);
    println!("  ratio archiver/raw: {ratio:.3} (target ≥ 0.70)");
    Ok(serde_json::json!({
        "count": args.count, "concurrency": args.concurrency, "conversations": args.conversations,
        "raw_per_second": raw.per_second, "raw_p50_ms": ms(raw.p50), "raw_p99_ms": ms(raw.p99),
        "archiver_per_second": archiver, "ratio": ratio,
    }))
}
