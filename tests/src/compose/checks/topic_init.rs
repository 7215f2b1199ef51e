//! The topic-init service creates every documented topic, the dispatch topic with exactly
//! `QIM_MAILBOX_SHARDS` partitions, and keeps the message log longer than the hot window.

use std::collections::BTreeMap;

use crate::compose::deployment::OURS;
use crate::compose::project::script;
use crate::compose::service::{effective, env_of};
use crate::compose::topics::{created_topics, TopicSpec};
use crate::compose::Compose;

/// The topic problems of `compose` (empty when there are none).
///
/// # Panics
///
/// If no service runs `rpk topic create`.
pub fn check(compose: &Compose) -> Vec<String> {
    let mut problems = Vec::new();
    let mut created: BTreeMap<String, TopicSpec> = BTreeMap::new();
    let every = compose.every();
    let init_services = every.topic_init_services();
    for name in &init_services {
        match created_topics(&script(every.ours(name))) {
            Ok(topics) => created.extend(topics),
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    assert!(!init_services.is_empty(), "no service runs `rpk topic create` in docker-compose.yml");

    // Every topic any service reads or writes, as configured and by default.
    for ours in OURS {
        let Some(env) = env_of(every, ours.service, &mut problems) else {
            continue;
        };
        let vars = ours.variables();
        for var in &vars {
            if !var.name.ends_with("_TOPIC") {
                continue;
            }
            let configured = effective(&env, &vars, &var.name).unwrap_or_default();
            for topic in [Some(configured.as_str()), var.default.as_deref()].into_iter().flatten() {
                if !created.contains_key(topic) {
                    problems
                        .push(format!("{}: {}={topic} is not created by {init_services:?}", ours.service, var.name));
                }
            }
        }
    }

    // Dispatch topic: partition = mailbox shard.
    let dispatcher = OURS.iter().find(|o| o.service == "mailbox-dispatcher").expect("the dispatcher is one of ours");
    let env = env_of(every, dispatcher.service, &mut problems).unwrap_or_default();
    let shards = effective(&env, &dispatcher.variables(), "QIM_MAILBOX_SHARDS").unwrap_or_default();
    let dispatch = effective(&env, &dispatcher.variables(), "QIM_DISPATCH_TOPIC").unwrap_or_default();
    let partitions = created.get(&dispatch).and_then(|t| t.partitions);
    if shards.parse::<i64>().ok() != partitions || partitions.is_none() {
        problems.push(format!(
            "{dispatch} is created with {partitions:?} partitions but the dispatcher runs \
             QIM_MAILBOX_SHARDS={shards}; they must be equal (partition = shard)"
        ));
    }

    // The message log outlives the hot window, so the hot tier can be rebuilt from Kafka.
    let writer = &OURS[0];
    let env = env_of(every, writer.service, &mut problems).unwrap_or_default();
    let messages = effective(&env, &writer.variables(), "QIM_MESSAGES_TOPIC").unwrap_or_default();
    let hot_days: i64 =
        effective(&env, &writer.variables(), "QIM_HOT_WINDOW_DAYS").and_then(|d| d.parse().ok()).unwrap_or(0);
    let retention =
        created.get(&messages).and_then(|t| t.configs.get("retention.ms")).and_then(|r| r.parse::<i64>().ok());
    match retention {
        Some(-1) => {}
        Some(ms) if ms > hot_days * 86_400_000 => {}
        other => problems.push(format!(
            "{messages}: retention.ms is {other:?}; it must exceed QIM_HOT_WINDOW_DAYS={hot_days} days \
             (Redpanda's default is exactly 7 days)"
        )),
    }
    problems
}
