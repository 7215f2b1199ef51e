//! Profile `dev` has one Scylla node and RF 1, profile `rf3` three nodes and RF 3, all seeded
//! from the same node with a data volume each; the rf3 guard runs in rf3 only, is waited for
//! by the migration and really refuses RF 1.

use std::collections::BTreeSet;
use std::process::Command;

use crate::compose::deployment::{MIGRATE, PROFILES, RF3_GUARD, SCYLLA_SEED};
use crate::compose::project::{flag, words, Project};
use crate::compose::service::{depends_on, mounts};
use crate::compose::Compose;

/// The Scylla profile and rf3-guard problems of `compose` (empty when there are none). Runs
/// the guard's script with `sh -c`, once as profile rf3's variables resolve it and once as no
/// variables do (a second load of the file).
pub fn check(compose: &Compose) -> Vec<String> {
    let mut problems = Vec::new();
    let every = compose.every();
    let profiles: BTreeSet<String> = every.names().iter().flat_map(|n| words(every.ours(n).get("profiles"))).collect();
    for profile in PROFILES {
        if !profiles.contains(profile.name) {
            problems.push(format!("profile `{}` is not used by any service", profile.name));
        }
        let project = compose.profile(profile.name);
        let nodes = project.scylla_nodes();
        if nodes.len() != profile.scylla_nodes {
            problems.push(format!(
                "profile {} has Scylla nodes {nodes:?}, expected {}",
                profile.name, profile.scylla_nodes
            ));
        }
        if !nodes.iter().any(|n| n == SCYLLA_SEED) {
            problems.push(format!("profile {} lacks the seed node {SCYLLA_SEED}", profile.name));
        }
        let mut data_volumes = BTreeSet::new();
        for node in &nodes {
            let service = project.ours(node);
            let command = words(service.get("command"));
            let seeds = flag(&command, "--seeds").unwrap_or_default();
            if !seeds.split(',').any(|s| s == SCYLLA_SEED) {
                problems.push(format!("{node}: not seeded from {SCYLLA_SEED} (--seeds {seeds:?})"));
            }
            if profile.name == "dev" {
                for (option, value) in [("--smp", "1"), ("--memory", "1G"), ("--developer-mode", "1")] {
                    if flag(&command, option).as_deref() != Some(value) {
                        problems.push(format!("{node}: dev profile needs `{option} {value}`"));
                    }
                }
            }
            match mounts(service).into_iter().find(|m| m.target == "/var/lib/scylla" && m.keeps_data()) {
                Some(m) if data_volumes.insert(m.source.clone()) => {}
                Some(m) => problems.push(format!("{node}: shares its data volume `{}` with another node", m.source)),
                None => problems.push(format!("{node}: no volume mounted at /var/lib/scylla")),
            }
        }
    }

    // The rf3 guard: present only in rf3, waited for by migrate, and it really refuses RF 1.
    match every.service(RF3_GUARD) {
        None => problems.push(format!("service {RF3_GUARD} is missing")),
        Some(guard) => {
            if compose.profile("dev").has(RF3_GUARD) || !compose.profile("rf3").has(RF3_GUARD) {
                problems.push(format!("{RF3_GUARD} must run in profile rf3 only"));
            }
            let waits = depends_on(every.ours(MIGRATE))
                .into_iter()
                .any(|d| d.name == RF3_GUARD && d.condition == "service_completed_successfully");
            if !waits {
                problems.push(format!("{MIGRATE} does not wait for {RF3_GUARD} to complete successfully"));
            }
            let entrypoint = words(guard.get("entrypoint"));
            if entrypoint != ["/bin/sh", "-c"] {
                problems.push(format!("{RF3_GUARD}: entrypoint {entrypoint:?}, expected [/bin/sh, -c]"));
            }
            let rf3 = PROFILES.iter().find(|p| p.name == "rf3").expect("rf3 is listed");
            for (vars, should_pass) in [(rf3.vars, true), (&[][..], false)] {
                let script = |p: &Project| words(p.ours(RF3_GUARD).get("command")).join(" ");
                match Project::load(&["rf3"], vars).map(|p| script(&p)) {
                    Ok(script) => {
                        let passed =
                            Command::new("sh").arg("-c").arg(&script).output().expect("run sh").status.success();
                        if passed != should_pass {
                            problems.push(format!(
                                "{RF3_GUARD} with {vars:?}: {} but should {}",
                                if passed { "passes" } else { "fails" },
                                if should_pass { "pass" } else { "fail" }
                            ));
                        }
                    }
                    Err(e) => problems.push(format!("{RF3_GUARD}: {e}")),
                }
            }
        }
    }
    problems
}
