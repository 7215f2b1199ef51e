//! Batches joined into one ([`Batch::join`]), for a round trip shared by sends in flight
//! ([`super::group`]): commands that do the same thing to one slot become one command.

use redis::{Arg, Cmd, Value};

use super::scripts::{repeatable, Batch, Reply};
use crate::redis::connection::{first_key, hash_tag};

/// Where one command's reply is in a joint batch's replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Place {
    /// The joint command.
    pub at: usize,
    /// For a command merged into a call of a script's several-at-once form, its element of that
    /// call's array reply.
    pub item: Option<usize>,
}

impl Place {
    /// This command's reply among `replies` (the joint batch's).
    pub(super) fn reply(self, replies: &[Reply]) -> Reply {
        match (self.item, &replies[self.at]) {
            (Some(i), Ok(Value::Array(items))) if i < items.len() => Ok(items[i].clone()),
            (_, reply) => reply.clone(),
        }
    }
}

/// What commands merge by: the same kind and target.
#[derive(PartialEq, Eq)]
enum Kind {
    /// `ZADD key score member` (no options) or `ZREM key member…` of one key: the arguments after
    /// the key appended, the one reply answered alike to each (callers check only that it
    /// succeeded).
    SetWrite { name: Vec<u8>, key: Vec<u8> },
    /// Calls of a repeatable script ([`repeatable`]) in one slot: their keys and arguments in its
    /// several-at-once form, each answered its element of the array reply.
    Script { hash: String, tag: Vec<u8> },
}

/// A merge under way.
struct Merge {
    kind: Kind,
    /// Its command in the joint batch.
    at: usize,
    /// A script merge's keys and arguments so far, and how many calls it holds.
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
    calls: usize,
}

impl Merge {
    /// Adds the script call `args` (`EVALSHA sha numkeys key… arg…`); the element of the reply it
    /// will get.
    fn absorb(&mut self, args: &[Vec<u8>]) -> usize {
        let numkeys = std::str::from_utf8(&args[2]).ok().and_then(|n| n.parse().ok()).unwrap_or(0usize);
        let numkeys = numkeys.min(args.len() - 3);
        self.keys.extend(args[3..3 + numkeys].iter().cloned());
        self.args.extend(args[3 + numkeys..].iter().cloned());
        self.calls += 1;
        self.calls - 1
    }
}

impl Batch {
    /// The commands of `batches` as one batch, and for each batch where its commands' replies
    /// will be. Writes that only add or remove set members are merged into one command per key;
    /// calls of a repeatable script ([`repeatable`]) on one slot into one call. The joint batch
    /// keeps every command in its slot, so it is legal wherever its parts were; the commands of
    /// one batch are independent (see [`Batch`]), so where a merged command lands among them
    /// changes nothing.
    pub(super) fn join(batches: Vec<Batch>) -> (Batch, Vec<Vec<Place>>) {
        let mut joint = Batch::default();
        let mut merges: Vec<Merge> = Vec::new();
        let mut places = Vec::with_capacity(batches.len());
        for batch in batches {
            let mut place = Vec::with_capacity(batch.cmds.len());
            for (cmd, script) in batch.cmds.into_iter().zip(batch.scripts) {
                let args = words(&cmd);
                let Some(kind) = kind(&args, script.is_some()) else {
                    place.push(Place { at: joint.cmds.len(), item: None });
                    joint.cmds.push(cmd);
                    joint.scripts.push(script);
                    continue;
                };
                let scripted = matches!(kind, Kind::Script { .. });
                let merge = match merges.iter_mut().find(|m| m.kind == kind) {
                    Some(merge) => {
                        if !scripted {
                            joint.cmds[merge.at].arg(&args[2..]);
                        }
                        merge
                    }
                    None => {
                        let at = joint.cmds.len();
                        joint.cmds.push(cmd);
                        joint.scripts.push(script);
                        merges.push(Merge { kind, at, keys: Vec::new(), args: Vec::new(), calls: 0 });
                        merges.last_mut().expect("just pushed")
                    }
                };
                let item = scripted.then(|| merge.absorb(&args));
                place.push(Place { at: merge.at, item });
            }
            places.push(place);
        }
        for merge in merges.into_iter().filter(|m| matches!(m.kind, Kind::Script { .. })) {
            if merge.calls == 1 {
                // One call stays the plain call, answered as such.
                places.iter_mut().flatten().filter(|p| p.at == merge.at).for_each(|p| p.item = None);
                continue;
            }
            let Kind::Script { hash, .. } = &merge.kind else { continue };
            let Some(&(_, many, per_keys, per_args)) = repeatable().iter().find(|(s, ..)| s.get_hash() == hash) else {
                continue;
            };
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(many.get_hash())
                .arg(merge.keys.len())
                .arg(&merge.keys)
                .arg(per_keys)
                .arg(per_args)
                .arg(&merge.args);
            joint.cmds[merge.at] = cmd;
            joint.scripts[merge.at] = Some(many);
        }
        (joint, places)
    }
}

/// The arguments of `cmd` (the command name first).
fn words(cmd: &Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .map(|a| match a {
            Arg::Simple(bytes) => bytes.to_vec(),
            _ => Vec::new(),
        })
        .collect()
}

/// What `args` (a whole command; `scripted`: an `EVALSHA` of a known script) merges by, if it
/// merges at all.
fn kind(args: &[Vec<u8>], scripted: bool) -> Option<Kind> {
    let (name, key, rest) = match args {
        [name, key, rest @ ..] => (name, key, rest),
        _ => return None,
    };
    let adds_one = name.eq_ignore_ascii_case(b"ZADD")
        && rest.len() == 2
        && std::str::from_utf8(&rest[0]).ok().and_then(|s| s.parse::<f64>().ok()).is_some();
    let removes = name.eq_ignore_ascii_case(b"ZREM") && !rest.is_empty();
    if adds_one || removes {
        return Some(Kind::SetWrite { name: name.to_ascii_uppercase(), key: key.clone() });
    }
    if !scripted || !name.eq_ignore_ascii_case(b"EVALSHA") {
        return None;
    }
    let hash = String::from_utf8_lossy(key).into_owned();
    let &(_, _, per_keys, per_args) = repeatable().iter().find(|(single, ..)| single.get_hash() == hash)?;
    // Only calls of the shape the several-at-once form splits by are merged.
    let numkeys: usize = rest.first().and_then(|n| std::str::from_utf8(n).ok()).and_then(|n| n.parse().ok())?;
    if numkeys != per_keys || rest.len() != 1 + per_keys + per_args {
        return None;
    }
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(args[1..].to_vec());
    let tag = hash_tag(&first_key(&cmd)?).to_vec();
    Some(Kind::Script { hash, tag })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::message::scripts::{CLAIM, CLAIM_MANY, COMMIT_CAS, COMMIT_CAS_MANY};

    fn text(cmd: &Cmd) -> Vec<String> {
        words(cmd).iter().map(|w| String::from_utf8_lossy(w).into_owned()).collect()
    }

    #[test]
    fn set_writes_of_one_key_become_one_command_and_everything_else_stays() {
        let mut a = Batch::default();
        a.command("ZADD").arg("idx:1").arg(10).arg("m1");
        a.command("PEXPIRE").arg("claim:a").arg(5);
        a.command("ZREM").arg("rec:1").arg("x").arg("y");
        let mut b = Batch::default();
        b.command("ZADD").arg("idx:2").arg(20).arg("m2");
        b.command("zadd").arg("idx:1").arg(30).arg("m3");
        b.command("ZADD").arg("idx:1").arg("GT").arg(40).arg("m4");
        b.command("ZREM").arg("rec:1").arg("z");
        let (joint, places) = Batch::join(vec![a, b]);
        let all: Vec<_> = joint.cmds.iter().map(text).collect();
        assert_eq!(
            all,
            vec![
                vec!["ZADD", "idx:1", "10", "m1", "30", "m3"],
                vec!["PEXPIRE", "claim:a", "5"],
                vec!["ZREM", "rec:1", "x", "y", "z"],
                vec!["ZADD", "idx:2", "20", "m2"],
                vec!["ZADD", "idx:1", "GT", "40", "m4"],
            ]
        );
        let at = |v: &[usize]| v.iter().map(|&at| Place { at, item: None }).collect::<Vec<_>>();
        assert_eq!(places, vec![at(&[0, 1, 2]), at(&[3, 0, 4, 2])], "each batch finds its replies");
    }

    #[test]
    fn calls_of_another_shape_than_the_many_form_splits_by_are_not_merged() {
        let batches = (0..2)
            .map(|i| {
                let mut batch = Batch::default();
                batch.script(&COMMIT_CAS, &["{c:1}:commit:a"]).arg(i).arg("next").arg(0).arg("extra");
                batch
            })
            .collect();
        let (joint, places) = Batch::join(batches);
        assert_eq!(joint.cmds.len(), 2, "each call stays its own");
        assert!(places.iter().flatten().all(|p| p.item.is_none()));
    }

    #[test]
    fn calls_of_a_repeatable_script_in_one_slot_become_one_call_of_its_many_form() {
        let mut batches = Vec::new();
        for (key, read) in [("{c:1}:commit:a", "r1"), ("{c:2}:commit:b", "r2"), ("{c:1}:commit:c", "r3")] {
            let mut batch = Batch::default();
            batch.script(&COMMIT_CAS, &[key]).arg(read).arg("next").arg(0);
            batch.script(&CLAIM, &[&format!("{{k:9}}:claim:{read}"), "{k:9}:commit"]).arg("v").arg(1);
            batches.push(batch);
        }
        let (joint, places) = Batch::join(batches);
        let all: Vec<_> = joint.cmds.iter().map(text).collect();
        let many_cas = COMMIT_CAS_MANY.get_hash().to_owned();
        let many_claim = CLAIM_MANY.get_hash().to_owned();
        let keys = |k: &[&str]| k.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut expected = vec![vec!["EVALSHA".to_owned(), many_cas, "2".into()]];
        expected[0].extend(keys(&["{c:1}:commit:a", "{c:1}:commit:c", "1", "3", "r1", "next", "0", "r3", "next", "0"]));
        let mut claims = vec!["EVALSHA".to_owned(), many_claim, "6".into()];
        claims.extend(keys(&["{k:9}:claim:r1", "{k:9}:commit", "{k:9}:claim:r2", "{k:9}:commit"]));
        claims.extend(keys(&["{k:9}:claim:r3", "{k:9}:commit", "2", "2", "v", "1", "v", "1", "v", "1"]));
        expected.push(claims);
        let mut alone = vec!["EVALSHA".to_owned(), COMMIT_CAS.get_hash().to_owned(), "1".into()];
        alone.extend(keys(&["{c:2}:commit:b", "r2", "next", "0"]));
        expected.push(alone);
        assert_eq!(all, expected);
        let p = |at, item| Place { at, item };
        assert_eq!(
            places,
            vec![
                vec![p(0, Some(0)), p(1, Some(0))],
                vec![p(2, None), p(1, Some(1))],
                vec![p(0, Some(1)), p(1, Some(2))]
            ]
        );
        let replies: Vec<Reply> = vec![
            Ok(Value::Array(vec![Value::Int(10), Value::Int(11)])),
            Ok(Value::Array(vec![Value::Int(20), Value::Int(21), Value::Int(22)])),
            Ok(Value::Int(30)),
        ];
        let got: Vec<Vec<Value>> =
            places.iter().map(|b| b.iter().map(|p| p.reply(&replies).unwrap()).collect()).collect();
        assert_eq!(
            got,
            vec![
                vec![Value::Int(10), Value::Int(20)],
                vec![Value::Int(30), Value::Int(21)],
                vec![Value::Int(11), Value::Int(22)]
            ]
        );
    }
}
