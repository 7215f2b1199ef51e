//! Dead letters read back and re-driven: the `dlq list | show | redrive` subcommands, the same
//! for every qim dead-letter topic (each service runs them on its own).
//!
//! A dead letter is the refused record as it arrived (key, value, headers) plus the
//! `qim-dlq-reason`, `qim-dlq-source` (`topic/partition/offset`) and `qim-dlq-detail` headers
//! ([`super::dead_letter_headers`]). `redrive` appends the original record (its key, value and
//! own headers, without the `qim-dlq-*` ones) to its source topic and partition, or to a chosen
//! topic (partitioned by key), with a [`HEADER_REDRIVEN_FROM`] header naming the dead letter.
//! Consumers treat a re-driven record like any other: a record they had written already is
//! written again with the same values, a refused one is refused again.

use std::time::Duration;

use anyhow::{bail, Context};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use qim_store::topic::{HEADER_DLQ_DETAIL, HEADER_DLQ_REASON, HEADER_DLQ_SOURCE};

/// The header a re-driven record carries: the dead letter it came from, `topic/partition/offset`.
pub const HEADER_REDRIVEN_FROM: &str = "qim-redriven-from";
/// Longest wait for metadata, offsets and each fetch.
const KAFKA_TIMEOUT: Duration = Duration::from_secs(10);

/// One record of a dead-letter topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// Its partition in the dead-letter topic.
    pub partition: i32,
    /// Its offset there.
    pub offset: i64,
    /// The refused record's key.
    pub key: Option<Vec<u8>>,
    /// The refused record's value.
    pub value: Option<Vec<u8>>,
    /// Every header, the refused record's own first, in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl DeadLetter {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().rev().find(|(k, _)| k == name).and_then(|(_, v)| std::str::from_utf8(v.as_deref()?).ok())
    }

    /// Why it was refused (`qim-dlq-reason`).
    pub fn reason(&self) -> &str {
        self.header(HEADER_DLQ_REASON).unwrap_or("")
    }

    /// Where it was read (`qim-dlq-source`: `topic/partition/offset`).
    pub fn source(&self) -> &str {
        self.header(HEADER_DLQ_SOURCE).unwrap_or("")
    }

    /// What was wrong, for a person (`qim-dlq-detail`).
    pub fn detail(&self) -> &str {
        self.header(HEADER_DLQ_DETAIL).unwrap_or("")
    }

    /// The source's topic and partition, when the source header names them.
    pub fn source_partition(&self) -> Option<(&str, i32)> {
        let mut parts = self.source().rsplitn(3, '/');
        let (_offset, partition, topic) = (parts.next()?, parts.next()?, parts.next()?);
        Some((topic, partition.parse().ok()?))
    }

    /// The refused record's own headers (without the `qim-dlq-*` ones).
    pub fn original_headers(&self) -> impl Iterator<Item = &(String, Option<Vec<u8>>)> {
        self.headers.iter().filter(|(k, _)| !k.starts_with("qim-dlq-"))
    }
}

/// Which dead letters a command acts on.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct Filter {
    /// Only dead letters refused for this reason (`qim-dlq-reason`, e.g. `undecodable`).
    #[arg(long)]
    pub reason: Option<String>,
    /// Only dead letters whose source (`topic/partition/offset`) starts with this, e.g. a topic
    /// or `topic/3/`.
    #[arg(long)]
    pub source: Option<String>,
}

impl Filter {
    /// Whether `letter` passes.
    pub fn admits(&self, letter: &DeadLetter) -> bool {
        self.reason.as_deref().is_none_or(|r| letter.reason() == r)
            && self.source.as_deref().is_none_or(|s| letter.source().starts_with(s))
    }
}

/// `dlq` subcommands.
#[derive(Clone, Debug, PartialEq, Eq, clap::Subcommand)]
pub enum DlqCommand {
    /// One line per dead letter: position, reason, source, detail.
    List(Filter),
    /// One dead letter in full: headers, key and value.
    Show {
        /// `partition:offset` in the dead-letter topic.
        #[arg(value_parser = parse_position)]
        at: (i32, i64),
    },
    /// Append the original records back to their source topic and partition (or to `--to`).
    Redrive {
        #[command(flatten)]
        filter: Filter,
        /// Append to this topic instead of each record's source (partitioned by key).
        #[arg(long)]
        to: Option<String>,
        /// Only say what would be re-driven.
        #[arg(long)]
        dry_run: bool,
    },
}

fn parse_position(text: &str) -> Result<(i32, i64), String> {
    let (p, o) = text.split_once(':').ok_or_else(|| format!("{text:?} is not partition:offset"))?;
    Ok((
        p.trim().parse().map_err(|_| format!("{text:?}: bad partition"))?,
        o.trim().parse().map_err(|_| format!("{text:?}: bad offset"))?,
    ))
}

/// Every record of `topic` up to its end now, in partition and offset order.
pub async fn read_all(brokers: &str, topic: &str) -> anyhow::Result<Vec<DeadLetter>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", format!("{topic}-dlq-reader"))
        .set("enable.auto.commit", "false")
        .create()
        .context("creating the dead-letter reader")?;
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let partitions = super::partition_ids(consumer.client(), &topic, KAFKA_TIMEOUT).map_err(anyhow::Error::msg)?;
        let mut letters = Vec::new();
        for p in partitions {
            let (low, high) = consumer.fetch_watermarks(&topic, p, KAFKA_TIMEOUT).context("reading watermarks")?;
            if low >= high {
                continue;
            }
            let mut assignment = TopicPartitionList::new();
            assignment.add_partition_offset(&topic, p, Offset::Offset(low))?;
            consumer.assign(&assignment)?;
            let mut next = low;
            while next < high {
                let Some(message) = consumer.poll(KAFKA_TIMEOUT) else {
                    bail!("{topic}/{p}: no record within {KAFKA_TIMEOUT:?} at offset {next} (end {high})");
                };
                let m = message.context("reading the dead-letter topic")?;
                next = m.offset() + 1;
                let headers = m.headers().map_or_else(Vec::new, |h| {
                    h.iter().map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec))).collect()
                });
                letters.push(DeadLetter {
                    partition: p,
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    headers,
                });
            }
        }
        Ok(letters)
    })
    .await?
}

/// Appends each of `letters` (see the module docs) and waits for every acknowledgement; returns
/// how many.
pub async fn redrive(
    brokers: &str,
    dlq_topic: &str,
    letters: &[&DeadLetter],
    to: Option<&str>,
) -> anyhow::Result<usize> {
    let producer: FutureProducer =
        super::producer_config(brokers, Duration::ZERO).create().context("creating the re-drive producer")?;
    for letter in letters {
        let from = super::dead_letter_source(dlq_topic, letter.partition, letter.offset);
        let mut headers = OwnedHeaders::new();
        for (key, value) in letter.original_headers() {
            headers = headers.insert(Header { key, value: value.as_deref() });
        }
        headers = headers.insert(Header { key: HEADER_REDRIVEN_FROM, value: Some(from.as_bytes()) });
        let (topic, partition) = match to {
            Some(topic) => (topic, None),
            None => {
                let Some((topic, partition)) = letter.source_partition() else {
                    bail!("{from} names no source ({:?}): re-drive it with --to TOPIC", letter.source());
                };
                (topic, Some(partition))
            }
        };
        let mut record = FutureRecord::<[u8], [u8]>::to(topic).headers(headers);
        if let Some(key) = letter.key.as_deref() {
            record = record.key(key);
        }
        if let Some(value) = letter.value.as_deref() {
            record = record.payload(value);
        }
        if let Some(partition) = partition {
            record = record.partition(partition);
        }
        producer
            .send(record, super::DELIVERY_TIMEOUT)
            .await
            .map_err(|(e, _)| e)
            .with_context(|| format!("re-driving {from} to {topic}"))?;
    }
    Ok(letters.len())
}

/// Bytes for a person: the text when it is UTF-8, else hex.
fn printable(bytes: Option<&[u8]>) -> String {
    match bytes {
        None => "(null)".to_owned(),
        Some(b) => std::str::from_utf8(b).map_or_else(|_| format!("0x{}", hex::encode(b)), str::to_owned),
    }
}

/// Runs `command` on `dlq_topic`, printing its result.
pub async fn run(command: &DlqCommand, brokers: &str, dlq_topic: &str) -> anyhow::Result<()> {
    let letters = read_all(brokers, dlq_topic).await?;
    match command {
        DlqCommand::List(filter) => {
            let chosen: Vec<&DeadLetter> = letters.iter().filter(|l| filter.admits(l)).collect();
            for l in &chosen {
                println!("{}:{}\t{}\t{}\t{}", l.partition, l.offset, l.reason(), l.source(), l.detail());
            }
            println!("{} dead letters in {dlq_topic} ({} in all)", chosen.len(), letters.len());
        }
        DlqCommand::Show { at: (partition, offset) } => {
            let Some(l) = letters.iter().find(|l| l.partition == *partition && l.offset == *offset) else {
                bail!("{dlq_topic} has no record at {partition}:{offset}");
            };
            println!("dead letter {dlq_topic}/{partition}/{offset}");
            for (key, value) in &l.headers {
                println!("header {key}: {}", printable(value.as_deref()));
            }
            println!("key: {}", printable(l.key.as_deref()));
            println!("value ({} bytes): {}", l.value.as_ref().map_or(0, Vec::len), printable(l.value.as_deref()));
        }
        DlqCommand::Redrive { filter, to, dry_run } => {
            let chosen: Vec<&DeadLetter> = letters.iter().filter(|l| filter.admits(l)).collect();
            if *dry_run {
                for l in &chosen {
                    let target = to.as_deref().map_or_else(|| l.source().to_owned(), str::to_owned);
                    println!("would re-drive {}:{} ({}) to {target}", l.partition, l.offset, l.reason());
                }
                println!("{} dead letters would be re-driven (dry run)", chosen.len());
            } else {
                let n = redrive(brokers, dlq_topic, &chosen, to.as_deref()).await?;
                println!("re-drove {n} dead letters from {dlq_topic}");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(reason: &str, source: &str) -> DeadLetter {
        DeadLetter {
            partition: 0,
            offset: 7,
            key: None,
            value: None,
            headers: vec![
                ("qim-schema".to_owned(), Some(b"1".to_vec())),
                (HEADER_DLQ_REASON.to_owned(), Some(reason.as_bytes().to_vec())),
                (HEADER_DLQ_SOURCE.to_owned(), Some(source.as_bytes().to_vec())),
            ],
        }
    }

    #[test]
    fn filters_match_reason_and_source_prefix() {
        let l = letter("undecodable", "qim.messages.v1/3/41");
        assert!(Filter::default().admits(&l));
        assert!(Filter { reason: Some("undecodable".into()), source: Some("qim.messages.v1/3/".into()) }.admits(&l));
        assert!(!Filter { reason: Some("bad_key".into()), source: None }.admits(&l));
        assert!(!Filter { reason: None, source: Some("qim.messages.v1/4/".into()) }.admits(&l));
    }

    #[test]
    fn the_source_names_topic_and_partition_and_the_dlq_headers_are_dropped() {
        let l = letter("undecodable", "a.topic/with/slashes/3/41");
        assert_eq!(l.source_partition(), Some(("a.topic/with/slashes", 3)));
        assert_eq!(letter("x", "nonsense").source_partition(), None);
        let kept: Vec<&str> = l.original_headers().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kept, ["qim-schema"]);
        assert_eq!(parse_position("2:17"), Ok((2, 17)));
        assert!(parse_position("2-17").is_err());
    }
}
