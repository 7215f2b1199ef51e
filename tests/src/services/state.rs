//! Destroying and rewinding a run's state, for the replay/rebuild and fault tests.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::{PipelineEnv, ServiceBinaries, ServiceKind};
use crate::stack;

const KAFKA_TIMEOUT: Duration = Duration::from_secs(10);

/// Deletes every Redis key of the run's namespace (`<ns>:*`, the hot tier, commit state, seq
/// counters and leases, the member cache, mailboxes, watermarks) at one instant
/// ([`qim_testkit::redis::wipe_namespace`]). Returns how many.
///
/// # Errors
///
/// Redis does not answer.
pub async fn wipe_redis_namespace(env: &PipelineEnv) -> anyhow::Result<usize> {
    qim_testkit::redis::wipe_namespace(&env.redis_url, &env.redis_namespace).await
}

/// Drops the run's keyspace and migrates it again: an empty archive.
///
/// # Errors
///
/// Cassandra does not answer.
pub async fn recreate_keyspace(env: &PipelineEnv) -> anyhow::Result<()> {
    let session = stack::connect_scylla().await?;
    session
        .query_unpaged(format!("DROP KEYSPACE IF EXISTS {}", env.keyspace), ())
        .await
        .context("dropping the keyspace")?;
    env.migrate().await
}

/// Commits each partition's low watermark for `group` on `topic`, so the group's next member
/// starts from the earliest offset. The group must have no live member.
///
/// # Errors
///
/// Kafka does not answer, or refuses the commit (a member is still live).
pub async fn rewind_group(brokers: &str, group: &str, topic: &str) -> anyhow::Result<()> {
    let mut config = stack::kafka_config();
    config.set("bootstrap.servers", brokers).set("group.id", group).set("enable.auto.commit", "false");
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let consumer: BaseConsumer = config.create()?;
        let metadata = consumer.fetch_metadata(Some(&topic), KAFKA_TIMEOUT)?;
        let mut tpl = TopicPartitionList::new();
        for p in metadata.topics().iter().flat_map(|t| t.partitions().iter().map(|p| p.id())) {
            let (low, _) = consumer.fetch_watermarks(&topic, p, KAFKA_TIMEOUT)?;
            tpl.add_partition_offset(&topic, p, Offset::Offset(low))?;
        }
        consumer.commit(&tpl, CommitMode::Sync).context("committing the earliest offsets")?;
        Ok(())
    })
    .await
    .context("the rewind task panicked")?
}

/// Runs `kind`'s binary once with `args` (e.g. `["replay", "--from", "earliest"]`) in the run's
/// environment and returns its stdout; stderr goes to the service's log.
///
/// # Errors
///
/// It could not be spawned or exited non-zero (the error carries its log tail).
pub async fn run_command(
    kind: ServiceKind,
    bins: &ServiceBinaries,
    env: &PipelineEnv,
    args: &[&str],
) -> anyhow::Result<String> {
    let log_path = env.run_dir.join(format!("{}-{}.log", kind.name(), args.first().copied().unwrap_or("command")));
    let log = std::fs::File::create(&log_path)?;
    let mut cmd = tokio::process::Command::new(bins.path(kind));
    cmd.args(args);
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| k.starts_with("QIM_") || k == "FAILPOINTS") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.service_env(kind)).stdin(Stdio::null()).stderr(log).stdout(Stdio::piped());
    let out = cmd.output().await.with_context(|| format!("running {} {}", kind.binary(), args.join(" ")))?;
    if !out.status.success() {
        let tail = std::fs::read_to_string(&log_path).unwrap_or_default();
        let tail: Vec<&str> = tail.lines().rev().take(20).collect();
        bail!(
            "{} {} exited with {}:\n{}",
            kind.binary(),
            args.join(" "),
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
