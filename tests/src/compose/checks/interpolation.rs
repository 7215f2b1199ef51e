//! The compose file interpolates only the known compose-level variables, the README names each
//! of them and shows the command line of each profile with the variables it sets.

use std::collections::BTreeSet;

use crate::compose::deployment::{COMPOSE_VARS, PROFILES, UP_DEV};
use crate::compose::{compose_dir, read, Compose};

/// The interpolation and README problems of `compose` (empty when there are none).
pub fn check(compose: &Compose) -> Vec<String> {
    let mut problems = Vec::new();
    // Interpolation errors already failed the load (`docker compose` would fail the same way).
    let used: BTreeSet<&String> = compose.variants().iter().flat_map(|(_, p)| p.interpolated()).collect();
    for name in used {
        if !COMPOSE_VARS.contains(&name.as_str()) {
            problems.push(format!(
                "the compose file interpolates ${name}; known compose-level variables: {COMPOSE_VARS:?}"
            ));
        }
    }

    let readme = read(&compose_dir().join("README.md"));
    for name in COMPOSE_VARS {
        if !readme.contains(&format!("`{name}`")) {
            problems.push(format!("README.md does not document the compose-level variable `{name}`"));
        }
    }
    if !readme.contains(UP_DEV) {
        problems.push(format!("README.md does not show `{UP_DEV}`"));
    }
    for profile in PROFILES {
        if !readme.contains(&format!("--profile {}", profile.name)) {
            problems.push(format!("README.md does not show `--profile {}`", profile.name));
        }
        for (name, value) in profile.vars {
            if !readme.contains(&format!("{name}={value}")) {
                problems.push(format!("README.md does not show `{name}={value}` for profile {}", profile.name));
            }
        }
    }
    problems
}
