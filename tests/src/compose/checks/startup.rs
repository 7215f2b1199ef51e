//! Start-up order holds: the loader warns about nothing, the `depends_on` conditions can be met
//! (a healthcheck to wait for, a one-shot that does not restart), the topic init waits for every
//! broker of the profile, and our services wait for the migration, the topics and Redis, restart
//! and stop gracefully.

use crate::compose::deployment::{MIGRATE, OURS, PROFILES};
use crate::compose::project::scalar_at;
use crate::compose::service::{depends_on, effective, env_of, redis_host_port};
use crate::compose::Compose;

/// The start-up order problems of `compose` (empty when there are none), including
/// healthcheck forms and undeclared named volumes.
pub fn check(compose: &Compose) -> Vec<String> {
    let mut problems = Vec::new();
    for (profile, project) in compose.variants() {
        for warning in project.warnings() {
            problems.push(format!("[{profile}] the Compose loader warns: {warning}"));
        }
    }
    let every = compose.every();
    // The loader itself refuses a healthcheck test of the wrong form, an undeclared volume, a
    // dependency on no service or on a service the profile disables, and an unknown condition
    // (the load fails with its message); what it can not know is checked here.
    let names = every.names();
    for name in &names {
        let service = every.ours(name);
        for dep in depends_on(service) {
            let Some(target) = every.service(&dep.name) else { continue };
            let healthy = dep.condition == "service_healthy";
            if healthy && target.get("healthcheck").is_none() {
                problems.push(format!("{name}: waits for {} to be healthy, but it has no healthcheck", dep.name));
            }
            if dep.condition == "service_completed_successfully" {
                let restart = scalar_at(target, "restart").unwrap_or_else(|| "no".into());
                if restart != "no" {
                    problems.push(format!("{name}: waits for {} to complete, but it restarts ({restart})", dep.name));
                }
            }
        }
    }

    // The topic init waits for every broker of the profile: before all have joined, a topic
    // can not get its replicas (and Redpanda would give its consumer-offsets topic RF 1).
    for profile in PROFILES {
        let project = compose.profile(profile.name);
        for init in project.topic_init_services() {
            let deps = depends_on(project.ours(&init));
            for broker in project.redpanda_brokers() {
                if !deps.iter().any(|d| d.name == broker && d.condition == "service_healthy") {
                    problems.push(format!("{init} [{}]: does not wait for {broker} to be healthy", profile.name));
                }
            }
        }
    }

    // Our services: migrate first, topics created, Redis healthy; restart and graceful stop.
    let init_services = every.topic_init_services();
    for ours in OURS {
        let service = every.ours(ours.service);
        let deps = depends_on(service);
        let waits_for =
            |target: &str, condition: &str| deps.iter().any(|d| d.name == target && d.condition == condition);
        let restart = scalar_at(service, "restart").unwrap_or_default();
        if !ours.long_running {
            if restart != "no" {
                problems.push(format!("{}: a one-shot needs restart: \"no\", has {restart:?}", ours.service));
            }
            for node in compose.profile("rf3").scylla_nodes().iter().chain(&compose.profile("dev").scylla_nodes()) {
                if !waits_for(node, "service_healthy") {
                    problems.push(format!("{}: does not wait for {node} to be healthy", ours.service));
                }
            }
            continue;
        }
        if restart != "unless-stopped" {
            problems.push(format!("{}: restart is {restart:?}, expected unless-stopped", ours.service));
        }
        if service.get("stop_grace_period").is_none() {
            problems.push(format!("{}: no stop_grace_period for the SIGTERM drain", ours.service));
        }
        if let Some(signal) = scalar_at(service, "stop_signal") {
            if signal != "SIGTERM" {
                problems.push(format!("{}: stop_signal {signal}, expected SIGTERM", ours.service));
            }
        }
        if !waits_for(MIGRATE, "service_completed_successfully") {
            problems.push(format!("{}: does not wait for {MIGRATE} to complete", ours.service));
        }
        for init in &init_services {
            if !waits_for(init, "service_completed_successfully") {
                problems.push(format!("{}: does not wait for {init} (topics) to complete", ours.service));
            }
        }
        let env = env_of(every, ours.service, &mut problems).unwrap_or_default();
        let redis = effective(&env, &ours.variables(), "QIM_REDIS_URL").and_then(|u| redis_host_port(&u));
        // A Redis URL naming no service is reported by the backing-services check.
        if let Some((redis, _)) = redis.filter(|(host, _)| every.has(host)) {
            if !waits_for(&redis, "service_healthy") {
                problems.push(format!("{}: does not wait for {redis} to be healthy", ours.service));
            }
        }
    }
    problems
}
