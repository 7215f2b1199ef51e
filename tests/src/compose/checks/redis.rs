//! Redis runs with AOF (`everysec`), never evicts, and keeps its data on a volume.

use crate::compose::yaml::{flag, scalar_at, words};
use crate::compose::Compose;

/// The Redis persistence problems of `compose` (empty when there are none), including there
/// being no Redis service.
pub fn check(compose: &Compose) -> Vec<String> {
    let mut problems = Vec::new();
    let redis: Vec<String> = compose
        .names()
        .into_iter()
        .filter(|n| scalar_at(compose.ours(n), "image").is_some_and(|i| i.starts_with("redis")))
        .collect();
    if redis.is_empty() {
        problems.push("no Redis service (image redis:...)".into());
    }
    for name in redis {
        let service = compose.ours(&name);
        let command = words(service.get("command"));
        for (option, value) in
            [("--appendonly", "yes"), ("--appendfsync", "everysec"), ("--maxmemory-policy", "noeviction")]
        {
            if flag(&command, option).as_deref() != Some(value) {
                problems.push(format!(
                    "{name}: command {command:?} lacks `{option} {value}` (commit state and seq \
                     counters must survive restarts and never be evicted)"
                ));
            }
        }
        let volumes = words(service.get("volumes"));
        if !volumes.iter().any(|v| v.split(':').nth(1) == Some("/data")) {
            problems.push(format!("{name}: no volume mounted at /data (the AOF would die with the container)"));
        }
    }
    problems
}
