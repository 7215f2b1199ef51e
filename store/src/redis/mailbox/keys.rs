//! Key names of the mailbox store (see the layout in the parent module's doc).

use crate::ids::{MessageId, TenantId, UserId};
use crate::mailbox::{MailboxSeq, ShardId};

/// The keys of one user's mailbox; all share the hash tag `{u:<tenant hex><user hex>}`.
#[derive(Clone, Debug)]
pub(super) struct UserKeys {
    pub(super) meta: String,
    pub(super) groups: String,
    pub(super) seqs: String,
    pub(super) exp: String,
}

impl UserKeys {
    pub(super) fn new(ns: &str, tenant: &TenantId, user: &UserId) -> Self {
        let base = format!("{ns}:{{u:{}{}}}", tenant.to_hex(), user.to_hex());
        Self {
            meta: format!("{base}:meta"),
            groups: format!("{base}:groups"),
            seqs: format!("{base}:seqs"),
            exp: format!("{base}:exp"),
        }
    }
}

/// The keys of one shard's dispatch bookkeeping; all share the hash tag `{d:<shard>}`.
#[derive(Clone, Debug)]
pub(super) struct ShardKeys {
    /// Prefix of every dispatch's keys: `<prefix><message id hex>` (HASH), `...:done`, `...:obs`.
    pub(super) dispatch_prefix: String,
    pub(super) sources: String,
    pub(super) src: String,
    pub(super) seen: String,
    pub(super) watermarks: String,
    /// `<message id hex>` → max observed offset, `<message id hex>:<lane>` → chunks of the lane
    /// not yet complete, `<message id hex>:lanes` → the lanes with work (comma-separated): what
    /// watermarks and GC read of each dispatch, in one declared key.
    pub(super) work: String,
    /// The shard's incarnation marker (`mailbox_incarnation.lua`).
    pub(super) incarnation: String,
}

impl ShardKeys {
    pub(super) fn new(ns: &str, shard: ShardId) -> Self {
        let base = format!("{ns}:{{d:{}}}", shard.0);
        Self {
            dispatch_prefix: format!("{base}:disp:"),
            sources: format!("{base}:sources"),
            src: format!("{base}:src"),
            seen: format!("{base}:seen"),
            watermarks: format!("{base}:wm"),
            work: format!("{base}:work"),
            incarnation: format!("{base}:incarnation"),
        }
    }

    /// The dispatch row, its completed-chunk set and its observation set.
    pub(super) fn dispatch(&self, message: &MessageId) -> (String, String, String) {
        let row = format!("{}{}", self.dispatch_prefix, message.to_hex());
        let done = format!("{row}:done");
        let obs = format!("{row}:obs");
        (row, done, obs)
    }

    /// The work-hash field counting a dispatch's lane chunks not yet complete.
    pub(super) fn work_field(message: &MessageId, lane: u8) -> String {
        format!("{}:{lane}", message.to_hex())
    }
}

/// A seq as the 8 big-endian bytes that sort like the seq (ZSET lex order is byte order).
pub(super) fn seq8(seq: MailboxSeq) -> [u8; 8] {
    seq.as_u64().to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailbox::ShardEpoch;

    #[test]
    fn user_keys_share_one_hash_tag() {
        let k = UserKeys::new("qim", &TenantId([1; 16]), &UserId([2; 16]));
        let tag = format!("{{u:{}{}}}", TenantId([1; 16]).to_hex(), UserId([2; 16]).to_hex());
        for key in [&k.meta, &k.groups, &k.seqs, &k.exp] {
            assert!(key.starts_with("qim:"), "{key}");
            assert_eq!(key.find('{'), Some(4), "{key}");
            assert!(key.contains(&tag), "{key}");
        }
        let s = ShardKeys::new("qim", ShardId(7));
        let (row, done, obs) = s.dispatch(&MessageId([3; 16]));
        for key in [&row, &done, &obs, &s.sources, &s.src, &s.seen, &s.watermarks, &s.work] {
            assert!(key.starts_with("qim:{d:7}:"), "{key}");
        }
    }

    #[test]
    fn seq8_sorts_like_the_seq() {
        let a = MailboxSeq::new(ShardEpoch(1), 255).unwrap();
        let b = MailboxSeq::new(ShardEpoch(1), 256).unwrap();
        let c = MailboxSeq::new(ShardEpoch(2), 0).unwrap();
        assert!(seq8(a) < seq8(b) && seq8(b) < seq8(c));
    }
}
