//! Property tests of every codec: round-trips, canonical bytes, and fuzzing (random, truncated
//! and mutated bytes must give an error or a value that re-encodes to exactly those bytes, never
//! a panic).

use proptest::prelude::*;
use qim_store::codec::*;
use qim_store::ids::*;
use qim_store::mailbox::*;
use qim_store::message::*;
use qim_store::retention::RetentionClass;

fn id16() -> impl Strategy<Value = [u8; 16]> {
    any::<[u8; 16]>()
}

fn client_id() -> impl Strategy<Value = ClientMessageId> {
    "[!-~]{1,64}".prop_map(|s| ClientMessageId::new(s).expect("generated ids are valid"))
}

fn kind() -> impl Strategy<Value = MessageKind> {
    prop::sample::select(MessageKind::ALL.to_vec())
}

fn retention() -> impl Strategy<Value = RetentionClass> {
    prop::sample::select(RetentionClass::ALL.to_vec())
}

fn seq() -> impl Strategy<Value = ConversationSeq> {
    (1u64..=i64::MAX as u64).prop_map(ConversationSeq)
}

fn request() -> impl Strategy<Value = CommitRequest> {
    (id16(), id16(), client_id(), id16(), kind(), retention(), prop::collection::vec(any::<u8>(), 0..64)).prop_map(
        |(t, s, c, conv, kind, retention, payload)| CommitRequest {
            key: CommitKey { tenant: TenantId(t), sender: UserId(s), client_message_id: c },
            conversation: ConversationId(conv),
            kind,
            retention,
            payload,
        },
    )
}

fn publication() -> impl Strategy<Value = Publication> {
    (0..=i32::MAX, 0..=i64::MAX).prop_map(|(partition, offset)| Publication { partition, offset })
}

fn commit() -> impl Strategy<Value = Commit> {
    (request(), seq(), id16(), any::<i64>(), 0..4u8, publication(), any::<i64>()).prop_map(
        |(request, seq, id, created, state, p, at)| {
            let state = [CommitState::Reserved, CommitState::Recorded, CommitState::Outboxed, CommitState::Committed]
                [state as usize];
            let publication = (state >= CommitState::Outboxed).then_some(p);
            let committed_at = (state == CommitState::Committed).then_some(UnixMillis(at));
            Commit {
                intent: CommitIntent {
                    request,
                    seq,
                    message_id: MessageId(id),
                    created_at: UnixMillis(created),
                    publication,
                },
                state,
                committed_at,
            }
        },
    )
}

fn record() -> impl Strategy<Value = MessageRecord> {
    (commit(), prop::option::of(any::<i64>())).prop_map(|(c, exp)| c.intent.record(exp.map(UnixMillis)))
}

fn message_ref(tenant: [u8; 16]) -> impl Strategy<Value = MessageRef> {
    (id16(), seq(), id16(), id16(), kind(), any::<i64>()).prop_map(move |(conv, seq, id, sender, kind, at)| {
        MessageRef {
            tenant: TenantId(tenant),
            conversation: ConversationId(conv),
            seq,
            message_id: MessageId(id),
            sender: UserId(sender),
            kind,
            created_at: UnixMillis(at),
        }
    })
}

fn group() -> impl Strategy<Value = EventGroup> {
    id16().prop_flat_map(|tenant| {
        (
            id16(),
            0u64..(1 << 63),
            any::<i64>(),
            prop::collection::btree_map(any::<u16>(), (id16(), message_ref(tenant)), 1..6),
        )
            .prop_map(move |(user, seq, exp, events)| EventGroup {
                tenant: TenantId(tenant),
                user: UserId(user),
                seq: MailboxSeq::from_u64(seq).expect("bit 63 clear"),
                expires_at: UnixMillis(exp),
                events: events
                    .into_iter()
                    .map(|(ordinal, (eid, message))| MailboxEvent { ordinal, event_id: EventId(eid), message })
                    .collect(),
            })
    })
}

fn manifest() -> impl Strategy<Value = DispatchManifest> {
    id16().prop_flat_map(|tenant| {
        (message_ref(tenant), any::<u16>(), prop::collection::vec(id16(), 1..40)).prop_map(|(message, shard, users)| {
            DispatchManifest::new(
                DispatchId { message_id: message.message_id, shard: ShardId(shard) },
                message,
                users.into_iter().map(UserId).collect(),
            )
        })
    })
}

fn ledger() -> impl Strategy<Value = RetentionLedger> {
    prop::collection::btree_map(0u32..100_000, (0u64..(1 << 63), any::<i64>()), 0..=LEDGER_MAX_ITEMS).prop_map(
        |items| {
            let mut l = RetentionLedger::default();
            for (day, (seq, _)) in items {
                // Register at the day's first millisecond: the item keeps that day.
                l.register(seq, UnixMillis(i64::from(day) * MILLIS_PER_DAY)).expect("within capacity");
            }
            l
        },
    )
}

/// A decoder as "decode then re-encode": `None` when the bytes are refused.
type RoundTrip = fn(&[u8]) -> Option<Vec<u8>>;

/// Every decoder, so fuzz checks can treat them alike.
fn decoders() -> Vec<(&'static str, RoundTrip)> {
    vec![
        ("request", |b| decode_request(b).ok().map(|v| encode_request(&v))),
        ("intent", |b| decode_intent(b).ok().map(|v| encode_intent(&v))),
        ("commit", |b| decode_commit(b).ok().map(|v| encode_commit(&v))),
        ("record", |b| decode_record(b).ok().map(|v| encode_record(&v))),
        ("group", |b| decode_event_group(b).ok().map(|v| encode_event_group(&v))),
        ("manifest", |b| decode_manifest(b).ok().map(|v| encode_manifest(&v))),
        ("ledger", |b| RetentionLedger::decode(b).ok().map(|v| v.encode())),
    ]
}

/// A valid blob of each kind and all its prefixes fail; every single-byte mutation either fails
/// or is canonical.
fn check_blob(bytes: &[u8]) -> Result<(), TestCaseError> {
    for (name, roundtrip) in decoders() {
        if let Some(again) = roundtrip(bytes) {
            prop_assert_eq!(&again, bytes, "{} accepted non-canonical bytes", name);
            for cut in 0..bytes.len() {
                prop_assert!(roundtrip(&bytes[..cut]).is_none(), "{} accepted a {}-byte prefix", name, cut);
            }
            let mut longer = bytes.to_vec();
            longer.push(0);
            prop_assert!(roundtrip(&longer).is_none(), "{} accepted trailing garbage", name);
        }
    }
    Ok(())
}

fn check_mutations(bytes: &[u8], at: usize, xor: u8) -> Result<(), TestCaseError> {
    let mut m = bytes.to_vec();
    let i = at % m.len();
    m[i] ^= xor.max(1);
    for (name, roundtrip) in decoders() {
        if let Some(again) = roundtrip(&m) {
            prop_assert_eq!(&again, &m, "{} decoded a mutated blob into a different value", name);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn requests_round_trip(r in request(), at in any::<usize>(), xor in any::<u8>()) {
        let b = encode_request(&r);
        prop_assert_eq!(decode_request(&b).unwrap(), r);
        check_blob(&b)?;
        check_mutations(&b, at, xor)?;
    }

    #[test]
    fn commits_and_intents_round_trip(c in commit(), at in any::<usize>(), xor in any::<u8>()) {
        let b = encode_commit(&c);
        prop_assert_eq!(decode_commit(&b).unwrap(), c.clone());
        check_blob(&b)?;
        check_mutations(&b, at, xor)?;
        let i = encode_intent(&c.intent);
        prop_assert_eq!(decode_intent(&i).unwrap(), c.intent);
        check_blob(&i)?;
    }

    /// A commit stored as request bytes beside its head (the Redis layout) reads back as the
    /// same commit, as does an earlier release's whole commit beside its request; a head or a
    /// request mutated in one byte is refused or reads back as exactly what its bytes say, and a
    /// whole commit beside another request is refused.
    #[test]
    fn commit_heads_beside_their_request_round_trip(c in commit(), other in request(), at in any::<usize>(), xor in any::<u8>()) {
        let (req, head) = (encode_request(&c.intent.request), encode_commit_head(&c));
        prop_assert_eq!(decode_commit_parts(&req, &head).unwrap(), c.clone());
        prop_assert!(head.len() < 64, "a head is small: {} bytes", head.len());
        prop_assert_eq!(decode_commit_parts(&req, &encode_commit(&c)).unwrap(), c.clone());
        if other != c.intent.request {
            prop_assert!(decode_commit_parts(&encode_request(&other), &encode_commit(&c)).is_err());
        }
        for cut in 0..head.len() {
            prop_assert!(decode_commit_parts(&req, &head[..cut]).is_err(), "a {}-byte prefix of a head", cut);
        }
        let mut mutated = head.clone();
        let i = at % mutated.len();
        mutated[i] ^= xor.max(1);
        if let Ok(m) = decode_commit_parts(&req, &mutated) {
            prop_assert_eq!(encode_commit_head(&m), mutated);
        }
        prop_assert!(decode_commit_parts(&head, &head).is_err(), "a head is not a request");
    }

    #[test]
    fn records_round_trip(r in record(), at in any::<usize>(), xor in any::<u8>()) {
        let b = encode_record(&r);
        prop_assert_eq!(decode_record(&b).unwrap(), r);
        check_blob(&b)?;
        check_mutations(&b, at, xor)?;
    }

    /// A head's and a record's seq sit at fixed byte ranges, and a commit with another seq
    /// differs in those bytes only: a script that issues the seq writes it into blobs encoded
    /// around a placeholder and gets exactly the blobs of the commit with that seq.
    #[test]
    fn a_seq_is_spliced_into_heads_and_records_at_fixed_bytes(c in commit(), other in seq(), exp in prop::option::of(any::<i64>())) {
        let mut moved = c.clone();
        moved.intent.seq = other;
        let exp = exp.map(UnixMillis);
        for (at, blob, with_other) in [
            (COMMIT_HEAD_SEQ_BYTES, encode_commit_head(&c), encode_commit_head(&moved)),
            (RECORD_SEQ_BYTES, encode_record(&c.intent.record(exp)), encode_record(&moved.intent.record(exp))),
        ] {
            prop_assert_eq!(&blob[at.clone()], &c.intent.seq.0.to_be_bytes()[..]);
            let mut spliced = blob.clone();
            spliced[at].copy_from_slice(&other.0.to_be_bytes());
            prop_assert_eq!(spliced, with_other);
        }
    }

    #[test]
    fn groups_round_trip(g in group(), at in any::<usize>(), xor in any::<u8>()) {
        let b = encode_event_group(&g);
        prop_assert_eq!(decode_event_group(&b).unwrap(), g);
        check_blob(&b)?;
        check_mutations(&b, at, xor)?;
    }

    #[test]
    fn manifests_round_trip(m in manifest(), at in any::<usize>(), xor in any::<u8>()) {
        let b = encode_manifest(&m);
        prop_assert_eq!(decode_manifest(&b).unwrap(), m);
        check_blob(&b)?;
        check_mutations(&b, at, xor)?;
    }

    #[test]
    fn ledgers_round_trip(l in ledger(), at in any::<usize>(), xor in any::<u8>()) {
        let b = l.encode();
        prop_assert_eq!(RetentionLedger::decode(&b).unwrap(), l);
        check_blob(&b)?;
        check_mutations(&b, at, xor)?;
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300), tag in 0x51u8..0x63, version in 0u8..3) {
        let mut framed = vec![tag, version];
        framed.extend_from_slice(&bytes);
        for input in [&bytes[..], &framed[..]] {
            for (_, roundtrip) in decoders() {
                if let Some(again) = roundtrip(input) {
                    prop_assert_eq!(&again[..], input, "random bytes decoded non-canonically");
                }
            }
        }
    }
}

#[test]
fn an_oversized_length_prefix_is_refused_without_allocating() {
    // A record claiming a payload of 2^62 bytes: the size limit must refuse it up front.
    let mut b = encode_record(&MessageRecord {
        tenant: TenantId([1; 16]),
        conversation: ConversationId([2; 16]),
        seq: ConversationSeq(1),
        message_id: MessageId([3; 16]),
        sender: UserId([4; 16]),
        client_message_id: ClientMessageId::new("c").unwrap(),
        kind: MessageKind::Normal,
        retention: RetentionClass::Default,
        created_at: UnixMillis(0),
        expires_at: None,
        payload: vec![],
    });
    let len_at = b.len() - 8;
    b[len_at..].copy_from_slice(&(1u64 << 62).to_be_bytes());
    assert!(decode_record(&b).is_err());
}
