//! The compose file as Compose sees it: YAML with anchors, aliases and `<<` merge keys
//! resolved, plus the helpers that read scalars, word lists and `--flag value` pairs out of it.

use std::collections::BTreeSet;

use serde_yaml::{Mapping, Value};

use super::{compose_dir, read};

/// The parsed `deploy/compose/docker-compose.yml` with anchors and merge keys resolved.
///
/// Values are not interpolated: `${VAR}` references are left as written (see
/// [`super::interpolate`]).
pub struct Compose {
    doc: Value,
}

impl Compose {
    /// Reads and parses `deploy/compose/docker-compose.yml`, then applies its `<<` merge keys.
    ///
    /// # Panics
    ///
    /// If the file can not be read, is not valid YAML, has a malformed `<<` merge key, or still
    /// has a `<<` key after merging (a merged mapping carried its own `<<`, which Compose and
    /// this reader may resolve differently).
    #[track_caller]
    pub fn load() -> Self {
        let path = compose_dir().join("docker-compose.yml");
        let mut doc: Value =
            serde_yaml::from_str(&read(&path)).unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", path.display()));
        // serde_yaml resolves aliases while parsing, but `<<` merge keys only on request.
        doc.apply_merge().unwrap_or_else(|e| panic!("{}: bad `<<` merge key: {e}", path.display()));
        let mut leftover = Vec::new();
        find_merge_keys(&doc, "", &mut leftover);
        assert!(
            leftover.is_empty(),
            "`<<` keys left after merging (a merged mapping carried its own `<<`; \
             Compose and this test may disagree): {leftover:?}"
        );
        Compose { doc }
    }

    /// The whole document (top-level keys such as `services`, `volumes`, `version`).
    pub fn doc(&self) -> &Value {
        &self.doc
    }

    /// The `services` mapping.
    ///
    /// # Panics
    ///
    /// If the file has no `services` mapping.
    #[track_caller]
    pub fn services(&self) -> &Mapping {
        self.doc.get("services").and_then(Value::as_mapping).expect("the compose file has a `services` mapping")
    }

    /// Every service name, in file order.
    pub fn names(&self) -> Vec<String> {
        self.services().keys().filter_map(|k| k.as_str().map(str::to_owned)).collect()
    }

    /// Service `name`, or `None` when the file has no such service.
    pub fn service(&self, name: &str) -> Option<&Value> {
        self.services().get(name)
    }

    /// Service `name`, for callers whose other checks depend on it being there.
    ///
    /// # Panics
    ///
    /// If the file has no service `name`; the message names it.
    #[track_caller]
    pub fn ours(&self, name: &str) -> &Value {
        self.service(name).unwrap_or_else(|| panic!("service `{name}` is missing from docker-compose.yml"))
    }

    /// Whether Compose starts service `name` with `profile` active (`None`: no profile): the
    /// service exists and either names no profile or names `profile`.
    pub fn enabled(&self, name: &str, profile: Option<&str>) -> bool {
        let Some(service) = self.service(name) else {
            return false;
        };
        let profiles = profiles_of(service);
        profiles.is_empty() || profile.is_some_and(|p| profiles.iter().any(|q| q == p))
    }

    /// Every profile some service names.
    pub fn all_profiles(&self) -> BTreeSet<String> {
        self.services().values().flat_map(profiles_of).collect()
    }

    /// The Scylla nodes enabled in `profile`, in file order: services running the
    /// `scylladb/scylla` image itself (no `entrypoint` override, so not a one-shot that merely
    /// reuses the image).
    pub fn scylla_nodes(&self, profile: Option<&str>) -> Vec<String> {
        self.names()
            .into_iter()
            .filter(|n| {
                let s = self.ours(n);
                scalar_at(s, "image").is_some_and(|i| i.contains("scylladb/scylla"))
                    && s.get("entrypoint").is_none()
                    && self.enabled(n, profile)
            })
            .collect()
    }

    /// The services that create Kafka topics, in file order: those whose [`script`] contains
    /// `rpk topic create`.
    pub fn topic_init_services(&self) -> Vec<String> {
        self.names().into_iter().filter(|n| script(self.ours(n)).contains("rpk topic create")).collect()
    }

    /// The names declared under the top-level `volumes` key (empty when there is none).
    pub fn declared_volumes(&self) -> BTreeSet<String> {
        self.doc
            .get("volumes")
            .and_then(Value::as_mapping)
            .map(|m| m.keys().filter_map(scalar).collect())
            .unwrap_or_default()
    }
}

/// Records in `out` the path (`.key.key...`, sequences not indexed) of every `<<` key in `v`.
fn find_merge_keys(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Mapping(m) => {
            for (k, v) in m {
                let key = scalar(k).unwrap_or_default();
                if key == "<<" {
                    out.push(path.to_owned());
                }
                find_merge_keys(v, &format!("{path}.{key}"), out);
            }
        }
        Value::Sequence(s) => s.iter().for_each(|v| find_merge_keys(v, path, out)),
        _ => {}
    }
}

/// A string, number or boolean as text; `None` for null, sequences, mappings and tagged values.
pub fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// [`scalar`] of `v[key]`; `None` when the key is missing or its value is not a scalar.
pub fn scalar_at(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(scalar)
}

/// A `command`/`entrypoint`/`healthcheck.test`/`volumes`/`profiles` value as words: a
/// sequence gives its scalar items, a scalar is split on whitespace (as Compose does for
/// simple commands), a missing or null value gives no words.
pub fn words(v: Option<&Value>) -> Vec<String> {
    match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Sequence(items)) => items.iter().filter_map(scalar).collect(),
        Some(other) => scalar(other).map(|s| s.split_whitespace().map(str::to_owned).collect()).unwrap_or_default(),
    }
}

/// The profiles a service is listed under (empty: it runs in every profile).
pub fn profiles_of(service: &Value) -> Vec<String> {
    words(service.get("profiles"))
}

/// A service's `entrypoint` followed by its `command`, as [`words`] joined by single spaces:
/// the shell script a one-shot such as the topic-init service runs.
pub fn script(service: &Value) -> String {
    let mut all = words(service.get("entrypoint"));
    all.extend(words(service.get("command")));
    all.join(" ")
}

/// The value of the first `--flag value` or `--flag=value` among `words` (`name` includes the
/// dashes); `None` when the flag is absent or is the last word with no value after it.
pub fn flag(words: &[String], name: &str) -> Option<String> {
    let prefix = format!("{name}=");
    words.iter().enumerate().find_map(|(i, w)| {
        if w == name {
            words.get(i + 1).cloned()
        } else {
            w.strip_prefix(&prefix).map(str::to_owned)
        }
    })
}
