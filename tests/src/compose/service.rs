//! One service's runtime settings as Compose gives them to the container: `environment`,
//! `ports` and `depends_on`, and the Kafka/Scylla/Redis addresses its variables name.

use std::collections::BTreeMap;

use qim_store::env::{find, EnvVar};
use serde_yaml::Value;

use super::interpolate::expand;
use super::yaml::{scalar, scalar_at, words};
use super::Compose;

/// A service's `environment` (mapping or `KEY=value` list form), each value interpolated with
/// `vars` (see [`expand`]); empty when the service has none.
///
/// # Errors
///
/// A non-scalar key or entry, a variable without a value (Compose would copy it from the
/// host's environment), an interpolation error, or an `environment` that is neither a mapping
/// nor a list.
pub fn environment(service: &Value, vars: &[(&str, &str)]) -> Result<BTreeMap<String, String>, String> {
    let mut env = BTreeMap::new();
    match service.get("environment") {
        None | Some(Value::Null) => {}
        Some(Value::Mapping(m)) => {
            for (k, v) in m {
                let key = scalar(k).ok_or("a non-scalar environment key")?;
                let raw = scalar(v)
                    .ok_or_else(|| format!("{key} has no value (it would be copied from the host's environment)"))?;
                env.insert(key, expand(&raw, vars)?);
            }
        }
        Some(Value::Sequence(items)) => {
            for item in items {
                let raw = scalar(item).ok_or("a non-scalar environment entry")?;
                let (key, value) = raw
                    .split_once('=')
                    .ok_or_else(|| format!("{raw} has no value (it would be copied from the host's environment)"))?;
                env.insert(key.to_owned(), expand(value, vars)?);
            }
        }
        Some(_) => return Err("`environment` is neither a mapping nor a list".into()),
    }
    Ok(env)
}

/// The value of variable `name` as the service sees it: set in `env` (its compose
/// environment), else the default documented in `tables`, else `None`.
pub fn effective(env: &BTreeMap<String, String>, tables: &[&[EnvVar]], name: &str) -> Option<String> {
    env.get(name).cloned().or_else(|| find(tables, name).and_then(|v| v.default.map(str::to_owned)))
}

/// The [`environment`] of service `service`, interpolated with `vars`. A broken one is pushed
/// onto `problems` as `"<service>: environment: <error>"` and gives `None`, so it is reported
/// by name instead of surfacing later as a confusing symptom.
///
/// # Panics
///
/// If the compose file has no service `service` (see [`Compose::ours`]).
#[track_caller]
pub fn env_of(
    compose: &Compose,
    service: &str,
    vars: &[(&str, &str)],
    problems: &mut Vec<String>,
) -> Option<BTreeMap<String, String>> {
    environment(compose.ours(service), vars).map_err(|e| problems.push(format!("{service}: environment: {e}"))).ok()
}

/// One `ports` entry of a service.
pub struct Port {
    /// The host port, when one is published (`None`: Compose picks an ephemeral port).
    pub published: Option<u16>,
    /// The container port.
    pub target: u16,
}

/// A service's `ports`, in long (`target`/`published`) or short
/// (`[ip:][host:]container[/proto]`) form; empty when it has none.
///
/// # Errors
///
/// A non-scalar short entry, a long entry without `target`, or a port that is not a single
/// number (ranges such as `8000-8010` included).
pub fn ports(service: &Value) -> Result<Vec<Port>, String> {
    let Some(entries) = service.get("ports").and_then(Value::as_sequence) else {
        return Ok(Vec::new());
    };
    let number = |s: &str| s.parse::<u16>().map_err(|_| format!("port `{s}` is not a single port number"));
    entries
        .iter()
        .map(|entry| match entry {
            Value::Mapping(_) => Ok(Port {
                published: scalar_at(entry, "published").map(|p| number(&p)).transpose()?,
                target: number(&scalar_at(entry, "target").ok_or("a port without `target`")?)?,
            }),
            other => {
                let text = scalar(other).ok_or("a non-scalar port entry")?;
                let spec = text.split('/').next().unwrap_or_default();
                let (front, target) = spec.rsplit_once(':').unwrap_or(("", spec));
                let published = front.rsplit(':').next().filter(|p| !p.is_empty());
                Ok(Port { published: published.map(number).transpose()?, target: number(target)? })
            }
        })
        .collect()
}

/// One `depends_on` entry of a service.
pub struct Dependency {
    /// The service depended on.
    pub name: String,
    /// `service_started` (the default), `service_healthy`, `service_completed_successfully`,
    /// or whatever else the file says.
    pub condition: String,
    /// `required` (default `true`): whether Compose refuses to start without that service.
    pub required: bool,
}

/// A service's `depends_on`, in long (mapping) or short (list of names) form, in file order;
/// empty when it has none.
pub fn depends_on(service: &Value) -> Vec<Dependency> {
    match service.get("depends_on") {
        Some(Value::Mapping(m)) => m
            .iter()
            .map(|(k, v)| Dependency {
                name: scalar(k).unwrap_or_default(),
                condition: scalar_at(v, "condition").unwrap_or_else(|| "service_started".into()),
                required: v.get("required").and_then(Value::as_bool).unwrap_or(true),
            })
            .collect(),
        other => words(other)
            .into_iter()
            .map(|name| Dependency { name, condition: "service_started".into(), required: true })
            .collect(),
    }
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
