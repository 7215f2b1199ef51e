//! Random operation sequences against the memory `MessageStore`, checked against a simple model:
//! a map from request key to (request, seq, state) plus a counter per conversation.

use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;
use qim_store::clock::ManualClock;
use qim_store::ids::*;
use qim_store::memory::MemoryMessageStore;
use qim_store::message::*;
use qim_store::retention::{RetentionClass, RetentionPolicy};
use qim_store::{ErrorKind, MessageStore, StoreError};

#[derive(Clone, Debug)]
enum Op {
    /// Reserve key `key` for content variant `content` in conversation `conv`.
    Reserve { key: u8, content: u8, conv: u8 },
    /// Take the next step of key `key`'s commit.
    Advance { key: u8 },
    /// Take step `step` (0 record, 1 outbox, 2 commit) regardless of state.
    Step { key: u8, step: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..6u8, 0..2u8, 0..2u8).prop_map(|(key, content, conv)| Op::Reserve { key, content, conv }),
        (0..6u8).prop_map(|key| Op::Advance { key }),
        (0..6u8, 0..3u8).prop_map(|(key, step)| Op::Step { key, step }),
    ]
}

fn request(key: u8, content: u8, conv: u8) -> CommitRequest {
    CommitRequest {
        key: CommitKey {
            tenant: TenantId([1; 16]),
            sender: UserId([key; 16]),
            client_message_id: ClientMessageId::new(format!("k{key}")).unwrap(),
        },
        conversation: ConversationId([conv; 16]),
        kind: MessageKind::Normal,
        retention: RetentionClass::Default,
        payload: vec![content],
    }
}

struct ModelCommit {
    request: CommitRequest,
    seq: u64,
    state: CommitState,
    message_id: MessageId,
}

const NEXT: [CommitState; 3] = [CommitState::Recorded, CommitState::Outboxed, CommitState::Committed];

async fn step(store: &MemoryMessageStore, c: &Commit, step: u8) -> Result<Commit, StoreError> {
    let key = &c.intent.request.key;
    match step {
        0 => store.put_record(&c.intent).await,
        1 => {
            store
                .mark_outbox_published(
                    key,
                    c.intent.message_id,
                    Publication { partition: 0, offset: c.intent.seq.0 as i64 },
                )
                .await
        }
        _ => store.mark_committed(key, c.intent.message_id).await,
    }
}

async fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let store = MemoryMessageStore::new(RetentionPolicy::default(), Arc::new(ManualClock::new(UnixMillis(1_000))));
    let mut model: HashMap<u8, ModelCommit> = HashMap::new();
    let mut counters: HashMap<u8, u64> = HashMap::new();
    let mut next_id = 0u8;
    for op in ops {
        match op {
            Op::Reserve { key, content, conv } => {
                let req = request(key, content, conv);
                next_id += 1;
                let got = store.reserve(&req, MessageId([next_id; 16])).await;
                match model.get(&key) {
                    Some(m) if m.request == req => {
                        let c = got.expect("replay of the same bytes succeeds");
                        prop_assert_eq!((c.intent.seq.0, c.state, c.intent.message_id), (m.seq, m.state, m.message_id));
                    }
                    Some(_) => prop_assert_eq!(got.map(|_| ()).unwrap_err().kind(), ErrorKind::Conflict),
                    None => {
                        let c = got.expect("a new key reserves");
                        let counter = counters.entry(conv).or_insert(0);
                        *counter += 1;
                        prop_assert_eq!(c.intent.seq.0, *counter, "seqs are issued one by one per conversation");
                        model.insert(
                            key,
                            ModelCommit {
                                request: req,
                                seq: c.intent.seq.0,
                                state: CommitState::Reserved,
                                message_id: MessageId([next_id; 16]),
                            },
                        );
                    }
                }
            }
            Op::Advance { key } | Op::Step { key, .. } => {
                let Some(m) = model.get_mut(&key) else {
                    let stranger = request(key, 0, 0);
                    prop_assert_eq!(
                        store.mark_committed(&stranger.key, MessageId([0; 16])).await.unwrap_err().kind(),
                        ErrorKind::NotFound
                    );
                    continue;
                };
                let current = store.load_commit(&m.request.key).await.unwrap().expect("reserved commits stay");
                let wanted = match op {
                    Op::Step { step, .. } => step,
                    _ => NEXT.iter().position(|s| s.predecessor() == Some(m.state)).map_or(2, |i| i as u8),
                };
                let got = step(&store, &current, wanted).await;
                if NEXT[wanted as usize].predecessor() == Some(m.state) {
                    let c = got.expect("the right step succeeds");
                    m.state = NEXT[wanted as usize];
                    prop_assert_eq!(c.state, m.state);
                } else {
                    prop_assert_eq!(got.unwrap_err().kind(), ErrorKind::Conflict, "a wrong step is a conflict");
                }
            }
        }
    }
    // Every recorded seq is in history exactly once, in order.
    for conv in 0..2u8 {
        let mut want: Vec<u64> = model
            .values()
            .filter(|m| m.request.conversation.0[0] == conv && m.state >= CommitState::Recorded)
            .map(|m| m.seq)
            .collect();
        want.sort_unstable();
        let page = store
            .history_page(
                &HistoryQuery {
                    tenant: TenantId([1; 16]),
                    conversation: ConversationId([conv; 16]),
                    viewer: UserId([0; 16]),
                    direction: Direction::Newer,
                    anchor: None,
                    max_items: 100,
                    max_bytes: 1 << 20,
                },
                &AllowAll,
            )
            .await
            .unwrap();
        prop_assert_eq!(page.records.iter().map(|r| r.seq.0).collect::<Vec<_>>(), want);
    }
    Ok(())
}

struct AllowAll;

#[async_trait::async_trait]
impl qim_store::HistoryAuthorizer for AllowAll {
    async fn authorize_history(&self, _: TenantId, _: ConversationId, _: UserId) -> qim_store::StoreResult<()> {
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn memory_store_matches_the_model(ops in prop::collection::vec(op(), 1..60)) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(run(ops))?;
    }
}
