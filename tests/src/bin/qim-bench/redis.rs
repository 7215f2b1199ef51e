//! `qim-bench redis`: commits/s through `RedisMessageStore` (reserve → put_record →
//! mark_outbox_published → mark_committed) against raw pipelined `EVALSHA` of a script of the
//! same shape (the same keys and writes in one call), measured in one run on one server.

use std::sync::Arc;

use qim_store::clock::SystemClock;
use qim_store::ids::{ClientMessageId, ConversationId, MessageId, TenantId, UserId};
use qim_store::message::{CommitKey, CommitRequest, MessageKind, Publication};
use qim_store::redis::{RedisConfig, RedisMessageStore};
use qim_store::retention::{RetentionClass, RetentionPolicy};
use qim_store::MessageStore;

use super::{drive, ms, Args, Measurement};

/// The raw primitive: the writes of one commit (seq counter, commit blob, record, history
/// index, expiry index) in one script, as if the state machine were a single call.
const RAW_SCRIPT: &str = r#"
local seq = redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], seq, ARGV[2])
redis.call('ZADD', KEYS[4], seq, seq)
redis.call('ZADD', KEYS[5], ARGV[3], KEYS[3] .. ':' .. seq)
return seq
"#;

fn request(tenant: TenantId, conv: u32, n: u64, payload: &[u8]) -> CommitRequest {
    let mut c = [0u8; 16];
    c[12..].copy_from_slice(&conv.to_be_bytes());
    CommitRequest {
        key: CommitKey {
            tenant,
            sender: UserId([7; 16]),
            client_message_id: ClientMessageId::new(format!("bench-{n}")).expect("ascii id"),
        },
        conversation: ConversationId(c),
        kind: MessageKind::Normal,
        retention: RetentionClass::Default,
        payload: payload.to_vec(),
    }
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
            let c = store.reserve(&req, MessageId(id)).await?;
            store.put_record(&c.intent).await?;
            let publication = Publication { partition: 0, offset: n as i64 };
            store.mark_outbox_published(&req.key, c.intent.message_id, publication).await?;
            store.mark_committed(&req.key, c.intent.message_id).await?;
            Ok(())
        }
    })
    .await
}

async fn raw_path(conn: redis::aio::ConnectionManager, args: &Args, namespace: &str) -> anyhow::Result<Measurement> {
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
                .key(format!("{ns}:{{rawk{n}}}:commit"))
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

/// Runs both paths and prints the comparison.
pub async fn run(args: &Args) -> anyhow::Result<serde_json::Value> {
    let namespace = format!("qimbench{}", std::process::id());
    let config = RedisConfig { url: args.redis_url.clone(), namespace: namespace.clone() };
    let policy = RetentionPolicy::with_default_days(30)?;
    let store = Arc::new(RedisMessageStore::open(&config, policy, Arc::new(SystemClock)).await?);
    store.reseed(&[]).await?;
    let tenant = TenantId([9; 16]);
    let warm = Args { count: (args.concurrency as u64) * 20, ..args.clone() };
    store_path(Arc::clone(&store), &warm, tenant, 10_000_000).await?;
    let conn = qim_store::redis::connect(&config).await?;
    raw_path(conn.clone(), &warm, &format!("{namespace}w")).await?;

    let raw = raw_path(conn.clone(), args, &namespace).await?;
    let through_store = store_path(Arc::clone(&store), args, tenant, 0).await?;
    cleanup(conn, &namespace).await?;

    let ratio = through_store.per_second / raw.per_second;
    println!(
        "redis commit path: {} commits, concurrency {}, {} conversations, {}-byte payloads",
        args.count, args.concurrency, args.conversations, args.payload
    );
    println!("  {:<34} {:>10} {:>10} {:>10}", "", "per sec", "p50 ms", "p99 ms");
    println!(
        "  {:<34} {:>10.0} {:>10.2} {:>10.2}",
        "raw pipelined EVALSHA (1 script)",
        raw.per_second,
        ms(raw.p50),
        ms(raw.p99)
    );
    println!(
        "  {:<34} {:>10.0} {:>10.2} {:>10.2}",
        "store reserve→committed",
        through_store.per_second,
        ms(through_store.p50),
        ms(through_store.p99)
    );
    println!("  ratio store/raw: {ratio:.3}");
    Ok(serde_json::json!({
        "count": args.count, "concurrency": args.concurrency,
        "raw_per_second": raw.per_second, "store_per_second": through_store.per_second, "ratio": ratio,
        "store_p50_ms": ms(through_store.p50), "store_p99_ms": ms(through_store.p99),
    }))
}

pub async fn cleanup(mut conn: redis::aio::ConnectionManager, namespace: &str) -> anyhow::Result<()> {
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{namespace}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        if !keys.is_empty() {
            redis::cmd("UNLINK").arg(&keys).query_async::<()>(&mut conn).await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}
