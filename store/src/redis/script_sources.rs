//! The sources of the store's scripts, by SHA-1, so that an `EVALSHA` a server answered
//! `NOSCRIPT` (the node restarted, failed over to a replica that never ran the script, or was
//! flushed) can be sent again at once as `EVAL` of the source, to the same node by the same keys;
//! the node caches the script from then on. A `SCRIPT LOAD` (what redis-rs does on `NOSCRIPT`)
//! goes to every node of a cluster and fails while a dead master is still in the slot map.
//! [`super::script`] registers every script the store builds.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

use redis::{Arg, Cmd, ServerErrorKind, Value};

/// Script sources by SHA-1, for [`eval_of`].
static SOURCES: LazyLock<RwLock<HashMap<String, Arc<str>>>> = LazyLock::new(Default::default);

/// Remembers `source` as the script whose SHA-1 is `sha`.
pub(crate) fn remember_script(sha: &str, source: &str) {
    let mut sources = SOURCES.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    sources.entry(sha.to_owned()).or_insert_with(|| Arc::from(source));
}

/// `EVAL` of the source of the script an `EVALSHA` command names, with the same keys and
/// arguments; `None` for any other command or a script the store did not register.
pub(crate) fn eval_of(cmd: &Cmd) -> Option<Cmd> {
    let mut args = cmd.args_iter().map(|a| match a {
        Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let name = args.next()??;
    if !name.eq_ignore_ascii_case(b"EVALSHA") {
        return None;
    }
    let sha = std::str::from_utf8(args.next()??).ok()?;
    let source = SOURCES.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(sha).cloned()?;
    let mut eval = redis::cmd("EVAL");
    eval.arg(source.as_bytes());
    for arg in args {
        eval.arg(arg?);
    }
    Some(eval)
}

/// Whether a command failed because the server does not hold its script.
pub(crate) fn is_noscript(result: &redis::RedisResult<Value>) -> bool {
    matches!(result, Err(e) if e.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_script_is_sent_as_eval_of_its_source() {
        let script = crate::redis::script("return {KEYS[1], ARGV[1]}");
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(script.get_hash()).arg(1).arg("{c}:k").arg("v");
        let eval = eval_of(&evalsha).expect("a registered script");
        let args: Vec<Vec<u8>> = eval
            .args_iter()
            .map(|a| match a {
                Arg::Simple(b) => b.to_vec(),
                _ => unreachable!("no cursor in a script call"),
            })
            .collect();
        let want: Vec<&[u8]> = vec![b"EVAL", b"return {KEYS[1], ARGV[1]}", b"1", b"{c}:k", b"v"];
        assert_eq!(args, want);
        let mut unknown = redis::cmd("EVALSHA");
        unknown.arg("0000000000000000000000000000000000000000").arg(0);
        assert!(eval_of(&unknown).is_none());
        assert!(eval_of(redis::cmd("GET").arg("k")).is_none());
    }
}
