//! qim-stack-probe: what the local stack (`deploy/local/stack`) asks its servers before it calls
//! them ready, through the clients the services use.
//!
//! ```text
//! qim-stack-probe cql [--host 127.0.0.1] [--port 9042] [--timeout 5] [--lwt]
//! ```
//!
//! `cql` connects with the scylla driver, reads `release_version` from `system.local` and
//! prints it; with `--lwt` it also creates a throwaway keyspace, runs `INSERT ... IF NOT EXISTS`
//! twice (the first must apply, the second must not), reads the row back and drops the keyspace.
//! Exit 0 when every step answered; otherwise the reason on stderr and exit 1.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
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
    let builder = SessionBuilder::new()
        .known_node(&node)
        .connection_timeout(timeout)
        .metadata_request_clientside_timeout(timeout);
    let session = tokio::time::timeout(timeout * 2, builder.build())
        .await
        .context("no session in time")?
        .context("connecting")?;
    let version = release_version(&session).await?;
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
