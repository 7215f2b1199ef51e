//! The check of a service's environment as a whole, before anything connects (`check-config`
//! and every start): each variable's value by its own parser, then the service's typed
//! configuration (rules between variables, such as the replication factor a single-node
//! cluster may use), then the `QIM_*` names no qim service reads. Every problem is reported at
//! once, each naming its variable.

use std::collections::{BTreeMap, BTreeSet};

use clap::{ArgMatches, Command};

use super::describe::{env_args, env_name, parse_values, variables};
use super::known::QIM_VARIABLES;

/// Prefixes of variables that belong to tests and the local stack, not to services.
const NOT_SERVICE_VARS: &[&str] = &["QIM_TEST_", "QIM_STACK_"];

/// One problem with the environment, naming the variable.
pub type Problem = String;

/// The rules between variables: the service's typed configuration built from parsed values.
pub type Validate<'a> = &'a dyn Fn(&ArgMatches) -> Result<(), String>;

/// A variable some qim service reads nearest to `name` (a few edits away), if any.
fn nearest<'a>(name: &str, own: &'a BTreeSet<String>) -> Option<&'a str> {
    own.iter()
        .map(String::as_str)
        .chain(QIM_VARIABLES.iter().copied())
        .map(|known| (strsim::levenshtein(name, known), known))
        .filter(|(distance, _)| *distance <= 3)
        .min()
        .map(|(_, near)| near)
}

/// The first line of a clap error, without its `error: ` prefix.
fn reason(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let line = text.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}

/// Checks every variable of `cmd` (value from `lookup`, else its default), then `validate`
/// with the values that passed, and flags `QIM_*` names in `present` that no qim service reads
/// (a typo would otherwise be ignored silently), suggesting the nearest within a few edits. A
/// sibling service's variable is accepted (the sibling checks it), so one environment file
/// serves all three. Returns the resolved `(name, shown value)` pairs, secrets redacted, or
/// every problem found.
pub fn check(
    cmd: &Command,
    lookup: &dyn Fn(&str) -> Option<String>,
    present: impl IntoIterator<Item = String>,
    validate: Validate<'_>,
) -> Result<Vec<(String, String)>, Vec<Problem>> {
    let mut resolved = Vec::new();
    let mut problems = Vec::new();
    let mut valid = BTreeMap::new();
    for arg in env_args(cmd) {
        let name = env_name(arg);
        let Some(value) = lookup(&name) else { continue };
        let alone = Command::new("check").arg(arg.clone());
        let id = arg.get_id().to_string();
        match parse_values(&alone, &BTreeMap::from([(id.clone(), value.clone())])) {
            Ok(_) => drop(valid.insert(id, value)),
            Err(e) => problems.push(format!("{name}={value:?}: {}", reason(&e))),
        }
    }
    for var in variables(cmd) {
        let shown = match (lookup(&var.name).or(var.default), var.secret) {
            (None, _) => "(unset)".to_owned(),
            (Some(_), true) => "(set, redacted)".to_owned(),
            (Some(v), false) => v,
        };
        resolved.push((var.name, shown));
    }
    match parse_values(cmd, &valid) {
        Ok(matches) => {
            if let Err(why) = validate(&matches) {
                problems.push(why);
            }
        }
        Err(e) => problems.push(reason(&e)),
    }
    let own: BTreeSet<String> = resolved.iter().map(|(name, _)| name.clone()).collect();
    for name in present {
        let ours = name.starts_with("QIM_") && !NOT_SERVICE_VARS.iter().any(|p| name.starts_with(p));
        if ours && !own.contains(&name) && !QIM_VARIABLES.contains(&name.as_str()) {
            problems.push(match nearest(&name, &own) {
                Some(near) => format!("{name} is set but no qim service reads it (did you mean {near}?)"),
                None => format!("{name} is set but no qim service reads it (a typo?)"),
            });
        }
    }
    if problems.is_empty() {
        Ok(resolved)
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use clap::{Args, FromArgMatches};

    use super::*;
    use crate::env::auth::AuthArgs;
    use crate::env::groups::{CommonArgs, KafkaArgs, StoreArgs};

    #[derive(Args, Debug)]
    struct Shared {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        kafka: KafkaArgs,
        #[command(flatten)]
        auth: AuthArgs,
        #[command(flatten)]
        common: CommonArgs,
    }

    fn check_pairs(pairs: &[(&str, &str)]) -> Result<Vec<(String, String)>, Vec<Problem>> {
        let env: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let lookup = |name: &str| env.get(name).cloned();
        let validate = |m: &ArgMatches| {
            let shared = Shared::from_arg_matches(m).map_err(|e| e.to_string())?;
            shared.store.scylla().map(drop)
        };
        check(&Shared::augment_args(Command::new("t")), &lookup, env.keys().cloned(), &validate)
    }

    fn has(resolved: &[(String, String)], name: &str, value: &str) -> bool {
        resolved.contains(&(name.to_owned(), value.to_owned()))
    }

    /// The four Scylla variables that have no default.
    const SCYLLA: &[(&str, &str)] = &[
        ("QIM_SCYLLA_HOSTS", "10.0.0.1:9042"),
        ("QIM_SCYLLA_KEYSPACE", "qim"),
        ("QIM_SCYLLA_DC", "dc1"),
        ("QIM_SCYLLA_RF", "3"),
    ];

    /// [`SCYLLA`] and `extra` (which replaces a variable of [`SCYLLA`] it sets).
    fn with_scylla<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut all: Vec<_> = SCYLLA.iter().copied().filter(|(k, _)| !extra.iter().any(|(e, _)| e == k)).collect();
        all.extend_from_slice(extra);
        all
    }

    #[test]
    fn defaults_and_the_scylla_cluster_are_valid_in_production() {
        let resolved = check_pairs(SCYLLA).expect("the documented defaults and an explicit cluster are valid");
        assert!(has(&resolved, "QIM_STORE_BACKEND", "redis"), "{resolved:?}");
        assert!(has(&resolved, "QIM_AUTH_HS256_SECRET", "(unset)"), "{resolved:?}");
        assert!(has(&resolved, "QIM_SCYLLA_HOSTS", "10.0.0.1:9042"), "{resolved:?}");
    }

    #[test]
    fn the_scylla_cluster_has_no_default_in_either_backend() {
        for backend in ["redis", "scylla"] {
            let problems = check_pairs(&[("QIM_STORE_BACKEND", backend)]).unwrap_err();
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(problems[0].starts_with("QIM_SCYLLA_HOSTS: is not set"), "{problems:?}");
            for (var, _) in SCYLLA {
                assert!(problems[0].contains(var), "{var} not named in {problems:?}");
            }
            for (missing, _) in SCYLLA {
                let rest: Vec<_> =
                    with_scylla(&[("QIM_STORE_BACKEND", backend)]).into_iter().filter(|(k, _)| k != missing).collect();
                let problems = check_pairs(&rest).unwrap_err();
                assert_eq!(problems.len(), 1, "{problems:?}");
                assert!(problems[0].starts_with(&format!("{missing}: is not set (unset: {missing})")), "{problems:?}");
            }
        }
    }

    #[test]
    fn every_problem_names_its_variable() {
        let problems = check_pairs(&with_scylla(&[
            ("QIM_STORE_BACKEND", "postgres"),
            ("QIM_DEFAULT_HISTORY_RETENTION_DAYS", "0"),
            ("QIM_SCYLLA_RF", "1"),
            ("QIM_REDIS_URL", "not a url"),
            ("QIM_STOER_BACKEND", "redis"),
            ("QIM_TEST_SCYLLA_RF", "1"),
        ]))
        .unwrap_err();
        for var in [
            "QIM_STORE_BACKEND=",
            "QIM_DEFAULT_HISTORY_RETENTION_DAYS",
            "QIM_SCYLLA_RF",
            "QIM_REDIS_URL",
            "QIM_STOER_BACKEND",
        ] {
            assert!(problems.iter().any(|p| p.contains(var)), "{var} not reported in {problems:?}");
        }
        assert_eq!(problems.len(), 5, "test and stack variables are not service variables: {problems:?}");
    }

    #[test]
    fn a_siblings_variable_is_accepted_and_a_typo_gets_the_nearest_name() {
        // One environment file for all three services: the dispatcher's variables are fine here.
        assert!(
            check_pairs(&with_scylla(&[("QIM_MAILBOX_SHARDS", "4"), ("QIM_WRITER_HTTP_ADDR", "127.0.0.1:1")])).is_ok()
        );
        let problems = check_pairs(&[("QIM_STOER_BACKEND", "redis"), ("QIM_NOTHING_LIKE_THIS", "1")]).unwrap_err();
        assert!(
            problems.iter().any(|p| p.contains("QIM_STOER_BACKEND") && p.contains("did you mean QIM_STORE_BACKEND?")),
            "{problems:?}"
        );
        assert!(problems.iter().any(|p| p.contains("QIM_NOTHING_LIKE_THIS") && p.contains("a typo?")), "{problems:?}");
    }

    #[test]
    fn secrets_are_redacted() {
        let resolved = check_pairs(&with_scylla(&[("QIM_AUTH_HS256_SECRET", "hunter2")])).unwrap();
        assert!(has(&resolved, "QIM_AUTH_HS256_SECRET", "(set, redacted)"));
        assert!(!format!("{resolved:?}").contains("hunter2"));
    }

    #[test]
    fn a_range_is_enforced_and_named() {
        let problems = check_pairs(&[("QIM_HOT_WINDOW_DAYS", "31"), ("QIM_STARTUP_TIMEOUT_SECS", "soon")]).unwrap_err();
        assert!(problems.iter().any(|p| p.starts_with("QIM_HOT_WINDOW_DAYS=\"31\"") && p.contains("1..=30")));
        assert!(problems.iter().any(|p| p.starts_with("QIM_STARTUP_TIMEOUT_SECS") && p.contains("1..=3600")));
    }
}
