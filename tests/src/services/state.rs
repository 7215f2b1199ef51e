//! Destroying and resetting a run's state, for the replay/rebuild and fault tests.

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{bail, Context};

use super::{PipelineEnv, ServiceBinaries, ServiceKind};
use crate::stack;

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

/// Resets `group`'s offsets in `topic` to the earliest with Kafka's own tool,
/// `kafka-consumer-groups --reset-offsets --to-earliest --execute` (its `ConsumerGroupCommand`,
/// run from the local stack's Kafka jars), as an operator would. Returns the tool's output.
///
/// # Errors
///
/// Java or the stack's Kafka jars are missing (`deploy/local/stack up` fetches them), or the
/// tool failed (a live member, Kafka down): the error carries its output.
pub async fn reset_group_with_kafka_tool(brokers: &str, group: &str, topic: &str) -> anyhow::Result<String> {
    let cache = std::env::var_os("QIM_STACK_CACHE").map(PathBuf::from).unwrap_or_else(|| {
        let home = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache")
        });
        home.join("qim-stack")
    });
    let lib = std::fs::read_dir(&cache)
        .with_context(|| format!("reading the stack's cache {}", cache.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path().join("lib"))
        .find(|lib| lib.parent().and_then(|d| d.file_name()).is_some_and(|n| n.to_string_lossy().starts_with("kafka-")))
        .with_context(|| format!("no kafka-*/lib under {} (deploy/local/stack up fetches it)", cache.display()))?;
    // The tool's admin calls wait 5 s by default, which a loaded machine exceeds (finding the
    // group's coordinator timed out in a whole run); and it exits 0 even when a call failed,
    // printing `Error:`.
    let output = tokio::process::Command::new("java")
        .arg("-cp")
        .arg(format!("{}/*", lib.display()))
        .arg("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand")
        .args(["--bootstrap-server", brokers, "--group", group, "--topic", topic, "--timeout", "60000"])
        .args(["--reset-offsets", "--to-earliest", "--execute"])
        .output()
        .await
        .context("running java")?;
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    if !output.status.success() || text.contains("Error:") {
        bail!("kafka-consumer-groups --reset-offsets for {group} failed:\n{text}");
    }
    Ok(text)
}

/// Runs `kind`'s binary once with `args` (e.g. `["replay", "--from", "earliest"]`) in the run's
/// environment and returns its stdout; its stderr is kept as `<kind>-<first arg>.log` in the
/// run's directory.
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
    let mut cmd = tokio::process::Command::new(bins.path(kind));
    cmd.args(args);
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| k.starts_with("QIM_") || k == "FAILPOINTS") {
            cmd.env_remove(k);
        }
    }
    // `output()` pipes stdout and stderr whatever they were set to (tokio, unlike std): the
    // log is written from what it captured.
    cmd.envs(env.service_env(kind)).stdin(Stdio::null());
    let out = cmd.output().await.with_context(|| format!("running {} {}", kind.binary(), args.join(" ")))?;
    std::fs::write(&log_path, &out.stderr).with_context(|| format!("writing {}", log_path.display()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
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
