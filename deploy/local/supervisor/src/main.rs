//! qim-stack: the local stack's supervisor. Redis, Kafka (KRaft) and Cassandra as plain
//! processes on 127.0.0.1, installed, configured, started, probed, killed and stopped from one
//! state dir; beside them a Redis Cluster (`cluster ...`) and a three-node mode of Kafka and
//! Cassandra (`rf3 ...`). `deploy/local/stack` builds this and runs it with its arguments; see
//! deploy/local/README.md for the commands, the knobs and the layout.
//!
//! Exit codes: 0 done; 1 a command failed (`[stack ..] ERROR: ..` on stderr), or `status` /
//! `check` found a server not answering; 2 a usage error (1 for a bad `kill` or `logs` argument).

mod cassandra;
mod cassandra_ring;
mod commands;
mod install;
mod kafka;
mod kafka_cluster;
mod kafka_wire;
mod layout;
mod logfile;
mod output;
mod ports;
mod probe;
mod process;
mod redis;
mod redis_cluster;
mod resp;
mod rf3;
mod rf3_layout;
mod topics;

use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

use crate::layout::{Service, Settings};
use crate::rf3_layout::Node;

#[derive(Debug, Parser)]
#[command(
    name = "stack",
    bin_name = "deploy/local/stack",
    about = "qim local infrastructure stack, no Docker: Redis + Kafka (KRaft) + Cassandra on 127.0.0.1",
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, PartialEq, Eq, Subcommand)]
enum Cmd {
    /// Install/download what is missing, start redis, kafka, cassandra, wait until each answers
    /// a real request, create the qim topics.
    Up,
    /// Stop the servers started from this state dir (SIGTERM, SIGKILL after
    /// QIM_STACK_STOP_TIMEOUT seconds).
    Down,
    /// One line per server; exit 0 only if all three are up and answering.
    Status,
    /// The last QIM_STACK_LOG_LINES lines of the server logs (all three without a name).
    Logs {
        #[arg(value_enum)]
        servers: Vec<Service>,
        /// Follow the logs.
        #[arg(short, long)]
        follow: bool,
    },
    /// Deeper self-test: redis SET/GET, kafka topics, cassandra LWT.
    Check,
    /// Down, then delete the state dir (all data).
    Reset,
    /// SIGKILL one server for fault tests; `up` restarts it.
    Kill {
        #[arg(value_enum)]
        server: Service,
    },
    /// The Redis Cluster (three masters, three replicas) beside the single Redis; `down` and
    /// `reset` stop it too.
    Cluster {
        #[command(subcommand)]
        action: ClusterCmd,
    },
    /// The three-node mode: three Kafka brokers (RF 3) and a three-node Cassandra ring, beside
    /// everything else; `down` and `reset` leave it alone.
    Rf3 {
        #[command(subcommand)]
        action: Rf3Cmd,
    },
}

/// The three-node mode: three Kafka brokers and a three-node Cassandra ring on loopback, beside
/// the single-node stack (its own state dir and ports; see deploy/local/README.md).
#[derive(Debug, PartialEq, Eq, Subcommand)]
enum Rf3Cmd {
    /// Start what is not running (brokers together, Cassandra nodes one at a time), wait until
    /// each broker sees three brokers with the qim topics in sync (RF 3) and each Cassandra node
    /// answers CQL and sees the ring whole; print the connection strings on stdout.
    Up,
    /// Stop the six nodes (SIGTERM, SIGKILL after QIM_STACK_STOP_TIMEOUT seconds); data stays.
    Down,
    /// One line per node; exit 0 only if all six are up and see the whole cluster.
    Status,
    /// Stop the nodes and delete the mode's state dir (all its data).
    Reset,
    /// SIGKILL one node (kafka-1..3, cassandra-1..3) for fault tests; `rf3 up` restarts it.
    Kill { node: Node },
    /// Cassandra's nodetool against node N's JMX port, e.g. `rf3 nodetool 1 status`.
    Nodetool {
        #[arg(value_parser = clap::value_parser!(u8).range(1..=3))]
        node: u8,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Debug, PartialEq, Eq, Subcommand)]
enum ClusterCmd {
    /// Start the six nodes (QIM_STACK_REDIS_CLUSTER_PORT and the five after it), create the
    /// cluster on a fresh state dir, wait for cluster_state:ok on every node.
    Up,
    /// Stop the nodes.
    Down,
    /// One line per node; exit 0 only if every node reports cluster_state:ok.
    Status,
    /// Stop the nodes and delete their data.
    Reset,
    /// SIGKILL one node (by port) for failover tests; `cluster up` restarts it.
    Kill { port: u16 },
}

/// The exit code of a usage error: 1 for a bad `kill` or `logs` argument, 2 otherwise.
fn usage_exit_code(first_arg: Option<&str>) -> u8 {
    match first_arg {
        Some("kill" | "logs") => 1,
        _ => 2,
    }
}

fn main() -> ExitCode {
    let settings = Settings::from_env();
    let mut command = Cli::command();
    if let Ok(s) = &settings {
        command = command.after_help(format!(
            "state: {}   (QIM_STACK_DIR)\ncache: {}   (QIM_STACK_CACHE)",
            s.stack_dir.display(),
            s.cache_dir.display()
        ));
    }
    let cli = match command.try_get_matches().and_then(|m| Cli::from_arg_matches(&m)) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(usage_exit_code(std::env::args().nth(1).as_deref()))
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let result = settings.and_then(|s| match cli.command {
        Cmd::Up => commands::up(&s),
        Cmd::Down => commands::down(&s),
        Cmd::Status => commands::status(&s),
        Cmd::Logs { servers, follow } => commands::logs(&s, &servers, follow),
        Cmd::Check => commands::check(&s),
        Cmd::Reset => commands::reset(&s),
        Cmd::Kill { server } => commands::kill(&s, server),
        Cmd::Cluster { action } => match action {
            ClusterCmd::Up => redis_cluster::up(&s),
            ClusterCmd::Down => {
                redis_cluster::stop(&s);
                Ok(ExitCode::SUCCESS)
            }
            ClusterCmd::Status => redis_cluster::status(&s),
            ClusterCmd::Reset => redis_cluster::reset(&s),
            ClusterCmd::Kill { port } => redis_cluster::kill(&s, port),
        },
        Cmd::Rf3 { action } => match action {
            Rf3Cmd::Up => rf3::up(&s),
            Rf3Cmd::Down => rf3::down(&s),
            Rf3Cmd::Status => rf3::status(&s),
            Rf3Cmd::Reset => rf3::reset(&s),
            Rf3Cmd::Kill { node } => rf3::kill(&s, node),
            Rf3Cmd::Nodetool { node, args } => rf3::nodetool(&s, node, &args),
        },
    });
    result.unwrap_or_else(|e| {
        log!("ERROR: {e:#}");
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cmd, clap::Error> {
        Cli::try_parse_from(std::iter::once("stack").chain(args.iter().copied())).map(|c| c.command)
    }

    #[test]
    fn the_commands_parse_as_the_script_took_them() {
        assert_eq!(parse(&["up"]).unwrap(), Cmd::Up);
        assert_eq!(parse(&["status"]).unwrap(), Cmd::Status);
        assert_eq!(parse(&["cluster", "up"]).unwrap(), Cmd::Cluster { action: ClusterCmd::Up });
        assert_eq!(
            parse(&["cluster", "kill", "7302"]).unwrap(),
            Cmd::Cluster { action: ClusterCmd::Kill { port: 7302 } }
        );
        assert_eq!(parse(&["kill", "cassandra"]).unwrap(), Cmd::Kill { server: Service::Cassandra });
        assert_eq!(parse(&["rf3", "up"]).unwrap(), Cmd::Rf3 { action: Rf3Cmd::Up });
        assert_eq!(parse(&["rf3", "reset"]).unwrap(), Cmd::Rf3 { action: Rf3Cmd::Reset });
        assert_eq!(
            parse(&["rf3", "kill", "kafka-2"]).unwrap(),
            Cmd::Rf3 { action: Rf3Cmd::Kill { node: Node::Kafka(2) } }
        );
        assert_eq!(
            parse(&["rf3", "kill", "cassandra-3"]).unwrap(),
            Cmd::Rf3 { action: Rf3Cmd::Kill { node: Node::Cassandra(3) } }
        );
        assert_eq!(
            parse(&["rf3", "nodetool", "2", "status", "-r"]).unwrap(),
            Cmd::Rf3 { action: Rf3Cmd::Nodetool { node: 2, args: vec!["status".into(), "-r".into()] } }
        );
        assert_eq!(parse(&["logs"]).unwrap(), Cmd::Logs { servers: vec![], follow: false });
        assert_eq!(
            parse(&["logs", "-f", "kafka", "redis"]).unwrap(),
            Cmd::Logs { servers: vec![Service::Kafka, Service::Redis], follow: true }
        );
        assert_eq!(
            parse(&["logs", "redis", "--follow"]).unwrap(),
            Cmd::Logs { servers: vec![Service::Redis], follow: true }
        );
    }

    #[test]
    fn bad_usage_is_refused_with_the_scripts_exit_codes() {
        assert!(parse(&[]).is_err());
        assert!(parse(&["start"]).is_err());
        assert!(parse(&["kill"]).is_err());
        assert!(parse(&["kill", "zookeeper"]).is_err());
        assert!(parse(&["logs", "zookeeper"]).is_err());
        assert!(parse(&["rf3"]).is_err());
        assert!(parse(&["rf3", "kill", "kafka-4"]).is_err());
        assert!(parse(&["rf3", "kill", "redis-1"]).is_err());
        assert!(parse(&["rf3", "nodetool", "0", "status"]).is_err());
        assert_eq!(usage_exit_code(Some("kill")), 1);
        assert_eq!(usage_exit_code(Some("logs")), 1);
        assert_eq!(usage_exit_code(Some("start")), 2);
        assert_eq!(usage_exit_code(None), 2);
        assert!(parse(&["--help"]).is_err_and(|e| !e.use_stderr()));
    }
}
