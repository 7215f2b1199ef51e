//! `qim-bench scylla`: what each CQL write path costs, measured in one run on one server:
//! plain prepared inserts (LOCAL_QUORUM) against LWT inserts (`IF NOT EXISTS`, LOCAL_SERIAL),
//! so the price of every LWT on a hot path is visible, then mailbox entries through the store
//! against the same per-entry writes (see `scylla_mailbox`).

use std::sync::Arc;

use anyhow::Context;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::statement::{Consistency, SerialConsistency};

use super::{drive, Args, Measurement};

async fn connect(hosts: &str) -> anyhow::Result<Session> {
    let mut builder = SessionBuilder::new();
    for host in hosts.split(',') {
        builder = builder.known_node(host.trim());
    }
    builder
        .build()
        .await
        .with_context(|| format!("connecting to Cassandra/ScyllaDB at {hosts} (deploy/local/stack up)"))
}

async fn plain_inserts(session: Arc<Session>, ks: &str, args: &Args) -> anyhow::Result<Measurement> {
    let mut insert = session.prepare(format!("INSERT INTO {ks}.plain (k, c, v) VALUES (?, ?, ?)")).await?;
    insert.set_consistency(Consistency::LocalQuorum);
    let (insert, payload) = (Arc::new(insert), Arc::new(vec![b'x'; args.payload]));
    let partitions = args.conversations as u64;
    drive(args.count, args.concurrency, move |n| {
        let (session, insert, payload) = (Arc::clone(&session), Arc::clone(&insert), Arc::clone(&payload));
        async move {
            let key = (n % partitions).to_be_bytes().to_vec();
            session.execute_unpaged(&insert, (key, n as i64, payload.as_slice())).await?;
            Ok(())
        }
    })
    .await
}

async fn lwt_inserts(session: Arc<Session>, ks: &str, args: &Args) -> anyhow::Result<Measurement> {
    let mut insert = session.prepare(format!("INSERT INTO {ks}.lwt (k, v) VALUES (?, ?) IF NOT EXISTS")).await?;
    insert.set_consistency(Consistency::LocalQuorum);
    insert.set_serial_consistency(Some(SerialConsistency::LocalSerial));
    let (insert, payload) = (Arc::new(insert), Arc::new(vec![b'x'; args.payload]));
    drive(args.count, args.concurrency, move |n| {
        let (session, insert, payload) = (Arc::clone(&session), Arc::clone(&insert), Arc::clone(&payload));
        async move {
            session.execute_unpaged(&insert, (n.to_be_bytes().to_vec(), payload.as_slice())).await?;
            Ok(())
        }
    })
    .await
}

/// Runs every path and prints the comparison.
pub async fn run(args: &Args) -> anyhow::Result<serde_json::Value> {
    let session = Arc::new(connect(&args.scylla_hosts).await?);
    let (dc,) = session
        .query_unpaged("SELECT data_center FROM system.local", &[])
        .await?
        .into_rows_result()?
        .single_row::<(String,)>()
        .context("reading the local data center")?;
    let ks = format!("qim_bench_{}", std::process::id());
    let ddl = [
        format!("CREATE KEYSPACE {ks} WITH replication = {{'class': 'NetworkTopologyStrategy', '{dc}': 1}}"),
        format!("CREATE TABLE {ks}.plain (k blob, c bigint, v blob, PRIMARY KEY (k, c))"),
        format!("CREATE TABLE {ks}.lwt (k blob PRIMARY KEY, v blob)"),
    ];
    for statement in &ddl {
        session.query_unpaged(statement.as_str(), &[]).await.with_context(|| format!("running {statement}"))?;
    }
    let result = measure(&session, &ks, args).await;
    if let Err(e) = session.query_unpaged(format!("DROP KEYSPACE IF EXISTS {ks}"), &[]).await {
        eprintln!("warning: could not drop benchmark keyspace {ks}: {e}");
    }
    result
}

async fn measure(session: &Arc<Session>, ks: &str, args: &Args) -> anyhow::Result<serde_json::Value> {
    let warm = Args { count: args.concurrency as u64 * 10, ..args.clone() };
    plain_inserts(Arc::clone(session), ks, &warm).await?;
    lwt_inserts(Arc::clone(session), ks, &Args { count: warm.count, ..warm.clone() }).await?;
    let plain = plain_inserts(Arc::clone(session), ks, args).await?;
    // Fresh keys beyond the warm-up's, so every LWT applies.
    let lwt = lwt_inserts(Arc::clone(session), ks, args).await?;
    println!(
        "scylla write paths: {} writes each, concurrency {}, {}-byte values",
        args.count, args.concurrency, args.payload
    );
    println!("  {:<40} {:>10} {:>10} {:>10}", "", "per sec", "p50 ms", "p99 ms");
    for (name, m) in
        [("plain prepared INSERT (LOCAL_QUORUM)", &plain), ("LWT INSERT IF NOT EXISTS (LOCAL_SERIAL)", &lwt)]
    {
        println!("  {:<40} {:>10.0} {:>10.2} {:>10.2}", name, m.per_second, super::ms(m.p50), super::ms(m.p99));
    }
    println!("  ratio LWT/plain: {:.3}", lwt.per_second / plain.per_second);
    let mailbox = super::scylla_mailbox::measure(session, ks, args).await?;
    Ok(serde_json::json!({
        "count": args.count, "concurrency": args.concurrency,
        "plain_per_second": plain.per_second, "lwt_per_second": lwt.per_second,
        "lwt_over_plain": lwt.per_second / plain.per_second, "mailbox": mailbox,
    }))
}
