//! Where the Scylla backend connects and what replication it requires.
//!
//! [`ScyllaConfig`] holds only explicit facts: contact points, keyspace, local DC and RF. Two
//! constructors read them from the environment:
//!
//! - [`ScyllaConfig::production_from_env`]: `QIM_SCYLLA_HOSTS`, `QIM_SCYLLA_KEYSPACE`,
//!   `QIM_SCYLLA_DC` and `QIM_SCYLLA_RF` are required (seed 000: "Scylla 模式必填"); there is
//!   no default cluster, so a deployment that forgets one fails its configuration check instead
//!   of silently using a local node. `QIM_SCYLLA_DEV_SINGLE_NODE` is optional
//!   ([`DEFAULT_DEV_SINGLE_NODE`]). It refuses an unset variable, RF < 3, an empty DC and an
//!   illegal keyspace name, naming the variable.
//! - [`ScyllaConfig::test_from_env`]: the isolated `QIM_TEST_SCYLLA_*` variables; RF 1 is legal
//!   only here, and an unset keyspace gets a fresh per-process name.
//!
//! Nothing here touches the network: migration and connection read the config they are given.

/// Production contact points variable, `host:port` comma-separated (required).
pub const HOSTS_VAR: &str = "QIM_SCYLLA_HOSTS";
/// Production keyspace variable (required).
pub const KEYSPACE_VAR: &str = "QIM_SCYLLA_KEYSPACE";
/// Production local data centre variable (required).
pub const DC_VAR: &str = "QIM_SCYLLA_DC";
/// Production replication factor variable (required).
pub const RF_VAR: &str = "QIM_SCYLLA_RF";
/// `true` lets production settings use RF 1 or 2, for a single-node development cluster only.
pub const DEV_SINGLE_NODE_VAR: &str = "QIM_SCYLLA_DEV_SINGLE_NODE";
/// The production variables that have no default: each must be set explicitly.
pub const REQUIRED_VARS: [&str; 4] = [HOSTS_VAR, KEYSPACE_VAR, DC_VAR, RF_VAR];
/// [`DEV_SINGLE_NODE_VAR`] when unset.
pub const DEFAULT_DEV_SINGLE_NODE: &str = "false";
/// Test contact points (default `127.0.0.1:9042`).
pub const TEST_HOSTS_VAR: &str = "QIM_TEST_SCYLLA_HOSTS";
/// Test keyspace (default: a fresh `qim_test_<pid>_<nanos>`).
pub const TEST_KEYSPACE_VAR: &str = "QIM_TEST_SCYLLA_KEYSPACE";
/// Test local data centre (default `datacenter1`).
pub const TEST_DC_VAR: &str = "QIM_TEST_SCYLLA_DC";
/// Test replication factor (default 1).
pub const TEST_RF_VAR: &str = "QIM_TEST_SCYLLA_RF";

/// Smallest replication factor production accepts.
pub const MIN_PRODUCTION_RF: u32 = 3;
/// Longest keyspace name (CQL's own limit).
pub const MAX_KEYSPACE_LEN: usize = 48;

/// Connection and replication settings of the Scylla backend.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ScyllaConfig {
    /// Contact points, `host:port` each; at least one.
    pub hosts: Vec<String>,
    /// The keyspace holding every table of this backend.
    pub keyspace: String,
    /// The local data centre: replication and every `LOCAL_*` consistency refer to it.
    pub local_dc: String,
    /// Replicas in the local data centre.
    pub replication_factor: u32,
}

/// A configuration value that must stop the service from starting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}: {reason}")]
pub struct ScyllaConfigError {
    /// The variable at fault.
    pub var: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

fn err(var: &'static str, reason: impl Into<String>) -> ScyllaConfigError {
    ScyllaConfigError { var, reason: reason.into() }
}

/// Checks a keyspace name: ASCII letters, digits and `_`, 1..=48 characters, not starting with
/// `_`. It is interpolated into DDL, so nothing else may pass.
pub fn validate_keyspace(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_KEYSPACE_LEN {
        return Err(format!("keyspace {name:?} must be 1 to {MAX_KEYSPACE_LEN} characters"));
    }
    if name.starts_with('_') {
        return Err(format!("keyspace {name:?} must not start with `_`"));
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(format!("keyspace {name:?} may hold only ASCII letters, digits and `_`"));
    }
    Ok(())
}

fn hosts(var: &'static str, raw: &str) -> Result<Vec<String>, ScyllaConfigError> {
    let hosts: Vec<String> = raw.split(',').map(str::trim).filter(|h| !h.is_empty()).map(str::to_owned).collect();
    if hosts.is_empty() {
        return Err(err(var, format!("{raw:?} names no contact point (want host:port, comma-separated)")));
    }
    Ok(hosts)
}

fn rf(var: &'static str, raw: &str, min: u32) -> Result<u32, ScyllaConfigError> {
    let rf: u32 = raw.trim().parse().map_err(|_| err(var, format!("{raw:?} is not a whole number")))?;
    if rf < min {
        return Err(err(var, format!("replication factor {rf} is below the minimum {min}")));
    }
    Ok(rf)
}

/// The lowest RF production settings accept: 3, or 1 when a single-node development cluster is
/// declared explicitly.
fn min_rf(dev_single_node: &str) -> Result<u32, ScyllaConfigError> {
    match dev_single_node.trim() {
        "" | "false" => Ok(MIN_PRODUCTION_RF),
        "true" => Ok(1),
        other => Err(err(DEV_SINGLE_NODE_VAR, format!("{other:?} is not `true` or `false`"))),
    }
}

fn dc(var: &'static str, raw: &str) -> Result<String, ScyllaConfigError> {
    let dc = raw.trim();
    if dc.is_empty() {
        return Err(err(var, "the local data centre must not be empty"));
    }
    Ok(dc.to_owned())
}

fn keyspace(var: &'static str, raw: &str) -> Result<String, ScyllaConfigError> {
    let ks = raw.trim();
    validate_keyspace(ks).map_err(|reason| err(var, reason))?;
    Ok(ks.to_owned())
}

/// A per-process test keyspace name: `qim_test_<pid>_<nanos>` (at most 48 characters).
pub fn generated_test_keyspace() -> String {
    test_keyspace_owned_by(std::process::id())
}

/// A test keyspace name owned by process `pid`: `qim_test_<pid>_<nanos>`, which the sweep of
/// leftover keyspaces leaves alone while `pid` runs.
pub fn test_keyspace_owned_by(pid: u32) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("qim_test_{pid}_{}", nanos % 10u128.pow(19))
}

impl ScyllaConfig {
    /// Production settings from `lookup` (a variable's value, `None` when unset).
    ///
    /// Every variable of [`REQUIRED_VARS`] must be set: when some are not, the error names the
    /// first as its `var` and lists all of them in its reason. [`DEV_SINGLE_NODE_VAR`] unset
    /// is [`DEFAULT_DEV_SINGLE_NODE`]. Nothing is connected to.
    pub fn production_from(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ScyllaConfigError> {
        let missing: Vec<&'static str> = REQUIRED_VARS.into_iter().filter(|var| lookup(var).is_none()).collect();
        if let Some(&first) = missing.first() {
            return Err(err(
                first,
                format!(
                    "is not set (unset: {}): {} have no defaults, so a service never falls back to a \
                     local cluster; set each to the deployment's cluster",
                    missing.join(", "),
                    REQUIRED_VARS.join(", ")
                ),
            ));
        }
        let get = |var: &'static str| lookup(var).unwrap_or_default();
        let dev = lookup(DEV_SINGLE_NODE_VAR).unwrap_or_else(|| DEFAULT_DEV_SINGLE_NODE.to_owned());
        Ok(Self {
            hosts: hosts(HOSTS_VAR, &get(HOSTS_VAR))?,
            keyspace: keyspace(KEYSPACE_VAR, &get(KEYSPACE_VAR))?,
            local_dc: dc(DC_VAR, &get(DC_VAR))?,
            replication_factor: rf(RF_VAR, &get(RF_VAR), min_rf(&dev)?)?,
        })
    }

    /// Production settings from the process environment (see [`Self::production_from`]).
    pub fn production_from_env() -> Result<Self, ScyllaConfigError> {
        Self::production_from(|var| std::env::var(var).ok())
    }

    /// Isolated test settings from `lookup`: `QIM_TEST_SCYLLA_HOSTS`, `QIM_TEST_SCYLLA_DC` and
    /// `QIM_TEST_SCYLLA_RF` are required (RF 1 is legal only here): a test run must name its
    /// cluster explicitly, and fails loudly instead of guessing (`deploy/local/test` sets them
    /// for the local stack). `QIM_TEST_SCYLLA_KEYSPACE` is optional (default
    /// [`generated_test_keyspace`], a fresh keyspace per run).
    pub fn test_from(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ScyllaConfigError> {
        let required = |var: &'static str| {
            lookup(var).ok_or_else(|| {
                err(var, "is not set: the Scylla tests need an explicit test cluster (deploy/local/test sets it for the local stack)")
            })
        };
        Ok(Self {
            hosts: hosts(TEST_HOSTS_VAR, &required(TEST_HOSTS_VAR)?)?,
            keyspace: keyspace(TEST_KEYSPACE_VAR, &lookup(TEST_KEYSPACE_VAR).unwrap_or_else(generated_test_keyspace))?,
            local_dc: dc(TEST_DC_VAR, &required(TEST_DC_VAR)?)?,
            replication_factor: rf(TEST_RF_VAR, &required(TEST_RF_VAR)?, 1)?,
        })
    }

    /// Isolated test settings from the process environment (see [`Self::test_from`]).
    pub fn test_from_env() -> Result<Self, ScyllaConfigError> {
        Self::test_from(|var| std::env::var(var).ok())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |k| map.get(k).cloned()
    }

    /// Every required production variable, set to a valid value.
    const PRODUCTION: &[(&str, &str)] =
        &[(HOSTS_VAR, "10.0.0.1:9042"), (KEYSPACE_VAR, "qim"), (DC_VAR, "dc1"), (RF_VAR, "3")];

    /// [`PRODUCTION`] with `extra` set on top (replacing a variable it sets).
    fn production<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut all: Vec<_> = PRODUCTION.iter().copied().filter(|(k, _)| !extra.iter().any(|(e, _)| e == k)).collect();
        all.extend_from_slice(extra);
        all
    }

    #[test]
    fn production_has_no_default_cluster() {
        let c = ScyllaConfig::production_from(vars(PRODUCTION)).unwrap();
        assert_eq!(
            c,
            ScyllaConfig {
                hosts: vec!["10.0.0.1:9042".into()],
                keyspace: "qim".into(),
                local_dc: "dc1".into(),
                replication_factor: 3,
            }
        );
        for missing in REQUIRED_VARS {
            let rest: Vec<_> = PRODUCTION.iter().copied().filter(|(k, _)| *k != missing).collect();
            let e = ScyllaConfig::production_from(vars(&rest)).unwrap_err();
            assert_eq!(e.var, missing);
            assert!(e.to_string().starts_with(&format!("{missing}: is not set")), "{e}");
        }
        // Nothing set: the first is the error's variable, and the message names all four.
        let e = ScyllaConfig::production_from(vars(&[(DEV_SINGLE_NODE_VAR, "true")])).unwrap_err();
        assert_eq!(e.var, HOSTS_VAR);
        assert!(e.reason.contains(&format!("unset: {}", REQUIRED_VARS.join(", "))), "{e}");
    }

    #[test]
    fn production_reads_every_variable() {
        let c = ScyllaConfig::production_from(vars(&production(&[
            (HOSTS_VAR, " a:9042, b:9042 ,"),
            (KEYSPACE_VAR, "qim_prod"),
            (DC_VAR, "eu-west"),
            (RF_VAR, "5"),
        ])))
        .unwrap();
        assert_eq!(c.hosts, vec!["a:9042".to_owned(), "b:9042".to_owned()]);
        assert_eq!((c.keyspace.as_str(), c.local_dc.as_str(), c.replication_factor), ("qim_prod", "eu-west", 5));
    }

    #[test]
    fn production_refuses_and_names_the_variable() {
        let cases = [
            (RF_VAR, "2"),
            (RF_VAR, "1"),
            (RF_VAR, "three"),
            (RF_VAR, "-3"),
            (DC_VAR, ""),
            (DC_VAR, "   "),
            (KEYSPACE_VAR, "_qim"),
            (KEYSPACE_VAR, "qim-prod"),
            (KEYSPACE_VAR, "qim;drop"),
            (KEYSPACE_VAR, ""),
            (KEYSPACE_VAR, &"k".repeat(49)),
            (HOSTS_VAR, " , "),
        ];
        for (var, value) in cases {
            let e = ScyllaConfig::production_from(vars(&production(&[(var, value)]))).unwrap_err();
            assert_eq!(e.var, var, "{var}={value:?}: {e}");
            assert!(e.to_string().starts_with(var), "{e}");
        }
        assert!(ScyllaConfig::production_from(vars(&production(&[(KEYSPACE_VAR, &"k".repeat(48))]))).is_ok());
    }

    const LOCAL: &[(&str, &str)] =
        &[(TEST_HOSTS_VAR, "127.0.0.1:9042"), (TEST_DC_VAR, "datacenter1"), (TEST_RF_VAR, "1")];

    fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut all: Vec<_> = LOCAL.iter().copied().filter(|(k, _)| !extra.iter().any(|(e, _)| e == k)).collect();
        all.extend_from_slice(extra);
        all
    }

    #[test]
    fn test_config_allows_rf_one_and_generates_a_keyspace() {
        let c = ScyllaConfig::test_from(vars(LOCAL)).unwrap();
        assert_eq!(c.hosts, vec!["127.0.0.1:9042".to_owned()]);
        assert_eq!((c.local_dc.as_str(), c.replication_factor), ("datacenter1", 1));
        assert!(c.keyspace.starts_with("qim_test_"), "{}", c.keyspace);
        validate_keyspace(&c.keyspace).unwrap();
        let c = ScyllaConfig::test_from(vars(&with(&[(TEST_KEYSPACE_VAR, "mine"), (TEST_RF_VAR, "2")]))).unwrap();
        assert_eq!((c.keyspace.as_str(), c.replication_factor), ("mine", 2));
        assert_eq!(ScyllaConfig::test_from(vars(&with(&[(TEST_RF_VAR, "0")]))).unwrap_err().var, TEST_RF_VAR);
        assert_eq!(ScyllaConfig::test_from(vars(&with(&[(TEST_DC_VAR, "")]))).unwrap_err().var, TEST_DC_VAR);
        let bad_keyspace = ScyllaConfig::test_from(vars(&with(&[(TEST_KEYSPACE_VAR, "a b")])));
        assert_eq!(bad_keyspace.unwrap_err().var, TEST_KEYSPACE_VAR);
    }

    #[test]
    fn test_config_requires_an_explicit_cluster() {
        for missing in [TEST_HOSTS_VAR, TEST_DC_VAR, TEST_RF_VAR] {
            let rest: Vec<_> = LOCAL.iter().copied().filter(|(k, _)| *k != missing).collect();
            let e = ScyllaConfig::test_from(vars(&rest)).unwrap_err();
            assert_eq!(e.var, missing);
            assert!(e.to_string().contains("is not set"), "{e}");
        }
    }

    #[test]
    fn test_config_ignores_production_variables() {
        let c = ScyllaConfig::test_from(vars(&with(&[(RF_VAR, "1"), (KEYSPACE_VAR, "prod")]))).unwrap();
        assert_ne!(c.keyspace, "prod");
    }

    #[test]
    fn a_declared_single_node_development_cluster_may_use_rf_one() {
        let dev =
            ScyllaConfig::production_from(vars(&production(&[(RF_VAR, "1"), (DEV_SINGLE_NODE_VAR, "true")]))).unwrap();
        assert_eq!(dev.replication_factor, 1);
        let e = ScyllaConfig::production_from(vars(&production(&[(RF_VAR, "1"), (DEV_SINGLE_NODE_VAR, "false")])))
            .unwrap_err();
        assert_eq!(e.var, RF_VAR);
        let e = ScyllaConfig::production_from(vars(&production(&[(DEV_SINGLE_NODE_VAR, "yes")]))).unwrap_err();
        assert_eq!(e.var, DEV_SINGLE_NODE_VAR);
    }
}
