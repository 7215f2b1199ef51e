//! The invariant checker (issue 9): compares what the writer acknowledged with what the
//! pipeline holds (the messages and dispatch topics from their beginning, the Scylla archive,
//! the Redis hot tier, the mailboxes and the lane watermarks) and names every broken promise of
//! DESIGN.md. See [`rules`] for the checks and [`Invariant`] for their names.
//!
//! ```no_run
//! # async fn demo(env: qim_tests::services::PipelineEnv, plan: qim_tests::workload::Plan,
//! #               report: qim_tests::workload::Report) -> anyhow::Result<()> {
//! use qim_tests::checker::{check, CheckInput};
//! let verdict = check(&CheckInput::new(env, &plan, report.acks, report.retries_mismatched)).await?;
//! assert!(verdict.is_ok(), "{verdict}");
//! # Ok(()) }
//! ```

pub mod files;
pub mod kafka;
pub mod observe;
pub mod rules;
mod verdict;

use std::collections::{BTreeSet, HashMap, HashSet};

use anyhow::Context;
use qim_store::ids::{ConversationId, TenantId, UnixMillis, UserId};
use qim_store::mailbox::{EventGroup, LaneWatermark};
use qim_store::message::MessageRecord;
use qim_store::retention::RetentionPolicy;
use qim_store::topic::decode_message;

pub use verdict::{Counts, Invariant, Verdict, Violation, SHOWN_VIOLATIONS};

use crate::services::PipelineEnv;
use crate::workload::{Ack, Conversation, Plan};
use kafka::RawRecord;
use observe::ArchivedRow;

/// What the checker is asked to verify.
#[derive(Clone, Debug)]
pub struct CheckInput {
    /// The run (addresses, topic names, keyspace, namespace, shards, retention).
    pub env: PipelineEnv,
    /// Every acknowledgement the clients received (a retried send may appear more than once).
    pub acks: Vec<Ack>,
    /// The tenant of the conversations.
    pub tenant: String,
    /// The conversations and their members (every member must receive every message).
    pub conversations: Vec<Conversation>,
    /// Client retries whose answer differed from the first (from the workload report).
    pub retries_mismatched: u64,
    /// Messages created before this moment (Unix millis) need not be in the hot tier: it was
    /// wiped then (the replay test). `None`: it never was.
    pub hot_exempt_before: Option<i64>,
    /// Days the hot tier keeps history (`QIM_HOT_WINDOW_DAYS`, 7).
    pub hot_window_days: u32,
}

impl CheckInput {
    /// The input for a workload run of `plan` on `env`.
    pub fn new(env: PipelineEnv, plan: &Plan, acks: Vec<Ack>, retries_mismatched: u64) -> Self {
        Self {
            env,
            acks,
            tenant: plan.tenant.clone(),
            conversations: plan.conversations.clone(),
            retries_mismatched,
            hot_exempt_before: None,
            hot_window_days: 7,
        }
    }
}

/// The expectations in typed form, as the rules take them.
#[derive(Clone, Debug)]
pub struct Expect {
    /// Acknowledgements.
    pub acks: Vec<Ack>,
    /// Members per conversation.
    pub members: HashMap<ConversationId, Vec<UserId>>,
    /// See [`CheckInput::retries_mismatched`].
    pub retries_mismatched: u64,
    /// The services' retention policy.
    pub policy: RetentionPolicy,
    /// See [`CheckInput::hot_exempt_before`].
    pub hot_exempt_before: Option<i64>,
    /// See [`CheckInput::hot_window_days`].
    pub hot_window_days: u32,
    /// Mailbox shards.
    pub shards: u16,
}

/// Everything the checker read.
#[derive(Clone, Debug)]
pub struct Observed {
    /// The messages topic, every partition from its beginning.
    pub messages: Vec<RawRecord>,
    /// The dispatch topic, every partition from its beginning.
    pub dispatches: Vec<RawRecord>,
    /// The archive's rows of every conversation.
    pub archive: Vec<ArchivedRow>,
    /// The hot tier's records, per conversation oldest first.
    pub hot: Vec<MessageRecord>,
    /// Conversations whose hot tier is not trusted yet after Redis lost state.
    pub hot_untrusted: HashSet<(TenantId, ConversationId)>,
    /// Every member's mailbox.
    pub mailboxes: HashMap<UserId, Vec<EventGroup>>,
    /// Every lane watermark.
    pub watermarks: Vec<LaneWatermark>,
    /// When the reading began.
    pub now: UnixMillis,
}

/// Reads everything and applies every rule. Run it once the pipeline has converged.
///
/// # Errors
///
/// A server does not answer, or the input names malformed ids (a violation is never an error:
/// it is in the verdict).
pub async fn check(input: &CheckInput) -> anyhow::Result<Verdict> {
    let expect = expect(input)?;
    let observed = observe(input, &expect).await?;
    Ok(rules::evaluate(&expect, &observed))
}

/// Types the input.
///
/// # Errors
///
/// A malformed id or retention setting.
pub fn expect(input: &CheckInput) -> anyhow::Result<Expect> {
    let mut members = HashMap::new();
    for c in &input.conversations {
        let id = ConversationId::from_hex(&c.id).with_context(|| format!("conversation {:?}", c.id))?;
        let users = c
            .members
            .iter()
            .map(|u| UserId::from_hex(u).with_context(|| format!("member {u:?}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        members.insert(id, users);
    }
    Ok(Expect {
        acks: input.acks.clone(),
        members,
        retries_mismatched: input.retries_mismatched,
        policy: RetentionPolicy::with_default_days(input.env.retention_days).context("the retention policy")?,
        hot_exempt_before: input.hot_exempt_before,
        hot_window_days: input.hot_window_days,
        shards: input.env.mailbox_shards,
    })
}

/// Reads the topics and the stores of `input.env`.
///
/// # Errors
///
/// A server does not answer.
pub async fn observe(input: &CheckInput, x: &Expect) -> anyhow::Result<Observed> {
    let env = &input.env;
    let tenant = TenantId::from_hex(&input.tenant).with_context(|| format!("tenant {:?}", input.tenant))?;
    let now = UnixMillis::now();
    let messages =
        kafka::read_topic(&env.kafka_brokers, &env.messages_topic).await.context("reading the messages topic")?;
    let dispatches =
        kafka::read_topic(&env.kafka_brokers, &env.dispatch_topic).await.context("reading the dispatch topic")?;
    // Conversations: the plan's and any the topic names; highest seq from the topic and acks.
    let mut top: HashMap<(TenantId, ConversationId), u64> = x.members.keys().map(|c| ((tenant, *c), 0)).collect();
    for raw in &messages {
        if let Ok(r) = decode_message(raw.key.as_deref(), raw.value.as_deref(), None, None) {
            let e = top.entry((r.tenant, r.conversation)).or_default();
            *e = (*e).max(r.seq.0);
        }
    }
    for a in &input.acks {
        if let Ok(c) = ConversationId::from_hex(&a.conversation) {
            let e = top.entry((tenant, c)).or_default();
            *e = (*e).max(a.conversation_seq);
        }
    }
    let conversations: Vec<_> = top.iter().map(|((t, c), max)| (*t, *c, *max)).collect();
    let archive = observe::read_archive(env, &conversations).await.context("reading the archive")?;
    let pairs: Vec<_> = conversations.iter().map(|(t, c, _)| (*t, *c)).collect();
    let (hot, hot_untrusted) = observe::read_hot(env, x.policy, &pairs).await.context("reading the hot tier")?;
    let users: BTreeSet<(TenantId, UserId)> = x.members.values().flatten().map(|u| (tenant, *u)).collect();
    let mailboxes = observe::read_mailboxes(env, &users).await.context("reading the mailboxes")?;
    let watermarks = observe::read_watermarks(env, env.mailbox_shards).await.context("reading the lane watermarks")?;
    Ok(Observed { messages, dispatches, archive, hot, hot_untrusted, mailboxes, watermarks, now })
}
