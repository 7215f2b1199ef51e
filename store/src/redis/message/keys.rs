//! The key layout of [`super::RedisMessageStore`] and the members of its global indexes.
//!
//! See the module documentation of [`super`] for the whole layout.

use super::Loc;
use crate::error::{StoreError, StoreResult};
use crate::ids::{ClientMessageId, ConversationId, ConversationSeq, MessageId, TenantId, UnixMillis, UserId};
use crate::message::CommitKey;
use crate::redis::index_shard::IndexShard;
use crate::redis::membership_cache::{MEMBERS_CACHED_SUFFIX, MEMBERS_SUFFIX};

/// Builds every key of one namespace.
#[derive(Clone, Debug)]
pub(super) struct Keys {
    ns: String,
}

impl Keys {
    pub(super) fn new(namespace: &str) -> Self {
        Self { ns: namespace.to_owned() }
    }

    /// `<ns>:{c:<tenant hex><conversation hex>}:<suffix>`: a key of a conversation (its hash
    /// tag is the conversation's).
    fn conversation(&self, tenant: TenantId, conversation: ConversationId, suffix: &str) -> String {
        let mut key = String::with_capacity(self.ns.len() + 70 + suffix.len());
        key.push_str(&self.ns);
        key.push_str(":{c:");
        push_hex(&mut key, &tenant.0);
        push_hex(&mut key, &conversation.0);
        key.push_str("}:");
        key.push_str(suffix);
        key
    }

    /// The conversation's member cache: its member set and its marker
    /// ([`crate::redis::membership_cache`]), which a send's allocation consults.
    pub(super) fn member_cache(&self, tenant: TenantId, conversation: ConversationId) -> [String; 2] {
        [
            self.conversation(tenant, conversation, MEMBERS_SUFFIX),
            self.conversation(tenant, conversation, MEMBERS_CACHED_SUFFIX),
        ]
    }

    /// The highest seq ever issued in the conversation (INCR counter).
    pub(super) fn seq(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.conversation(tenant, conversation, "seq")
    }

    /// The history index: ZSET, member = seq (decimal), score = seq.
    pub(super) fn index(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.conversation(tenant, conversation, "idx")
    }

    /// The records: HASH, field = seq (decimal), value = canonical record blob.
    pub(super) fn records(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.conversation(tenant, conversation, "rec")
    }

    /// The hot-tier lower bound: seqs at or below it were trimmed (absent = 0).
    pub(super) fn lower_bound(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.conversation(tenant, conversation, "lowbound")
    }

    /// The archived watermark: the highest seq the archive holds contiguously (absent = 0).
    /// The hot-tier trim never passes it.
    pub(super) fn archived(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.conversation(tenant, conversation, "archived")
    }

    /// The conversation's seq lease: `<serving>:<through>:<start>`, the copy of the data it is
    /// valid in, the highest seq it may issue (the durable high-water mark is at least that) and
    /// the counter it was installed at.
    pub(super) fn lease(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.conversation(tenant, conversation, "lease")
    }

    /// The token of a revalidation in progress (a random hex string with a Redis TTL).
    pub(super) fn lease_token(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.conversation(tenant, conversation, "leasetoken")
    }

    /// The claims: HASH, field = [`claim`] of a request key, value = `<seq>:<claimed_at ms>`.
    pub(super) fn claims(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.conversation(tenant, conversation, "claims")
    }

    /// The conversation's clock: the highest `created_at` (ms) issued in it, which no later seq's
    /// `created_at` goes below (`message_allocate_seq.lua`). No TTL, like the seq counter.
    pub(super) fn clock(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.conversation(tenant, conversation, "clock")
    }

    /// The claims by time: ZSET, score = claimed_at ms, member = [`claim`].
    pub(super) fn claim_times(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.conversation(tenant, conversation, "claimtimes")
    }

    /// Tombstones of the expiry drain: SET of seqs whose record was deleted while their expiry
    /// member may still exist (a crash between the two steps).
    pub(super) fn gc_tombstones(&self, tenant: TenantId, conversation: ConversationId) -> String {
        self.conversation(tenant, conversation, "gcdone")
    }

    /// `<ns>:{k:<tenant hex><sender hex>}:<kind>:<client id>`: a key of one request key, in
    /// its sender's slot.
    fn sender(&self, key: &CommitKey, kind: &str) -> String {
        let client = key.client_message_id.as_str();
        let mut out = String::with_capacity(self.ns.len() + 72 + kind.len() + client.len());
        out.push_str(&self.ns);
        out.push_str(":{k:");
        push_hex(&mut out, &key.tenant.0);
        push_hex(&mut out, &key.sender.0);
        out.push_str("}:");
        out.push_str(kind);
        out.push(':');
        out.push_str(client);
        out
    }

    /// `<ns>:{k:<tenant hex><sender hex>}:commit:<client id>`: HASH with `req` (request bytes)
    /// and `commit` (the commit's head, `codec::encode_commit_head`).
    pub(super) fn commit(&self, key: &CommitKey) -> String {
        self.sender(key, "commit")
    }

    /// The hash of `key`'s commit at `loc` ([`Self::commit`] or [`Self::commit_in_conversation`]).
    pub(super) fn commit_at(&self, key: &CommitKey, loc: Loc) -> String {
        match loc {
            Loc::Sender => self.commit(key),
            Loc::Conversation(conversation) => self.commit_in_conversation(key, conversation),
        }
    }

    /// `<ns>:{k:<tenant hex><sender hex>}:claim:<client id>`: the group-commit layout's claim of
    /// a request key, in the sender's slot: `<conversation hex>:<request digest>`
    /// (`message_claim.lua` decides which request and conversation own the key).
    pub(super) fn sender_claim(&self, key: &CommitKey) -> String {
        self.sender(key, "claim")
    }

    /// `<ns>:{c:<tenant hex><conversation hex>}:commit:<sender hex>:<client id>`: the
    /// group-commit layout's commit (the same hash as [`Self::commit`]), in its conversation's
    /// slot, so the script that issues the seq creates it (`message_append.lua`).
    pub(super) fn commit_in_conversation(&self, key: &CommitKey, conversation: ConversationId) -> String {
        let mut suffix = String::with_capacity(40 + key.client_message_id.as_str().len());
        suffix.push_str("commit:");
        push_hex(&mut suffix, &key.sender.0);
        suffix.push(':');
        suffix.push_str(key.client_message_id.as_str());
        self.conversation(key.tenant, conversation, &suffix)
    }

    /// `<ns>:{recovery:<shard>}`: ZSETs of unfinished commits, score = created_at ms, member =
    /// [`aux_member`], in the shard of the member's sender ([`aux_shard`]).
    pub(super) fn recovery(&self, shard: IndexShard) -> String {
        shard.key(&self.ns, "recovery")
    }

    /// `<ns>:{commitgc:<shard>}`: ZSETs of COMMITTED commits, score = committed_at ms, member =
    /// [`aux_member`], sharded as `recovery`.
    pub(super) fn commit_gc(&self, shard: IndexShard) -> String {
        shard.key(&self.ns, "commitgc")
    }

    /// `<ns>:{hotwindow:<shard>}`: ZSETs of records the hot-tier trim must eventually remove,
    /// score = created_at ms, member = [`expiry_member`], in the shard of the member's
    /// conversation ([`expiry_shard`]). Filled only by a trim-owning store.
    pub(super) fn hot_window(&self, shard: IndexShard) -> String {
        shard.key(&self.ns, "hotwindow")
    }

    /// `<ns>:{msghistorygc:<shard>}`: ZSETs of the hot tier's record expiries, score = expiry
    /// ms, member = [`expiry_member`], sharded as `hotwindow`.
    pub(super) fn history_gc(&self, shard: IndexShard) -> String {
        shard.key(&self.ns, "msghistorygc")
    }
}

/// The identity of one reservation in the global auxiliary indexes:
/// `<tenant hex><sender hex>:<created_at ms>:<client id>`. `created_at` tells a reservation
/// apart from a later reuse of the same key (after the auxiliary TTL) and from a reserver that
/// lost the race for the key. Sorting members of equal score orders them by key, as the
/// reference backend does.
pub(super) fn aux_member(key: &CommitKey, created_at: UnixMillis) -> String {
    let client = key.client_message_id.as_str();
    let mut out = String::with_capacity(86 + client.len());
    push_hex(&mut out, &key.tenant.0);
    push_hex(&mut out, &key.sender.0);
    out.push(':');
    out.push_str(&created_at.0.to_string());
    out.push(':');
    out.push_str(client);
    out
}

/// The identity of one reservation of the group-commit layout in the global auxiliary indexes:
/// `<tenant hex><sender hex>/<conversation hex>:<message id hex>:<client id>`. The message id,
/// proposed before the key is claimed and kept by every attempt of that reservation, tells it
/// apart as `created_at` does in [`aux_member`]; the conversation says which slot holds the
/// commit.
pub(super) fn aux_member_in_conversation(
    key: &CommitKey,
    conversation: ConversationId,
    message_id: MessageId,
) -> String {
    let client = key.client_message_id.as_str();
    let mut out = String::with_capacity(164 + client.len());
    push_hex(&mut out, &key.tenant.0);
    push_hex(&mut out, &key.sender.0);
    out.push('/');
    push_hex(&mut out, &conversation.0);
    out.push(':');
    push_hex(&mut out, &message_id.0);
    out.push(':');
    out.push_str(client);
    out
}

/// The shard of an [`aux_member`] or an [`aux_member_in_conversation`]: its sender's (the first
/// 64 characters, the tenant and sender in hex), so both forms of one sender share a shard.
pub(super) fn aux_shard(member: &str) -> IndexShard {
    IndexShard::of(member.get(..64).unwrap_or(member))
}

/// A member of `{recovery}` or `{commitgc}`, in either layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum AuxMember {
    /// [`aux_member`]: a commit in its sender's slot, reserved at `created_at`.
    InSenderSlot { key: CommitKey, created_at: UnixMillis },
    /// [`aux_member_in_conversation`]: a commit of the group-commit layout, in `conversation`'s
    /// slot, reserved as `message_id`.
    InConversationSlot { key: CommitKey, conversation: ConversationId, message_id: MessageId },
}

/// A request key's field in its conversation's claims: `<sender hex>:<client id>` (the tenant is
/// the conversation's).
pub(super) fn claim(key: &CommitKey) -> String {
    let client = key.client_message_id.as_str();
    let mut out = String::with_capacity(33 + client.len());
    push_hex(&mut out, &key.sender.0);
    out.push(':');
    out.push_str(client);
    out
}

/// Parses [`aux_member`] and [`aux_member_in_conversation`] (told apart by the character after
/// the sender: `:` or `/`).
pub(super) fn parse_aux_member(member: &str) -> StoreResult<AuxMember> {
    let bad = || StoreError::CorruptEntry(format!("commit index member {member:?} is malformed"));
    if !member.is_ascii() {
        return Err(bad());
    }
    let ids = member.get(..64).ok_or_else(bad)?;
    let tenant = TenantId::from_hex(&ids[..32]).map_err(|_| bad())?;
    let sender = UserId::from_hex(&ids[32..]).map_err(|_| bad())?;
    let key = |client: &str| -> StoreResult<CommitKey> {
        let client_message_id = ClientMessageId::new(client).map_err(|_| bad())?;
        Ok(CommitKey { tenant, sender, client_message_id })
    };
    let rest = member.get(64..).unwrap_or_default();
    if let Some(rest) = rest.strip_prefix(':') {
        let (created, client) = rest.split_once(':').ok_or_else(bad)?;
        let created: i64 = created.parse().map_err(|_| bad())?;
        return Ok(AuxMember::InSenderSlot { key: key(client)?, created_at: UnixMillis(created) });
    }
    let rest = rest.strip_prefix('/').ok_or_else(bad)?;
    let (conversation, rest) = rest.split_once(':').ok_or_else(bad)?;
    let (message_id, client) = rest.split_once(':').ok_or_else(bad)?;
    let conversation = ConversationId::from_hex(conversation).map_err(|_| bad())?;
    let message_id = MessageId::from_hex(message_id).map_err(|_| bad())?;
    Ok(AuxMember::InConversationSlot { key: key(client)?, conversation, message_id })
}

/// The expiry index member of one record: `<tenant hex>|<conversation hex>|<seq>`.
pub(super) fn expiry_member(tenant: TenantId, conversation: ConversationId, seq: ConversationSeq) -> String {
    let mut out = String::with_capacity(86);
    push_hex(&mut out, &tenant.0);
    out.push('|');
    push_hex(&mut out, &conversation.0);
    out.push('|');
    out.push_str(&seq.0.to_string());
    out
}

/// The shard of an [`expiry_member`]: its conversation's (the text before the last `|`).
pub(super) fn expiry_shard(member: &str) -> IndexShard {
    IndexShard::of(member.rsplit_once('|').map_or(member, |(owner, _)| owner))
}

/// Appends `bytes` as lowercase hex, the same text as the ids' `to_hex` (key names are on the
/// hot path: encoded on the stack, no allocation).
fn push_hex(out: &mut String, bytes: &[u8; 16]) {
    let mut digits = [0u8; 32];
    if hex::encode_to_slice(bytes, &mut digits).is_ok() {
        out.extend(digits.iter().map(|d| char::from(*d)));
    }
}

/// Parses [`expiry_member`].
pub(super) fn parse_expiry_member(member: &str) -> StoreResult<(TenantId, ConversationId, ConversationSeq)> {
    let bad = || StoreError::CorruptEntry(format!("history expiry member {member:?} is malformed"));
    let mut parts = member.split('|');
    let (Some(t), Some(c), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    let tenant = TenantId::from_hex(t).map_err(|_| bad())?;
    let conversation = ConversationId::from_hex(c).map_err(|_| bad())?;
    let seq = parse_seq(s).ok_or_else(bad)?;
    Ok((tenant, conversation, seq))
}

/// A seq as stored in members and fields: canonical decimal, 1..2^63.
pub(super) fn parse_seq(text: &str) -> Option<ConversationSeq> {
    let seq: u64 = text.parse().ok()?;
    (seq != 0 && seq >> 63 == 0 && seq.to_string() == text).then_some(ConversationSeq(seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_round_trip() {
        let key = CommitKey {
            tenant: TenantId([1; 16]),
            sender: UserId([0xab; 16]),
            client_message_id: ClientMessageId::new("a:b{c}").unwrap(),
        };
        for created in [UnixMillis(0), UnixMillis(-5), UnixMillis(1_790_000_000_000)] {
            let m = aux_member(&key, created);
            assert_eq!(
                parse_aux_member(&m).unwrap(),
                AuxMember::InSenderSlot { key: key.clone(), created_at: created }
            );
        }
        let (conversation, message_id) = (ConversationId([0xc4; 16]), MessageId([0x07; 16]));
        let m = aux_member_in_conversation(&key, conversation, message_id);
        let parsed = parse_aux_member(&m).unwrap();
        assert_eq!(parsed, AuxMember::InConversationSlot { key: key.clone(), conversation, message_id });
        assert_eq!(aux_shard(&m), aux_shard(&aux_member(&key, UnixMillis(3))), "one sender, one shard");
        let v1 = aux_member(&key, UnixMillis(9));
        for bad in [
            String::new(),
            v1[..64].to_owned(),
            v1.replacen(':', ";", 1),
            m.replacen('/', "//", 1),
            m[..m.len() - key.client_message_id.as_str().len() - 1].to_owned(),
            m.replacen(&message_id.to_hex(), "07", 1),
            m.replacen(&conversation.to_hex(), &"z".repeat(32), 1),
            format!("{}é", &v1[..63]),
        ] {
            assert!(parse_aux_member(&bad).is_err(), "{bad}");
        }
        let m = expiry_member(TenantId([2; 16]), ConversationId([3; 16]), ConversationSeq(42));
        assert_eq!(parse_expiry_member(&m).unwrap(), (TenantId([2; 16]), ConversationId([3; 16]), ConversationSeq(42)));
        for bad in ["", "x|y|z", "0101|0303|1", &format!("{m}|1")] {
            assert!(parse_expiry_member(bad).is_err(), "{bad}");
        }
        for bad in ["0", "01", "-1", "9223372036854775808", "1.0"] {
            assert_eq!(parse_seq(bad), None, "{bad}");
        }
    }

    #[test]
    fn hex_matches_the_ids() {
        let (t, u, c) = (TenantId([0x0f; 16]), UserId(*b"\x00\x01\xa0\xffqim-redis-ke"), ConversationId([0xe7; 16]));
        let key = CommitKey { tenant: t, sender: u, client_message_id: ClientMessageId::new("c-1").unwrap() };
        let keys = Keys::new("qim");
        assert_eq!(keys.commit(&key), format!("qim:{{k:{}{}}}:commit:c-1", t.to_hex(), u.to_hex()));
        assert_eq!(keys.sender_claim(&key), format!("qim:{{k:{}{}}}:claim:c-1", t.to_hex(), u.to_hex()));
        assert_eq!(
            keys.commit_in_conversation(&key, c),
            format!("qim:{{c:{}{}}}:commit:{}:c-1", t.to_hex(), c.to_hex(), u.to_hex())
        );
        assert_eq!(
            aux_member_in_conversation(&key, c, MessageId([0x5a; 16])),
            format!("{}{}/{}:{}:c-1", t.to_hex(), u.to_hex(), c.to_hex(), MessageId([0x5a; 16]).to_hex())
        );
        assert_eq!(keys.seq(t, c), format!("qim:{{c:{}{}}}:seq", t.to_hex(), c.to_hex()));
        assert_eq!(aux_member(&key, UnixMillis(-7)), format!("{}{}:-7:c-1", t.to_hex(), u.to_hex()));
        assert_eq!(expiry_member(t, c, ConversationSeq(9)), format!("{}|{}|9", t.to_hex(), c.to_hex()));
    }

    #[test]
    fn keys_share_hash_tags() {
        let keys = Keys::new("qim");
        let (t, c) = (TenantId([1; 16]), ConversationId([2; 16]));
        let tag = format!("{{c:{}{}}}", t.to_hex(), c.to_hex());
        let [members, cached] = keys.member_cache(t, c);
        let sender =
            CommitKey { tenant: t, sender: UserId([4; 16]), client_message_id: ClientMessageId::new("x:{y}").unwrap() };
        let sender_tag = format!("qim:{{k:{}{}}}:", t.to_hex(), sender.sender.to_hex());
        assert!(keys.commit(&sender).starts_with(&sender_tag) && keys.sender_claim(&sender).starts_with(&sender_tag));
        assert_eq!(keys.sender_claim(&sender), format!("{sender_tag}claim:x:{{y}}"));
        for k in [
            keys.commit_in_conversation(&sender, c),
            keys.seq(t, c),
            keys.index(t, c),
            keys.records(t, c),
            keys.lower_bound(t, c),
            keys.gc_tombstones(t, c),
            members,
            cached,
        ] {
            assert!(k.starts_with(&format!("qim:{tag}:")), "{k}");
        }
        let member = expiry_member(t, c, ConversationSeq(7));
        assert_eq!(expiry_shard(&member), expiry_shard(&expiry_member(t, c, ConversationSeq(8))));
        assert!(keys.history_gc(expiry_shard(&member)).starts_with("qim:{msghistorygc:"));
        let key =
            CommitKey { tenant: t, sender: UserId([3; 16]), client_message_id: ClientMessageId::new("m").unwrap() };
        let aux = aux_member(&key, UnixMillis(5));
        assert_eq!(aux_shard(&aux), aux_shard(&aux_member(&key, UnixMillis(6))));
        assert!(keys.recovery(aux_shard(&aux)).starts_with("qim:{recovery:"));
    }
}
