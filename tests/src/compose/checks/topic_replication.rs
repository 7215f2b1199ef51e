//! Every topic is created with the profile's Kafka replication factor (1 in dev, 3 in rf3: odd,
//! as Redpanda requires, and no more than the profile's brokers), and the topic init sets the
//! cluster so that no topic can have fewer replicas: `default_topic_replications` and
//! `minimum_topic_replications` are that factor, and topic auto-creation is off.
//!
//! Redpanda has no `min.insync.replicas`: a partition is a Raft group and an `acks=all` write is
//! acknowledged once a majority of its replicas have it (2 of 3), which is the guarantee that
//! setting gives Kafka. So the replication factor is what is checked here.

use crate::compose::deployment::PROFILES;
use crate::compose::project::script;
use crate::compose::topics::{cluster_config, created_topics};
use crate::compose::Compose;

/// The cluster properties the topic init must set, and what to: `None` for the profile's
/// Kafka replication factor.
const CLUSTER_CONFIG: &[(&str, Option<&str>)] = &[
    ("auto_create_topics_enabled", Some("false")),
    ("default_topic_replications", None),
    ("minimum_topic_replications", None),
];

/// The replication problems of `compose` in each profile (empty when there are none).
pub fn check(compose: &Compose) -> Vec<String> {
    let mut problems = Vec::new();
    for profile in PROFILES {
        let project = compose.profile(profile.name);
        let rf = profile.kafka_rf;
        let brokers = project.redpanda_brokers().len();
        if rf % 2 == 0 || rf as usize > brokers {
            problems.push(format!(
                "profile {}: Kafka RF {rf} must be odd and at most its {brokers} broker(s)",
                profile.name
            ));
        }
        let init_services = project.topic_init_services();
        if init_services.is_empty() {
            problems.push(format!("profile {}: no service runs `rpk topic create`", profile.name));
        }
        for name in &init_services {
            let at = |what: String| format!("{name} [{}]: {what}", profile.name);
            let text = script(project.ours(name));
            match created_topics(&text) {
                Ok(topics) => {
                    for (topic, spec) in topics {
                        if spec.replicas != Some(i64::from(rf)) {
                            let given =
                                spec.replicas.map_or_else(|| "no --replicas".into(), |r| format!("--replicas {r}"));
                            problems.push(at(format!("{topic} is created with {given}; the profile needs {rf}")));
                        }
                    }
                }
                Err(e) => problems.push(at(e)),
            }
            match cluster_config(&text) {
                Ok(set) => {
                    for (key, wanted) in CLUSTER_CONFIG {
                        let wanted = wanted.map_or_else(|| rf.to_string(), str::to_owned);
                        match set.get(*key) {
                            Some(value) if *value == wanted => {}
                            Some(value) => {
                                problems.push(at(format!("sets {key} to {value}; the profile needs {wanted}")))
                            }
                            None => problems.push(at(format!("does not set {key} (the profile needs {wanted})"))),
                        }
                    }
                }
                Err(e) => problems.push(at(e)),
            }
        }
    }
    problems
}
