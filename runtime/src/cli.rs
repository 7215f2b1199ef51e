//! The command line every qim service shares (clap): its main subcommand is the default, the
//! administrative ones ([`AdminCommand`]) are the same in each binary, and `--help` lists every
//! `QIM_*` variable the service reads with its default.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Subcommand};

use crate::admin::{check_environment, migrate_from};
use crate::env::EnvVar;

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

/// The `--help` epilogue: every variable of `tables`, its default and what it controls.
pub fn environment_help(tables: &[&[EnvVar]]) -> String {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = String::from("Environment (every variable this service reads):\n");
    for var in tables.iter().flat_map(|t| t.iter()).filter(|v| seen.insert(v.name)) {
        let default = var.default.map_or_else(|| "unset".to_owned(), |d| format!("{d:?}"));
        out.push_str(&format!("  {} [default: {default}]\n      {}\n", var.name, var.describe()));
    }
    out
}

/// Parses the process's arguments into `C`, whose `--help` ends with [`environment_help`] of
/// `tables`; exits with clap's message (2 for a usage error) when they do not parse.
pub fn parse<C: CommandFactory + FromArgMatches>(tables: &[&[EnvVar]]) -> C {
    let matches = C::command().after_help(environment_help(tables)).get_matches();
    C::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Runs `command` against the process environment, validated against `tables`.
pub async fn run_admin(tables: &[&[EnvVar]], command: &AdminCommand) -> ExitCode {
    let lookup = |name: &str| std::env::var(name).ok();
    match command {
        AdminCommand::CheckConfig => match check_environment(tables, &lookup, std::env::vars().map(|(k, _)| k)) {
            Ok(resolved) => {
                for (name, value) in resolved {
                    println!("{name}={value}");
                }
                ExitCode::SUCCESS
            }
            Err(problems) => {
                for p in problems {
                    eprintln!("error: {p}");
                }
                ExitCode::from(2)
            }
        },
        AdminCommand::Migrate => match migrate_from(&lookup).await {
            Ok(summary) => {
                println!("{summary}");
                ExitCode::SUCCESS
            }
            Err(why) => {
                eprintln!("error: {why}");
                ExitCode::FAILURE
            }
        },
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::{HTTP_ENV, STORE_ENV};

    #[test]
    fn the_help_lists_every_variable_once_with_its_default() {
        let help = environment_help(&[STORE_ENV, HTTP_ENV, STORE_ENV]);
        for var in STORE_ENV.iter().chain(HTTP_ENV) {
            assert_eq!(help.matches(&format!("  {} [default:", var.name)).count(), 1, "{}", var.name);
        }
        assert!(help.contains("QIM_STORE_BACKEND [default: \"redis\"]"), "{help}");
    }
}
