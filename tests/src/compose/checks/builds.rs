//! Our services are built from the one Dockerfile, from a target that exists and runs that
//! service's binary as a non-root user; the builder compiles every binary from the lock file
//! with a toolchain not older than the workspace's `rust-version`, and the build context
//! leaves out build output and VCS data.

use std::collections::BTreeSet;
use std::path::Path;

use crate::compose::deployment::{MIGRATE, OURS};
use crate::compose::dockerfile::{dockerfile_stages, entrypoint_program, inherited, stage, version};
use crate::compose::project::{scalar_at, words};
use crate::compose::{compose_dir, read, repo_root, Compose};

/// The build problems of `compose` (empty when there are none): each of our services' `build`
/// (context, dockerfile, target), the Dockerfile stage it names (entrypoint, user), the
/// builder's `cargo build`, its toolchain and the root `.dockerignore`.
pub fn check(compose: &Compose) -> Vec<String> {
    let dockerfile = compose_dir().join("Dockerfile");
    let stages = dockerfile_stages(&read(&dockerfile));
    let mut problems = Vec::new();

    let every = compose.every();
    for ours in OURS {
        let service = every.ours(ours.service);
        let Some(build) = service.get("build").filter(|b| b.is_object()) else {
            problems.push(format!("{}: needs a `build` mapping (context, dockerfile, target)", ours.service));
            continue;
        };
        let context = scalar_at(build, "context").unwrap_or_default();
        let context_dir = compose_dir().join(&context);
        if !context_dir.join("Cargo.toml").is_file() || !context_dir.join("Cargo.lock").is_file() {
            problems.push(format!(
                "{}: build context `{context}` ({}) is not the workspace root (no Cargo.toml/Cargo.lock)",
                ours.service,
                context_dir.display()
            ));
        }
        let file = scalar_at(build, "dockerfile").unwrap_or_else(|| "Dockerfile".into());
        let file_path = context_dir.join(&file);
        match (file_path.canonicalize(), dockerfile.canonicalize()) {
            (Ok(a), Ok(b)) if a == b => {}
            _ => problems.push(format!(
                "{}: dockerfile `{file}` (relative to the context) is not deploy/compose/Dockerfile",
                ours.service
            )),
        }
        let target = scalar_at(build, "target").unwrap_or_default();
        if target != ours.target {
            problems.push(format!("{}: build target is `{target}`, expected `{}`", ours.service, ours.target));
        }
        let Some(stage_found) = stage(&stages, &target) else {
            problems.push(format!(
                "{}: target `{target}` is not a `FROM ... AS {target}` stage of the Dockerfile",
                ours.service
            ));
            continue;
        };
        let entrypoint = inherited(&stages, stage_found, "ENTRYPOINT").unwrap_or_default();
        if Path::new(entrypoint_program(&entrypoint)).file_name().and_then(|f| f.to_str()) != Some(ours.binary) {
            problems.push(format!(
                "{}: stage `{target}` has ENTRYPOINT `{entrypoint}`, expected exec form running {}",
                ours.service, ours.binary
            ));
        }
        let user = inherited(&stages, stage_found, "USER").unwrap_or_default();
        let uid = user.split(':').next().unwrap_or_default();
        if uid.is_empty() || uid == "root" || uid == "0" {
            problems.push(format!("{}: stage `{target}` runs as root", ours.service));
        }
        if service.get("image").is_some() {
            problems.push(format!(
                "{}: has both `build` and `image`; Compose would try to pull the image first",
                ours.service
            ));
        }
    }
    let migrate = words(every.ours(MIGRATE).get("command"));
    if migrate.first().map(String::as_str) != Some("migrate") {
        problems.push(format!("migrate: command is {migrate:?}, expected [\"migrate\", ...]"));
    }

    // The builder compiles every binary a target copies, from the lock file.
    let builds: Vec<&String> = stages
        .iter()
        .flat_map(|s| &s.instructions)
        .filter(|(k, a)| k == "RUN" && a.contains("cargo build"))
        .map(|(_, a)| a)
        .collect();
    match builds.as_slice() {
        [build] => {
            let tokens: Vec<&str> = build.split_whitespace().collect();
            for required in ["--release", "--locked"] {
                if !tokens.contains(&required) {
                    problems.push(format!("Dockerfile: `cargo build` lacks {required}"));
                }
            }
            for ours in OURS {
                if !tokens.windows(2).any(|w| w == ["-p", ours.binary]) {
                    problems.push(format!("Dockerfile: `cargo build` lacks `-p {}`", ours.binary));
                }
            }
        }
        _ => problems.push(format!("Dockerfile: expected exactly one `RUN ... cargo build`, found {}", builds.len())),
    }

    // The builder's toolchain is not older than the workspace's rust-version.
    let manifest = read(&repo_root().join("Cargo.toml"));
    let msrv = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version"))
        .and_then(|l| l.split('"').nth(1))
        .map(version)
        .expect("the workspace Cargo.toml declares rust-version");
    match stages.iter().find(|s| s.base.starts_with("rust:")) {
        Some(builder) => {
            let toolchain = version(builder.base.trim_start_matches("rust:").split('-').next().unwrap_or_default());
            if toolchain.len() < 2 || toolchain < msrv {
                problems.push(format!(
                    "Dockerfile: builder `{}` is older than the workspace rust-version {msrv:?} \
                     (or does not pin major.minor)",
                    builder.base
                ));
            }
        }
        None => problems.push("Dockerfile: no `FROM rust:<version>...` builder stage".into()),
    }

    let ignore = read(&repo_root().join(".dockerignore"));
    let ignored: BTreeSet<&str> =
        ignore.lines().map(|l| l.trim().trim_start_matches('/').trim_end_matches('/')).collect();
    for required in ["target", ".git", ".stack"] {
        if !ignored.contains(required) {
            problems.push(format!(".dockerignore does not exclude {required}/"));
        }
    }
    problems
}
