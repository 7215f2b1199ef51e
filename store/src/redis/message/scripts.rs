//! The Lua scripts of [`super::RedisMessageStore`] and the mapping of their replies.
//!
//! Every script answers a table whose first element is a status: `ok` (or another success
//! status the caller knows), `conflict` → [`StoreError::Conflict`], `corrupt` →
//! [`StoreError::CorruptEntry`], `notfound` → [`StoreError::NotFound`], each with a reason.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use crate::redis::RedisConnection;
use redis::{Script, ScriptInvocation, ServerErrorKind, Value};

use crate::error::{StoreError, StoreResult};
use crate::redis::connection::pipeline_by_slot;
use crate::redis::script_sources::eval_of;
use crate::redis::serving_script;

/// A script that reads seq leases: `lease_prelude.lua` (their format and parsing) in front of
/// it, behind the serving prelude ([`serving_script`]).
macro_rules! leased {
    ($file:literal) => {
        serving_script(concat!(
            include_str!("../scripts/lease_prelude.lua"),
            include_str!(concat!("../scripts/", $file))
        ))
    };
}

pub(super) static RESERVE: LazyLock<Script> =
    LazyLock::new(|| crate::redis::script(include_str!("../scripts/message_reserve.lua")));
pub(super) static COMMIT_CAS: LazyLock<Script> =
    LazyLock::new(|| crate::redis::script(include_str!("../scripts/message_commit_cas.lua")));
/// [`COMMIT_CAS`] of several commits of one slot in one call ([`repeated`]).
pub(super) static COMMIT_CAS_MANY: LazyLock<Script> =
    LazyLock::new(|| crate::redis::script(&repeated(include_str!("../scripts/message_commit_cas.lua"))));
pub(super) static COMMIT_DELETE: LazyLock<Script> =
    LazyLock::new(|| crate::redis::script(include_str!("../scripts/message_commit_delete.lua")));
pub(super) static CLAIM: LazyLock<Script> =
    LazyLock::new(|| crate::redis::script(include_str!("../scripts/message_claim.lua")));
/// [`CLAIM`] of several keys of one slot in one call ([`repeated`]).
pub(super) static CLAIM_MANY: LazyLock<Script> =
    LazyLock::new(|| crate::redis::script(&repeated(include_str!("../scripts/message_claim.lua"))));

/// The scripts a shared round trip may call once for several commands of one slot, each with
/// its several-at-once form, and how many keys and arguments one command of it has.
pub(super) fn repeatable() -> [(&'static Script, &'static Script, usize, usize); 2] {
    [(&COMMIT_CAS, &COMMIT_CAS_MANY, 1, 3), (&CLAIM, &CLAIM_MANY, 2, 2)]
}

/// A script that runs `single` (a script body: it reads `KEYS` and `ARGV`, and returns) once
/// per group of keys and arguments, answering the array of its replies. `ARGV[1]` and `ARGV[2]`
/// are the keys and the arguments per group; the groups follow, in order. A runtime error in
/// one group fails the call with the earlier groups' writes made, as one script's error does.
fn repeated(single: &str) -> String {
    format!(
        "local function single(KEYS, ARGV)\n{single}\nend\n\
         local per_keys, per_args = tonumber(ARGV[1]), tonumber(ARGV[2])\n\
         local replies = {{}}\n\
         for i = 0, #KEYS / per_keys - 1 do\n\
           local keys, args = {{}}, {{}}\n\
           for j = 1, per_keys do keys[j] = KEYS[i * per_keys + j] end\n\
           for j = 1, per_args do args[j] = ARGV[2 + i * per_args + j] end\n\
           replies[i + 1] = single(keys, args)\n\
         end\n\
         return replies\n"
    )
}
pub(super) static CLAIM_RELEASE: LazyLock<Script> =
    LazyLock::new(|| crate::redis::script(include_str!("../scripts/message_claim_release.lua")));
pub(super) static APPEND: LazyLock<Script> = LazyLock::new(|| leased!("message_append.lua"));
pub(super) static COMMIT_RECORD: LazyLock<Script> =
    LazyLock::new(|| crate::redis::script(include_str!("../scripts/message_commit_record.lua")));
pub(super) static PUT_RECORD: LazyLock<Script> = LazyLock::new(|| leased!("message_put_record.lua"));
pub(super) static RESTORE_RECORD: LazyLock<Script> =
    LazyLock::new(|| crate::redis::script(include_str!("../scripts/message_restore_record.lua")));
pub(super) static RESTORE_COMMIT: LazyLock<Script> =
    LazyLock::new(|| crate::redis::script(include_str!("../scripts/message_restore_commit.lua")));
pub(super) static HISTORY: LazyLock<Script> =
    LazyLock::new(|| crate::redis::script(include_str!("../scripts/message_history.lua")));
pub(super) static ALLOCATE_SEQ: LazyLock<Script> = LazyLock::new(|| leased!("message_allocate_seq.lua"));
pub(super) static RAISE: LazyLock<Script> =
    LazyLock::new(|| crate::redis::script(include_str!("../scripts/message_raise.lua")));
pub(super) static TRIM: LazyLock<Script> =
    LazyLock::new(|| crate::redis::script(include_str!("../scripts/message_trim.lua")));
pub(super) static GC_RECORD: LazyLock<Script> =
    LazyLock::new(|| crate::redis::script(include_str!("../scripts/message_gc_record.lua")));
pub(super) static LEASE_INSTALL: LazyLock<Script> = LazyLock::new(|| leased!("message_lease_install.lua"));
pub(super) static LEASE_CHECK: LazyLock<Script> = LazyLock::new(|| leased!("message_lease_check.lua"));

/// The store's connection (multiplexed, self-reconnecting; clones share it) and a count of the
/// round trips made through it, so tests and the benchmark can hold the step costs to account.
#[derive(Clone)]
pub(super) struct Link {
    manager: RedisConnection,
    trips: Arc<AtomicU64>,
}

impl Link {
    pub(super) fn new(manager: RedisConnection) -> Self {
        Self { manager, trips: Arc::default() }
    }

    /// A connection handle for one round trip (counted).
    fn trip(&self) -> RedisConnection {
        self.trips.fetch_add(1, Ordering::Relaxed);
        self.manager.clone()
    }

    /// A connection handle for a caller that counts its own trips ([`run`]).
    pub(super) fn manager(&self) -> RedisConnection {
        self.manager.clone()
    }

    /// Round trips made so far.
    pub(super) fn trips(&self) -> u64 {
        self.trips.load(Ordering::Relaxed)
    }
}

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
pub(super) async fn invoke(con: &Link, what: &str, invocation: &ScriptInvocation<'_>) -> StoreResult<Value> {
    let mut attempt = 1;
    loop {
        // EVALSHA, and on NOSCRIPT a load and EVALSHA again: counted as one trip (rare).
        match invocation.invoke_async(&mut con.trip()).await {
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
pub(super) async fn query<T: redis::FromRedisValue>(con: &Link, what: &str, cmd: &redis::Cmd) -> StoreResult<T> {
    cmd.query_async(&mut con.trip()).await.map_err(|e| call_error(what, e))
}

/// Commands sent together in one round trip: a pipeline, not a transaction. Each command
/// succeeds or fails on its own, and on Redis Cluster the commands of different slots go to
/// different nodes as pipelines of their own (those of one slot in one pipeline, in order), so
/// any subset of them may take effect (a crash mid-send, one node failing).
/// Callers batch only commands that do not depend on each other's results, and whose every
/// partial outcome is legal state (each call site says why).
#[derive(Default)]
pub(super) struct Batch {
    pub(super) cmds: Vec<redis::Cmd>,
    /// The script behind each command, if it is an `EVALSHA` (to load it on NOSCRIPT).
    pub(super) scripts: Vec<Option<&'static Script>>,
}

impl Batch {
    /// Adds the plain command `name`; the caller appends its arguments to the returned command.
    pub(super) fn command(&mut self, name: &str) -> &mut redis::Cmd {
        self.cmds.push(redis::cmd(name));
        self.scripts.push(None);
        self.cmds.last_mut().expect("just pushed")
    }

    /// Adds `EVALSHA` of `script` over `keys`; the caller appends its `ARGV` to the returned
    /// command.
    pub(super) fn script(&mut self, script: &'static Script, keys: &[&str]) -> &mut redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash()).arg(keys.len()).arg(keys);
        self.cmds.push(cmd);
        self.scripts.push(Some(script));
        self.cmds.last_mut().expect("just pushed")
    }

    /// Whether the batch holds no command.
    pub(super) fn is_empty(&self) -> bool {
        self.cmds.is_empty()
    }
}

/// One command's reply in a [`Batch`]: its value, or the error the server answered it with.
pub(super) type Reply = Result<Value, redis::RedisError>;

/// Sends `batch` (one pipeline on a single node; one per slot, at once, on a cluster) and
/// returns every command's reply, in order. Commands whose script the server lost (NOSCRIPT: a
/// `SCRIPT FLUSH`, a restart, a failover) are sent again as `EVAL` of the script's source; the
/// others are not repeated. `Err` only when a round trip itself failed (then any subset of the
/// commands may have taken effect).
pub(super) async fn run(link: &Link, what: &str, batch: Batch) -> StoreResult<Vec<Reply>> {
    let con = link.manager();
    let Batch { cmds, scripts } = batch;
    let mut replies: Vec<Option<Reply>> = (0..cmds.len()).map(|_| None).collect();
    let mut pending: Vec<usize> = (0..cmds.len()).collect();
    let mut sending = cmds;
    let mut attempt = 1;
    while !pending.is_empty() {
        let (values, trips) = pipeline_by_slot(&con, &sending).await.map_err(|e| call_error(what, e))?;
        link.trips.fetch_add(trips as u64, Ordering::Relaxed);
        let mut lost = Vec::new();
        let mut again = Vec::new();
        for ((&i, value), sent) in pending.iter().zip(values).zip(&sending) {
            match value {
                Value::ServerError(e)
                    if attempt < NOSCRIPT_ATTEMPTS
                        && scripts[i].is_some()
                        && e.kind() == Some(ServerErrorKind::NoScript) =>
                {
                    match eval_of(sent) {
                        Some(eval) => {
                            lost.push(i);
                            again.push(eval);
                        }
                        None => replies[i] = Some(Err(e.into())),
                    }
                }
                Value::ServerError(e) => replies[i] = Some(Err(e.into())),
                other => replies[i] = Some(Ok(other)),
            }
        }
        pending = lost;
        sending = again;
        attempt += 1;
    }
    Ok(replies.into_iter().map(|r| r.expect("every command was answered")).collect())
}

/// A batch reply as a store result (a server error mapped like [`query`]'s).
pub(super) fn answered(what: &str, reply: Reply) -> StoreResult<Value> {
    reply.map_err(|e| call_error(what, e))
}

/// A batch reply converted to `T` (a server error mapped like [`query`]'s).
pub(super) fn from_reply<T: redis::FromRedisValue>(what: &str, reply: Reply) -> StoreResult<T> {
    T::from_redis_value(answered(what, reply)?)
        .map_err(|e| StoreError::InvariantViolation(format!("{what}: unexpected reply: {e}")))
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
/// `context` is formatted only for an error.
pub(super) fn status(what: &str, context: &dyn std::fmt::Display, value: Value) -> StoreResult<(String, Vec<Value>)> {
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
        _ => Ok((status, rest)),
    }
}

/// [`status`] for scripts whose only success is `ok`.
pub(super) fn expect_ok(what: &str, context: &dyn std::fmt::Display, value: Value) -> StoreResult<()> {
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
        assert!(expect_ok("s", &"c", reply(&["ok"])).is_ok());
        let cases = [
            ("conflict", ErrorKind::Conflict),
            ("corrupt", ErrorKind::CorruptEntry),
            ("notfound", ErrorKind::NotFound),
        ];
        for (s, kind) in cases {
            let err = expect_ok("s", &"ctx", reply(&[s, "why"])).unwrap_err();
            assert_eq!(err.kind(), kind);
            assert!(err.to_string().contains("ctx: why"), "{err}");
        }
        let (s, rest) = status("s", &"c", reply(&["exists", "blob"])).unwrap();
        assert_eq!((s.as_str(), rest.len()), ("exists", 1));
        assert_eq!(expect_ok("s", &"c", reply(&["exists"])).unwrap_err().kind(), ErrorKind::InvariantViolation);
        assert_eq!(expect_ok("s", &"c", Value::Int(1)).unwrap_err().kind(), ErrorKind::InvariantViolation);
        assert_eq!(expect_ok("s", &"c", Value::Array(vec![])).unwrap_err().kind(), ErrorKind::InvariantViolation);
    }
}
