//! Shared by the Scylla test binaries: the test configuration, a session that fails loudly when
//! Cassandra is missing, the once-per-process migration and the contract-suite harness.
//!
//! Prefer the generated keyspace: a reused `QIM_TEST_SCYLLA_KEYSPACE` keeps the unfinished
//! commits earlier runs left at the suite's fixed start time `T0` (recovery entries of unfinished
//! commits never expire), and its recovery cursor where the clocks of earlier runs moved it.
//!
//! The recovery cursor is one row per keyspace and follows the scanning store's clock, which is
//! how production uses it (one wall clock). Tests whose manual clocks jump and that check what
//! recovery finds open their store with [`isolated_store`], in a keyspace of their own.
//!
//! Each `#[tokio::test]` has its own runtime, so each opened store gets its own session (a
//! session's connections belong to the runtime that made them); only the migration is shared.

#![allow(dead_code)] // not every test uses every helper

use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use qim_store::clock::{Clock, ManualClock};
use qim_store::ids::{ConversationId, ConversationSeq, TenantId, UnixMillis};
use qim_store::message::{CommitIntent, MessageRecord, Publication, PublishedRecord};
use qim_store::retention::{RetentionClass, RetentionPolicy};
use qim_store::scylla::config::generated_test_keyspace;
use qim_store::scylla::schema::SEQ_BUCKET_SIZE;
use qim_store::scylla::{open_session, ScyllaConfig, ScyllaMessageStore};
use qim_store::testsuite::fixtures::{fresh_message_id, request, user};
pub use qim_store::testsuite::scylla_keyspace::describe;
use qim_store::testsuite::scylla_keyspace::{self, migrate_retrying};
use qim_store::testsuite::MessageHarness;
use qim_store::MessageStore;
use scylla::client::session::Session;

/// The test cluster's configuration, read once per process; its keyspace is the base name the
/// suites' own keyspaces ([`Keyspace`]) and [`isolated_store`] replace.
fn base_config() -> &'static ScyllaConfig {
    static CONFIG: OnceLock<ScyllaConfig> = OnceLock::new();
    CONFIG.get_or_init(|| ScyllaConfig::test_from_env().unwrap_or_else(|e| panic!("test configuration: {e}")))
}

/// One test file's keyspace, named and migrated once per run (see
/// `qim_store::testsuite::scylla_keyspace`: the process under `cargo test`, every process of a
/// nextest run): each file's tests share it, and no other file's tests write to it (the recovery
/// cursor follows the clocks of the stores that scan it, so suites with different clocks must not
/// share one). A set `QIM_TEST_SCYLLA_KEYSPACE` is used by every file as it is.
pub struct Keyspace {
    /// The file's name among the run's keyspaces.
    label: &'static str,
    config: OnceLock<ScyllaConfig>,
}

impl Keyspace {
    pub const fn new(label: &'static str) -> Self {
        Self { label, config: OnceLock::new() }
    }

    /// The configuration of this file's keyspace.
    pub fn config(&self) -> &ScyllaConfig {
        self.config.get_or_init(|| {
            let mut config = base_config().clone();
            if std::env::var_os("QIM_TEST_SCYLLA_KEYSPACE").is_none() {
                config.keyspace = scylla_keyspace::run_keyspace_name(self.label);
            }
            config
        })
    }

    /// Migrates this file's keyspace once per run (later calls wait for the first).
    pub async fn migrated(&self, _session: &Session) {
        scylla_keyspace::migrate_once_per_run(self.config()).await;
    }
}

/// Polls `check` every 100 ms until it holds, or panics naming `what` after `timeout`: for
/// rows whose TTL runs out.
pub async fn wait_until<F, Fut>(what: &str, timeout: std::time::Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A session to the test server, or a panic naming Cassandra and how to start it.
pub async fn connect(config: &ScyllaConfig) -> Session {
    open_session(config).await.unwrap_or_else(|e| {
        panic!(
            "Cassandra is not reachable at {}: start the local stack with `deploy/local/stack up` \
             (or point QIM_TEST_SCYLLA_HOSTS at a running Cassandra/ScyllaDB); cause: {}",
            config.hosts.join(","),
            describe(&e)
        )
    })
}

/// A store in a fresh keyspace of its own, migrated now (a few seconds): for tests that move the
/// recovery cursor with their own clock. The keyspace is dropped by a later run's sweep.
pub async fn isolated_store(policy: RetentionPolicy, clock: Arc<dyn Clock>) -> ScyllaMessageStore {
    isolated_stores(policy, vec![clock]).await.0.remove(0)
}

/// Like [`isolated_store`], one store per clock, all in one fresh keyspace (writers whose clocks
/// differ), and that keyspace's settings.
pub async fn isolated_stores(
    policy: RetentionPolicy,
    clocks: Vec<Arc<dyn Clock>>,
) -> (Vec<ScyllaMessageStore>, ScyllaConfig) {
    let mut isolated = base_config().clone();
    isolated.keyspace = generated_test_keyspace();
    migrate_retrying(&connect(&isolated).await, &isolated).await;
    let mut stores = Vec::new();
    for clock in clocks {
        let store = ScyllaMessageStore::with_session(connect(&isolated).await, &isolated, policy, clock)
            .await
            .unwrap_or_else(|e| panic!("connecting the store: {}", describe(&e)));
        stores.push(store);
    }
    (stores, isolated)
}

/// Opens Scylla stores in one file's [`Keyspace`] and keeps a typed handle to each, for sabotage
/// by direct CQL.
pub struct Scylla {
    keyspace: &'static Keyspace,
    stores: Mutex<Vec<ScyllaMessageStore>>,
}

impl Scylla {
    pub fn of(keyspace: &'static Keyspace) -> Self {
        Self { keyspace, stores: Mutex::default() }
    }

    pub fn store(&self) -> ScyllaMessageStore {
        self.stores.lock().unwrap().last().cloned().expect("a store was opened")
    }
}

pub fn record_key(
    tenant: TenantId,
    conversation: ConversationId,
    seq: ConversationSeq,
) -> (Vec<u8>, Vec<u8>, i64, i64) {
    let bucket = i64::try_from(seq.0 / SEQ_BUCKET_SIZE).expect("test seqs are small");
    (tenant.0.to_vec(), conversation.0.to_vec(), bucket, i64::try_from(seq.0).expect("test seqs are small"))
}

/// Opens stores of the suite's keyspace as seq high-water stores.
#[async_trait]
impl qim_store::testsuite::SeqHighWaterHarness for Scylla {
    async fn open(&self) -> Arc<dyn qim_store::SeqHighWater> {
        let clock = Arc::new(ManualClock::new(qim_store::testsuite::fixtures::T0));
        let store = MessageHarness::open(self, RetentionPolicy::default(), clock).await;
        drop(store);
        Arc::new(self.store())
    }
}

#[async_trait]
impl MessageHarness for Scylla {
    async fn open(&self, policy: RetentionPolicy, clock: Arc<ManualClock>) -> Arc<dyn MessageStore> {
        let session = connect(self.keyspace.config()).await;
        self.keyspace.migrated(&session).await;
        let store = ScyllaMessageStore::with_session(session, self.keyspace.config(), policy, clock)
            .await
            .unwrap_or_else(|e| panic!("connecting the store: {}", describe(&e)));
        self.stores.lock().unwrap().push(store.clone());
        Arc::new(store)
    }

    async fn remove_record(
        &self,
        _: &Arc<dyn MessageStore>,
        tenant: TenantId,
        conversation: ConversationId,
        seq: ConversationSeq,
    ) {
        let store = self.store();
        let cql = format!(
            "DELETE FROM {}.message_record WHERE tenant_id = ? AND conversation_id = ? AND seq_bucket = ? \
             AND conversation_seq = ?",
            store.config().keyspace
        );
        store.session().query_unpaged(cql, record_key(tenant, conversation, seq)).await.expect("sabotage: remove");
    }

    async fn overwrite_record(
        &self,
        _: &Arc<dyn MessageStore>,
        tenant: TenantId,
        conversation: ConversationId,
        seq: ConversationSeq,
        bytes: Vec<u8>,
    ) {
        let store = self.store();
        let cql = format!(
            "INSERT INTO {}.message_record (tenant_id, conversation_id, seq_bucket, conversation_seq, record_blob) \
             VALUES (?, ?, ?, ?, ?)",
            store.config().keyspace
        );
        let (t, c, b, s) = record_key(tenant, conversation, seq);
        store.session().query_unpaged(cql, (t, c, b, s, bytes)).await.expect("sabotage: overwrite");
    }
}

/// The suites' retention: 30 days by default.
pub fn default_policy() -> RetentionPolicy {
    RetentionPolicy::with_default_days(30).expect("30 days is legal")
}

/// A record `n` of a conversation, as the writer would have published it.
pub fn archived_record(t: TenantId, c: ConversationId, n: u64, body: &str, created_at: UnixMillis) -> MessageRecord {
    let req = request(t, user(1), &format!("m{n}"), c, body.as_bytes());
    let intent = CommitIntent {
        request: req,
        seq: ConversationSeq(n),
        message_id: fresh_message_id(),
        created_at,
        publication: None,
    };
    intent.record(default_policy().expires_at(RetentionClass::Default, created_at))
}

/// `records` as published at partition 3 from `offset` on, one offset each.
pub fn at(records: &[MessageRecord], offset: i64) -> Vec<PublishedRecord> {
    records
        .iter()
        .enumerate()
        .map(|(i, r)| PublishedRecord {
            record: r.clone(),
            publication: Publication { partition: 3, offset: offset + i as i64 },
        })
        .collect()
}
