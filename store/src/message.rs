//! The message side of the domain: commit requests, intents, states and history records.

use crate::ids::{ClientMessageId, ConversationId, ConversationSeq, MessageId, TenantId, UnixMillis, UserId};
use crate::retention::RetentionClass;

/// Largest message payload the store accepts, in bytes.
pub const MAX_PAYLOAD_BYTES: usize = 256 * 1024;

/// What kind of message a record is.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum MessageKind {
    /// An ordinary message.
    Normal,
    /// A new version of an earlier message.
    Edited,
    /// A control message (membership change, receipts); never counted as unread.
    Control,
}

impl MessageKind {
    /// Every kind, in wire order.
    pub const ALL: [MessageKind; 3] = [MessageKind::Normal, MessageKind::Edited, MessageKind::Control];

    /// The API/wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            MessageKind::Normal => "normal",
            MessageKind::Edited => "edited",
            MessageKind::Control => "control",
        }
    }

    /// Parses an API name; unknown names are `None`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// Whether a message of this kind counts toward unread totals.
    pub const fn counts_as_unread(self) -> bool {
        matches!(self, MessageKind::Normal | MessageKind::Edited)
    }
}

/// The idempotency key of one send: the same key is the same message.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct CommitKey {
    /// The sender's tenant.
    pub tenant: TenantId,
    /// The sender.
    pub sender: UserId,
    /// The client's own id for this send.
    pub client_message_id: ClientMessageId,
}

/// What the client asked for. Its canonical encoding is the stable request identity: a retry
/// with the same key and the same bytes is the same request; different bytes are a conflict.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct CommitRequest {
    /// The idempotency key.
    pub key: CommitKey,
    /// Where the message goes.
    pub conversation: ConversationId,
    /// Its kind.
    pub kind: MessageKind,
    /// How long its history lives.
    pub retention: RetentionClass,
    /// The opaque body, at most [`MAX_PAYLOAD_BYTES`].
    pub payload: Vec<u8>,
}

/// Where a record landed in Kafka when it was published.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Publication {
    /// Partition of `qim.messages.v1`.
    pub partition: i32,
    /// Offset within that partition.
    pub offset: i64,
}

/// A record as it was published: the record and where it is in `qim.messages.v1`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct PublishedRecord {
    /// The record.
    pub record: MessageRecord,
    /// Its partition and offset.
    pub publication: Publication,
}

/// The immutable facts fixed at reservation, plus the publication once outboxed.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct CommitIntent {
    /// The request as the client sent it.
    pub request: CommitRequest,
    /// The conversation position allocated to it.
    pub seq: ConversationSeq,
    /// The message id allocated to it.
    pub message_id: MessageId,
    /// When it was reserved; the retention clock starts here.
    pub created_at: UnixMillis,
    /// Set at OUTBOXED, unchanged afterwards.
    pub publication: Option<Publication>,
}

impl CommitIntent {
    /// The history record this intent becomes.
    pub fn record(&self, expires_at: Option<UnixMillis>) -> MessageRecord {
        MessageRecord {
            tenant: self.request.key.tenant,
            conversation: self.request.conversation,
            seq: self.seq,
            message_id: self.message_id,
            sender: self.request.key.sender,
            client_message_id: self.request.key.client_message_id.clone(),
            kind: self.request.kind,
            retention: self.request.retention,
            created_at: self.created_at,
            expires_at,
            payload: self.request.payload.clone(),
        }
    }
}

/// Where a commit stands. Moves only forward, one step at a time.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum CommitState {
    /// Seq and message id allocated; nothing else durable yet.
    Reserved,
    /// Record and history index written.
    Recorded,
    /// Produced to Kafka; publication coordinates stored.
    Outboxed,
    /// Done; the client may be answered.
    Committed,
}

impl CommitState {
    /// The state that must precede this one (`None` for `Reserved`).
    pub const fn predecessor(self) -> Option<CommitState> {
        match self {
            CommitState::Reserved => None,
            CommitState::Recorded => Some(CommitState::Reserved),
            CommitState::Outboxed => Some(CommitState::Recorded),
            CommitState::Committed => Some(CommitState::Outboxed),
        }
    }

    /// Whether the recovery loop must still drive this commit forward.
    pub const fn is_recoverable(self) -> bool {
        !matches!(self, CommitState::Committed)
    }

    /// A stable name for logs and metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            CommitState::Reserved => "reserved",
            CommitState::Recorded => "recorded",
            CommitState::Outboxed => "outboxed",
            CommitState::Committed => "committed",
        }
    }
}

/// A commit as stored: its intent and where it stands.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Commit {
    /// The immutable facts.
    pub intent: CommitIntent,
    /// Where the commit stands.
    pub state: CommitState,
    /// When it reached COMMITTED.
    pub committed_at: Option<UnixMillis>,
}

/// One message in a conversation's history, as both tiers store it.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct MessageRecord {
    /// Tenant of the conversation.
    pub tenant: TenantId,
    /// The conversation.
    pub conversation: ConversationId,
    /// Position in the conversation.
    pub seq: ConversationSeq,
    /// The message id.
    pub message_id: MessageId,
    /// Who sent it.
    pub sender: UserId,
    /// The sender's idempotency key.
    pub client_message_id: ClientMessageId,
    /// Its kind.
    pub kind: MessageKind,
    /// Its retention class.
    pub retention: RetentionClass,
    /// When it was reserved.
    pub created_at: UnixMillis,
    /// When it expires under the policy in force at commit (`None`: never).
    pub expires_at: Option<UnixMillis>,
    /// The opaque body.
    pub payload: Vec<u8>,
}

impl MessageRecord {
    /// Bytes a history page charges for this record against its `max_bytes` budget.
    pub fn page_bytes(&self) -> usize {
        self.payload.len()
    }

    /// Whether the record is expired at `now`.
    pub fn is_expired(&self, now: UnixMillis) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }
}

/// Which way a history page reads from its anchor.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Direction {
    /// Seqs below the anchor, newest first (no anchor: from the newest).
    Older,
    /// Seqs above the anchor, oldest first (no anchor: from the earliest available).
    Newer,
}

/// One history read.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct HistoryQuery {
    /// Tenant of the conversation and of the viewer.
    pub tenant: TenantId,
    /// The conversation.
    pub conversation: ConversationId,
    /// Who reads; checked by the [`crate::HistoryAuthorizer`] before anything is read.
    pub viewer: UserId,
    /// Which way to read.
    pub direction: Direction,
    /// Exclusive starting point; `None` reads from the newest (older) or earliest (newer).
    pub anchor: Option<ConversationSeq>,
    /// At most this many records (1..=[`MAX_PAGE_ITEMS`]).
    pub max_items: usize,
    /// Payload byte budget: the first record may exceed it, later ones never do.
    pub max_bytes: usize,
}

/// Largest `max_items` of one history page.
pub const MAX_PAGE_ITEMS: usize = 500;

/// One page of history.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct HistoryPage {
    /// Records in reading order (newest first for `Older`, oldest first for `Newer`).
    pub records: Vec<MessageRecord>,
    /// Lowest seq still available (not expired, not deleted); `None` when nothing is.
    pub earliest_available: Option<ConversationSeq>,
    /// Whether more records lie beyond this page in the reading direction.
    pub has_more: bool,
}

/// How far a viewer has read one conversation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ReadPosition {
    /// The conversation.
    pub conversation: ConversationId,
    /// Highest seq the viewer has read (0: nothing).
    pub read_through: ConversationSeq,
}

/// Unread counts are exact up to this many candidate records, then capped.
pub const UNREAD_PRECISE_LIMIT: u32 = 100;

/// One conversation's summary for a viewer.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ConversationSummary {
    /// The conversation.
    pub conversation: ConversationId,
    /// Highest committed seq present in history (`None`: empty).
    pub last_seq: Option<ConversationSeq>,
    /// Messages after `read_through` sent by others, Normal or Edited.
    pub unread: u32,
    /// `false` when the window exceeded [`UNREAD_PRECISE_LIMIT`] and `unread` is the cap.
    pub unread_precise: bool,
}
