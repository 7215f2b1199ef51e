//! The mailbox contract suite against the CQL backend, plus checks of its zero-LWT dispatch path.
//!
//! Needs a running Cassandra (or ScyllaDB) named by `QIM_TEST_SCYLLA_HOSTS` (with `_DC` and
//! `_RF`; `deploy/local/test` sets them for the stack that `deploy/local/stack up` starts). An unreachable server fails the tests;
//! they never skip. The suite runs in one keyspace per test run (`scylla_support::Keyspace`).

use crate::scylla_support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use qim_store::clock::ManualClock;
use qim_store::ids::{TenantId, UserId};
use qim_store::mailbox::{MailboxRetention, MailboxSeq};
use qim_store::scylla::mailbox::{mailbox_table_ddl, ScyllaMailboxStore};
use qim_store::testsuite::MailboxHarness;
use qim_store::MailboxStore;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla_support::Keyspace;

const HOSTS_VAR: &str = "QIM_TEST_SCYLLA_HOSTS";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// This file's keyspace (see [`Keyspace`]): the whole schema, the mailbox tables among it.
static KEYSPACE: Keyspace = Keyspace::new("scylla_mailbox_contract");

/// A session to `hosts`, or an error naming Cassandra, the address and how to start it.
async fn connect(hosts: &str) -> Result<Session, String> {
    let builder =
        hosts.split(',').map(str::trim).filter(|h| !h.is_empty()).fold(SessionBuilder::new(), |b, h| match h
            .parse::<SocketAddr>()
        {
            Ok(a) => b.known_node_addr(a),
            Err(_) => b.known_node(h),
        });
    let builder = builder.connection_timeout(CONNECT_TIMEOUT).metadata_request_clientside_timeout(CONNECT_TIMEOUT);
    let build = builder.build();
    let fail = |cause: String| {
        format!(
            "Cassandra is unreachable at {hosts} ({HOSTS_VAR}): {cause}. Start the local stack with \
             `deploy/local/stack up` (or point {HOSTS_VAR} at a running Cassandra/ScyllaDB); these tests never skip."
        )
    };
    match tokio::time::timeout(CONNECT_TIMEOUT * 2, build).await {
        Ok(Ok(session)) => Ok(session),
        Ok(Err(e)) => Err(fail(e.to_string())),
        Err(_) => Err(fail(format!("no session within {:?}", CONNECT_TIMEOUT * 2))),
    }
}

async fn exec(session: &Session, cql: String) {
    session.query_unpaged(cql.clone(), &[]).await.unwrap_or_else(|e| panic!("`{cql}` failed: {e}"));
}

/// A session (panicking loudly when Cassandra is down) and this file's keyspace, migrated once
/// per run.
async fn session_and_keyspace() -> (Arc<Session>, String) {
    let session = scylla_support::connect(KEYSPACE.config()).await;
    KEYSPACE.migrated(&session).await;
    (Arc::new(session), KEYSPACE.config().keyspace.clone())
}

async fn open_store(
    retention: MailboxRetention,
    clock: Arc<ManualClock>,
) -> (ScyllaMailboxStore, Arc<Session>, String) {
    let (session, ks) = session_and_keyspace().await;
    let store =
        ScyllaMailboxStore::connect(session.clone(), &ks, retention, clock).await.expect("connecting the store");
    (store, session, ks)
}

/// Opens CQL stores in this process's keyspace and keeps the session for sabotage.
#[derive(Default)]
struct Cql {
    last: Mutex<Option<(Arc<Session>, String)>>,
}

#[async_trait]
impl MailboxHarness for Cql {
    async fn open(&self, retention: MailboxRetention, clock: Arc<ManualClock>) -> Arc<dyn MailboxStore> {
        let (store, session, ks) = open_store(retention, clock).await;
        *self.last.lock().unwrap() = Some((session, ks));
        Arc::new(store)
    }

    async fn overwrite_group(
        &self,
        _: &Arc<dyn MailboxStore>,
        tenant: TenantId,
        user: UserId,
        seq: MailboxSeq,
        bytes: Vec<u8>,
    ) {
        let (session, ks) = self.last.lock().unwrap().clone().expect("a store was opened");
        let seq = i64::try_from(seq.as_u64()).expect("seqs fit a bigint");
        session
            .query_unpaged(
                format!("INSERT INTO {ks}.mailbox_entry (tenant_id, user_id, mailbox_seq, grp) VALUES (?, ?, ?, ?)"),
                (&tenant.0[..], &user.0[..], seq, bytes),
            )
            .await
            .expect("overwriting a group in Cassandra");
    }
}

mod mailbox {
    use super::*;
    qim_store::mailbox_store_contract_suite!(Cql::default());
}

/// CQL-specific checks: the LWT budget of the dispatch path, last-write-wins by offset, DDL
/// idempotence, the failure message when Cassandra is down.
mod cql_specific {
    use super::*;
    use qim_store::ids::{ConversationId, ConversationSeq, EventId, UnixMillis, MILLIS_PER_DAY};
    use qim_store::mailbox::{
        lane_of, ChunkId, DispatchId, DispatchManifest, LaneId, MailboxEntry, MailboxEvent, MessageRef, ShardEpoch,
        ShardId,
    };
    use qim_store::message::MessageKind;
    use qim_store::testsuite::fixtures::{fresh_bytes, fresh_message_id, fresh_tenant, user, T0};

    const EPOCH: ShardEpoch = ShardEpoch(1);

    fn fresh_shard() -> ShardId {
        let b = fresh_bytes();
        ShardId(u16::from_be_bytes([b[14], b[15]]) ^ u16::from_be_bytes([b[6], b[7]]))
    }

    /// The end of the day `days` after [`T0`]: a retention day of the proof tests.
    fn day(days: i64) -> UnixMillis {
        qim_store::mailbox::end_of_day(T0.plus_millis(days * MILLIS_PER_DAY))
    }

    /// User `u`'s entry at mailbox position `n`, expiring at `expires_at` (the proof tests).
    fn proof_entry(t: TenantId, u: UserId, n: u64, expires_at: UnixMillis) -> MailboxEntry {
        MailboxEntry {
            tenant: t,
            user: u,
            seq: MailboxSeq::new(EPOCH, n).unwrap(),
            expires_at,
            event: MailboxEvent { ordinal: 0, event_id: EventId([n as u8; 16]), message: message(t) },
        }
    }

    fn message(tenant: TenantId) -> MessageRef {
        MessageRef {
            tenant,
            conversation: ConversationId([3; 16]),
            seq: ConversationSeq(1),
            message_id: fresh_message_id(),
            sender: user(999),
            kind: MessageKind::Normal,
            created_at: T0,
        }
    }

    /// A dispatch to users whose retention day is already registered costs zero LWTs: begin,
    /// every chunk, every completion and every lane's watermark advance. Registration of a new
    /// day costs exactly one LWT per user.
    #[tokio::test]
    async fn dispatch_chunks_and_watermarks_issue_zero_lwts() {
        let retention = MailboxRetention::default();
        let (store, _, _) = open_store(retention, Arc::new(ManualClock::new(T0))).await;
        let (t, shard) = (fresh_tenant(), fresh_shard());
        let recipients: Vec<UserId> = (1..=300).map(user).collect();
        // Warm up: one earlier entry per user in the same expiry day registers that day.
        let expires_at = retention.expires_at(T0);
        let warm: Vec<MailboxEntry> = recipients
            .iter()
            .map(|u| MailboxEntry {
                tenant: t,
                user: *u,
                seq: MailboxSeq::new(EPOCH, 1).unwrap(),
                expires_at,
                event: MailboxEvent { ordinal: 0, event_id: EventId([1; 16]), message: message(t) },
            })
            .collect();
        store.append_batch(&warm).await.unwrap();
        assert_eq!(store.lwt_count(), recipients.len() as u64, "one registration LWT per user and day");
        store.append_batch(&warm).await.unwrap();
        assert_eq!(store.lwt_count(), recipients.len() as u64, "a replay registers nothing");

        let before = store.lwt_count();
        let started = std::time::Instant::now();
        let msg = message(t);
        let m = DispatchManifest::new(DispatchId { message_id: msg.message_id, shard }, msg, recipients.clone());
        let receipt = store.begin_dispatch(EPOCH, &m, 7).await.unwrap();
        let dup = store.begin_dispatch(EPOCH, &m, 8).await.unwrap();
        assert!(dup.duplicate);
        let counts = m.chunk_counts();
        for lane in LaneId::all() {
            for index in 0..counts[lane.get() as usize] {
                let chunk = ChunkId { lane, index };
                store.append_chunk(&receipt, &m, chunk).await.unwrap();
                store.mark_chunk_completed(m.id, chunk).await.unwrap();
            }
        }
        for lane in LaneId::all() {
            assert_eq!(store.advance_watermark(shard, lane, 8).await.unwrap().through, Some(8));
        }
        assert_eq!(store.lwt_count(), before, "the dispatch path issued LWTs");
        eprintln!(
            "dispatch to {} recipients (2 observations, every chunk, 64 watermark advances): {:?}, 0 LWTs",
            recipients.len(),
            started.elapsed()
        );
        let u = recipients[0];
        let page = store.range_scan(t, u, MailboxSeq::origin(EPOCH), MailboxSeq::new(EPOCH, 100).unwrap(), 10).await;
        assert_eq!(
            page.unwrap().groups.iter().map(|g| g.seq).collect::<Vec<_>>(),
            vec![MailboxSeq::new(EPOCH, 1).unwrap(), receipt.seq]
        );
        assert!(lane_of(&t, &u).get() < 64);
    }

    /// Writers racing on one user's retention meta (each bringing new expiry days) retry their
    /// LWT until every day is registered: every group lands and stays readable.
    #[tokio::test]
    async fn concurrent_registrations_of_one_user_all_land() {
        let (store, _, _) = open_store(MailboxRetention::default(), Arc::new(ManualClock::new(T0))).await;
        let t = fresh_tenant();
        let u = user(1);
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..8u64 {
            let store = store.clone();
            tasks.spawn(async move {
                for k in 0..3u64 {
                    let n = w * 3 + k + 1;
                    let expires_at = qim_store::mailbox::end_of_day(T0.plus_millis(n as i64 * MILLIS_PER_DAY));
                    let e = MailboxEntry {
                        tenant: t,
                        user: u,
                        seq: MailboxSeq::new(EPOCH, n).unwrap(),
                        expires_at,
                        event: MailboxEvent { ordinal: 0, event_id: EventId([n as u8; 16]), message: message(t) },
                    };
                    store.append_batch(&[e]).await.expect("a racing append");
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
        eprintln!("{} LWTs for 24 new days (retries included)", store.lwt_count());
        assert!(store.lwt_count() >= 24, "one LWT per new day at least");
        let page =
            store.range_scan(t, u, MailboxSeq::origin(EPOCH), MailboxSeq::new(EPOCH, 100).unwrap(), 100).await.unwrap();
        assert_eq!(page.groups.len(), 24);
    }

    /// A ledger day whose bucket proof is missing, or a retention meta that does not decode, fails
    /// closed instead of guessing the expired-gap boundary.
    #[tokio::test]
    async fn missing_proofs_and_corrupt_ledgers_fail_closed() {
        let clock = Arc::new(ManualClock::new(T0));
        let (store, session, ks) = open_store(MailboxRetention::default(), clock.clone()).await;
        let t = fresh_tenant();
        let (u, v) = (user(1), user(2));
        let expires_at = qim_store::mailbox::end_of_day(T0.plus_millis(MILLIS_PER_DAY));
        let entry = |who: UserId| MailboxEntry {
            tenant: t,
            user: who,
            seq: MailboxSeq::new(EPOCH, 4).unwrap(),
            expires_at,
            event: MailboxEvent { ordinal: 0, event_id: EventId([4; 16]), message: message(t) },
        };
        store.append_batch(&[entry(u), entry(v)]).await.unwrap();
        let (origin, top) = (MailboxSeq::origin(EPOCH), MailboxSeq::new(EPOCH, 100).unwrap());
        session
            .query_unpaged(
                format!("DELETE FROM {ks}.mailbox_retention_bucket_v3 WHERE tenant_id = ? AND user_id = ?"),
                (&t.0[..], &u.0[..]),
            )
            .await
            .unwrap();
        assert_eq!(store.range_scan(t, u, origin, top, 10).await.unwrap().groups.len(), 1, "the day is still live");
        clock.set(expires_at);
        assert_eq!(
            store.range_scan(t, u, origin, top, 10).await.unwrap_err().kind(),
            qim_store::ErrorKind::CorruptEntry,
            "an expired ledger day without its proof"
        );
        session
            .query_unpaged(
                format!("UPDATE {ks}.mailbox_retention_meta SET active_ledger = ? WHERE tenant_id = ? AND user_id = ?"),
                (vec![b'Q', b'R', b'L', 1, 0], &t.0[..], &v.0[..]),
            )
            .await
            .unwrap();
        assert_eq!(
            store.range_scan(t, v, origin, top, 10).await.unwrap_err().kind(),
            qim_store::ErrorKind::CorruptEntry,
            "a truncated ledger blob"
        );
    }

    /// Seed 000: the ledger lists a day, so its bucket proof must exist and be at least as high
    /// as the ledger's `max_seq`. A proof that regressed (here a stray write with a winning
    /// timestamp) is `CorruptEntry`, never hidden by taking the ledger's higher seq: for a live
    /// day at the next registration (which folds the live days' proofs), for an expired day at
    /// every read and registration, and still after the proofs' slack.
    #[tokio::test]
    async fn a_regressed_proof_fails_closed() {
        let clock = Arc::new(ManualClock::new(T0));
        let (store, session, ks) = open_store(MailboxRetention::default(), clock.clone()).await;
        let t = fresh_tenant();
        let u = user(1);
        let entry = |n: u64, expires_at| proof_entry(t, u, n, expires_at);
        store.append_batch(&[entry(9, day(1))]).await.unwrap();
        let listed = MailboxSeq::new(EPOCH, 9).unwrap().as_u64() as i64;
        // The highest write timestamp this backend can issue wins over every proof write.
        session
            .query_unpaged(
                format!(
                    "UPDATE {ks}.mailbox_retention_bucket_v3 USING TIMESTAMP ? SET max_seq = ? \
                     WHERE tenant_id = ? AND user_id = ? AND expiry_day = ? AND epoch = ?"
                ),
                (
                    qim_store::scylla::mailbox::highest_wins_timestamp(i64::MAX),
                    listed - 1,
                    &t.0[..],
                    &u.0[..],
                    day(1).day(),
                    i32::from(EPOCH.0),
                ),
            )
            .await
            .unwrap();
        let corrupt = |what: &str, r: Result<(), qim_store::StoreError>| {
            let e = r.expect_err(what);
            assert_eq!(e.kind(), qim_store::ErrorKind::CorruptEntry, "{what}: {e}");
            assert!(e.to_string().contains("regressed"), "{what}: {e}");
        };
        let (origin, top) = (MailboxSeq::origin(EPOCH), MailboxSeq::new(EPOCH, 100).unwrap());
        assert_eq!(
            store.range_scan(t, u, origin, top, 10).await.unwrap().groups.len(),
            1,
            "a live day is not inspected"
        );
        corrupt("a registration folding the live day", store.append_batch(&[entry(10, day(2))]).await);
        clock.set(day(1));
        corrupt("a read of the expired day", store.range_scan(t, u, origin, top, 10).await.map(drop));
        corrupt("a registration consuming it", store.append_batch(&[entry(11, day(3))]).await);
        clock.set(day(1).plus_millis(70 * MILLIS_PER_DAY));
        corrupt("a read after the proofs' slack", store.range_scan(t, u, origin, top, 10).await.map(drop));
    }

    /// A live day the ledger lists without its bucket proof fails the next registration (which
    /// folds every live day's proof), and an expired one every read, however long ago it
    /// expired: seed 000's `CorruptEntry` for a missing proof (proofs have no TTL while listed).
    #[tokio::test]
    async fn a_missing_proof_fails_closed_however_long_ago_its_day_expired() {
        let clock = Arc::new(ManualClock::new(T0));
        let (store, session, ks) = open_store(MailboxRetention::default(), clock.clone()).await;
        let t = fresh_tenant();
        let u = user(1);
        let entry = |n: u64, expires_at| proof_entry(t, u, n, expires_at);
        store.append_batch(&[entry(9, day(1))]).await.unwrap();
        session
            .query_unpaged(
                format!("DELETE FROM {ks}.mailbox_retention_bucket_v3 WHERE tenant_id = ? AND user_id = ?"),
                (&t.0[..], &u.0[..]),
            )
            .await
            .unwrap();
        let missing = |what: &str, r: Result<(), qim_store::StoreError>| {
            let e = r.expect_err(what);
            assert_eq!(e.kind(), qim_store::ErrorKind::CorruptEntry, "{what}: {e}");
            assert!(e.to_string().contains("missing"), "{what}: {e}");
        };
        let (origin, top) = (MailboxSeq::origin(EPOCH), MailboxSeq::new(EPOCH, 100).unwrap());
        missing("a registration folding the live day", store.append_batch(&[entry(10, day(2))]).await);
        for days in [0, 30, 59, 60, 400] {
            clock.set(day(1).plus_millis(days * MILLIS_PER_DAY));
            missing("a read of the expired day", store.range_scan(t, u, origin, top, 10).await.map(drop));
        }
    }

    /// Scans page through more rows than one query fetches.
    #[tokio::test]
    async fn range_scan_spans_several_query_pages() {
        let (store, _, _) = open_store(MailboxRetention::default(), Arc::new(ManualClock::new(T0))).await;
        let t = fresh_tenant();
        let u = user(1);
        let expires_at = MailboxRetention::default().expires_at(T0);
        let batch: Vec<MailboxEntry> = (1..=600u64)
            .map(|n| MailboxEntry {
                tenant: t,
                user: u,
                seq: MailboxSeq::new(EPOCH, n).unwrap(),
                expires_at,
                event: MailboxEvent { ordinal: 0, event_id: EventId([7; 16]), message: message(t) },
            })
            .collect();
        store.append_batch(&batch).await.unwrap();
        let (origin, top) = (MailboxSeq::origin(EPOCH), MailboxSeq::new(EPOCH, 1000).unwrap());
        let all = store.range_scan(t, u, origin, top, 10_000).await.unwrap();
        assert_eq!((all.groups.len(), all.covered), (600, top));
        assert!(all.groups.windows(2).all(|w| w[0].seq < w[1].seq));
        let part = store.range_scan(t, u, origin, top, 300).await.unwrap();
        assert_eq!((part.groups.len(), part.covered), (300, MailboxSeq::new(EPOCH, 300).unwrap()));
        let rest = store.range_scan(t, u, part.covered, top, 10_000).await.unwrap();
        assert_eq!((rest.groups.len(), rest.groups[0].seq), (300, MailboxSeq::new(EPOCH, 301).unwrap()));
    }

    /// A user's entries of one call go to the server in batches (70 entries: five of them):
    /// every entry lands, each with its own TTL (its expiry on the store's clock, plus the slack).
    #[tokio::test]
    async fn entries_written_in_batches_keep_each_its_own_ttl() {
        let (store, session, ks) = open_store(MailboxRetention::default(), Arc::new(ManualClock::new(T0))).await;
        let (t, u) = (fresh_tenant(), user(1));
        let expiry = |n: u64| if n.is_multiple_of(2) { day(1) } else { day(3) };
        let batch: Vec<MailboxEntry> = (1..=70u64).map(|n| proof_entry(t, u, n, expiry(n))).collect();
        store.append_batch(&batch).await.unwrap();
        let rows: Vec<(i64, Option<i32>)> = session
            .query_unpaged(
                format!("SELECT mailbox_seq, TTL(grp) FROM {ks}.mailbox_entry WHERE tenant_id = ? AND user_id = ?"),
                (&t.0[..], &u.0[..]),
            )
            .await
            .unwrap()
            .into_rows_result()
            .unwrap()
            .rows::<(i64, Option<i32>)>()
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows.len(), 70, "every entry of the call is written");
        for (raw, ttl) in rows {
            let n = MailboxSeq::from_u64(raw as u64).expect("a mailbox seq").position();
            let left = expiry(n).0 - T0.0;
            let want = (left + 999) / 1000 + qim_store::scylla::mailbox::ENTRY_TTL_SLACK_SECS;
            let ttl = i64::from(ttl.expect("every entry has a TTL"));
            assert!((want - 60..=want).contains(&ttl), "entry {n}: TTL {ttl} s, written as {want} s");
        }
    }

    /// A user idle for long stays available with the exact boundary: the proof of a listed day
    /// has no TTL, so the entries written after the user's last registration still count.
    /// The registration that drops the expired day gives its proof rows a short TTL.
    #[tokio::test]
    async fn long_idle_users_keep_their_proofs_until_a_registration_drops_the_day() {
        let clock = Arc::new(ManualClock::new(T0));
        let (store, session, ks) = open_store(MailboxRetention::default(), clock.clone()).await;
        let t = fresh_tenant();
        let u = user(1);
        let entry = |n: u64, expires_at| proof_entry(t, u, n, expires_at);
        store.append_batch(&[entry(4, day(1))]).await.unwrap();
        store.append_batch(&[entry(9, day(1))]).await.unwrap(); // the ledger still says 4
        clock.set(day(1).plus_millis(400 * MILLIS_PER_DAY));
        let (origin, top) = (MailboxSeq::origin(EPOCH), MailboxSeq::new(EPOCH, 100).unwrap());
        let nine = MailboxSeq::new(EPOCH, 9).unwrap();
        match store.range_scan(t, u, origin, top, 10).await {
            Err(qim_store::StoreError::CursorExpired { earliest }) => assert_eq!(earliest, nine, "the proof's seq"),
            other => panic!("expected CursorExpired, got {other:?}"),
        }
        store.append_batch(&[entry(11, day(402))]).await.expect("a new day registers, dropping the expired one");
        let ttls: Vec<Option<i32>> = session
            .query_unpaged(
                format!(
                    "SELECT TTL(max_seq) FROM {ks}.mailbox_retention_bucket_v3 \
                     WHERE tenant_id = ? AND user_id = ? AND expiry_day = ?"
                ),
                (&t.0[..], &u.0[..], day(1).day()),
            )
            .await
            .unwrap()
            .into_rows_result()
            .unwrap()
            .rows::<(Option<i32>,)>()
            .unwrap()
            .map(|r| r.unwrap().0)
            .collect();
        assert!(
            !ttls.is_empty() && ttls.iter().all(|t| t.is_some_and(|t| t > 0 && t <= 86_400)),
            "the dropped day's proof rows are retired with a day to live: {ttls:?}"
        );
        match store.range_scan(t, u, origin, top, 10).await {
            Err(qim_store::StoreError::CursorExpired { earliest }) => assert_eq!(earliest, nine, "now from the gap"),
            other => panic!("expected CursorExpired, got {other:?}"),
        }
        let page = store.range_scan(t, u, nine, top, 10).await.unwrap();
        assert_eq!(page.groups.iter().map(|g| g.seq.position()).collect::<Vec<_>>(), vec![11]);
    }

    /// A meta in the legacy format 4 (earlier builds, whose proofs were in the legacy table with
    /// a TTL): its days' proofs are read from both tables; a proof gone past the legacy slack is
    /// replaced by the ledger item; the next registration copies the live days' proofs into the
    /// current table and writes the meta in format 5, after which a missing proof fails closed.
    #[tokio::test]
    async fn a_legacy_meta_is_read_as_before_and_upgraded_by_the_next_registration() {
        let clock = Arc::new(ManualClock::new(T0));
        let (store, session, ks) = open_store(MailboxRetention::default(), clock.clone()).await;
        let t = fresh_tenant();
        let (u, w) = (user(1), user(2));
        let cql = |q: &str| q.replace("{ks}", &ks);
        let set_format = |who: UserId, version: i32| {
            let session = session.clone();
            let q =
                cql("UPDATE {ks}.mailbox_retention_meta SET format_version = ? WHERE tenant_id = ? AND user_id = ?");
            async move { session.query_unpaged(q, (version, &t.0[..], &who.0[..])).await.unwrap() }
        };
        let (origin, top) = (MailboxSeq::origin(EPOCH), MailboxSeq::new(EPOCH, 100).unwrap());
        // u: a live day whose legacy proof (9) is above the current table's (4).
        store.append_batch(&[proof_entry(t, u, 4, day(200))]).await.unwrap();
        let nine = MailboxSeq::new(EPOCH, 9).unwrap().as_u64() as i64;
        let stamp = qim_store::scylla::mailbox::highest_wins_timestamp(nine);
        session
            .query_unpaged(
                cql("INSERT INTO {ks}.mailbox_retention_bucket_v2 \
                     (tenant_id, user_id, expiry_day, epoch, max_seq, expires_at) VALUES (?, ?, ?, ?, ?, ?) \
                     USING TIMESTAMP ?"),
                (&t.0[..], &u.0[..], day(200).day(), i32::from(EPOCH.0), nine, day(200).0, stamp),
            )
            .await
            .unwrap();
        set_format(u, 4).await;
        store.append_batch(&[proof_entry(t, u, 10, day(300))]).await.expect("a registration of a legacy meta");
        let format = session
            .query_unpaged(
                cql("SELECT format_version FROM {ks}.mailbox_retention_meta WHERE tenant_id = ? AND user_id = ?"),
                (&t.0[..], &u.0[..]),
            )
            .await
            .unwrap()
            .into_rows_result()
            .unwrap()
            .single_row::<(i32,)>()
            .unwrap();
        assert_eq!(format.0, 5, "the registration writes the current format");
        let copied = session
            .query_unpaged(
                cql("SELECT max_seq FROM {ks}.mailbox_retention_bucket_v3 \
                     WHERE tenant_id = ? AND user_id = ? AND expiry_day = ?"),
                (&t.0[..], &u.0[..], day(200).day()),
            )
            .await
            .unwrap()
            .into_rows_result()
            .unwrap()
            .single_row::<(i64,)>()
            .unwrap();
        assert_eq!(copied.0, nine, "the legacy proof was copied into the current table");

        // w: an expired day whose proof is gone (its legacy TTL ran out, simulated).
        store.append_batch(&[proof_entry(t, w, 4, day(1))]).await.unwrap();
        store.append_batch(&[proof_entry(t, w, 9, day(1))]).await.unwrap(); // the ledger still says 4
        session
            .query_unpaged(
                cql("DELETE FROM {ks}.mailbox_retention_bucket_v3 WHERE tenant_id = ? AND user_id = ?"),
                (&t.0[..], &w.0[..]),
            )
            .await
            .unwrap();
        set_format(w, 4).await;
        clock.set(day(1).plus_millis(70 * MILLIS_PER_DAY));
        match store.range_scan(t, w, origin, top, 10).await {
            Err(qim_store::StoreError::CursorExpired { earliest }) => {
                assert_eq!(earliest, MailboxSeq::new(EPOCH, 4).unwrap(), "the legacy ledger item stands in")
            }
            other => panic!("expected CursorExpired, got {other:?}"),
        }
        set_format(w, 5).await;
        let e = store.range_scan(t, w, origin, top, 10).await.expect_err("the current format fails closed");
        assert_eq!(e.kind(), qim_store::ErrorKind::CorruptEntry, "{e}");
    }

    /// A stale writer's lower watermark (lower write timestamp) can not move it back.
    #[tokio::test]
    async fn a_stale_watermark_write_loses() {
        let (store, session, ks) = open_store(MailboxRetention::default(), Arc::new(ManualClock::new(T0))).await;
        let (t, shard) = (fresh_tenant(), fresh_shard());
        let lane = LaneId::new(3).unwrap();
        let members: Vec<UserId> = (0..).map(user).filter(|u| lane_of(&t, u) == lane).take(1).collect();
        let msg = message(t);
        let m = DispatchManifest::new(DispatchId { message_id: msg.message_id, shard }, msg, members);
        let r = store.begin_dispatch(EPOCH, &m, 5).await.unwrap();
        store.append_chunk(&r, &m, ChunkId { lane, index: 0 }).await.unwrap();
        store.mark_chunk_completed(m.id, ChunkId { lane, index: 0 }).await.unwrap();
        assert_eq!(store.advance_watermark(shard, lane, 5).await.unwrap().through, Some(5));
        // A zombie writes the value it computed before, stamped by the same rule (its lower offset).
        session
            .query_unpaged(
                format!(
                    "UPDATE {ks}.mailbox_lane_watermark USING TIMESTAMP ? SET through = 2 WHERE shard = ? AND lane = ?"
                ),
                (qim_store::scylla::mailbox::highest_wins_timestamp(2), i32::from(shard.0), i32::from(lane.get())),
            )
            .await
            .unwrap();
        assert_eq!(store.lane_watermark(shard, lane).await.unwrap().through, Some(5));
    }

    /// The DDL is idempotent (`IF NOT EXISTS`), and `connect` only prepares.
    #[tokio::test]
    async fn ddl_is_idempotent() {
        let (session, ks) = session_and_keyspace().await;
        for ddl in mailbox_table_ddl(&ks) {
            exec(&session, ddl).await;
        }
        let missing = ScyllaMailboxStore::connect(
            session,
            "qim_mbx_no_such_keyspace",
            MailboxRetention::default(),
            Arc::new(ManualClock::new(T0)),
        )
        .await;
        assert_eq!(missing.unwrap_err().kind(), qim_store::ErrorKind::Unavailable, "connect never creates tables");
    }

    /// A dead address fails with a message naming Cassandra and the command that starts it.
    #[tokio::test]
    async fn unreachable_cassandra_fails_naming_the_stack() {
        let err = connect("127.0.0.1:1").await.expect_err("nothing listens on port 1");
        assert!(err.contains("Cassandra") && err.contains("deploy/local/stack up"), "{err}");
    }
}

/// The memory backend is the reference: the same random operations against both stores, on one
/// manual clock, must give the same answers (values, or error kinds and `CursorExpired`
/// boundaries). 10 random runs of 300 steps (the runner is `qim_store::testsuite::differential`),
/// each with a store, clock, tenant and shard of its own, so the runs go concurrently: one after
/// the other they took four to six minutes, most of it waiting on Cassandra's LWTs.
#[tokio::test(flavor = "current_thread")]
async fn cql_answers_like_the_memory_reference() {
    use qim_store::testsuite::differential;
    let fresh = qim_store::testsuite::fixtures::fresh_bytes();
    let base = u16::from_be_bytes([fresh[15], fresh[14]]) & 0x7fff;
    let runs = (0..10u64).map(|seed| async move {
        let clock = differential::clock();
        let (cql, _, _) = open_store(differential::retention(), clock.clone()).await;
        let shard = qim_store::mailbox::ShardId(0x8000 | base.wrapping_add(seed as u16));
        let seed = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x51ed;
        let mut paths = differential::Paths::new();
        differential::compare_with_memory(&cql, clock, seed, 300, shard, &mut paths).await;
        paths
    });
    let mut paths = differential::Paths::new();
    for run in futures_util::future::join_all(runs).await {
        for (path, n) in run {
            *paths.entry(path).or_default() += n;
        }
    }
    differential::assert_every_path_reached(&paths);
}
