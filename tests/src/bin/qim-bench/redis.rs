//! `qim-bench redis`: commits/s through `RedisMessageStore` on the writer's calls
//! (`reserve_and_record` from a member, then `mark_outbox_published_and_committed`) against raw
//! pipelined `EVALSHA` of a script of the same shape (the same keys and writes in one call),
//! measured in one run on the same servers. `--commit-layout conversation` runs the store in the
//! group-commit layout. The member cache of every conversation is filled first, as the writer's
//! authorizer fills it, so the sends' membership is answered within their seq's script.
//!
//! The two paths run in [`ROUNDS`] interleaved rounds (so load from elsewhere on a shared machine
//! falls on both alike), and besides throughput each path reports what it costs per operation,
//! which contention hardly changes: CPU of this process, CPU of the Redis server (from `INFO
//! cpu`, so whatever else that server did meanwhile counts too) and round trips (the store's
//! own count). With `--cluster` both run on the local stack's Redis Cluster, and the Redis CPU is
//! that of all its nodes.

use std::sync::Arc;

use qim_store::clock::SystemClock;
use qim_store::ids::{ClientMessageId, ConversationId, MessageId, TenantId, UserId};
use qim_store::message::{CommitKey, CommitRequest, MessageKind, Publication};
use qim_store::redis::membership_cache::Cached;
use qim_store::redis::{CommitLayout, RedisConfig, RedisMembershipCache, RedisMessageStore};
use qim_store::retention::{RetentionClass, RetentionPolicy};
use qim_store::{HistoryAuthorizer, MessageStore, StoreResult};
use qim_testkit::redis::wipe_namespace;
use qim_testkit::stack::unique_name;

use super::{drive, ms, Args, Measurement};

/// Interleaved rounds per path (`--count` is split among them).
const ROUNDS: u64 = 3;

/// The raw primitive: the writes of one commit (seq counter, commit blob, record, history
/// index, expiry index) in one script, as if the state machine were a single call. Every key
/// carries the conversation's hash tag, so the script is legal on a Redis Cluster too (the store
/// keeps a commit in its sender's slot, which costs it a second script: the raw loop is the
/// lower bound).
const RAW_SCRIPT: &str = r#"
local seq = redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], seq, ARGV[2])
redis.call('ZADD', KEYS[4], seq, seq)
redis.call('ZADD', KEYS[5], ARGV[3], KEYS[3] .. ':' .. seq)
return seq
"#;

/// The benchmark's one sender.
const SENDER: UserId = UserId([7; 16]);

fn request(tenant: TenantId, conv: u32, n: u64, payload: &[u8]) -> CommitRequest {
    let mut c = [0u8; 16];
    c[12..].copy_from_slice(&conv.to_be_bytes());
    CommitRequest {
        key: CommitKey {
            tenant,
            sender: SENDER,
            client_message_id: ClientMessageId::new(format!("bench-{n}")).expect("ascii id"),
        },
        conversation: ConversationId(c),
        kind: MessageKind::Normal,
        retention: RetentionClass::Default,
        payload: payload.to_vec(),
    }
}

/// Admits every sender: asked only when a conversation's member cache can not answer (it is
/// filled before the measured rounds, see [`fill_member_caches`]).
struct Everyone;

#[async_trait::async_trait]
impl HistoryAuthorizer for Everyone {
    async fn authorize_history(&self, _: TenantId, _: ConversationId, _: UserId) -> StoreResult<()> {
        Ok(())
    }
}

/// Fills the member cache of each of the benchmark's conversations with its one sender.
async fn fill_member_caches(config: &RedisConfig, tenant: TenantId, conversations: usize) -> anyhow::Result<()> {
    let cache = RedisMembershipCache::open(config).await?;
    for conv in 0..conversations as u32 {
        let conversation = request(tenant, conv, 0, b"").conversation;
        if let Cached::Miss { generation } = cache.is_member(tenant, conversation, SENDER).await? {
            cache.fill(tenant, conversation, &generation, &[SENDER]).await?;
        }
    }
    Ok(())
}

async fn store_path(
    store: Arc<RedisMessageStore>,
    args: &Args,
    tenant: TenantId,
    first: u64,
) -> anyhow::Result<Measurement> {
    let payload = Arc::new(vec![b'x'; args.payload]);
    let conversations = args.conversations as u64;
    drive(args.count, args.concurrency, move |i| {
        let (store, payload) = (Arc::clone(&store), Arc::clone(&payload));
        async move {
            let n = first + i;
            let req = request(tenant, (n % conversations) as u32, n, &payload);
            let mut id = [0u8; 16];
            id[8..].copy_from_slice(&n.to_be_bytes());
            let c = store.reserve_and_record(&req, MessageId(id), &Everyone).await?;
            let publication = Publication { partition: 0, offset: n as i64 };
            store.mark_outbox_published_and_committed(&req.key, c.intent.message_id, publication).await?;
            Ok(())
        }
    })
    .await
}

/// The raw primitive: pipelined `EVALSHA`s of [`RAW_SCRIPT`] (a commit's writes in one call).
pub async fn raw_path(
    conn: qim_store::redis::RedisConnection,
    args: &Args,
    namespace: &str,
) -> anyhow::Result<Measurement> {
    let script = Arc::new(redis::Script::new(RAW_SCRIPT));
    let payload = Arc::new(vec![b'x'; args.payload]);
    let (ns, conversations) = (Arc::new(namespace.to_owned()), args.conversations as u64);
    drive(args.count, args.concurrency, move |n| {
        let (mut conn, script, payload, ns) =
            (conn.clone(), Arc::clone(&script), Arc::clone(&payload), Arc::clone(&ns));
        async move {
            let tag = format!("{ns}:{{raw{}}}", n % conversations);
            let _: i64 = script
                .key(format!("{tag}:seq"))
                .key(format!("{tag}:commit:{n}"))
                .key(format!("{tag}:rec"))
                .key(format!("{tag}:idx"))
                .key(format!("{tag}:gc"))
                .arg(payload.as_slice())
                .arg(payload.as_slice())
                .arg(n)
                .invoke_async(&mut conn)
                .await?;
            Ok(())
        }
    })
    .await
}

/// What one path did over its rounds.
#[derive(Default)]
struct Totals {
    ops: u64,
    wall: f64,
    p50: Vec<f64>,
    p99: Vec<f64>,
    client_cpu: f64,
    redis_cpu: f64,
    trips: u64,
}

impl Totals {
    fn per_second(&self) -> f64 {
        self.ops as f64 / self.wall
    }

    /// The median round's p50.
    fn p50(&self) -> f64 {
        let mut v = self.p50.clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    /// The worst round's p99.
    fn p99(&self) -> f64 {
        self.p99.iter().copied().fold(0.0, f64::max)
    }

    fn micros_per_op(&self, seconds: f64) -> f64 {
        seconds * 1e6 / self.ops as f64
    }

    fn add(&mut self, ops: u64, m: &Measurement, cost: Cost) {
        self.ops += ops;
        self.wall += ops as f64 / m.per_second;
        self.p50.push(ms(m.p50));
        self.p99.push(ms(m.p99));
        self.client_cpu += cost.client_cpu;
        self.redis_cpu += cost.redis_cpu;
        self.trips += cost.trips;
    }

    fn line(&self, name: &str) -> String {
        format!(
            "  {:<34} {:>10.0} {:>10.2} {:>10.2} {:>12.1} {:>12.1} {:>9.2}",
            name,
            self.per_second(),
            self.p50(),
            self.p99(),
            self.micros_per_op(self.client_cpu),
            self.micros_per_op(self.redis_cpu),
            self.trips as f64 / self.ops as f64
        )
    }
}

/// CPU seconds and round trips spent over one measured stretch.
struct Cost {
    client_cpu: f64,
    redis_cpu: f64,
    trips: u64,
}

/// Runs `path`, measuring what it cost.
async fn costed<F: std::future::Future<Output = anyhow::Result<Measurement>>>(
    redis_cpu: &mut super::redis_server::RedisServers,
    store: &RedisMessageStore,
    path: F,
) -> anyhow::Result<(Measurement, Cost)> {
    let (cpu, server, trips) = (super::cpu::own_seconds(), redis_cpu.seconds().await?, store.round_trips());
    let m = path.await?;
    let (server_after, trips_after) = (redis_cpu.seconds().await?, store.round_trips());
    let cost = Cost {
        client_cpu: super::cpu::own_seconds() - cpu,
        redis_cpu: server_after - server,
        trips: trips_after - trips,
    };
    Ok((m, cost))
}

/// Runs both paths and prints the comparison.
pub async fn run(args: &Args) -> anyhow::Result<serde_json::Value> {
    let namespace = unique_name("qimbench");
    let url = args.redis_url();
    let config = RedisConfig { url: url.clone(), namespace: namespace.clone() };
    let policy = RetentionPolicy::with_default_days(30)?;
    // The high-water marks in process memory: this path measures the Redis steps (the writer
    // benchmark's path raises them in the archive, once per lease block).
    let marks = Arc::new(qim_store::memory::MemorySeqHighWater::new());
    let store = RedisMessageStore::open(&config, policy, Arc::new(SystemClock)).await?;
    let layout = args.commit_layout();
    let store = store.with_seq_leases(qim_store::redis::SeqLeases::new(marks)).with_commit_layout(layout);
    let store = Arc::new(store.with_group_commit(args.group_commit));
    let tenant = TenantId([9; 16]);
    fill_member_caches(&config, tenant, args.conversations).await?;
    let warm = Args { count: (args.concurrency as u64) * 20, ..args.clone() };
    store_path(Arc::clone(&store), &warm, tenant, 10_000_000).await?;
    let conn = qim_store::redis::connect(&config).await?;
    let mut redis_cpu = super::redis_server::RedisServers::connect(&url).await?;
    let warm_ns = unique_name("qimbenchwarm");
    raw_path(conn.clone(), &warm, &warm_ns).await?;

    let per_round = (args.count / ROUNDS).max(args.concurrency as u64);
    let round = Args { count: per_round, ..args.clone() };
    let (mut raw, mut through_store) = (Totals::default(), Totals::default());
    for r in 0..ROUNDS {
        let path = raw_path(conn.clone(), &round, &namespace);
        let (m, mut cost) = costed(&mut redis_cpu, &store, path).await?;
        cost.trips = per_round; // one pipelined EVALSHA per operation, outside the store's count
        raw.add(per_round, &m, cost);
        let path = store_path(Arc::clone(&store), &round, tenant, r * per_round);
        let (m, cost) = costed(&mut redis_cpu, &store, path).await?;
        through_store.add(per_round, &m, cost);
    }
    drop(conn);
    wipe_namespace(&url, &namespace).await?;
    wipe_namespace(&url, &warm_ns).await?;

    let ratio = through_store.per_second() / raw.per_second();
    let cost = |t: &Totals| t.micros_per_op(t.client_cpu + t.redis_cpu);
    let cost_ratio = cost(&through_store) / cost(&raw);
    println!(
        "redis commit path: {} commits, commits in the {} slot, group commit {}, concurrency {}, {} conversations, {}-byte payloads, \
         {ROUNDS} interleaved rounds, {} (Redis CPU over {} servers)",
        per_round * ROUNDS,
        if layout == CommitLayout::InSenderSlot { "sender" } else { "conversation" },
        if args.group_commit { "on" } else { "off" },
        args.concurrency,
        args.conversations,
        args.payload,
        args.topology(),
        redis_cpu.servers()
    );
    println!(
        "  {:<34} {:>10} {:>10} {:>10} {:>12} {:>12} {:>9}",
        "", "per sec", "p50 ms", "p99 ms", "client µs/op", "redis µs/op", "trips/op"
    );
    println!("{}", raw.line("raw pipelined EVALSHA (1 script)"));
    println!("{}", through_store.line("store reserve→committed"));
    println!("  ratio store/raw: {ratio:.3}");
    println!("  CPU per op (client + redis) store/raw: {cost_ratio:.2}×");
    Ok(serde_json::json!({
        "count": per_round * ROUNDS, "concurrency": args.concurrency, "rounds": ROUNDS,
        "topology": args.topology(), "redis_servers": redis_cpu.servers(), "commit_layout": format!("{layout:?}"), "group_commit": args.group_commit,
        "raw_per_second": raw.per_second(), "store_per_second": through_store.per_second(), "ratio": ratio,
        "store_p50_ms": through_store.p50(), "store_p99_ms": through_store.p99(),
        "raw_client_cpu_us": raw.micros_per_op(raw.client_cpu), "raw_redis_cpu_us": raw.micros_per_op(raw.redis_cpu),
        "store_client_cpu_us": through_store.micros_per_op(through_store.client_cpu),
        "store_redis_cpu_us": through_store.micros_per_op(through_store.redis_cpu),
        "store_round_trips_per_commit": through_store.trips as f64 / through_store.ops as f64,
    }))
}
