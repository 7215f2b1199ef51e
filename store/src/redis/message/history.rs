//! History reads of [`RedisMessageStore`]: pages, `earliest_available` and unread summaries.
//!
//! Index entries and their record blobs come in batches from `message_history.lua` (one
//! consistent snapshot per batch); every record is decoded and checked against its index
//! position here, lazily and in reading order, so exactly the records the reference backend
//! would look at are looked at (and a corrupt one beyond the page is not reached).

use redis::Value;

use super::keys::parse_seq;
use super::scripts::{bytes, invoke};
use super::RedisMessageStore;
use crate::codec::decode_record;
use crate::error::{StoreError, StoreResult};
use crate::ids::{ConversationId, ConversationSeq, TenantId, UnixMillis, UserId};
use crate::message::{
    ConversationSummary, Direction, HistoryPage, HistoryQuery, MessageRecord, ReadPosition, MAX_PAGE_ITEMS,
    UNREAD_PRECISE_LIMIT,
};

/// Most index entries one history script call returns.
const BATCH: usize = 128;

/// One index entry and its record blob (`None`: missing).
type Entry = (ConversationSeq, Option<Vec<u8>>);

/// Decodes one indexed record and checks it sits at its index position.
fn check_record(
    tenant: TenantId,
    conversation: ConversationId,
    seq: ConversationSeq,
    blob: Option<&[u8]>,
) -> StoreResult<MessageRecord> {
    let blob = blob.ok_or_else(|| {
        StoreError::CorruptEntry(format!("history index holds seq {seq} of {conversation} but its record is missing"))
    })?;
    let record = decode_record(blob)?;
    if record.tenant != tenant || record.conversation != conversation || record.seq != seq {
        return Err(StoreError::CorruptEntry(format!(
            "record at seq {seq} of {conversation} belongs to seq {} of {}",
            record.seq, record.conversation
        )));
    }
    Ok(record)
}

/// Walks a conversation's index from an exclusive anchor in one direction, yielding checked
/// records (expired ones included: callers decide).
struct Walk<'a> {
    store: &'a RedisMessageStore,
    tenant: TenantId,
    conversation: ConversationId,
    direction: Direction,
    anchor: Option<ConversationSeq>,
    batch: usize,
    buffered: std::vec::IntoIter<Entry>,
    exhausted: bool,
}

impl<'a> Walk<'a> {
    fn new(
        store: &'a RedisMessageStore,
        tenant: TenantId,
        conversation: ConversationId,
        direction: Direction,
        anchor: Option<ConversationSeq>,
        batch: usize,
    ) -> Self {
        Self {
            store,
            tenant,
            conversation,
            direction,
            anchor,
            batch: batch.clamp(1, BATCH),
            buffered: Vec::new().into_iter(),
            exhausted: false,
        }
    }

    /// The next index entry's seq and its checked record; `None` at the end of the index.
    async fn next_entry(&mut self) -> StoreResult<Option<(ConversationSeq, Option<Vec<u8>>)>> {
        if let Some(entry) = self.buffered.next() {
            return Ok(Some(entry));
        }
        if self.exhausted {
            return Ok(None);
        }
        let entries =
            self.store.read_index(self.tenant, self.conversation, self.direction, self.anchor, self.batch).await?;
        self.exhausted = entries.len() < self.batch;
        self.anchor = entries.last().map(|(seq, _)| *seq).or(self.anchor);
        self.buffered = entries.into_iter();
        Ok(self.buffered.next())
    }

    /// The next record, decoded and checked.
    async fn next_record(&mut self) -> StoreResult<Option<MessageRecord>> {
        match self.next_entry().await? {
            None => Ok(None),
            Some((seq, blob)) => check_record(self.tenant, self.conversation, seq, blob.as_deref()).map(Some),
        }
    }

    /// The next record not expired at `now`.
    async fn next_live(&mut self, now: UnixMillis) -> StoreResult<Option<MessageRecord>> {
        while let Some(record) = self.next_record().await? {
            if !record.is_expired(now) {
                return Ok(Some(record));
            }
        }
        Ok(None)
    }
}

impl RedisMessageStore {
    /// Up to `count` index entries beyond `anchor` in `direction`, with their record blobs.
    async fn read_index(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        direction: Direction,
        anchor: Option<ConversationSeq>,
        count: usize,
    ) -> StoreResult<Vec<Entry>> {
        let mut invocation = super::scripts::HISTORY.key(self.keys.index(tenant, conversation));
        invocation.key(self.keys.records(tenant, conversation));
        invocation.arg(match direction {
            Direction::Older => "older",
            Direction::Newer => "newer",
        });
        invocation.arg(anchor.map(|a| a.0.to_string()).unwrap_or_default()).arg(count);
        let reply = invoke(&self.con, "reading history", &invocation).await?;
        let unexpected = |v: &Value| StoreError::InvariantViolation(format!("message_history: unexpected reply {v:?}"));
        let Value::Array(items) = reply else {
            return Err(unexpected(&reply));
        };
        if items.len() % 2 != 0 {
            return Err(StoreError::InvariantViolation("message_history: odd reply length".to_owned()));
        }
        items
            .chunks(2)
            .map(|pair| {
                let member = bytes(&pair[0]).ok_or_else(|| unexpected(&pair[0]))?;
                let seq = std::str::from_utf8(member).ok().and_then(parse_seq).ok_or_else(|| {
                    StoreError::CorruptEntry(format!(
                        "history index of {conversation} holds malformed member {:?}",
                        String::from_utf8_lossy(member)
                    ))
                })?;
                let blob = match &pair[1] {
                    Value::Nil => None,
                    other => Some(bytes(other).ok_or_else(|| unexpected(other))?.to_vec()),
                };
                Ok((seq, blob))
            })
            .collect()
    }

    /// One page (after the authorizer admitted the viewer).
    pub(super) async fn read_page(&self, query: &HistoryQuery) -> StoreResult<HistoryPage> {
        if query.max_items == 0 || query.max_items > MAX_PAGE_ITEMS {
            return Err(StoreError::InvalidInput(format!(
                "max_items must be 1..={MAX_PAGE_ITEMS}, got {}",
                query.max_items
            )));
        }
        let now = self.clock.now();
        let (tenant, conversation) = (query.tenant, query.conversation);
        let earliest_available =
            Walk::new(self, tenant, conversation, Direction::Newer, None, 16).next_live(now).await?.map(|r| r.seq);
        // One entry beyond the page tells whether more follow.
        let mut walk = Walk::new(self, tenant, conversation, query.direction, query.anchor, query.max_items + 1);
        let mut records = Vec::new();
        let mut used = 0usize;
        let mut has_more = false;
        while let Some(record) = walk.next_live(now).await? {
            let fits = records.is_empty()
                || (records.len() < query.max_items && used + record.page_bytes() <= query.max_bytes);
            if !fits {
                has_more = true;
                break;
            }
            used += record.page_bytes();
            records.push(record);
        }
        Ok(HistoryPage { records, earliest_available, has_more })
    }

    /// One conversation's unread summary, reading from the newest entry down: live records
    /// above `read_through` (at most one beyond the precise window), and, when there are none,
    /// on to the first live record below (the last seq).
    pub(super) async fn summary(
        &self,
        tenant: TenantId,
        viewer: UserId,
        position: &ReadPosition,
    ) -> StoreResult<ConversationSummary> {
        let now = self.clock.now();
        let window = UNREAD_PRECISE_LIMIT as usize + 1;
        let mut walk = Walk::new(self, tenant, position.conversation, Direction::Older, None, window);
        let mut newer: Vec<MessageRecord> = Vec::new();
        let mut last_below = None;
        while let Some((seq, blob)) = walk.next_entry().await? {
            if seq <= position.read_through && !newer.is_empty() {
                break;
            }
            let record = check_record(tenant, position.conversation, seq, blob.as_deref())?;
            if record.is_expired(now) {
                continue;
            }
            if seq <= position.read_through {
                last_below = Some(seq);
                break;
            }
            newer.push(record);
            if newer.len() == window {
                break;
            }
        }
        let last_seq = newer.first().map(|r| r.seq).or(last_below);
        let (unread, unread_precise) = if newer.len() > UNREAD_PRECISE_LIMIT as usize {
            (UNREAD_PRECISE_LIMIT, false)
        } else {
            let n = newer.iter().filter(|r| r.sender != viewer && r.kind.counts_as_unread()).count();
            (u32::try_from(n).unwrap_or(UNREAD_PRECISE_LIMIT), true)
        };
        Ok(ConversationSummary { conversation: position.conversation, last_seq, unread, unread_precise })
    }
}
