//! The checker's answer: counts and named violations.

use std::fmt;

/// Which promise a violation breaks (DESIGN.md's invariants, split where a reader needs it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Invariant {
    /// An acknowledged message is missing where it belongs (Kafka, archive, hot tier, a mailbox).
    Lost,
    /// A record differs from what the writer acknowledged.
    AckMismatch,
    /// Two different messages for one seq, one client message id, or one message id; or one
    /// message twice in a mailbox.
    LogicalDuplicate,
    /// A client retry was answered with another message id or seq.
    RetryMismatch,
    /// Seqs out of order in a history read or a mailbox.
    Order,
    /// A seq that is a hole in Kafka is filled in a store, or a store holds a record Kafka does
    /// not.
    Hole,
    /// An archive TTL or expiry that does not match the retention policy.
    Retention,
    /// A lane watermark passed a dispatch whose entries are not all written.
    Watermark,
    /// A mailbox entry that does not match its message or its dispatch.
    MailboxMismatch,
    /// Something could not be decoded (fail closed: reported, never guessed).
    Corrupt,
}

impl Invariant {
    /// A short lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::Lost => "lost",
            Invariant::AckMismatch => "ack_mismatch",
            Invariant::LogicalDuplicate => "logical_duplicate",
            Invariant::RetryMismatch => "retry_mismatch",
            Invariant::Order => "order",
            Invariant::Hole => "hole",
            Invariant::Retention => "retention",
            Invariant::Watermark => "watermark",
            Invariant::MailboxMismatch => "mailbox_mismatch",
            Invariant::Corrupt => "corrupt",
        }
    }
}

/// One broken promise, with the ids involved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The invariant.
    pub invariant: Invariant,
    /// What and where, naming ids (hex) and seqs.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.invariant.name(), self.detail)
    }
}

/// What the checker counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Acknowledged messages given to the checker.
    pub acked: usize,
    /// Records on the messages topic (physical, duplicates included).
    pub kafka_records: usize,
    /// Acknowledged messages found on the messages topic.
    pub in_kafka: usize,
    /// Extra physical copies of a message on the messages topic (redelivery, recovery).
    pub kafka_physical_duplicates: usize,
    /// Logical duplicates (each a violation).
    pub logical_duplicates: usize,
    /// Acknowledged messages missing somewhere they belong (each place counts once).
    pub lost: usize,
    /// Acknowledged messages expired by now (not required in the stores).
    pub expired: usize,
    /// Acknowledged messages found in the archive.
    pub archived: usize,
    /// Acknowledged messages found in the hot tier.
    pub hot: usize,
    /// Acknowledged messages the hot tier is not required to hold (past its window, wiped, or in a
    /// conversation whose hot tier is not trusted since Redis lost state).
    pub hot_exempt: usize,
    /// Seq holes across all conversations (legal; reported).
    pub holes: usize,
    /// Mailbox entries (events) read.
    pub mailbox_entries: usize,
    /// Mailbox entries the acknowledged messages require (members × messages).
    pub expected_mailbox_entries: usize,
    /// Records on the dispatch topic (physical).
    pub dispatch_records: usize,
    /// Extra physical copies of a dispatch on the dispatch topic.
    pub dispatch_physical_duplicates: usize,
    /// Lanes whose watermark has advanced at least once.
    pub lanes_advanced: usize,
    /// Dispatches at or below their lanes' watermarks whose entries were verified.
    pub lane_dispatches_verified: usize,
    /// Client retries answered differently (from the workload).
    pub retries_mismatched: u64,
}

/// The checker's verdict.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    /// Counts.
    pub counts: Counts,
    /// Every violation found (empty when all invariants hold).
    pub violations: Vec<Violation>,
}

impl Verdict {
    /// Whether every invariant holds.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// The violations of one invariant.
    pub fn of(&self, invariant: Invariant) -> impl Iterator<Item = &Violation> {
        self.violations.iter().filter(move |v| v.invariant == invariant)
    }

    pub(crate) fn violate(&mut self, invariant: Invariant, detail: impl Into<String>) {
        self.violations.push(Violation { invariant, detail: detail.into() });
    }
}

/// How many violations [`Verdict`]'s `Display` lists.
pub const SHOWN_VIOLATIONS: usize = 12;

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.counts;
        writeln!(
            f,
            "acked {}, in kafka {} ({} records, {} physical duplicates), archived {}, hot {} (+{} exempt), expired {}",
            c.acked,
            c.in_kafka,
            c.kafka_records,
            c.kafka_physical_duplicates,
            c.archived,
            c.hot,
            c.hot_exempt,
            c.expired
        )?;
        writeln!(
            f,
            "mailbox entries {} of {} expected; dispatch records {} ({} physical duplicates); lanes advanced {}, dispatches verified under watermarks {}",
            c.mailbox_entries,
            c.expected_mailbox_entries,
            c.dispatch_records,
            c.dispatch_physical_duplicates,
            c.lanes_advanced,
            c.lane_dispatches_verified
        )?;
        writeln!(
            f,
            "lost {}, logical duplicates {}, retries mismatched {}, seq holes {}",
            c.lost, c.logical_duplicates, c.retries_mismatched, c.holes
        )?;
        if self.is_ok() {
            return write!(f, "verdict: OK, every invariant holds");
        }
        write!(f, "verdict: {} VIOLATIONS", self.violations.len())?;
        for v in self.violations.iter().take(SHOWN_VIOLATIONS) {
            write!(f, "\n  - {v}")?;
        }
        if self.violations.len() > SHOWN_VIOLATIONS {
            write!(f, "\n  - ... and {} more", self.violations.len() - SHOWN_VIOLATIONS)?;
        }
        Ok(())
    }
}
