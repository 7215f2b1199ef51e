//! The Kafka, Redis and Scylla addresses our services use name services of the file, enabled in
//! the profile (and Redpanda advertises the broker address the services use); every Kafka
//! bootstrap list, the topic init's included, names every broker of the profile; the Scylla
//! replication factor and data centre fit the profile's nodes.

use crate::compose::deployment::{OURS, PROFILES};
use crate::compose::project::{flag, scalar_at, words, Project};
use crate::compose::service::{effective, env_of, host_port, redis_host_port};
use crate::compose::Compose;

/// The Redpanda admin API port.
const ADMIN_PORT: u16 = 9644;

/// The backing-service address problems of `compose` in each profile (empty when there are
/// none).
pub fn check(compose: &Compose) -> Vec<String> {
    let mut problems = Vec::new();
    for profile in PROFILES {
        let project = compose.profile(profile.name);
        let scylla_nodes = project.scylla_nodes();
        let brokers = project.redpanda_brokers();
        for ours in OURS {
            if !project.has(ours.service) {
                problems.push(format!("{} is not enabled in profile {}", ours.service, profile.name));
                continue;
            }
            let Some(env) = env_of(project, ours.service, &mut problems) else {
                continue;
            };
            let vars = ours.variables();
            let value = |name: &str| effective(&env, &vars, name).unwrap_or_default();
            let at = |what: &str| format!("{} [{}] {what}", ours.service, profile.name);

            problems.extend(bootstrap(project, &value("QIM_KAFKA_BROKERS"), &at("QIM_KAFKA_BROKERS")));

            let url = value("QIM_REDIS_URL");
            match redis_host_port(&url) {
                Some((host, _)) if !project.has(&host) => {
                    problems.push(format!("{}: `{host}` is not a service of the profile", at("QIM_REDIS_URL")))
                }
                Some((host, port)) => {
                    let image = scalar_at(project.ours(&host), "image").unwrap_or_default();
                    if !image.starts_with("redis") || port != 6379 {
                        problems.push(format!(
                            "{}: {host}:{port} is not a Redis service on 6379 (image `{image}`)",
                            at("QIM_REDIS_URL")
                        ));
                    }
                }
                None => problems.push(format!("{}: `{url}` is not a redis:// URL", at("QIM_REDIS_URL"))),
            }

            for contact in value("QIM_SCYLLA_HOSTS").split(',') {
                match host_port(contact) {
                    Some((host, 9042)) if scylla_nodes.contains(&host) => {}
                    _ => problems.push(format!(
                        "{}: `{contact}` is not <scylla node of the profile>:9042 (nodes: {scylla_nodes:?})",
                        at("QIM_SCYLLA_HOSTS")
                    )),
                }
            }

            match value("QIM_SCYLLA_RF").parse::<u32>() {
                Ok(rf) if rf == profile.rf && rf as usize <= scylla_nodes.len() => {}
                other => problems.push(format!(
                    "{}: is {other:?}; profile {} needs {} with {} node(s)",
                    at("QIM_SCYLLA_RF"),
                    profile.name,
                    profile.rf,
                    scylla_nodes.len()
                )),
            }
            if value("QIM_SCYLLA_DC") != "datacenter1" {
                problems.push(format!(
                    "{}: the compose Scylla nodes use SimpleSnitch, whose data centre is datacenter1",
                    at("QIM_SCYLLA_DC")
                ));
            }
        }

        // The topic init's rpk talks to the same cluster: the Kafka API through every broker,
        // the admin API through brokers of the profile.
        for init in project.topic_init_services() {
            let Some(env) = env_of(project, &init, &mut problems) else {
                continue;
            };
            let at = |what: &str| format!("{init} [{}] {what}", profile.name);
            match env.get("RPK_BROKERS") {
                Some(list) => problems.extend(bootstrap(project, list, &at("RPK_BROKERS"))),
                None => problems.push(format!("{}: not set", at("RPK_BROKERS"))),
            }
            for admin in env.get("RPK_ADMIN_HOSTS").map_or("", String::as_str).split(',') {
                match host_port(admin) {
                    Some((host, ADMIN_PORT)) if brokers.contains(&host) => {}
                    _ => problems.push(format!(
                        "{}: `{admin}` is not <broker of the profile>:{ADMIN_PORT} (brokers: {brokers:?})",
                        at("RPK_ADMIN_HOSTS")
                    )),
                }
            }
        }
    }
    problems
}

/// The problems of the Kafka bootstrap list `list` (`host:port,...`) in `project`, each
/// prefixed by `at`: an entry that is not `host:port`, names no service or an address its broker
/// does not advertise, and a broker of the profile the list leaves out (a client started
/// while that one broker is down could not bootstrap from the others).
fn bootstrap(project: &Project, list: &str, at: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut named = Vec::new();
    for broker in list.split(',') {
        let Some((host, port)) = host_port(broker) else {
            problems.push(format!("{at}: `{broker}` is not host:port"));
            continue;
        };
        if !project.has(&host) {
            problems.push(format!("{at}: `{host}` is not a service of the profile"));
            continue;
        }
        let command = words(project.ours(&host).get("command"));
        let advertised: Vec<String> = flag(&command, "--advertise-kafka-addr")
            .unwrap_or_default()
            .split(',')
            .map(|a| a.rsplit("://").next().unwrap_or_default().to_owned())
            .collect();
        if !advertised.contains(&format!("{host}:{port}")) {
            problems.push(format!(
                "{at}: {host}:{port} is not among the addresses {host} advertises {advertised:?}; \
                 clients would be redirected elsewhere"
            ));
        }
        named.push(host);
    }
    for broker in project.redpanda_brokers() {
        if !named.contains(&broker) {
            problems.push(format!("{at}: `{list}` leaves out {broker}, a broker of the profile"));
        }
    }
    problems
}
