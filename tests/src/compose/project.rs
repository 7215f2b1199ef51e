//! The compose file as Docker Compose resolves it, read by the Compose specification's own
//! loader (compose-go v2, run as `deploy/compose/load`): anchors and merge keys resolved,
//! `${VAR}` interpolated, short syntax normalised, one [`Project`] per set of profiles. No YAML
//! or interpolation rules of our own: what the loader refuses fails the test with its message.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use super::compose_dir;
use super::deployment::PROFILES;

/// The compose file loaded once per variant the checks need: without profiles, with each
/// documented profile and the variables its README command sets, and with every profile.
pub struct Compose {
    none: Project,
    profiles: Vec<(&'static str, Project)>,
    every: Project,
}

impl Compose {
    /// The compose file, loaded once per process (each variant is one run of the loader).
    ///
    /// # Panics
    ///
    /// If Go is missing or the loader refuses the file in some variant; the message says which
    /// and why.
    #[track_caller]
    pub fn load() -> &'static Compose {
        static COMPOSE: OnceLock<Compose> = OnceLock::new();
        COMPOSE.get_or_init(|| {
            let load = |label: &str, profiles: &[&str], vars: &[(&str, &str)]| {
                Project::load(profiles, vars).unwrap_or_else(|e| panic!("docker-compose.yml [{label}]: {e}"))
            };
            Compose {
                none: load("no profile", &[], &[]),
                profiles: PROFILES.iter().map(|p| (p.name, load(p.name, &[p.name], p.vars))).collect(),
                every: load("every profile", &["*"], &[]),
            }
        })
    }

    /// Every service of the file, enabled by all profiles at once, with no compose-level
    /// variables set (their defaults apply).
    pub fn every(&self) -> &Project {
        &self.every
    }

    /// The project of profile `name` (one of [`PROFILES`]), with that profile's variables.
    ///
    /// # Panics
    ///
    /// If `name` is not one of [`PROFILES`] (a programming error in a check).
    #[track_caller]
    pub fn profile(&self, name: &str) -> &Project {
        self.profiles
            .iter()
            .find(|(p, _)| *p == name)
            .map(|(_, project)| project)
            .unwrap_or_else(|| panic!("profile `{name}` is not in deployment::PROFILES"))
    }

    /// Each variant a start-up must work in: no profile, then every documented profile, with a
    /// label for messages.
    pub fn variants(&self) -> Vec<(&str, &Project)> {
        std::iter::once(("no profile", &self.none))
            .chain(self.profiles.iter().map(|(p, project)| (*p, project)))
            .collect()
    }
}

/// The loader (`deploy/compose/load`) built once per version of its sources, in the temporary
/// directory: every test process of a run uses the one binary instead of paying `go run`'s link
/// each time. Concurrent first builds each write their own file and rename it into place.
fn loader() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(build_loader).clone()
}

fn build_loader() -> Result<PathBuf, String> {
    let src = compose_dir().join("load");
    let mut hasher = std::hash::DefaultHasher::new();
    for file in ["go.mod", "go.sum", "main.go"] {
        let text = std::fs::read(src.join(file)).map_err(|e| format!("reading deploy/compose/load/{file}: {e}"))?;
        text.hash(&mut hasher);
    }
    let bin = std::env::temp_dir().join(format!("qim-compose-load-{:016x}", hasher.finish()));
    if bin.exists() {
        return Ok(bin);
    }
    let partial = bin.with_extension(format!("partial-{}", std::process::id()));
    let output =
        Command::new("go").current_dir(&src).args(["build", "-o"]).arg(&partial).arg(".").output().map_err(|e| {
            format!(
                "can not run `go` ({e}): the compose checks load the file with compose-go \
                 (deploy/compose/load, Go 1.26 or newer on PATH)"
            )
        })?;
    if !output.status.success() {
        return Err(format!("building the Compose loader failed: {}", String::from_utf8_lossy(&output.stderr).trim()));
    }
    std::fs::rename(&partial, &bin).map_err(|e| format!("installing the Compose loader at {}: {e}", bin.display()))?;
    Ok(bin)
}

/// One resolved project: the services enabled in its profiles, and what the loader saw.
pub struct Project {
    doc: Value,
    interpolated: BTreeSet<String>,
    warnings: Vec<String>,
}

impl Project {
    /// Loads `deploy/compose/docker-compose.yml` with `profiles` enabled and the compose-level
    /// variables `vars` (nothing from this process's environment).
    ///
    /// # Errors
    ///
    /// Go could not be run (named, with how to get it), or the loader refused the file (its
    /// message), or its output was not the expected JSON.
    pub fn load(profiles: &[&str], vars: &[(&str, &str)]) -> Result<Project, String> {
        let dir = compose_dir();
        let mut go = Command::new(loader()?);
        for profile in profiles {
            go.args(["-profile", profile]);
        }
        for (name, value) in vars {
            go.arg("-env").arg(format!("{name}={value}"));
        }
        go.arg(dir.join("docker-compose.yml"));
        let output = go.output().map_err(|e| format!("can not run the Compose loader: {e}"))?;
        if !output.status.success() {
            return Err(format!("the Compose loader refused it: {}", String::from_utf8_lossy(&output.stderr).trim()));
        }
        let mut out: Value =
            serde_json::from_slice(&output.stdout).map_err(|e| format!("the loader's output is not JSON: {e}"))?;
        let strings = |v: &Value| words(Some(v));
        Ok(Project {
            interpolated: strings(&out["interpolated"]).into_iter().collect(),
            warnings: strings(&out["warnings"]),
            doc: out["project"].take(),
        })
    }

    /// The whole resolved document (`services`, `volumes`, `networks`, `x-*` extensions).
    pub fn doc(&self) -> &Value {
        &self.doc
    }

    /// The compose-level variables the file looked up while it was interpolated.
    pub fn interpolated(&self) -> &BTreeSet<String> {
        &self.interpolated
    }

    /// What the loader warned about (an obsolete `version:` key, a deprecated form, ...).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The names of the enabled services, sorted.
    pub fn names(&self) -> Vec<String> {
        self.doc["services"].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()
    }

    /// Service `name`, or `None` when the project does not run it.
    pub fn service(&self, name: &str) -> Option<&Value> {
        self.doc["services"].get(name)
    }

    /// Whether the project runs service `name`.
    pub fn has(&self, name: &str) -> bool {
        self.service(name).is_some()
    }

    /// Service `name`, for callers whose other checks depend on it being there.
    ///
    /// # Panics
    ///
    /// If the project does not run `name`; the message names it.
    #[track_caller]
    pub fn ours(&self, name: &str) -> &Value {
        self.service(name).unwrap_or_else(|| panic!("service `{name}` is missing from docker-compose.yml"))
    }

    /// The Scylla nodes, sorted: services running the `scylladb/scylla` image itself (no
    /// `entrypoint` override, so not a one-shot that merely reuses the image).
    pub fn scylla_nodes(&self) -> Vec<String> {
        self.running_image("scylladb/scylla")
    }

    /// The Redpanda brokers, sorted: services running the `redpandadata/redpanda` image itself
    /// (no `entrypoint` override, so not the topic init or a guard that reuses the image).
    pub fn redpanda_brokers(&self) -> Vec<String> {
        self.running_image("redpandadata/redpanda")
    }

    /// The services whose image names `image` and that run its own entrypoint, sorted.
    fn running_image(&self, image: &str) -> Vec<String> {
        self.names()
            .into_iter()
            .filter(|n| {
                let s = self.ours(n);
                scalar_at(s, "image").is_some_and(|i| i.contains(image)) && words(s.get("entrypoint")).is_empty()
            })
            .collect()
    }

    /// The services that create Kafka topics: those whose [`script`] runs `rpk topic create`.
    pub fn topic_init_services(&self) -> Vec<String> {
        self.names().into_iter().filter(|n| script(self.ours(n)).contains("rpk topic create")).collect()
    }
}

/// A string, number or boolean as text; `None` for null, arrays and objects.
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

/// A list value (`command`, `entrypoint`, `healthcheck.test`, `profiles`) as its scalar items;
/// a missing or null value gives none (the loader has already split string forms).
pub fn words(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).map(|items| items.iter().filter_map(scalar).collect()).unwrap_or_default()
}

/// A service's `entrypoint` followed by its `command`, joined by single spaces: the shell script
/// a one-shot such as the topic-init service runs.
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
