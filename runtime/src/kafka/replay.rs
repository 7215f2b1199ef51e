//! What every service's `replay` shares: where it starts (`--from earliest | --from-time T |
//! --offsets p:o,...`), the `(partition, first, end)` ranges that covers in a topic (up to the
//! end the topic had when the replay was planned), a consumer group's committed offsets read and
//! reset (refused while the group has a live member), and the progress bar.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// Where a replay starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// Every partition from its first retained record.
    Earliest,
    /// Every partition from its first record at or after this time (ms since the epoch).
    Time(i64),
    /// Only the named partitions, from the named offsets.
    Offsets(Vec<(i32, i64)>),
}

/// The command line of `replay`: exactly one starting point.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
#[group(required = true, multiple = false)]
pub struct ReplayArgs {
    /// Every partition from its first retained record (the only value: `earliest`).
    #[arg(long, value_name = "earliest", value_parser = ["earliest"])]
    from: Option<String>,
    /// Every partition from its first record at or after this time: RFC 3339
    /// (`2026-11-30T12:00:00Z`, any offset) or milliseconds since the epoch.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    from_time: Option<i64>,
    /// Only these partitions, from these offsets: `partition:offset[,partition:offset...]`.
    #[arg(long, value_name = "P:O,...", value_parser = parse_offsets)]
    offsets: Option<Offsets>,
}

/// `--offsets`: partition and offset pairs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offsets(pub Vec<(i32, i64)>);

impl ReplayArgs {
    /// Where these arguments start the replay.
    pub fn start(&self) -> Start {
        match (&self.from, self.from_time, &self.offsets) {
            (_, Some(ms), _) => Start::Time(ms),
            (_, _, Some(Offsets(pairs))) => Start::Offsets(pairs.clone()),
            _ => Start::Earliest,
        }
    }
}

/// `p:o[,p:o...]`.
pub fn parse_offsets(text: &str) -> Result<Offsets, String> {
    text.split(',')
        .map(|pair| {
            let (p, o) = pair.split_once(':').ok_or_else(|| format!("{pair:?} is not partition:offset"))?;
            let p = p.trim().parse().map_err(|_| format!("{pair:?}: bad partition"))?;
            let o = o.trim().parse().map_err(|_| format!("{pair:?}: bad offset"))?;
            Ok((p, o))
        })
        .collect::<Result<Vec<_>, String>>()
        .map(Offsets)
}

/// Milliseconds since the epoch, or an RFC 3339 timestamp (`2026-11-30T12:00:00Z`, any offset,
/// any fraction of a second; read to the millisecond).
pub fn parse_time(text: &str) -> Result<i64, String> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    text.parse::<jiff::Timestamp>().map(|t| t.as_millisecond()).map_err(|e| {
        format!("{text:?} is neither milliseconds nor an RFC 3339 timestamp such as 2026-11-30T12:00:00Z: {e}")
    })
}

/// Resolves `start` in `topic` to `(partition, first, end)` triples with records to replay
/// (`end`: the partition's end now), each wait bounded by `timeout`.
pub async fn plan<C, X>(
    consumer: Arc<C>,
    topic: String,
    start: Start,
    timeout: Duration,
) -> anyhow::Result<Vec<(i32, i64, i64)>>
where
    C: Consumer<X> + Send + Sync + 'static,
    X: ConsumerContext + 'static,
{
    tokio::task::spawn_blocking(move || {
        let partitions = super::partition_ids(consumer.client(), &topic, timeout).map_err(anyhow::Error::msg)?;
        let mut bounds = HashMap::new();
        for &p in &partitions {
            bounds.insert(p, consumer.fetch_watermarks(&topic, p, timeout).context("reading watermarks")?);
        }
        let firsts: Vec<(i32, i64)> = match start {
            Start::Earliest => partitions.iter().map(|p| (*p, bounds[p].0)).collect(),
            Start::Offsets(list) => {
                for (p, _) in &list {
                    if !bounds.contains_key(p) {
                        bail!("topic {topic} has no partition {p}");
                    }
                }
                list
            }
            Start::Time(ms) => {
                let mut query = TopicPartitionList::new();
                for p in &partitions {
                    query.add_partition_offset(&topic, *p, Offset::Offset(ms))?;
                }
                let found = consumer.offsets_for_times(query, timeout).context("finding offsets by time")?;
                found
                    .elements()
                    .iter()
                    .map(|e| {
                        let end = bounds[&e.partition()].1;
                        (e.partition(), if let Offset::Offset(o) = e.offset() { o } else { end })
                    })
                    .collect()
            }
        };
        Ok(firsts
            .into_iter()
            .map(|(p, first)| {
                let (low, high) = bounds[&p];
                (p, first.clamp(low, high), high)
            })
            .filter(|(_, first, end)| first < end)
            .collect())
    })
    .await?
}

/// A consumer of `group` that never joins it: for reading and setting its committed offsets.
fn group_client(brokers: &str, group: &str) -> anyhow::Result<BaseConsumer> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .with_context(|| format!("creating a client of group {group}"))
}

/// Sets `group`'s committed offsets in `topic` to `firsts` (partition, offset); other partitions
/// keep theirs. Refused, naming the group, while the group has a live member: stop every
/// instance of the service first (Kafka would refuse the commit anyway, less clearly).
pub async fn reset_group(
    brokers: &str,
    group: &str,
    topic: &str,
    firsts: Vec<(i32, i64)>,
    timeout: Duration,
) -> anyhow::Result<()> {
    let (client, group, topic) = (group_client(brokers, group)?, group.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let groups = client.fetch_group_list(Some(&group), timeout).context("reading the consumer group")?;
        if let Some(live) = groups.groups().iter().find(|g| !g.members().is_empty()) {
            bail!(
                "consumer group {group} has {} live member(s) (state {}): stop every instance using it, then replay",
                live.members().len(),
                live.state()
            );
        }
        let mut offsets = TopicPartitionList::new();
        for (p, first) in firsts {
            offsets.add_partition_offset(&topic, p, Offset::Offset(first))?;
        }
        if offsets.count() > 0 {
            client
                .commit(&offsets, CommitMode::Sync)
                .with_context(|| format!("setting the offsets of group {group}"))?;
        }
        Ok(())
    })
    .await?
}

/// `group`'s committed offset of each of `partitions` in `topic` (`None`: nothing committed).
pub async fn committed_offsets(
    brokers: &str,
    group: &str,
    topic: &str,
    partitions: Vec<i32>,
    timeout: Duration,
) -> anyhow::Result<Vec<(i32, Option<i64>)>> {
    let (client, topic) = (group_client(brokers, group)?, topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let mut query = TopicPartitionList::new();
        for p in &partitions {
            query.add_partition(&topic, *p);
        }
        let found = client.committed_offsets(query, timeout).context("reading committed offsets")?;
        Ok(found
            .elements()
            .iter()
            .map(|e| (e.partition(), if let Offset::Offset(o) = e.offset() { Some(o) } else { None }))
            .collect())
    })
    .await?
}

/// The bar every `replay` command shows while it works: records done of the total, the rate and
/// the time left. Feed it with [`progress_reporter`]; clear it with `finish_and_clear`.
pub fn progress_bar() -> indicatif::ProgressBar {
    let template = "replay {wide_bar} {pos}/{len} records ({percent}%), {per_sec}, eta {eta}";
    let style =
        indicatif::ProgressStyle::with_template(template).unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    indicatif::ProgressBar::new(0).with_style(style)
}

/// The `progress(done, total)` callback a replay reports through, moving `bar`.
pub fn progress_reporter(bar: &indicatif::ProgressBar) -> impl FnMut(u64, u64) + '_ {
    move |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `replay`'s arguments as the binary parses them.
    #[derive(clap::Parser)]
    struct Replay {
        #[command(flatten)]
        args: ReplayArgs,
    }

    fn start(line: &str) -> Result<Start, clap::Error> {
        use clap::Parser as _;
        Replay::try_parse_from(std::iter::once("replay").chain(line.split(' '))).map(|r| r.args.start())
    }

    #[test]
    fn starts_parse() {
        assert_eq!(start("--from earliest").unwrap(), Start::Earliest);
        assert_eq!(start("--from-time 1700000000000").unwrap(), Start::Time(1_700_000_000_000));
        assert_eq!(start("--from-time 2023-11-14T22:13:20Z").unwrap(), Start::Time(1_700_000_000_000));
        assert_eq!(start("--offsets 0:5,2:0").unwrap(), Start::Offsets(vec![(0, 5), (2, 0)]));
        assert!(start("--offsets 0-5").is_err());
        assert!(start("--from latest").is_err());
        assert!(start("--from earliest --offsets 0:5").is_err(), "one starting point only");
        assert!(start("").is_err(), "a starting point is required");
    }

    #[test]
    fn times_parse_as_utc() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_time("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(parse_time("2000-02-29T12:00:00.5Z"), Ok(951_825_600_500));
        assert_eq!(parse_time("2023-11-15T00:13:20+02:00"), Ok(1_700_000_000_000));
        assert!(parse_time("2023-13-01T00:00:00Z").is_err());
        assert!(parse_time("yesterday").is_err());
        assert!(parse_time("2023-11-14T22:13:20").is_err(), "a time without an offset is ambiguous");
    }
}
