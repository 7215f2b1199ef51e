//! Profile `dev` has one Scylla node and RF 1, profile `rf3` three nodes and RF 3, all seeded
//! from the same node with a data volume each; the rf3 guard runs in rf3 only, is waited for
//! by the migration and really refuses RF 1.

use std::collections::BTreeSet;
use std::process::Command;

use crate::compose::deployment::{MIGRATE, PROFILES, RF3_GUARD, SCYLLA_SEED};
use crate::compose::interpolate::expand;
use crate::compose::service::depends_on;
use crate::compose::yaml::{flag, words};
use crate::compose::Compose;

/// The Scylla profile and rf3-guard problems of `compose` (empty when there are none). Runs
/// the guard's script with `sh -c`, once with profile rf3's variables and once with none.
pub fn check(compose: &Compose) -> Vec<String> {
    let mut problems = Vec::new();
    let profiles = compose.all_profiles();
    for profile in PROFILES {
        if !profiles.contains(profile.name) {
            problems.push(format!("profile `{}` is not used by any service", profile.name));
        }
        let nodes = compose.scylla_nodes(Some(profile.name));
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
            let service = compose.ours(node);
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
            let volumes = words(service.get("volumes"));
            match volumes.iter().find(|v| v.split(':').nth(1) == Some("/var/lib/scylla")) {
                Some(v) if data_volumes.insert(v.split(':').next().unwrap_or_default().to_owned()) => {}
                Some(v) => problems.push(format!("{node}: shares its data volume `{v}` with another node")),
                None => problems.push(format!("{node}: no volume mounted at /var/lib/scylla")),
            }
        }
    }

    // The rf3 guard: present only in rf3, waited for by migrate, and it really refuses RF 1.
    match compose.service(RF3_GUARD) {
        None => problems.push(format!("service {RF3_GUARD} is missing")),
        Some(guard) => {
            if compose.enabled(RF3_GUARD, Some("dev")) || !compose.enabled(RF3_GUARD, Some("rf3")) {
                problems.push(format!("{RF3_GUARD} must run in profile rf3 only"));
            }
            let waits = depends_on(compose.ours(MIGRATE))
                .into_iter()
                .any(|d| d.name == RF3_GUARD && d.condition == "service_completed_successfully");
            if !waits {
                problems.push(format!("{MIGRATE} does not wait for {RF3_GUARD} to complete successfully"));
            }
            let entrypoint = words(guard.get("entrypoint"));
            let script = words(guard.get("command")).join(" ");
            if entrypoint != ["/bin/sh", "-c"] {
                problems.push(format!("{RF3_GUARD}: entrypoint {entrypoint:?}, expected [/bin/sh, -c]"));
            }
            let rf3 = PROFILES.iter().find(|p| p.name == "rf3").expect("rf3 is listed");
            for (vars, should_pass) in [(rf3.vars, true), (&[][..], false)] {
                match expand(&script, vars) {
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
