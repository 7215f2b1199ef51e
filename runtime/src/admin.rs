//! What the administrative subcommands every qim service has do (their command line is
//! `service::cli`), so operators get the same behaviour from each binary:
//!
//! - `check-config`: validates the service's documented environment without connecting to
//!   anything, prints the resolved values (secrets redacted), exits 0; on invalid or unknown
//!   variables prints each problem naming the variable and exits 2.
//! - `migrate`: creates or verifies the Scylla keyspace and tables (never alters an existing
//!   keyspace), then re-checks readiness; exits 0, or 1 with the reason.

use std::net::SocketAddr;

use crate::env::{find, EnvVar, ALL_SERVICES};
use qim_store::mailbox::MailboxRetention;
use qim_store::retention::RetentionPolicy;
use qim_store::scylla::{migrate, open_session, readiness, ScyllaConfig};

/// Variables whose values are never printed.
const SECRETS: &[&str] = &["QIM_API_TOKEN"];
/// Prefixes of variables that belong to tests and the local stack, not to services.
const NOT_SERVICE_VARS: &[&str] = &["QIM_TEST_", "QIM_STACK_"];

/// The documented variable nearest to `name` (a few edits away), if any.
fn nearest(name: &str) -> Option<&'static str> {
    ALL_SERVICES
        .iter()
        .flat_map(|t| t.iter())
        .map(|v| (strsim::levenshtein(name, v.name), v.name))
        .filter(|(distance, _)| *distance <= 3)
        .min()
        .map(|(_, near)| near)
}

/// One problem with the environment, naming the variable.
pub type Problem = String;

fn check_value(var: &EnvVar, value: &str) -> Result<(), String> {
    if let Some((lo, hi)) = var.range {
        return match value.trim().parse::<u64>() {
            Ok(n) if (lo..=hi).contains(&n) => Ok(()),
            _ => Err(format!("must be a whole number in {lo}..={hi}")),
        };
    }
    match var.name {
        "QIM_STORE_BACKEND" => match value {
            "redis" | "scylla" => Ok(()),
            _ => Err("must be `redis` or `scylla`".to_owned()),
        },
        "QIM_REDIS_URL" => redis::Client::open(value).map(|_| ()).map_err(|e| format!("is not a Redis URL: {e}")),
        "QIM_DEFAULT_HISTORY_RETENTION_DAYS" => {
            RetentionPolicy::from_env_value(Some(value)).map(|_| ()).map_err(|e| e.to_string())
        }
        "QIM_MAILBOX_RETENTION_DAYS" => match value.trim().parse::<u32>() {
            Ok(days) => MailboxRetention::days(days).map(|_| ()),
            Err(_) => Err("must be a whole number of days".to_owned()),
        },
        "QIM_REDIS_NAMESPACE" => {
            qim_store::redis::RedisConfig { url: String::new(), namespace: value.to_owned() }.validate()
        }
        name if name.ends_with("_HTTP_ADDR") => {
            value.parse::<SocketAddr>().map(|_| ()).map_err(|_| "must be an address like 127.0.0.1:8080".to_owned())
        }
        _ => Ok(()),
    }
}

/// Checks every variable of `tables` (value from `lookup`, else its default) and flags `QIM_*`
/// variables in `present` that no qim service reads (a typo would otherwise be ignored
/// silently), suggesting the nearest documented name within a few edits. A sibling service's
/// variable is accepted (not checked: the sibling checks it), so one environment file can
/// serve all three. Returns the resolved `(name, shown value)` pairs, or every problem found.
pub fn check_environment(
    tables: &[&[EnvVar]],
    lookup: &dyn Fn(&str) -> Option<String>,
    present: impl IntoIterator<Item = String>,
) -> Result<Vec<(&'static str, String)>, Vec<Problem>> {
    let mut resolved = Vec::new();
    let mut problems = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for var in tables.iter().flat_map(|t| t.iter()).filter(|v| seen.insert(v.name)) {
        let value = lookup(var.name).or_else(|| var.default.map(str::to_owned));
        if let Some(value) = &value {
            if let Err(why) = check_value(var, value) {
                problems.push(format!("{}={value:?} {why}", var.name));
            }
        }
        let shown = match (&value, SECRETS.contains(&var.name)) {
            (None, _) => "(unset)".to_owned(),
            (Some(_), true) => "(set, redacted)".to_owned(),
            (Some(v), false) => v.clone(),
        };
        resolved.push((var.name, shown));
    }
    // The Scylla settings are checked together (the error names the variable at fault).
    if seen.contains("QIM_SCYLLA_HOSTS") {
        if let Err(e) = ScyllaConfig::production_from(lookup) {
            problems.push(e.to_string());
        }
    }
    for name in present {
        let ours = name.starts_with("QIM_") && !NOT_SERVICE_VARS.iter().any(|p| name.starts_with(p));
        if ours && !seen.contains(name.as_str()) && find(ALL_SERVICES, &name).is_none() {
            problems.push(match nearest(&name) {
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

/// Runs `migrate` against the production Scylla settings of `lookup`.
pub async fn migrate_from(lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let config = ScyllaConfig::production_from(lookup).map_err(|e| e.to_string())?;
    let session = open_session(&config).await.map_err(|e| e.to_string())?;
    migrate(&session, &config).await.map_err(|e| format!("migrating keyspace {}: {e}", config.keyspace))?;
    let ready = readiness(&session, &config).await.map_err(|e| e.to_string())?;
    if !ready.is_ready() {
        return Err(format!("keyspace {} is not ready after migrating: {ready:?}", config.keyspace));
    }
    Ok(format!(
        "keyspace {} ready in data centre {} with replication factor {}",
        config.keyspace, config.local_dc, config.replication_factor
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::env::{HTTP_ENV, KAFKA_ENV, STORE_ENV};

    const TABLES: &[&[EnvVar]] = &[STORE_ENV, KAFKA_ENV, HTTP_ENV];

    fn check(pairs: &[(&str, &str)]) -> Result<Vec<(&'static str, String)>, Vec<Problem>> {
        let env: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let lookup = |name: &str| env.get(name).cloned();
        check_environment(TABLES, &lookup, env.keys().cloned())
    }

    #[test]
    fn defaults_are_valid_in_production() {
        let resolved = check(&[]).expect("the documented defaults are valid");
        assert!(resolved.contains(&("QIM_STORE_BACKEND", "redis".to_owned())));
        assert!(resolved.contains(&("QIM_API_TOKEN", "(unset)".to_owned())));
    }

    #[test]
    fn every_problem_names_its_variable() {
        let problems = check(&[
            ("QIM_STORE_BACKEND", "postgres"),
            ("QIM_DEFAULT_HISTORY_RETENTION_DAYS", "0"),
            ("QIM_SCYLLA_RF", "1"),
            ("QIM_REDIS_URL", "not a url"),
            ("QIM_STOER_BACKEND", "redis"),
            ("QIM_TEST_SCYLLA_RF", "1"),
        ])
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
        assert!(check(&[("QIM_MAILBOX_SHARDS", "4"), ("QIM_WRITER_HTTP_ADDR", "127.0.0.1:1")]).is_ok());
        let problems = check(&[("QIM_STOER_BACKEND", "redis"), ("QIM_NOTHING_LIKE_THIS", "1")]).unwrap_err();
        assert!(
            problems.iter().any(|p| p.contains("QIM_STOER_BACKEND") && p.contains("did you mean QIM_STORE_BACKEND?")),
            "{problems:?}"
        );
        assert!(problems.iter().any(|p| p.contains("QIM_NOTHING_LIKE_THIS") && p.contains("a typo?")), "{problems:?}");
    }

    #[test]
    fn secrets_are_redacted() {
        let resolved = check(&[("QIM_API_TOKEN", "hunter2")]).unwrap();
        assert!(resolved.contains(&("QIM_API_TOKEN", "(set, redacted)".to_owned())));
        assert!(!format!("{resolved:?}").contains("hunter2"));
    }
}
