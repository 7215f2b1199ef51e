//! Group commit: the round trips of sends in flight at once, shared. Each kind of step goes out
//! in ticks ([`crate::redis::tick`]: the next starts when the previous one's replies landed,
//! with no fixed linger):
//!
//! - **Round trips** of whole batches (a key's claim with its recovery entry, a commit's move to
//!   COMMITTED with its index entries): every batch waiting joins one pipeline (one per slot on a
//!   cluster); their index writes become one multi-member `ZADD` or `ZREM` per key, and the
//!   calls of a repeatable script in one slot (the claims of one sender, the compare-and-sets of
//!   one conversation's commits) one call of its several-at-once form ([`Batch::join`]).
//! - **Appends** (`message_append.lua`): the sends of one conversation in a tick become one call
//!   of the script, which answers each as if it had been alone; the calls of every conversation go
//!   out as one pipeline.
//!
//! A tick's failure (the connection lost) fails every send it carried, each with the error a
//! round trip of its own would have met, so each is retried or recovered as before; the scripts
//! and commands are the ones a lone send runs, so every crash point is one a lone send has.

use std::collections::HashMap;
use std::sync::Arc;

use redis::Value;

use super::scripts::{self, run, Batch, Link, Reply};
use crate::error::{StoreError, StoreResult};
use crate::redis::tick::{TickFn, Ticker};

/// At most this many items per tick: a bound on one pipeline's size (a tick under heavier
/// load leaves the rest to the next, which starts as soon as it lands).
const MAX_TICK_ITEMS: usize = 1024;

/// The store's tickers (clones share them).
#[derive(Clone)]
pub(super) struct GroupCommit {
    trips: Ticker<Batch, StoreResult<Vec<Reply>>>,
    appends: Ticker<AppendCall, StoreResult<Value>>,
}

/// One send's part of a `message_append.lua` call (see the script for the keys and arguments).
pub(super) struct AppendCall {
    /// KEYS[1..12]: the conversation's keys, the same for every send of the conversation.
    pub conversation: [String; 12],
    /// The shared ARGV[1..5] (the first send's are used for a call of several).
    pub shared: [Vec<u8>; 5],
    /// The send's commit key.
    pub commit: String,
    /// The send's five arguments.
    pub send: [Vec<u8>; 5],
    /// The send's `created_at`: a conversation's sends go in this order (fewer restamps).
    pub created_at: i64,
}

impl GroupCommit {
    pub(super) fn new(link: Link) -> Self {
        let trip_link = link.clone();
        let trips: TickFn<Batch, StoreResult<Vec<Reply>>> =
            Arc::new(move |batches| Box::pin(run_joined(trip_link.clone(), batches)));
        let appends: TickFn<AppendCall, StoreResult<Value>> =
            Arc::new(move |calls| Box::pin(run_appends(link.clone(), calls)));
        Self { trips: Ticker::new(MAX_TICK_ITEMS, trips), appends: Ticker::new(MAX_TICK_ITEMS, appends) }
    }

    /// `batch`'s replies, its round trip shared with every batch waiting meanwhile.
    pub(super) async fn round_trip(&self, what: &str, batch: Batch) -> StoreResult<Vec<Reply>> {
        self.trips.submit(batch).await.map_err(|e| abandoned(what, e))?.map_err(|e| context(what, e))
    }

    /// The reply `message_append.lua` gave `call`'s send.
    pub(super) async fn append(&self, call: AppendCall) -> StoreResult<Value> {
        let what = "reserving a commit";
        self.appends.submit(call).await.map_err(|e| abandoned(what, e))?.map_err(|e| context(what, e))
    }
}

/// One tick of round trips: the batches joined, sent, and their replies handed back.
async fn run_joined(link: Link, batches: Vec<Batch>) -> Vec<StoreResult<Vec<Reply>>> {
    let n = batches.len();
    let (joint, places) = Batch::join(batches);
    match run(&link, "a shared round trip", joint).await {
        Ok(replies) => {
            places.into_iter().map(|place| Ok(place.into_iter().map(|p| p.reply(&replies)).collect())).collect()
        }
        Err(e) => (0..n).map(|_| Err(e.same_again())).collect(),
    }
}

/// One tick of appends: one script call per conversation, all in one pipeline.
async fn run_appends(link: Link, calls: Vec<AppendCall>) -> Vec<StoreResult<Value>> {
    let n = calls.len();
    let mut by_conversation: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut order = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        by_conversation
            .entry(call.conversation[0].as_str())
            .or_insert_with(|| {
                order.push(call.conversation[0].as_str());
                Vec::new()
            })
            .push(i);
    }
    let mut batch = Batch::default();
    let mut groups = Vec::with_capacity(order.len());
    for seq_key in order {
        let mut group = by_conversation.remove(seq_key).unwrap_or_default();
        group.sort_by_key(|&i| calls[i].created_at);
        append_command(&mut batch, group.iter().map(|&i| &calls[i]));
        groups.push(group);
    }
    let mut answers: Vec<Option<StoreResult<Value>>> = (0..n).map(|_| None).collect();
    match run(&link, "a shared round trip", batch).await {
        Ok(replies) => {
            for (group, reply) in groups.into_iter().zip(replies) {
                let per_send = match reply {
                    Ok(Value::Array(items)) if items.len() == group.len() => Ok(items),
                    Ok(other) => Err(StoreError::InvariantViolation(format!(
                        "message_append: {other:?} in reply to {} sends",
                        group.len()
                    ))),
                    Err(e) => Err(scripts::call_error("message_append", e)),
                };
                match per_send {
                    Ok(items) => group.into_iter().zip(items).for_each(|(i, item)| answers[i] = Some(Ok(item))),
                    Err(e) => group.into_iter().for_each(|i| answers[i] = Some(Err(e.same_again()))),
                }
            }
        }
        Err(e) => answers.iter_mut().for_each(|a| *a = Some(Err(e.same_again()))),
    }
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(StoreError::InvariantViolation("an append went unanswered".into()))))
        .collect()
}

/// Adds one `message_append.lua` call covering `calls` (sends of one conversation) to `batch`.
pub(super) fn append_command<'a>(batch: &mut Batch, calls: impl Iterator<Item = &'a AppendCall> + Clone) {
    let Some(first) = calls.clone().next() else { return };
    let mut keys: Vec<&str> = first.conversation.iter().map(String::as_str).collect();
    keys.extend(calls.clone().map(|c| c.commit.as_str()));
    let cmd = batch.script(&scripts::APPEND, &keys);
    cmd.arg(&first.shared[..]);
    for call in calls {
        cmd.arg(&call.send[..]);
    }
}

/// `error` with what the caller was doing in front.
fn context(what: &str, error: StoreError) -> StoreError {
    match error {
        StoreError::Unavailable { message, source } => {
            StoreError::Unavailable { message: format!("{what}: {message}"), source }
        }
        other => other,
    }
}

fn abandoned(what: &str, e: crate::redis::tick::Abandoned) -> StoreError {
    StoreError::Unavailable { message: format!("{what}: {e}"), source: None }
}
