//! The command line every qim service shares (clap): its main subcommand is the default, the
//! administrative ones ([`AdminCommand`]) are the same in each binary, and `--help` lists every
//! `QIM_*` variable the service reads with its default.
//!
//! A subcommand that reads the environment (one that flattens the service's [`Environment`])
//! checks it as a whole before clap parses it, so a start reports every bad variable at once,
//! as `check-config` does, instead of clap's first.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Subcommand};

use crate::admin::migrate;
use crate::env::describe::{env_args, environment_help, with_ranges};
use crate::env::{check_process, Environment, Problem};

/// The administrative subcommands of every service.
#[derive(Clone, Debug, PartialEq, Eq, Subcommand)]
pub enum AdminCommand {
    /// Validate the QIM_* environment without connecting: print every variable's value (secrets
    /// redacted) and exit 0, or print each problem naming its variable and exit 2.
    CheckConfig,
    /// Create or verify the Scylla keyspace and tables (never alters an existing keyspace), then
    /// check readiness; exit 0, or 1 with the reason.
    Migrate,
}

fn exit_with(problems: Vec<Problem>) -> ! {
    for p in problems {
        eprintln!("error: {p}");
    }
    std::process::exit(2)
}

/// Parses the process's arguments into `C` (no subcommand: `default`), whose `--help` ends with
/// the variables of `E`. A subcommand reading the environment exits 2 naming every problem
/// with it; clap's usage errors exit 2 too.
pub fn parse<C: CommandFactory + FromArgMatches, E: Environment>(default: &str) -> C {
    let cmd = C::command().after_help(environment_help(&E::command())).mut_subcommands(with_ranges);
    let mut argv: Vec<OsString> = std::env::args_os().collect();
    if argv.len() == 1 {
        argv.push(default.into());
    }
    let asks_help =
        argv[1..].iter().any(|a| ["-h", "--help", "-V", "--version", "help"].contains(&&*a.to_string_lossy()));
    let reads_env = cmd.find_subcommand(&*argv[1].to_string_lossy()).is_some_and(|sub| env_args(sub).next().is_some());
    if reads_env && !asks_help {
        if let Err(problems) = check_process::<E>() {
            exit_with(problems);
        }
    }
    let matches = cmd.get_matches_from(argv);
    C::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Runs `command` against the process environment, checked as `E`.
pub async fn run_admin<E: Environment>(command: &AdminCommand) -> ExitCode {
    let resolved = match check_process::<E>() {
        Ok(resolved) => resolved,
        Err(problems) => exit_with(problems),
    };
    match command {
        AdminCommand::CheckConfig => {
            for (name, value) in resolved {
                println!("{name}={value}");
            }
            ExitCode::SUCCESS
        }
        AdminCommand::Migrate => {
            let env = E::command().try_get_matches_from(["environment"]).and_then(|m| E::from_arg_matches(&m));
            let scylla = env.map_err(|e| e.to_string()).and_then(|env| env.store().scylla());
            let result = match scylla {
                Ok(config) => migrate(&config).await,
                Err(why) => Err(why),
            };
            match result {
                Ok(summary) => {
                    println!("{summary}");
                    ExitCode::SUCCESS
                }
                Err(why) => {
                    eprintln!("error: {why}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Exits 0 for `Ok`, or prints the error with its causes and exits 1: what a service's main
/// subcommand returns.
pub fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
