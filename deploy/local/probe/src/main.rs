//! qim-stack-probe: what the local stack (`deploy/local/stack`) asks its servers before it calls
//! them ready, through the clients the services use.
//!
//! ```text
//! qim-stack-probe cql [--host 127.0.0.1] [--port 9042] [--timeout 5] [--lwt] [--ring N]
//! ```
//!
//! `cql` connects with the scylla driver to the node given, and to no other (a host filter: the
//! node itself coordinates every query), reads `release_version` from `system.local` and
//! prints it; with `--lwt` it also creates a throwaway keyspace, runs `INSERT ... IF NOT EXISTS`
//! twice (the first must apply, the second must not), reads the row back and drops the keyspace.
//! With `--ring N` the node must also see the ring whole, as `nodetool status` showing N nodes
//! UN would: N endpoints in status NORMAL in its gossip (`system_views.gossip_info`), and a read
//! at consistency ALL of `system_distributed` (replicated to N nodes or more) that it
//! coordinates, which it refuses while it deems any replica down and which every replica must
//! answer. Exit 0 when every step answered; otherwise the reason on stderr and exit 1.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::policies::host_filter::AllowListHostFilter;
use scylla::statement::unprepared::Statement;
use scylla::statement::{Consistency, SerialConsistency};
use scylla::value::{CqlValue, Row};

#[derive(Parser)]
#[command(name = "qim-stack-probe", version, about = "Readiness probes of the local stack's servers")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Cassandra/ScyllaDB: a CQL query (and, with --lwt, lightweight transactions) answers.
    Cql(CqlArgs),
}

#[derive(clap::Args)]
struct CqlArgs {
    /// The node's address.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Its CQL port.
    #[arg(long, default_value_t = 9042)]
    port: u16,
    /// Seconds each step may take.
    #[arg(long, default_value_t = 5)]
    timeout: u64,
    /// Also check lightweight transactions (a throwaway keyspace, created and dropped).
    #[arg(long)]
    lwt: bool,
    /// Also check that the node sees a ring of this many nodes, all NORMAL and answering.
    #[arg(long)]
    ring: Option<usize>,
}

/// The throwaway keyspace of `--lwt`.
const SELFTEST_KEYSPACE: &str = "qim_stack_selftest";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let Command::Cql(args) = Cli::parse().command;
    match cql(&args).await {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("qim-stack-probe cql: {}:{}: {e:#}", args.host, args.port);
            ExitCode::FAILURE
        }
    }
}

async fn cql(args: &CqlArgs) -> anyhow::Result<String> {
    let timeout = Duration::from_secs(args.timeout.max(1));
    let node = format!("{}:{}", args.host, args.port);
    let only = AllowListHostFilter::new([node.as_str()]).context("resolving the node's address")?;
    let builder = SessionBuilder::new()
        .known_node(&node)
        .host_filter(Arc::new(only))
        .connection_timeout(timeout)
        .metadata_request_clientside_timeout(timeout);
    let session = tokio::time::timeout(timeout * 2, builder.build())
        .await
        .context("no session in time")?
        .context("connecting")?;
    let mut version = release_version(&session).await?;
    if let Some(nodes) = args.ring {
        let seen = ring_check(&session, nodes).await?;
        version = format!("{version} (ring: {seen})");
    }
    if !args.lwt {
        return Ok(version);
    }
    let checked = lwt_check(&session).await;
    let dropped = session.query_unpaged(format!("DROP KEYSPACE IF EXISTS {SELFTEST_KEYSPACE}"), &[]).await;
    checked?;
    dropped.context("dropping the self-test keyspace")?;
    Ok(format!("{version} (LWT ok)"))
}

async fn release_version(session: &Session) -> anyhow::Result<String> {
    let rows = session
        .query_unpaged("SELECT release_version FROM system.local", &[])
        .await
        .context("reading system.local")?
        .into_rows_result()
        .context("system.local returned no rows")?;
    let (version,): (Option<String>,) = rows.maybe_first_row()?.context("system.local returned no row")?;
    version.context("system.local has no release_version")
}

/// The ring as the session's one node sees it: `nodes` endpoints NORMAL in its gossip, and a
/// read at ALL it coordinates over a keyspace replicated to at least `nodes` nodes.
async fn ring_check(session: &Session, nodes: usize) -> anyhow::Result<String> {
    let rows = session
        .query_unpaged("SELECT address, status, status_with_port FROM system_views.gossip_info", &[])
        .await
        .context("reading system_views.gossip_info")?
        .into_rows_result()?;
    let mut normal = Vec::new();
    let mut other = Vec::new();
    for row in rows.rows::<(std::net::IpAddr, Option<String>, Option<String>)>()? {
        let (address, status, with_port) = row?;
        let status = with_port.or(status).unwrap_or_default();
        if status.starts_with("NORMAL") {
            normal.push(address.to_string());
        } else {
            other.push(format!("{address} {:?}", status.split(',').next().unwrap_or_default()));
        }
    }
    normal.sort();
    if normal.len() != nodes {
        bail!(
            "{} of {nodes} nodes NORMAL in gossip ({}; others: {})",
            normal.len(),
            normal.join(" "),
            other.join(", ")
        );
    }
    let rows = session
        .query_unpaged(
            "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = 'system_distributed'",
            &[],
        )
        .await
        .context("reading system_distributed's replication")?
        .into_rows_result()?;
    let (replication,): (std::collections::HashMap<String, String>,) =
        rows.maybe_first_row()?.context("no system_distributed keyspace")?;
    let rf: usize = replication.get("replication_factor").and_then(|r| r.parse().ok()).unwrap_or(0);
    if rf < nodes {
        bail!("system_distributed is replicated to {rf} nodes, fewer than {nodes}: a read at ALL would not reach all");
    }
    let mut all = Statement::new(
        "SELECT status FROM system_distributed.view_build_status \
         WHERE keyspace_name = 'qim_stack_probe' AND view_name = 'ring'",
    );
    all.set_consistency(Consistency::All);
    session.query_unpaged(all, &[]).await.context("a read at consistency ALL")?;
    Ok(format!("{} NORMAL, read at ALL ok", normal.join(" ")))
}

/// Waits (10 s at most) until every peer the node knows reports the node's own schema version.
async fn schema_agreed(session: &Session) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let local = session.query_unpaged("SELECT schema_version FROM system.local", &[]).await?.into_rows_result()?;
        let (mine,): (Option<uuid::Uuid>,) = local.maybe_first_row()?.context("system.local returned no row")?;
        let peers =
            session.query_unpaged("SELECT schema_version FROM system.peers_v2", &[]).await?.into_rows_result()?;
        let versions = peers.rows::<(Option<uuid::Uuid>,)>()?.collect::<Result<Vec<_>, _>>()?;
        if versions.iter().all(|(v,)| *v == mine) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("the ring's schema versions do not agree after 10 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn lwt_check(session: &Session) -> anyhow::Result<()> {
    session
        .query_unpaged(
            format!(
                "CREATE KEYSPACE IF NOT EXISTS {SELFTEST_KEYSPACE} WITH replication = \
                 {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
            ),
            &[],
        )
        .await
        .context("creating the self-test keyspace")?;
    session
        .query_unpaged(format!("CREATE TABLE IF NOT EXISTS {SELFTEST_KEYSPACE}.t (k uuid PRIMARY KEY, v text)"), &[])
        .await
        .context("creating the self-test table")?;
    // The driver awaits schema agreement only among the nodes it is connected to, here one: on a
    // ring the replica of the LWT's key may not have the table yet (INCOMPATIBLE_SCHEMA).
    schema_agreed(session).await?;
    let key = uuid::Uuid::new_v4();
    let mut applied = Vec::new();
    for value in ["first", "second"] {
        let mut insert =
            Statement::new(format!("INSERT INTO {SELFTEST_KEYSPACE}.t (k, v) VALUES (?, ?) IF NOT EXISTS"));
        insert.set_consistency(Consistency::Quorum);
        insert.set_serial_consistency(Some(SerialConsistency::Serial));
        let result = session.query_unpaged(insert, (key, value)).await.context("an LWT insert")?;
        let rows = result.into_rows_result().context("an LWT returned no rows")?;
        let index = rows.column_specs().iter().position(|c| c.name() == "[applied]").context("no [applied] column")?;
        let row: Row = rows.single_row().context("an LWT returned not one row")?;
        match row.columns.get(index) {
            Some(Some(CqlValue::Boolean(b))) => applied.push(*b),
            other => bail!("[applied] is {other:?}, not a boolean"),
        }
    }
    if applied != [true, false] {
        bail!("LWT gave [applied] = {applied:?}, expected [true, false]");
    }
    let mut select = Statement::new(format!("SELECT v FROM {SELFTEST_KEYSPACE}.t WHERE k = ?"));
    select.set_consistency(Consistency::Quorum);
    let rows = session.query_unpaged(select, (key,)).await.context("reading the LWT row")?.into_rows_result()?;
    let (value,): (Option<String>,) = rows.maybe_first_row()?.context("the LWT row is not readable back")?;
    if value.as_deref() != Some("first") {
        bail!("the LWT row reads back {value:?}, expected \"first\"");
    }
    Ok(())
}
