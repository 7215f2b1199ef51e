//! `qim-bench dispatcher`: mailbox entries/s through the whole dispatcher (messages topic →
//! router → dispatch topic → shard workers → entries, until every lane watermark passed the
//! last record) against a raw loop of the same per-entry writes on the same backend, in one
//! run, and the LWTs each dispatch record cost (Scylla; Redis has none).
//!
//! Workload: `--members` members in each of 4 conversations of one tenant (default: two runs, 5000
//! and 500); one warm-up message per conversation (each member's first entry of the day
//! registers the day in the retention ledger: that LWT is outside the hot path), then
//! `--count / --members` messages (at least 40, and at least 100 000 entries) produced at once.
//! Shard workers write `--concurrency` chunk batches at once per shard; lane watermarks advance
//! every 250 ms (the default).
//!
//! The raw loop writes the same entries (same users, same event-group bytes) with
//! `--concurrency` entries in flight, each entry with exactly the writes the store makes for it
//! and nothing else (no reads, no scripts, no dispatch bookkeeping): Redis — one MULTI/EXEC of
//! the user's meta generation and ledger, `HSET groups`, `ZADD seqs`, `ZADD exp` and the three
//! key lifetimes; Scylla — the day's bucket-proof `INSERT` then the entry `INSERT`. The best of
//! 1× and 4× that concurrency is the baseline, so the ratio does not flatter the dispatcher.
//! With `--cluster` (or a `redis+cluster://` `--redis-url`) both run on a Redis Cluster, and the
//! Redis CPU per entry sums every node's.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use qim_mailbox_dispatcher::backend;
use qim_mailbox_dispatcher::config::{Backend, DispatcherConfig, KafkaConfig};
use qim_mailbox_dispatcher::serve::start_with;
use qim_runtime::kafka::messages::message_record;
use qim_store::codec::encode_event_group;
use qim_store::ids::{ClientMessageId, ConversationId, ConversationSeq, MessageId, TenantId, UnixMillis, UserId};
use qim_store::mailbox::{shard_of, EventGroup, LaneId, MailboxRetention, MailboxSeq, ShardEpoch, ShardId};
use qim_store::message::{MessageKind, MessageRecord};
use qim_store::redis::RedisConfig;
use qim_store::retention::RetentionClass;
use qim_store::scylla::{migrate, open_session, ScyllaConfig};
use qim_store::topic::encode_message;
use qim_store::MailboxStore;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::FutureProducer;
use tokio_util::sync::CancellationToken;

use super::redis_server::RedisServers;
use super::{drive, Args, Measurement};

const SHARDS: u16 = 8;
const CONVERSATIONS: usize = 4;
const EPOCH: ShardEpoch = ShardEpoch(0);
/// At least this many measured messages (spread over the 4 conversations) and entries, so the
/// pipeline's fill and drain (a few hundred ms: Kafka twice and a 250 ms watermark page) weigh
/// little against the run.
const MIN_MESSAGES: u64 = 40;
const MIN_ENTRIES: u64 = 100_000;

/// Runs the comparison on each backend `--backend` names (`redis`, `scylla` or `both`).
pub async fn run(args: &Args) -> anyhow::Result<serde_json::Value> {
    let kinds: &[&str] = match args.backend.as_str() {
        "both" => &["redis", "scylla"],
        "redis" => &["redis"],
        "scylla" => &["scylla"],
        other => bail!("--backend {other:?}: expected redis, scylla or both"),
    };
    // Large groups (the 10 000-member case halves into 8 shards of ~625) and small ones (where
    // each chunk carries about one recipient, so per-chunk bookkeeping weighs most).
    let sizes: Vec<u64> = if args.members == 0 { vec![5_000, 500] } else { vec![args.members] };
    let mut out = serde_json::Map::new();
    for kind in kinds {
        for members in &sizes {
            let args = Args { members: *members, ..args.clone() };
            out.insert(format!("{kind}_{members}"), measure(kind, &args).await?);
        }
    }
    Ok(serde_json::Value::Object(out))
}

/// One backend's world: topics, namespace or keyspace, cleaned up afterwards.
struct World {
    kafka: KafkaConfig,
    backend: Backend,
}

async fn world(kind: &str, args: &Args) -> anyhow::Result<World> {
    let name = format!("qim_bench_disp_{}_{}", std::process::id(), kind);
    let kafka = KafkaConfig {
        brokers: "127.0.0.1:9092".to_owned(),
        messages_topic: format!("{name}.messages"),
        dispatch_topic: format!("{name}.dispatch"),
        dlq_topic: format!("{name}.dlq"),
        group: name.clone(),
    };
    let topics = [
        (kafka.messages_topic.as_str(), 4),
        (kafka.dispatch_topic.as_str(), i32::from(SHARDS)),
        (kafka.dlq_topic.as_str(), 1),
    ];
    qim_testkit::kafka::create_topics_with(ClientConfig::new().set("bootstrap.servers", &kafka.brokers), &topics)
        .await
        .context("creating the benchmark topics")?;
    // A keyspace either way: the mailboxes' on Scylla, the durable membership table on Redis.
    let hosts: Vec<String> = args.scylla_hosts.split(',').map(str::to_owned).collect();
    let probe = ScyllaConfig { hosts, keyspace: name.clone(), local_dc: String::new(), replication_factor: 1 };
    let session = open_session(&ScyllaConfig { local_dc: "datacenter1".into(), ..probe.clone() }).await?;
    let (dc,) = session
        .query_unpaged("SELECT data_center FROM system.local", &[])
        .await?
        .into_rows_result()?
        .single_row::<(String,)>()?;
    let keyspace = ScyllaConfig { local_dc: dc, ..probe };
    migrate(&session, &keyspace).await.context("migrating the benchmark keyspace")?;
    let backend = match kind {
        "redis" => {
            Backend::Redis { redis: RedisConfig { url: args.redis_url(), namespace: name.clone() }, members: keyspace }
        }
        _ => Backend::Scylla(keyspace),
    };
    Ok(World { kafka, backend })
}

async fn cleanup(w: &World) {
    let admin: Result<AdminClient<DefaultClientContext>, _> =
        ClientConfig::new().set("bootstrap.servers", &w.kafka.brokers).create();
    if let Ok(admin) = admin {
        let topics = [w.kafka.messages_topic.as_str(), w.kafka.dispatch_topic.as_str(), w.kafka.dlq_topic.as_str()];
        let _ = admin.delete_topics(&topics, &AdminOptions::new()).await;
    }
    let keyspace = match &w.backend {
        Backend::Scylla(c) => c,
        Backend::Redis { redis: c, members } => {
            if let Err(e) = qim_testkit::redis::wipe_namespace(&c.url, &c.namespace).await {
                eprintln!("warning: could not remove benchmark keys of {}: {e}", c.namespace);
            }
            members
        }
    };
    if let Ok(s) = open_session(keyspace).await {
        if let Err(e) = s.query_unpaged(format!("DROP KEYSPACE IF EXISTS {}", keyspace.keyspace), &[]).await {
            eprintln!("warning: could not drop benchmark keyspace {}: {e}", keyspace.keyspace);
        }
    }
}

fn user(n: u64) -> UserId {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&std::process::id().to_be_bytes().repeat(2));
    b[8..].copy_from_slice(&n.to_be_bytes());
    UserId(b)
}

fn message(tenant: TenantId, conversation: ConversationId, n: u64, sender: UserId) -> MessageRecord {
    let mut id = [0u8; 16];
    id[..4].copy_from_slice(&std::process::id().to_be_bytes());
    id[8..].copy_from_slice(&n.to_be_bytes());
    MessageRecord {
        tenant,
        conversation,
        seq: ConversationSeq(n + 1),
        message_id: MessageId(id),
        sender,
        client_message_id: ClientMessageId::new(format!("b-{n}")).expect("ascii"),
        kind: MessageKind::Normal,
        retention: RetentionClass::Default,
        created_at: UnixMillis::now(),
        expires_at: None,
        payload: vec![b'x'; 64],
    }
}

/// Enqueues every record at once, then waits for every acknowledgement.
async fn produce(producer: &FutureProducer, topic: &str, records: &[MessageRecord]) -> anyhow::Result<()> {
    let mut deliveries = Vec::with_capacity(records.len());
    for r in records {
        let m = encode_message(r);
        deliveries.push(
            producer
                .send_result(message_record(topic, &m))
                .map_err(|(e, _)| anyhow::anyhow!("enqueueing a message: {e}"))?,
        );
    }
    for d in deliveries {
        d.await?.map_err(|(e, _)| anyhow::anyhow!("producing a message: {e}"))?;
    }
    Ok(())
}

/// Waits until each shard's partition holds `expected[shard]` records and every lane of every
/// shard passed the last one.
async fn drained(store: &Arc<dyn MailboxStore>, topic: &str, expected: &HashMap<ShardId, i64>) -> anyhow::Result<()> {
    let consumer: Arc<BaseConsumer> = Arc::new(
        ClientConfig::new().set("bootstrap.servers", "127.0.0.1:9092").set("group.id", "qim-bench-probe").create()?,
    );
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut done: BTreeSet<ShardId> = BTreeSet::new();
    while done.len() < expected.len() {
        if Instant::now() > deadline {
            bail!("the dispatcher did not finish within 15 minutes");
        }
        for (shard, want) in expected {
            if done.contains(shard) {
                continue;
            }
            let (c, t, p) = (Arc::clone(&consumer), topic.to_owned(), i32::from(shard.0));
            let (_, high) =
                tokio::task::spawn_blocking(move || c.fetch_watermarks(&t, p, Duration::from_secs(10))).await??;
            if high < *want {
                continue;
            }
            let last = u64::try_from(high - 1)?;
            let mut all = true;
            for lane in LaneId::all() {
                if store.lane_watermark(*shard, lane).await?.through.is_none_or(|w| w < last) {
                    all = false;
                    break;
                }
            }
            if all {
                done.insert(*shard);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn measure(kind: &str, args: &Args) -> anyhow::Result<serde_json::Value> {
    let w = world(kind, args).await?;
    let result = measure_in(kind, &w, args).await;
    cleanup(&w).await;
    result
}

async fn measure_in(kind: &str, w: &World, args: &Args) -> anyhow::Result<serde_json::Value> {
    let retention = MailboxRetention::default();
    let stores = backend::open(&w.backend, retention).await?;
    let tenant = TenantId([9; 16]);
    let members = args.members;
    let mut conversations = Vec::new();
    for c in 0..CONVERSATIONS as u64 {
        let conversation = ConversationId([c as u8 + 1; 16]);
        let users: Vec<UserId> = (0..members).map(|i| user(c * members + i)).collect();
        for batch in users.chunks(qim_store::MAX_MEMBERS_PER_CALL) {
            stores.members.add_members(tenant, conversation, batch).await?;
        }
        let shards: BTreeSet<ShardId> = users.iter().map(|u| shard_of(&tenant, u, SHARDS)).collect();
        conversations.push((conversation, users, shards));
    }
    let config = DispatcherConfig {
        backend: w.backend.clone(),
        kafka: w.kafka.clone(),
        shards: SHARDS,
        epoch: EPOCH,
        retention,
        chunks_in_flight: args.concurrency,
        keep_dispatches: Duration::from_secs(86_400),
        // What a deployment runs by default (`QIM_DISPATCH_ADVANCE_MILLIS`).
        advance_every: Duration::from_millis(250),
        http_addr: "127.0.0.1:0".parse()?,
        auth: qim_runtime::auth::AuthConfig::disabled(),
        log: qim_runtime::telemetry::LogSettings::text("warn"),
        startup_timeout: std::time::Duration::from_secs(30),
    };
    let metrics = qim_runtime::telemetry::install_metrics();
    let scylla = stores.scylla.clone();
    let probe = Arc::clone(&stores.mailbox);
    let shutdown = CancellationToken::new();
    let running = start_with(config, stores, metrics, shutdown.clone()).await?;
    let producer: FutureProducer =
        ClientConfig::new().set("bootstrap.servers", &w.kafka.brokers).set("linger.ms", "1").create()?;

    // Warm-up: one message per conversation.
    let mut expected: HashMap<ShardId, i64> = HashMap::new();
    let mut n = 0u64;
    let mut batch = |count: u64, expected: &mut HashMap<ShardId, i64>| -> Vec<MessageRecord> {
        (0..count)
            .map(|_| {
                let (conversation, users, shards) = &conversations[(n % CONVERSATIONS as u64) as usize];
                for s in shards {
                    *expected.entry(*s).or_default() += 1;
                }
                n += 1;
                message(tenant, *conversation, n, users[0])
            })
            .collect()
    };
    let warm = batch(CONVERSATIONS as u64, &mut expected);
    produce(&producer, &w.kafka.messages_topic, &warm).await?;
    drained(&probe, &w.kafka.dispatch_topic, &expected).await?;
    let lwts_before = scylla.as_ref().map_or(0, |s| s.lwt_count());

    let messages = (args.count / members).max(MIN_ENTRIES.div_ceil(members)).max(MIN_MESSAGES);
    let measured = batch(messages, &mut expected);
    let records: i64 = measured
        .iter()
        .map(|m| conversations.iter().find(|c| c.0 == m.conversation).map_or(0, |c| c.2.len() as i64))
        .sum();
    let mut redis_servers = match kind {
        "redis" => Some(RedisServers::connect(&args.redis_url()).await?),
        _ => None,
    };
    let redis_before = match &mut redis_servers {
        Some(servers) => Some(servers.stats().await?),
        None => None,
    };
    let started = Instant::now();
    produce(&producer, &w.kafka.messages_topic, &measured).await?;
    drained(&probe, &w.kafka.dispatch_topic, &expected).await?;
    let wall = started.elapsed();
    let redis_used = match (&mut redis_servers, &redis_before) {
        (Some(servers), Some(before)) => Some(servers.stats().await?.since(before)),
        _ => None,
    };
    let hot_lwts = scylla.as_ref().map_or(0, |s| s.lwt_count()) - lwts_before;
    shutdown.cancel();
    running.wait().await?;
    let entries = messages * members;
    let through = entries as f64 / wall.as_secs_f64();

    let users: Arc<Vec<UserId>> = Arc::new(conversations.iter().flat_map(|c| c.1.clone()).collect());
    let raw = best_raw(kind, w, args, tenant, &users, entries).await?;
    println!(
        "dispatcher ({kind}): {messages} messages × {members} members = {entries} entries, {records} dispatch records"
    );
    println!("  {:<48} {:>10} {:>10} {:>10}", "", "per sec", "p50 ms", "p99 ms");
    println!(
        "  {:<48} {:>10.0} {:>10.2} {:>10.2}",
        format!("raw loop of the same per-entry writes (c={})", raw.1),
        raw.0.per_second,
        super::ms(raw.0.p50),
        super::ms(raw.0.p99)
    );
    println!("  {:<48} {:>10.0} {:>10} {:>10}", "entries through the dispatcher", through, "-", "-");
    println!("  ratio dispatcher/raw: {:.3} (target ≥ 1.0)", through / raw.0.per_second);
    let lwt_line = match kind {
        "scylla" => format!("{hot_lwts} for {records} records ({:.3} per record)", hot_lwts as f64 / records as f64),
        _ => "0 (Redis has no LWT)".to_owned(),
    };
    println!("  LWTs on the hot path: {lwt_line}");
    if let Some(used) = &redis_used {
        let per_entry = |v: f64| v / entries as f64;
        let profile: Vec<String> = used
            .top_commands(8)
            .iter()
            .map(|(c, t)| format!("{c} {:.3}×/{:.2}", per_entry(t.calls as f64), per_entry(t.usec as f64)))
            .collect();
        println!(
            "  Redis per entry (the dispatcher's phase, whatever else ran): CPU {:.2} µs (target ≤ 12); \
             command time (calls/µs): {}",
            per_entry(used.cpu * 1e6),
            profile.join(", ")
        );
    }
    Ok(serde_json::json!({
        "messages": messages, "members": members, "entries": entries, "records": records,
        "dispatcher_entries_per_second": through, "raw_entries_per_second": raw.0.per_second,
        "raw_concurrency": raw.1, "dispatcher_over_raw": through / raw.0.per_second, "hot_path_lwts": hot_lwts,
        "redis_cpu_us_per_entry": redis_used.as_ref().map(|u| u.cpu * 1e6 / entries as f64),
    }))
}

/// The faster of the raw loop at `--concurrency` and at four times that.
async fn best_raw(
    kind: &str,
    w: &World,
    args: &Args,
    tenant: TenantId,
    users: &Arc<Vec<UserId>>,
    entries: u64,
) -> anyhow::Result<(Measurement, usize)> {
    let mut best: Option<(Measurement, usize)> = None;
    for concurrency in [args.concurrency, args.concurrency * 4] {
        let m = match (kind, &w.backend) {
            ("redis", Backend::Redis { redis: c, .. }) => raw_redis(c, tenant, users, entries, concurrency).await?,
            (_, Backend::Scylla(c)) => raw_scylla(c, tenant, users, entries, concurrency).await?,
            _ => bail!("backend mismatch"),
        };
        if best.as_ref().is_none_or(|(b, _)| m.per_second > b.per_second) {
            best = Some((m, concurrency));
        }
    }
    best.context("no raw measurement")
}

/// The group one entry carries (a fresh seq above everything the dispatcher wrote).
fn group(tenant: TenantId, user: UserId, n: u64) -> EventGroup {
    let record = message(tenant, ConversationId([1; 16]), 1_000_000 + n, user);
    let seq = MailboxSeq::new(EPOCH, 1_000_000 + n).expect("small position");
    let retention = MailboxRetention::default();
    let m = qim_store::mailbox::DispatchManifest::new(
        qim_store::mailbox::DispatchId { message_id: record.message_id, shard: ShardId(0) },
        qim_mailbox_dispatcher::router::route::message_ref(&record),
        vec![user],
    );
    let e = m.entry_for(user, seq, &retention);
    EventGroup { tenant, user, seq, expires_at: e.expires_at, events: vec![e.event] }
}

/// A retention ledger blob of one day's size (what the store rewrites with every entry).
const LEDGER: [u8; 30] = *b"QRL\x01\x00\x01xxxxxxxxxxxxxxxxxxxxxxxx";

async fn raw_redis(
    c: &RedisConfig,
    tenant: TenantId,
    users: &Arc<Vec<UserId>>,
    entries: u64,
    concurrency: usize,
) -> anyhow::Result<Measurement> {
    // The store's connection: one server or a cluster, as the URL says (a user's keys share a slot).
    let conn = qim_store::redis::connect(c).await?;
    let (ns, users) = (c.namespace.clone(), Arc::clone(users));
    drive(entries, concurrency, move |n| {
        let (mut conn, ns, users) = (conn.clone(), ns.clone(), Arc::clone(&users));
        async move {
            let u = users[(n % users.len() as u64) as usize];
            let g = group(tenant, u, n);
            let tag = format!("{ns}:{{u:{}{}}}", tenant.to_hex(), u.to_hex());
            let seq = g.seq.as_u64().to_be_bytes();
            let (meta, groups, seqs, exp) =
                (format!("{tag}:meta"), format!("{tag}:groups"), format!("{tag}:seqs"), format!("{tag}:exp"));
            let keep = 40 * qim_store::ids::MILLIS_PER_DAY;
            redis::pipe()
                .atomic()
                .hincr(&meta, "gen", 1)
                .ignore()
                .hset(&meta, "ledger", &LEDGER[..])
                .ignore()
                .hset(&groups, &seq[..], encode_event_group(&g))
                .ignore()
                .zadd(&seqs, &seq[..], 0)
                .ignore()
                .zadd(&exp, &seq[..], g.expires_at.0)
                .ignore()
                .pexpire(&groups, keep)
                .ignore()
                .pexpire(&seqs, keep)
                .ignore()
                .pexpire(&exp, keep)
                .ignore()
                .query_async::<()>(&mut conn)
                .await?;
            Ok(())
        }
    })
    .await
}

async fn raw_scylla(
    c: &ScyllaConfig,
    tenant: TenantId,
    users: &Arc<Vec<UserId>>,
    entries: u64,
    concurrency: usize,
) -> anyhow::Result<Measurement> {
    let session = Arc::new(open_session(c).await?);
    let ks = &c.keyspace;
    let proof = Arc::new(
        session
            .prepare(format!(
                "INSERT INTO {ks}.mailbox_retention_bucket_v3 (tenant_id, user_id, expiry_day, epoch, max_seq, \
                 expires_at) VALUES (?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
            ))
            .await?,
    );
    let entry = Arc::new(
        session
            .prepare(format!(
                "INSERT INTO {ks}.mailbox_entry (tenant_id, user_id, mailbox_seq, grp) VALUES (?, ?, ?, ?) USING TTL ?"
            ))
            .await?,
    );
    let users = Arc::clone(users);
    drive(entries, concurrency, move |n| {
        let (session, proof, entry, users) =
            (Arc::clone(&session), Arc::clone(&proof), Arc::clone(&entry), Arc::clone(&users));
        async move {
            let u = users[(n % users.len() as u64) as usize];
            let g = group(tenant, u, n);
            let seq = i64::try_from(g.seq.as_u64())?;
            let day = g.expires_at.0 / qim_store::ids::MILLIS_PER_DAY;
            let ttl = 40 * 86_400i32;
            session
                .execute_unpaged(&proof, (&tenant.0[..], &u.0[..], day, 0i32, seq, g.expires_at.0, seq + i64::MIN + 1))
                .await?;
            session.execute_unpaged(&entry, (&tenant.0[..], &u.0[..], seq, encode_event_group(&g), ttl)).await?;
            Ok(())
        }
    })
    .await
}
