//! Profile `dev` has one Scylla node and RF 1, profile `rf3` three nodes and RF 3, all seeded
//! from the same node with a data volume each (the rf3 guard is checked in
//! [`super::rf3_guards`]).

use std::collections::BTreeSet;

use crate::compose::deployment::{PROFILES, SCYLLA_SEED};
use crate::compose::project::{flag, words};
use crate::compose::service::mounts;
use crate::compose::Compose;

/// The Scylla profile problems of `compose` (empty when there are none), including a profile
/// no service uses.
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
    problems
}
