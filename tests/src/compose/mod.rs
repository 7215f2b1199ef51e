//! Reading the production-like deployment in `deploy/compose/` the way Docker Compose and
//! Docker would, for the `compose_config` drift test.
//!
//! Nothing here starts a container or talks to a server. The compose file is read by the
//! Compose specification's own loader (compose-go, `deploy/compose/load`, built once with
//! `go build`); the checks compare what it resolved with the code (the other process started is
//! `sh -c`, to run the rf3 guard scripts).
//!
//! - [`project`]: the compose file as the loader resolves it, one [`project::Project`] per set of
//!   profiles ([`Compose`]), and the helpers that read scalars, lists and `--flag value` pairs;
//! - [`service`]: one service's `environment`, `ports`, `volumes` and `depends_on`, and the
//!   addresses found in its variables;
//! - [`dockerfile`]: the stages of a multi-stage Dockerfile;
//! - [`topics`]: the topics a topic-init script creates with `rpk topic create` and the cluster
//!   properties it sets with `rpk cluster config set`;
//! - [`deployment`]: what the deployment must consist of (our services, the profiles);
//! - [`env_blocks`]: our services' `environment` blocks, generated from their definitions;
//! - [`checks`]: the drift checks themselves, one concern per module, built on the above.
//!
//! This module also holds the file access shared by all of them ([`compose_dir`], [`read`])
//! and the way the test reports what it found ([`report`]).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

pub mod checks;
pub mod deployment;
pub mod dockerfile;
pub mod env_blocks;
pub mod project;
pub mod service;
pub mod topics;

pub use project::Compose;

/// The workspace root (the directory holding the workspace `Cargo.toml`).
///
/// # Panics
///
/// If this crate's manifest directory has no parent, i.e. the crate is not inside the
/// workspace.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the tests crate lives inside the workspace").to_path_buf()
}

/// `deploy/compose/` under [`repo_root`]: the compose file, its Dockerfile and README.
pub fn compose_dir() -> PathBuf {
    repo_root().join("deploy").join("compose")
}

/// The whole of the text file at `path`.
///
/// # Panics
///
/// If the file can not be read (missing, unreadable or not UTF-8); the message names the path.
#[track_caller]
pub fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("can not read {}: {e}", path.display()))
}

/// Fails the test with every problem found (each once, in first-seen order), not just the
/// first; does nothing when `problems` is empty.
///
/// # Panics
///
/// When `problems` is not empty, with a message naming the check (`what`), the number of
/// distinct problems and each of them on its own line.
#[track_caller]
pub fn report(what: &str, mut problems: Vec<String>) {
    let mut seen = BTreeSet::new();
    problems.retain(|p| seen.insert(p.clone()));
    assert!(
        problems.is_empty(),
        "{what}: {} problem(s) in deploy/compose/:\n  - {}",
        problems.len(),
        problems.join("\n  - ")
    );
}
