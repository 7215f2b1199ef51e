//! Decoding script replies.

use redis::Value;

use crate::error::{StoreError, StoreResult};

/// A bulk reply's bytes (`None` for nil and other kinds).
pub(super) fn bulk(v: Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.into_bytes()),
        Value::Int(n) => Some(n.to_string().into_bytes()),
        _ => None,
    }
}

/// A script's `{status, ...}` reply split into the status and the rest.
pub(super) fn status(reply: Value) -> StoreResult<(String, Vec<Value>)> {
    let Value::Array(mut items) = reply else {
        return Err(StoreError::CorruptEntry(format!("mailbox script answered {reply:?}")));
    };
    if items.is_empty() {
        return Err(StoreError::CorruptEntry("mailbox script answered an empty list".into()));
    }
    let code = bulk(items.remove(0))
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| StoreError::CorruptEntry("mailbox script answered no status".into()))?;
    Ok((code, items))
}

/// A decimal `u64` in a reply.
pub(super) fn number(v: Option<Value>, what: &str) -> StoreResult<u64> {
    v.and_then(bulk)
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| StoreError::CorruptEntry(format!("dispatch bookkeeping holds a bad {what}")))
}

/// A reply as text, for error messages (empty when absent).
pub(super) fn text(v: Option<Value>) -> String {
    v.and_then(bulk).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_numbers_decode() {
        let reply = Value::Array(vec![Value::BulkString(b"ok".to_vec()), Value::Int(7)]);
        let (code, rest) = status(reply).unwrap();
        assert_eq!(code, "ok");
        assert_eq!(number(rest.into_iter().next(), "n").unwrap(), 7);
        assert!(status(Value::Nil).is_err());
        assert!(status(Value::Array(vec![])).is_err());
        assert!(number(Some(Value::BulkString(b"-1".to_vec())), "n").is_err());
        assert_eq!(text(None), "");
    }
}
