//! The Lua scripts of [`super::RedisMessageStore`] and the mapping of their replies.
//!
//! Every script answers a table whose first element is a status: `ok` (or another success
//! status the caller knows), `conflict` → [`StoreError::Conflict`], `corrupt` →
//! [`StoreError::CorruptEntry`], `notfound` → [`StoreError::NotFound`], `unseeded` →
//! [`StoreError::InvariantViolation`] (seq counters must be re-seeded), each with a reason.

use std::sync::LazyLock;

use redis::aio::ConnectionManager;
use redis::{Script, ScriptInvocation, ServerErrorKind, Value};

use crate::error::{StoreError, StoreResult};

pub(super) static RESERVE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/message_reserve.lua")));
pub(super) static COMMIT_CAS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/message_commit_cas.lua")));
pub(super) static COMMIT_DELETE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/message_commit_delete.lua")));
pub(super) static PUT_RECORD: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/message_put_record.lua")));
pub(super) static HISTORY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/message_history.lua")));
pub(super) static ALLOCATE_SEQ: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/message_allocate_seq.lua")));
pub(super) static RAISE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../scripts/message_raise.lua")));
pub(super) static TRIM: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../scripts/message_trim.lua")));
pub(super) static GC_RECORD: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/message_gc_record.lua")));

/// Maps a failed Redis call: a key of ours holding another type is a broken layout
/// (`CorruptEntry`); anything else is the transport or the server (`Unavailable`).
pub(super) fn call_error(what: &str, err: redis::RedisError) -> StoreError {
    if err.code() == Some("WRONGTYPE") {
        return StoreError::CorruptEntry(format!("{what}: {err}"));
    }
    crate::redis::redis_error(what, err)
}

/// How many times a script is sent while the server keeps losing it (a `SCRIPT FLUSH` between
/// the reload and the retried EVALSHA inside one `invoke_async`).
const NOSCRIPT_ATTEMPTS: usize = 3;

/// Runs a script (EVALSHA, reloaded on NOSCRIPT) and returns its raw reply.
pub(super) async fn invoke(
    con: &ConnectionManager,
    what: &str,
    invocation: &ScriptInvocation<'_>,
) -> StoreResult<Value> {
    let mut con = con.clone();
    let mut attempt = 1;
    loop {
        match invocation.invoke_async(&mut con).await {
            Ok(value) => return Ok(value),
            Err(e)
                if attempt < NOSCRIPT_ATTEMPTS && e.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript) =>
            {
                attempt += 1;
            }
            Err(e) => return Err(call_error(what, e)),
        }
    }
}

/// Runs one plain command.
pub(super) async fn query<T: redis::FromRedisValue>(
    con: &ConnectionManager,
    what: &str,
    cmd: &redis::Cmd,
) -> StoreResult<T> {
    let mut con = con.clone();
    cmd.query_async(&mut con).await.map_err(|e| call_error(what, e))
}

/// The bytes of a string reply.
pub(super) fn bytes(value: &Value) -> Option<&[u8]> {
    match value {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

fn unexpected(what: &str, value: &Value) -> StoreError {
    StoreError::InvariantViolation(format!("{what}: unexpected script reply {value:?}"))
}

/// Splits a status reply: failure statuses become errors (with `context` prefixed to the
/// script's reason); any other status is returned with the remaining elements.
pub(super) fn status(what: &str, context: &str, value: Value) -> StoreResult<(String, Vec<Value>)> {
    let Value::Array(items) = value else {
        return Err(unexpected(what, &value));
    };
    let mut items = items.into_iter();
    let first = items.next().unwrap_or(Value::Nil);
    let Some(status) = bytes(&first).and_then(|b| std::str::from_utf8(b).ok()).map(str::to_owned) else {
        return Err(unexpected(what, &first));
    };
    let rest: Vec<Value> = items.collect();
    let reason = || {
        let text = rest.first().and_then(bytes).map(String::from_utf8_lossy).unwrap_or_default();
        format!("{context}: {text}")
    };
    match status.as_str() {
        "conflict" => Err(StoreError::Conflict(reason())),
        "corrupt" => Err(StoreError::CorruptEntry(reason())),
        "notfound" => Err(StoreError::NotFound(reason())),
        "unseeded" => Err(StoreError::InvariantViolation(format!(
            "{}; refusing to issue seqs until they are re-seeded from durable evidence",
            reason()
        ))),
        _ => Ok((status, rest)),
    }
}

/// [`status`] for scripts whose only success is `ok`.
pub(super) fn expect_ok(what: &str, context: &str, value: Value) -> StoreResult<()> {
    match status(what, context, value)? {
        (s, _) if s == "ok" => Ok(()),
        (s, _) => Err(StoreError::InvariantViolation(format!("{what}: unexpected script status {s:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn reply(parts: &[&str]) -> Value {
        Value::Array(parts.iter().map(|p| Value::BulkString(p.as_bytes().to_vec())).collect())
    }

    #[test]
    fn statuses_map_to_error_kinds() {
        assert!(expect_ok("s", "c", reply(&["ok"])).is_ok());
        let cases = [
            ("conflict", ErrorKind::Conflict),
            ("corrupt", ErrorKind::CorruptEntry),
            ("notfound", ErrorKind::NotFound),
        ];
        for (s, kind) in cases {
            let err = expect_ok("s", "ctx", reply(&[s, "why"])).unwrap_err();
            assert_eq!(err.kind(), kind);
            assert!(err.to_string().contains("ctx: why"), "{err}");
        }
        let (s, rest) = status("s", "c", reply(&["exists", "blob"])).unwrap();
        assert_eq!((s.as_str(), rest.len()), ("exists", 1));
        assert_eq!(expect_ok("s", "c", reply(&["exists"])).unwrap_err().kind(), ErrorKind::InvariantViolation);
        assert_eq!(expect_ok("s", "c", Value::Int(1)).unwrap_err().kind(), ErrorKind::InvariantViolation);
        assert_eq!(expect_ok("s", "c", Value::Array(vec![])).unwrap_err().kind(), ErrorKind::InvariantViolation);
    }
}
