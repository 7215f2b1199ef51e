//! Errors of the storage layer, with kinds a caller can match.
//!
//! Every backend maps its own failures onto these variants: a Scylla LWT with `[applied]=false`
//! and a Redis script's "condition failed" reply are both [`StoreError::Conflict`]; a blob that
//! does not decode is [`StoreError::CorruptEntry`]; a network or server failure is
//! [`StoreError::Unavailable`] (the only retryable kind).

use crate::mailbox::MailboxSeq;

/// The result type of every store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// A store operation's failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A condition did not hold: different bytes under the same request key, a state transition
    /// from the wrong predecessor, a different message id. Never retried blindly.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The same dispatch id arrived with a different manifest.
    #[error("dispatch conflict: {0}")]
    DispatchConflict(String),
    /// The caller referred to something that does not exist (for example a commit never
    /// reserved).
    #[error("not found: {0}")]
    NotFound(String),
    /// The history authorizer refused the viewer.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The request itself is malformed or over a limit; nothing was written.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// Stored bytes failed to decode or contradict each other (index without record, unknown
    /// version, truncated blob). Fails closed: nothing is guessed.
    #[error("corrupt entry: {0}")]
    CorruptEntry(String),
    /// An internal rule was broken (for example a `u64` with bit 63 set bound to a CQL
    /// `bigint`, or a Redis store asked for a seq with no durable high-water mark to lease from).
    #[error("invariant violation: {0}")]
    InvariantViolation(String),
    /// The mailbox cursor lies in a trimmed or expired region; restart from `earliest`.
    #[error("cursor expired: the earliest valid cursor is {earliest}")]
    CursorExpired {
        /// The lowest cursor a reader may resume from.
        earliest: MailboxSeq,
    },
    /// The store lost or rolled back state the caller built on since it took that state over
    /// (a fenced write after Redis restarted, was restored from an older snapshot, failed over or
    /// was flushed). Nothing was written; retrying can not succeed: rebuild from the log.
    #[error("state lost: {0}")]
    StateLost(String),
    /// The backend could not be reached or failed transiently; safe to retry.
    #[error("store unavailable: {message}")]
    Unavailable {
        /// What was being attempted.
        message: String,
        /// The backend's error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

/// The kind of a [`StoreError`], for callers that branch (HTTP status, retry, metrics label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// See [`StoreError::Conflict`].
    Conflict,
    /// See [`StoreError::DispatchConflict`].
    DispatchConflict,
    /// See [`StoreError::NotFound`].
    NotFound,
    /// See [`StoreError::Forbidden`].
    Forbidden,
    /// See [`StoreError::InvalidInput`].
    InvalidInput,
    /// See [`StoreError::CorruptEntry`].
    CorruptEntry,
    /// See [`StoreError::InvariantViolation`].
    InvariantViolation,
    /// See [`StoreError::CursorExpired`].
    CursorExpired,
    /// See [`StoreError::StateLost`].
    StateLost,
    /// See [`StoreError::Unavailable`].
    Unavailable,
}

impl ErrorKind {
    /// A stable, low-cardinality label for metrics and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Conflict => "conflict",
            ErrorKind::DispatchConflict => "dispatch_conflict",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::CorruptEntry => "corrupt_entry",
            ErrorKind::InvariantViolation => "invariant_violation",
            ErrorKind::CursorExpired => "cursor_expired",
            ErrorKind::StateLost => "state_lost",
            ErrorKind::Unavailable => "unavailable",
        }
    }

    /// Whether retrying the same call may succeed. Exhaustive on purpose: a new kind must
    /// decide.
    pub const fn is_retryable(self) -> bool {
        match self {
            ErrorKind::Unavailable => true,
            ErrorKind::Conflict
            | ErrorKind::DispatchConflict
            | ErrorKind::NotFound
            | ErrorKind::Forbidden
            | ErrorKind::InvalidInput
            | ErrorKind::CorruptEntry
            | ErrorKind::InvariantViolation
            | ErrorKind::CursorExpired
            | ErrorKind::StateLost => false,
        }
    }
}

impl StoreError {
    /// The same failure again, for answering it to each of several callers of one call: the
    /// same variant and words; an `Unavailable`'s source is kept as text in its message.
    pub fn same_again(&self) -> StoreError {
        match self {
            StoreError::Conflict(m) => StoreError::Conflict(m.clone()),
            StoreError::DispatchConflict(m) => StoreError::DispatchConflict(m.clone()),
            StoreError::NotFound(m) => StoreError::NotFound(m.clone()),
            StoreError::Forbidden(m) => StoreError::Forbidden(m.clone()),
            StoreError::InvalidInput(m) => StoreError::InvalidInput(m.clone()),
            StoreError::CorruptEntry(m) => StoreError::CorruptEntry(m.clone()),
            StoreError::InvariantViolation(m) => StoreError::InvariantViolation(m.clone()),
            StoreError::CursorExpired { earliest } => StoreError::CursorExpired { earliest: *earliest },
            StoreError::StateLost(m) => StoreError::StateLost(m.clone()),
            StoreError::Unavailable { message, source } => StoreError::Unavailable {
                message: match source {
                    Some(source) => format!("{message}: {source}"),
                    None => message.clone(),
                },
                source: None,
            },
        }
    }

    /// This error's kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::Conflict(_) => ErrorKind::Conflict,
            StoreError::DispatchConflict(_) => ErrorKind::DispatchConflict,
            StoreError::NotFound(_) => ErrorKind::NotFound,
            StoreError::Forbidden(_) => ErrorKind::Forbidden,
            StoreError::InvalidInput(_) => ErrorKind::InvalidInput,
            StoreError::CorruptEntry(_) => ErrorKind::CorruptEntry,
            StoreError::InvariantViolation(_) => ErrorKind::InvariantViolation,
            StoreError::CursorExpired { .. } => ErrorKind::CursorExpired,
            StoreError::StateLost(_) => ErrorKind::StateLost,
            StoreError::Unavailable { .. } => ErrorKind::Unavailable,
        }
    }

    /// A transient backend failure with its cause.
    pub fn unavailable(message: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        StoreError::Unavailable { message: message.into(), source: Some(Box::new(source)) }
    }
}

impl From<crate::codec::CodecError> for StoreError {
    fn from(err: crate::codec::CodecError) -> Self {
        StoreError::CorruptEntry(err.to_string())
    }
}
