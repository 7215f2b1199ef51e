//! The `QIM_*` environment contract: each service's variables are one clap group (its
//! [`Environment`]), built from the shared [`groups`] and the service's own group in its
//! `config.rs`. A variable's doc comment, default, value parser and range are its only
//! definition; `--help`, `check-config`, start-up and the README and compose tables read them
//! back from the clap [`Command`] ([`describe`]).
//!
//! - [`whole`]: whole-number variables and their range;
//! - [`groups`]: the groups several services read;
//! - [`describe`]: a command's variables by introspection;
//! - [`check`]: the environment checked as a whole before anything connects;
//! - [`known`]: every variable some qim service reads (generated; see its docs).

pub mod auth;
pub mod check;
pub mod describe;
pub mod groups;
pub mod known;
pub mod whole;

use std::collections::BTreeMap;

use clap::{ArgMatches, Args, Command, FromArgMatches};

pub use auth::{AuthArgs, PublicKeyAlgorithm};
pub use check::Problem;
pub use describe::{variables, Variable};
pub use groups::{ArchiverGroupArgs, CommonArgs, KafkaArgs, StoreArgs, StoreBackend};
pub use whole::{whole, Whole};

/// A service's variables as one clap group, and the typed configuration built from them.
pub trait Environment: Args + FromArgMatches {
    /// The validated, typed configuration.
    type Config;

    /// Types the parsed values, checking the rules between variables; the error names the
    /// variable at fault.
    fn config(&self) -> Result<Self::Config, String>;

    /// The store variables (what `migrate` reads).
    fn store(&self) -> &StoreArgs;

    /// The group as a command: what `check-config`, the `--help` epilogue and the README
    /// describe ([`describe::variables`]).
    fn command() -> Command {
        Self::augment_args(Command::new("environment"))
    }
}

fn validate<E: Environment>(matches: &ArgMatches) -> Result<(), String> {
    E::from_arg_matches(matches).map_err(|e| e.to_string())?.config().map(drop)
}

/// Checks `E` against `lookup` ([`check::check`]; `present`: the names set), returning the
/// resolved `(name, shown value)` pairs or every problem.
pub fn check<E: Environment>(
    lookup: &dyn Fn(&str) -> Option<String>,
    present: impl IntoIterator<Item = String>,
) -> Result<Vec<(String, String)>, Vec<Problem>> {
    check::check(&E::command(), lookup, present, &validate::<E>)
}

/// Checks `E` against the process environment.
pub fn check_process<E: Environment>() -> Result<Vec<(String, String)>, Vec<Problem>> {
    check::<E>(&|name| std::env::var(name).ok(), std::env::vars().map(|(k, _)| k))
}

/// [`resolve`] over the environment made of `pairs` alone (name, value), as a test or a
/// tool that builds a configuration without the process environment uses it.
pub fn resolve_pairs<E: Environment>(pairs: &[(&str, &str)]) -> Result<E::Config, String> {
    let env: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    resolve::<E>(&|name| env.get(name).cloned(), env.keys().cloned())
}

/// Checks `E` against `lookup`, then parses and types it: what a service does at start. Every
/// problem is reported at once, joined by `; `.
pub fn resolve<E: Environment>(
    lookup: &dyn Fn(&str) -> Option<String>,
    present: impl IntoIterator<Item = String>,
) -> Result<E::Config, String> {
    check::<E>(lookup, present).map_err(|problems| problems.join("; "))?;
    let cmd = E::command();
    let values: BTreeMap<String, String> = describe::env_args(&cmd)
        .filter_map(|a| Some((a.get_id().to_string(), lookup(&describe::env_name(a))?)))
        .collect();
    let matches = describe::parse_values(&cmd, &values).map_err(|e| e.to_string())?;
    E::from_arg_matches(&matches).map_err(|e| e.to_string())?.config()
}
