//! Newtype identifiers, sequence numbers and time.
//!
//! Tenant, user, conversation, message and event ids are opaque 16-byte values kept as bytes
//! (no UUID type): what the client sent is what is stored.

use std::fmt;

macro_rules! id16 {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub [u8; 16]);

        impl $name {
            /// The id's 16 bytes.
            pub const fn as_bytes(&self) -> &[u8; 16] {
                &self.0
            }

            /// Parses exactly 16 bytes; any other length is an error naming the id.
            pub fn from_slice(bytes: &[u8]) -> Result<Self, IdError> {
                <[u8; 16]>::try_from(bytes)
                    .map(Self)
                    .map_err(|_| IdError { what: stringify!($name), len: bytes.len() })
            }

            /// Parses exactly 32 hexadecimal digits (either case; nothing else, no sign or
            /// prefix).
            pub fn from_hex(text: &str) -> Result<Self, IdError> {
                let mut out = [0u8; 16];
                hex::decode_to_slice(text, &mut out)
                    .map_err(|_| IdError { what: stringify!($name), len: text.len() / 2 })?;
                Ok(Self(out))
            }

            /// 32 lowercase hexadecimal digits.
            pub fn to_hex(&self) -> String {
                hex::encode(self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.to_hex())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.to_hex())
            }
        }
    };
}

id16!(
    /// A tenant: the isolation boundary; nothing of one tenant is reachable through another's.
    TenantId
);
id16!(
    /// A user within a tenant.
    UserId
);
id16!(
    /// A conversation (1:1 or group) within a tenant.
    ConversationId
);
id16!(
    /// A message, assigned once at reservation and never reused.
    MessageId
);
id16!(
    /// A mailbox event (one member of an event group).
    EventId
);

/// An id of the wrong length or spelling.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} must be 16 bytes (32 hex digits), got {len} bytes")]
pub struct IdError {
    /// Which id type was being parsed.
    pub what: &'static str,
    /// The length that was offered, in bytes.
    pub len: usize,
}

/// The client's idempotency key for one send: 1 to [`ClientMessageId::MAX_LEN`] printable ASCII
/// characters.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientMessageId(String);

impl ClientMessageId {
    /// Longest accepted client message id, in bytes.
    pub const MAX_LEN: usize = 64;

    /// Accepts 1..=64 printable ASCII characters (`!`..=`~`).
    pub fn new(value: impl Into<String>) -> Result<Self, ClientMessageIdError> {
        let value = value.into();
        if value.is_empty() || value.len() > Self::MAX_LEN {
            return Err(ClientMessageIdError::Length(value.len()));
        }
        if !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ClientMessageIdError::Characters);
        }
        Ok(Self(value))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ClientMessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClientMessageId({:?})", self.0)
    }
}

impl fmt::Display for ClientMessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a client message id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientMessageIdError {
    /// Empty or longer than [`ClientMessageId::MAX_LEN`].
    #[error("client message id must be 1 to 64 bytes, got {0}")]
    Length(usize),
    /// Contains something other than printable ASCII.
    #[error("client message id must be printable ASCII without spaces")]
    Characters,
}

/// Position of a message in its conversation. Starts at 1 (0, the default: none yet); never
/// reissued (a number consumed by contention or a crash stays a hole).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct ConversationSeq(pub u64);

impl fmt::Display for ConversationSeq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Milliseconds since the Unix epoch (UTC).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct UnixMillis(pub i64);

impl UnixMillis {
    /// The current wall-clock time.
    pub fn now() -> Self {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Self(i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
    }

    /// `self + millis`, saturating.
    pub const fn plus_millis(self, millis: i64) -> Self {
        Self(self.0.saturating_add(millis))
    }

    /// The UTC day number (days since 1970-01-01), rounding down.
    pub const fn day(self) -> i64 {
        self.0.div_euclid(MILLIS_PER_DAY)
    }
}

/// Milliseconds in one day.
pub const MILLIS_PER_DAY: i64 = 86_400_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_exactly_32_hex_digits() {
        let id = TenantId::from_hex("00112233445566778899AABBCCDDEEFF").expect("upper case is hex");
        assert_eq!(id.to_hex(), "00112233445566778899aabbccddeeff");
        for bad in [
            "+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1",
            "-f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f",
            "0x112233445566778899aabbccddeeff",
            " 0112233445566778899aabbccddeeff",
            "0011",
            "",
            "00112233445566778899aabbccddeeffé",
        ] {
            let err = TenantId::from_hex(bad).expect_err(bad);
            assert_eq!(err.what, "TenantId", "{bad:?}");
        }
    }
}
