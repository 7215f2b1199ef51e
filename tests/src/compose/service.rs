//! One service's runtime settings as Compose gives them to the container: `environment`,
//! `ports`, `volumes` and `depends_on` (in the loader's normalised long form), and the
//! Kafka/Scylla/Redis addresses its variables name.

use std::collections::BTreeMap;

use qim_runtime::env::Variable;
use serde_json::Value;

use super::project::{scalar, scalar_at, Project};

/// A service's `environment`, interpolated; empty when it has none.
///
/// # Errors
///
/// A variable without a value (Compose would copy it from the host's environment) or a
/// non-text value.
pub fn environment(service: &Value) -> Result<BTreeMap<String, String>, String> {
    let Some(entries) = service.get("environment").and_then(Value::as_object) else {
        return Ok(BTreeMap::new());
    };
    entries
        .iter()
        .map(|(key, value)| match value {
            Value::Null => Err(format!("{key} has no value (it would be copied from the host's environment)")),
            other => scalar(other).map(|v| (key.clone(), v)).ok_or_else(|| format!("{key} is not text")),
        })
        .collect()
}

/// The value of variable `name` as the service sees it: set in `env` (its compose
/// environment), else the default of its definition in `vars`, else `None`.
pub fn effective(env: &BTreeMap<String, String>, vars: &[Variable], name: &str) -> Option<String> {
    env.get(name).cloned().or_else(|| vars.iter().find(|v| v.name == name).and_then(|v| v.default.clone()))
}

/// The [`environment`] of service `service` in `project`. A broken one is pushed onto `problems`
/// as `"<service>: environment: <error>"` and gives `None`, so it is reported by name instead of
/// surfacing later as a confusing symptom.
///
/// # Panics
///
/// If the project has no service `service` (see [`Project::ours`]).
#[track_caller]
pub fn env_of(project: &Project, service: &str, problems: &mut Vec<String>) -> Option<BTreeMap<String, String>> {
    environment(project.ours(service)).map_err(|e| problems.push(format!("{service}: environment: {e}"))).ok()
}

/// One `ports` entry of a service.
pub struct Port {
    /// The host port, when one is published (`None`: Compose picks an ephemeral port).
    pub published: Option<u16>,
    /// The container port.
    pub target: u16,
}

/// A service's `ports`; empty when it has none.
///
/// # Errors
///
/// An entry without `target`, or a published port that is not a single number (ranges such as
/// `8000-8010` included).
pub fn ports(service: &Value) -> Result<Vec<Port>, String> {
    let Some(entries) = service.get("ports").and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    let number = |s: String| s.parse::<u16>().map_err(|_| format!("port `{s}` is not a single port number"));
    entries
        .iter()
        .map(|entry| {
            Ok(Port {
                published: scalar_at(entry, "published").filter(|p| !p.is_empty()).map(number).transpose()?,
                target: number(scalar_at(entry, "target").ok_or("a port without `target`")?)?,
            })
        })
        .collect()
}

/// One `volumes` entry of a service: what is mounted (a volume name or host path) and where.
pub struct Mount {
    /// `volume`, `bind`, `tmpfs`, ...
    pub kind: String,
    /// The volume name or host path (empty for an anonymous volume).
    pub source: String,
    /// The path inside the container.
    pub target: String,
}

impl Mount {
    /// Whether what is written there outlives the container: a named volume or a bind mount
    /// (not tmpfs, not an anonymous volume).
    pub fn keeps_data(&self) -> bool {
        matches!(self.kind.as_str(), "volume" | "bind") && !self.source.is_empty()
    }
}

/// A service's `volumes`; empty when it has none.
pub fn mounts(service: &Value) -> Vec<Mount> {
    let Some(entries) = service.get("volumes").and_then(Value::as_array) else {
        return Vec::new();
    };
    let text = |entry: &Value, key: &str| scalar_at(entry, key).unwrap_or_default();
    entries
        .iter()
        .map(|entry| Mount { kind: text(entry, "type"), source: text(entry, "source"), target: text(entry, "target") })
        .collect()
}

/// One `depends_on` entry of a service.
pub struct Dependency {
    /// The service depended on.
    pub name: String,
    /// `service_started`, `service_healthy`, `service_completed_successfully`, or whatever
    /// else the file says.
    pub condition: String,
    /// Whether Compose refuses to start without that service.
    pub required: bool,
}

/// A service's `depends_on`, sorted by name; empty when it has none.
pub fn depends_on(service: &Value) -> Vec<Dependency> {
    let Some(entries) = service.get("depends_on").and_then(Value::as_object) else {
        return Vec::new();
    };
    entries
        .iter()
        .map(|(name, v)| Dependency {
            name: name.clone(),
            condition: scalar_at(v, "condition").unwrap_or_else(|| "service_started".into()),
            required: v.get("required").and_then(Value::as_bool).unwrap_or(true),
        })
        .collect()
}

/// `host:port` (surrounding whitespace ignored) → (host, port); `None` without a `:` or when
/// the port is not a number.
pub fn host_port(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.trim().rsplit_once(':')?;
    Some((host.to_owned(), port.parse().ok()?))
}

/// `redis://[user[:pass]@]host[:port][/db]` (or `rediss://`) → (host, port), the port
/// defaulting to 6379; `None` for another scheme or a port that is not a number.
pub fn redis_host_port(url: &str) -> Option<(String, u16)> {
    let rest = url.strip_prefix("redis://").or_else(|| url.strip_prefix("rediss://"))?;
    let authority = rest.split('/').next()?;
    let authority = authority.rsplit('@').next()?;
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host.to_owned(), port.parse().ok()?)),
        None => Some((authority.to_owned(), 6379)),
    }
}
