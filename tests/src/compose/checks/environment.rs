//! Every variable a service is given is one its binary reads (its clap environment), and the
//! environment as a whole passes the binary's own start-up check (so a required variable, such as
//! the `QIM_SCYLLA_*` cluster, can not be missing from the file).

use std::collections::BTreeMap;

use crate::compose::deployment::{OURS, PROFILES};
use crate::compose::service::environment;
use crate::compose::Compose;

/// The environment problems of `compose` in each profile (empty when there are none): an
/// undocumented or empty variable, an unknown store backend, an environment the service's binary
/// would refuse to start with (`check-config`'s problems), a variable whose value differs
/// between services, or an `environment` that can not be read.
pub fn check(compose: &Compose) -> Vec<String> {
    let mut problems = Vec::new();
    for profile in PROFILES {
        let mut shared: BTreeMap<String, BTreeMap<String, &str>> = BTreeMap::new();
        for ours in OURS {
            let env = match environment(compose.profile(profile.name).ours(ours.service)) {
                Ok(env) => env,
                Err(e) => {
                    problems.push(format!("{} [{}]: {e}", ours.service, profile.name));
                    continue;
                }
            };
            for (name, value) in &env {
                if !ours.reads(name) {
                    problems.push(format!(
                        "{}: {name} is not read by {} \
                         (define it in the service's config.rs first, or drop it)",
                        ours.service, ours.binary
                    ));
                }
                if value.trim().is_empty() {
                    problems.push(format!("{} [{}]: {name} is empty", ours.service, profile.name));
                }
                shared.entry(name.clone()).or_default().insert(value.clone(), ours.service);
            }
            if let Err(refused) = (ours.check)(&env) {
                for why in refused {
                    problems.push(format!(
                        "{} [{}]: {} refuses its environment: {why}",
                        ours.service, profile.name, ours.binary
                    ));
                }
            }
            if let Some(backend) = env.get("QIM_STORE_BACKEND") {
                if backend != "redis" && backend != "scylla" {
                    problems.push(format!("{}: QIM_STORE_BACKEND={backend}, expected redis or scylla", ours.service));
                }
            }
        }
        for (name, values) in shared {
            if values.len() > 1 {
                problems.push(format!("[{}] {name} differs between services: {values:?}", profile.name));
            }
        }
    }
    problems
}
