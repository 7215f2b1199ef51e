//! Redis runs with AOF (`everysec`), never evicts, and keeps its data on a volume.

use crate::compose::project::{flag, scalar_at, words};
use crate::compose::service::mounts;
use crate::compose::Compose;

/// The Redis persistence problems of `compose` (empty when there are none), including there
/// being no Redis service.
pub fn check(compose: &Compose) -> Vec<String> {
    let mut problems = Vec::new();
    let every = compose.every();
    let redis: Vec<String> = every
        .names()
        .into_iter()
        .filter(|n| scalar_at(every.ours(n), "image").is_some_and(|i| i.starts_with("redis")))
        .collect();
    if redis.is_empty() {
        problems.push("no Redis service (image redis:...)".into());
    }
    for name in redis {
        let service = every.ours(&name);
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
        // A named volume (or a bind mount): tmpfs or an anonymous volume would not keep the AOF.
        if !mounts(service).iter().any(|m| m.target == "/data" && m.keeps_data()) {
            problems.push(format!("{name}: no volume mounted at /data (the AOF would die with the container)"));
        }
    }
    problems
}
