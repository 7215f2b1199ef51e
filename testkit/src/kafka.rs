//! Kafka topics for tests: created, then waited for until the broker's metadata shows every
//! partition with a leader, so a service started right after never meets
//! `UNKNOWN_TOPIC_OR_PART`. Thousands of leftover topics slow every metadata request, so the
//! test command deletes those finished test processes left before its run
//! (`qim-test-sweep`), and under `cargo test` the first creation of each process does
//! ([`sweep_leftover_topics`]).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

use crate::stack::{abandoned, kafka_config, swept_by_the_runner, unique_name_origin, MIN_AGE, START_HINT};

/// A replication factor of -1 asks for the brokers' `default.replication.factor` (KIP-464).
const BROKER_DEFAULT: i32 = -1;

/// How long a topic may take to be created and to get a leader for every partition.
pub const TOPIC_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Creates `topics` (`(name, partitions)`, the brokers' default replication factor: 1 on the
/// single stack, 3 on the three-node mode; one that exists already is kept) on the brokers of
/// `config` and waits until each has every partition led.
///
/// # Errors
///
/// Kafka does not answer, refuses a topic, or a partition has no leader within
/// [`TOPIC_READY_TIMEOUT`]; the message names the topic and [`START_HINT`].
pub async fn create_topics_with(config: &ClientConfig, topics: &[(&str, i32)]) -> anyhow::Result<()> {
    static SWEPT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    if !swept_by_the_runner() {
        SWEPT
            .get_or_init(|| async {
                sweep_leftover_topics(config, MIN_AGE).await;
            })
            .await;
    }
    let admin: AdminClient<DefaultClientContext> = config.create().context("creating a Kafka admin client")?;
    let new: Vec<NewTopic<'_>> =
        topics.iter().map(|(t, p)| NewTopic::new(t, *p, TopicReplication::Fixed(BROKER_DEFAULT))).collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let created = tokio::time::timeout(TOPIC_READY_TIMEOUT, admin.create_topics(&new, &options))
        .await
        .with_context(|| format!("Kafka did not answer within {TOPIC_READY_TIMEOUT:?}; {START_HINT}"))?
        .with_context(|| format!("creating topics; {START_HINT}"))?;
    for result in created {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, e)) => bail!("creating topic {topic}: {e}"),
        }
    }
    let config = config.clone();
    let wanted: Vec<(String, usize)> = topics.iter().map(|(t, p)| ((*t).to_owned(), *p as usize)).collect();
    tokio::task::spawn_blocking(move || wait_until_led(&config, &wanted)).await.context("the topic wait panicked")?
}

/// [`create_topics_with`] on the test brokers ([`kafka_config`]).
///
/// # Errors
///
/// As [`create_topics_with`].
pub async fn create_topics(topics: &[(&str, i32)]) -> anyhow::Result<()> {
    create_topics_with(&kafka_config(), topics).await
}

/// Like [`create_topics`], but panics with its message (what a test wants).
///
/// # Panics
///
/// When a topic can not be created or led in time.
pub async fn require_topics(topics: &[(&str, i32)]) {
    if let Err(e) = create_topics(topics).await {
        panic!("{e:#}");
    }
}

fn wait_until_led(config: &ClientConfig, topics: &[(String, usize)]) -> anyhow::Result<()> {
    let consumer: BaseConsumer = config.create().context("creating a Kafka metadata client")?;
    let deadline = Instant::now() + TOPIC_READY_TIMEOUT;
    for (topic, partitions) in topics {
        loop {
            let led = consumer.fetch_metadata(Some(topic), Duration::from_secs(5)).ok().is_some_and(|md| {
                md.topics().iter().any(|t| {
                    t.name() == topic
                        && t.error().is_none()
                        && t.partitions().len() == *partitions
                        && t.partitions().iter().all(|p| p.error().is_none() && p.leader() >= 0)
                })
            });
            if led {
                break;
            }
            if Instant::now() > deadline {
                bail!("topic {topic} has no leader for every one of its {partitions} partitions within {TOPIC_READY_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

/// Deletes every topic named by [`unique_name`](crate::stack::unique_name) (optionally with a
/// `.suffix`) whose process has exited and that is older than `min_age` (tests pass
/// [`MIN_AGE`]); returns how many. Failures are reported on stderr and skipped: a sweep never
/// fails a test.
pub async fn sweep_leftover_topics(config: &ClientConfig, min_age: Duration) -> usize {
    let metadata_config = config.clone();
    let listed = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<String>> {
        let consumer: BaseConsumer = metadata_config.create()?;
        let metadata = consumer.fetch_metadata(None, Duration::from_secs(10))?;
        Ok(metadata.topics().iter().map(|t| t.name().to_owned()).collect())
    })
    .await;
    let names = match listed {
        Ok(Ok(names)) => names,
        Ok(Err(e)) => return skipped(&e),
        Err(e) => return skipped(&e),
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let leftovers: Vec<&str> = names
        .iter()
        .filter(|name| unique_name_origin(name).is_some_and(|origin| abandoned(origin, now, min_age)))
        .map(String::as_str)
        .collect();
    if leftovers.is_empty() {
        return 0;
    }
    let admin: AdminClient<DefaultClientContext> = match config.create() {
        Ok(admin) => admin,
        Err(e) => return skipped(&e),
    };
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let deleted = match admin.delete_topics(&leftovers, &options).await {
        Ok(results) => results.iter().filter(|r| r.is_ok()).count(),
        Err(e) => return skipped(&e),
    };
    eprintln!("deleted {deleted} of {} leftover test topics", leftovers.len());
    deleted
}

fn skipped(e: &dyn std::fmt::Display) -> usize {
    eprintln!("warning: leftover test topics not swept: {e}");
    0
}
