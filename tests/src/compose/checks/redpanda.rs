//! Profile `dev` has one Redpanda broker and profile `rf3` three, forming one cluster: the root
//! broker founds it (no seeds) and every other broker is seeded from the root's RPC address.
//! Each broker has a node id of its own, binds and advertises its own service name (Kafka on
//! 9092, RPC on 33145), advertises its external listener on the host port it publishes, runs
//! like the root (mode, cores, memory) and keeps its data on a volume of its own; no broker waits
//! for another to be healthy (a restarted cluster is healthy only once all are back).

use std::collections::{BTreeMap, BTreeSet};

use crate::compose::deployment::{PROFILES, REDPANDA_ROOT};
use crate::compose::project::{flag, words};
use crate::compose::service::{depends_on, mounts, ports};
use crate::compose::Compose;

/// The Kafka API port every broker listens on inside the network.
const KAFKA_PORT: u16 = 9092;
/// The RPC port the brokers talk to each other on.
const RPC_PORT: u16 = 33145;
/// Where a broker keeps its data.
const DATA_DIR: &str = "/var/lib/redpanda/data";
/// The options every broker must run with as the root does.
const SAME_AS_ROOT: &[&str] = &["--mode", "--smp", "--memory"];

/// A `--kafka-addr`/`--advertise-kafka-addr` value (`name://host:port,...`) as listener name →
/// `host:port` (name empty when none is given).
fn listeners(value: Option<String>) -> BTreeMap<String, String> {
    value
        .unwrap_or_default()
        .split(',')
        .filter(|l| !l.is_empty())
        .map(|l| match l.split_once("://") {
            Some((name, addr)) => (name.to_owned(), addr.to_owned()),
            None => (String::new(), l.to_owned()),
        })
        .collect()
}

/// The port of `host:port`, if it has one.
fn port_of(addr: &str) -> Option<u16> {
    addr.rsplit_once(':').and_then(|(_, p)| p.parse().ok())
}

/// `value` for a message, `nothing` when there is none.
fn shown(value: Option<impl std::fmt::Display>) -> String {
    value.map_or_else(|| "nothing".to_owned(), |v| v.to_string())
}

/// The Redpanda broker problems of `compose` in each profile (empty when there are none).
pub fn check(compose: &Compose) -> Vec<String> {
    let mut problems = Vec::new();
    for profile in PROFILES {
        let project = compose.profile(profile.name);
        let brokers = project.redpanda_brokers();
        if brokers.len() != profile.brokers {
            problems.push(format!(
                "profile {} has Redpanda brokers {brokers:?}, expected {}",
                profile.name, profile.brokers
            ));
        }
        if !brokers.iter().any(|b| b == REDPANDA_ROOT) {
            problems.push(format!("profile {} lacks the root broker {REDPANDA_ROOT}", profile.name));
            continue;
        }
        let root_command = words(project.ours(REDPANDA_ROOT).get("command"));
        let mut node_ids: BTreeMap<u32, &str> = BTreeMap::new();
        let mut volumes = BTreeSet::new();
        let mut external = BTreeSet::new();
        for broker in &brokers {
            let at = |what: String| format!("{broker} [{}]: {what}", profile.name);
            let service = project.ours(broker);
            let command = words(service.get("command"));
            if !command.iter().map(String::as_str).take(2).eq(["redpanda", "start"]) {
                problems.push(at(format!("command {command:?} is not `redpanda start ...`")));
            }
            match flag(&command, "--node-id").and_then(|id| id.parse::<u32>().ok()) {
                Some(id) => {
                    if let Some(other) = node_ids.insert(id, broker) {
                        problems.push(at(format!("node id {id} is also {other}'s")));
                    }
                }
                None => problems.push(at("no --node-id <number>".into())),
            }
            let seeds = flag(&command, "--seeds");
            let root_rpc = format!("{REDPANDA_ROOT}:{RPC_PORT}");
            if broker == REDPANDA_ROOT {
                if let Some(seeds) = &seeds {
                    problems.push(at(format!("--seeds {seeds}: the root founds the cluster and must have no seeds")));
                }
            } else if !seeds.unwrap_or_default().split(',').any(|s| s == root_rpc) {
                problems.push(at(format!("not seeded from the root's RPC address {root_rpc}")));
            }
            let own_rpc = format!("{broker}:{RPC_PORT}");
            for option in ["--rpc-addr", "--advertise-rpc-addr"] {
                if flag(&command, option).as_deref() != Some(own_rpc.as_str()) {
                    problems.push(at(format!("{option} is {}, expected {own_rpc}", shown(flag(&command, option)))));
                }
            }
            for option in SAME_AS_ROOT {
                if flag(&command, option) != flag(&root_command, option) {
                    problems.push(at(format!("{option} differs from {REDPANDA_ROOT}'s")));
                }
            }

            // Kafka listeners: `internal` for the network, `external` for the host's tools.
            let bound = listeners(flag(&command, "--kafka-addr"));
            let advertised = listeners(flag(&command, "--advertise-kafka-addr"));
            let internal = format!("{broker}:{KAFKA_PORT}");
            if advertised.get("internal") != Some(&internal)
                || bound.get("internal").and_then(|a| port_of(a)) != Some(KAFKA_PORT)
            {
                problems.push(at(format!(
                    "listener `internal` must bind port {KAFKA_PORT} and advertise {internal} \
                     (binds {}, advertises {})",
                    shown(bound.get("internal")),
                    shown(advertised.get("internal"))
                )));
            }
            let published = ports(service).unwrap_or_default();
            match (bound.get("external").and_then(|a| port_of(a)), advertised.get("external")) {
                (Some(port), Some(addr))
                    if port_of(addr) == Some(port)
                        && published.iter().any(|p| p.target == port && p.published == Some(port)) =>
                {
                    if !external.insert(addr.clone()) {
                        problems.push(at(format!("advertises {addr}, as another broker does")));
                    }
                }
                (bound, addr) => problems.push(at(format!(
                    "listener `external` must bind, advertise and publish one host port \
                     (binds port {}, advertises {})",
                    shown(bound),
                    shown(addr)
                ))),
            }

            match mounts(service).into_iter().find(|m| m.target == DATA_DIR && m.keeps_data()) {
                Some(m) if volumes.insert(m.source.clone()) => {}
                Some(m) => problems.push(at(format!("shares its data volume `{}` with another broker", m.source))),
                None => problems.push(at(format!("no volume mounted at {DATA_DIR}"))),
            }
            for dep in depends_on(service) {
                if brokers.contains(&dep.name) && dep.condition == "service_healthy" {
                    problems.push(at(format!(
                        "waits for {} to be healthy; a restarted cluster is healthy only once every \
                         broker is up, so it would wait forever (use service_started)",
                        dep.name
                    )));
                }
            }
        }
    }
    problems
}
