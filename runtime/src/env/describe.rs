//! What a service's clap [`Command`] says about its variables, read back by introspection: the
//! `--help` epilogue, the range sentence of whole-number variables, `check-config`'s listing and
//! the README and compose tables all come from here.

use std::collections::BTreeMap;
use std::ffi::OsString;

use clap::{Arg, ArgMatches, Command};

use super::whole::{range_sentence, Whole};

/// One variable of a command, as documented by its argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variable {
    /// The `QIM_*` name.
    pub name: String,
    /// The argument's id (clap's, also its `--long` flag without dashes and with `-`).
    pub id: String,
    /// The value used when the variable is unset; `None` when there is none.
    pub default: Option<String>,
    /// What it controls, followed by its range sentence when it has one.
    pub help: String,
    /// `Some((lo, hi))`: a whole number in `lo..=hi`.
    pub range: Option<(u64, u64)>,
    /// Whether its value is never shown (`hide_env_values`).
    pub secret: bool,
}

/// The arguments of `cmd` that read a variable, in declaration order.
pub fn env_args(cmd: &Command) -> impl Iterator<Item = &Arg> {
    cmd.get_arguments().filter(|a| a.get_env().is_some())
}

/// The variable `arg` reads.
pub fn env_name(arg: &Arg) -> String {
    arg.get_env().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default()
}

/// `cmd` with every argument's variable removed: what parses explicit `--flag=value`s only.
pub(crate) fn without_env(cmd: &Command) -> Command {
    cmd.clone().mut_args(|a| a.env(None)).no_binary_name(true)
}

/// Parses `values` (argument id → raw value) with `cmd`'s parsers, without reading the process
/// environment: what is not given takes its default.
pub(crate) fn parse_values(cmd: &Command, values: &BTreeMap<String, String>) -> Result<ArgMatches, clap::Error> {
    let flags = env_args(cmd).filter_map(|a| {
        let value = values.get(a.get_id().as_str())?;
        Some(OsString::from(format!("--{}={value}", a.get_long()?)))
    });
    without_env(cmd).try_get_matches_from(flags.collect::<Vec<_>>())
}

/// The range of each whole-number argument of `cmd`, read from its default parsed by its own
/// value parser (the variables alone: other arguments of `cmd` may be required).
fn ranges(cmd: &Command) -> BTreeMap<String, (u64, u64)> {
    let alone = Command::new("ranges").args(env_args(cmd).cloned());
    let Ok(defaults) = parse_values(&alone, &BTreeMap::new()) else {
        return BTreeMap::new();
    };
    env_args(cmd)
        .filter_map(|a| {
            let whole = defaults.try_get_one::<Whole>(a.get_id().as_str()).ok().flatten()?;
            Some((a.get_id().to_string(), whole.bounds()))
        })
        .collect()
}

/// Every variable `cmd` reads, in declaration order.
pub fn variables(cmd: &Command) -> Vec<Variable> {
    let ranges = ranges(cmd);
    env_args(cmd)
        .map(|a| {
            let range = ranges.get(a.get_id().as_str()).copied();
            let doc = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            let help = match range {
                Some((lo, hi)) => format!("{doc} {}", range_sentence(lo, hi)),
                None => doc,
            };
            Variable {
                name: env_name(a),
                id: a.get_id().to_string(),
                default: a.get_default_values().first().map(|d| d.to_string_lossy().into_owned()),
                help,
                range,
                secret: a.is_hide_env_values_set(),
            }
        })
        .collect()
}

/// `cmd` with the range sentence appended to the help of each whole-number argument, so its
/// `--help` states the range its parser enforces.
pub fn with_ranges(cmd: Command) -> Command {
    let ranges = ranges(&cmd);
    cmd.mut_args(|a| match ranges.get(a.get_id().as_str()) {
        Some(&(lo, hi)) => {
            let doc = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            a.help(format!("{doc} {}", range_sentence(lo, hi)))
        }
        None => a,
    })
}

/// The `--help` epilogue: every variable of `cmd`, its default and what it controls.
pub fn environment_help(cmd: &Command) -> String {
    let mut out = String::from("Environment (every variable this service reads):\n");
    for var in variables(cmd) {
        let default = var.default.map_or_else(|| "unset".to_owned(), |d| format!("{d:?}"));
        out.push_str(&format!("  {} [default: {default}]\n      {}\n", var.name, var.help));
    }
    out
}

#[cfg(test)]
mod tests {
    use clap::Args;

    use super::*;
    use crate::env::groups::{CommonArgs, StoreArgs};

    fn command() -> Command {
        StoreArgs::augment_args(CommonArgs::augment_args(Command::new("t")))
    }

    #[test]
    fn the_help_lists_every_variable_once_with_its_default() {
        let help = environment_help(&command());
        for var in variables(&command()) {
            assert_eq!(help.matches(&format!("  {} [default:", var.name)).count(), 1, "{}", var.name);
        }
        assert!(help.contains("QIM_STORE_BACKEND [default: \"redis\"]"), "{help}");
    }

    #[test]
    fn a_range_comes_from_the_parser_and_reaches_the_help() {
        let vars = variables(&command());
        let hot = vars.iter().find(|v| v.name == "QIM_HOT_WINDOW_DAYS").unwrap();
        assert_eq!(hot.range, Some((1, 30)));
        assert_eq!(hot.help, "Days of history kept in the Redis hot tier once archived. A whole number in 1..=30.");
        assert_eq!(vars.iter().find(|v| v.name == "QIM_LOG").unwrap().range, None);
        let cmd = with_ranges(command());
        let arg = cmd.get_arguments().find(|a| a.get_id() == "hot_window_days").unwrap();
        assert!(arg.get_help().unwrap().to_string().ends_with("A whole number in 1..=30."));
    }
}
