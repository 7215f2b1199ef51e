//! Every stored and wire encoding of qim, in one place.
//!
//! A blob is `[tag][version][body]`: `tag` names what the blob is (so a record can never be
//! decoded as an intent), `version` its format. Bodies are bincode 2.0.1 with fixed-width
//! big-endian integers and a size limit; the bincode types live in this module only, so the
//! format can move without touching the domain.
//!
//! Decoding fails closed with [`CodecError`] (mapped to `StoreError::CorruptEntry`): an unknown
//! tag or version, truncation, trailing bytes, an over-limit length, an unknown enum value, or
//! a value that breaks a domain rule. Encodings are canonical: equal values have equal bytes and
//! every accepted blob re-encodes to itself, so byte equality is what idempotency compares.

mod cql;
mod ledger;
mod mailbox;
mod message;

pub use cql::{i64_to_u64, u64_to_i64};
pub use ledger::{LedgerItem, RetentionLedger, LEDGER_MAX_ITEMS};
pub(crate) use mailbox::validate_group;
pub use mailbox::{decode_event_group, decode_manifest, encode_event_group, encode_manifest};
pub use message::{
    decode_commit, decode_commit_parts, decode_intent, decode_record, decode_request, encode_commit,
    encode_commit_head, encode_intent, encode_record, encode_request, COMMIT_HEAD_SEQ_BYTES, RECORD_SEQ_BYTES,
};

use bincode::config::{BigEndian, Configuration, Fixint, Limit};

/// Largest blob any decoder accepts (a 100k-recipient manifest is about 1.6 MB).
pub const MAX_BLOB_BYTES: usize = 4 * 1024 * 1024;

/// The body format: fixed-width big-endian integers, so every value has exactly one encoding.
const fn encode_config() -> Configuration<BigEndian, Fixint> {
    bincode::config::standard().with_big_endian().with_fixed_int_encoding()
}

/// The same format, refusing to allocate past [`MAX_BLOB_BYTES`] whatever a length prefix
/// claims.
const fn decode_config() -> Configuration<BigEndian, Fixint, Limit<MAX_BLOB_BYTES>> {
    encode_config().with_limit::<MAX_BLOB_BYTES>()
}

/// A blob that can not be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Shorter than its header.
    #[error("{what}: blob of {len} bytes is shorter than its header")]
    Truncated {
        /// What was being decoded.
        what: &'static str,
        /// The blob's length.
        len: usize,
    },
    /// The first byte names another kind of blob.
    #[error("{what}: tag {found:#04x} is not {expected:#04x}")]
    WrongTag {
        /// What was being decoded.
        what: &'static str,
        /// The tag this decoder reads.
        expected: u8,
        /// The tag found.
        found: u8,
    },
    /// A format version this build does not know.
    #[error("{what}: unknown format version {version}")]
    UnknownVersion {
        /// What was being decoded.
        what: &'static str,
        /// The version found.
        version: u8,
    },
    /// The body failed to decode (truncated, over a limit, bad enum value, bad UTF-8).
    #[error("{what}: {reason}")]
    Malformed {
        /// What was being decoded.
        what: &'static str,
        /// The decoder's reason.
        reason: String,
    },
    /// Bytes after the end of the body.
    #[error("{what}: {extra} trailing bytes")]
    Trailing {
        /// What was being decoded.
        what: &'static str,
        /// How many.
        extra: usize,
    },
    /// Decoded, but a domain rule does not hold.
    #[error("{what}: {reason}")]
    Invalid {
        /// What was being decoded.
        what: &'static str,
        /// The broken rule.
        reason: String,
    },
}

fn encode_blob<T: bincode::Encode>(tag: u8, version: u8, body: &T) -> Vec<u8> {
    let mut out = vec![tag, version];
    // Writing plain structs of integers, byte arrays, strings and vectors into a Vec has no
    // failure mode (no limit is set for encoding, and a Vec's writer never errors).
    bincode::encode_into_std_write(body, &mut out, encode_config())
        .unwrap_or_else(|e| unreachable!("bincode encode into a Vec failed: {e}"));
    out
}

fn decode_blob<T: bincode::Decode<()>>(
    what: &'static str,
    tag: u8,
    version: u8,
    bytes: &[u8],
) -> Result<T, CodecError> {
    let [found_tag, found_version, body @ ..] = bytes else {
        return Err(CodecError::Truncated { what, len: bytes.len() });
    };
    if *found_tag != tag {
        return Err(CodecError::WrongTag { what, expected: tag, found: *found_tag });
    }
    if *found_version != version {
        return Err(CodecError::UnknownVersion { what, version: *found_version });
    }
    let (value, used) = bincode::decode_from_slice(body, decode_config())
        .map_err(|e| CodecError::Malformed { what, reason: e.to_string() })?;
    if used != body.len() {
        return Err(CodecError::Trailing { what, extra: body.len() - used });
    }
    Ok(value)
}

/// Blob tags. Never reuse a retired tag.
mod tag {
    pub const REQUEST: u8 = 0x51;
    pub const INTENT: u8 = 0x52;
    pub const COMMIT: u8 = 0x53;
    pub const RECORD: u8 = 0x54;
    pub const COMMIT_HEAD: u8 = 0x55;
    pub const EVENT_GROUP: u8 = 0x61;
    pub const MANIFEST: u8 = 0x62;
}
