//! The `MessageStore` contract suite against the Scylla backend, plus its migration, readiness,
//! flavour and bit-63 tests.
//!
//! Needs Cassandra (or ScyllaDB) at `QIM_TEST_SCYLLA_HOSTS` (default `127.0.0.1:9042`), DC
//! `QIM_TEST_SCYLLA_DC` (default `datacenter1`), RF `QIM_TEST_SCYLLA_RF` (default 1). The suite
//! runs in `QIM_TEST_SCYLLA_KEYSPACE`, or in a fresh `qim_test_<pid>_<nanos>` keyspace migrated
//! once per process. When the server is missing, every test fails naming it and
//! `deploy/local/stack up`; nothing is skipped. The flavour test expects Cassandra (the local
//! stack) unless `QIM_TEST_SCYLLA_FLAVOUR=scylla`.

use crate::scylla_support;

use std::sync::Arc;

use qim_store::clock::ManualClock;
use qim_store::ids::ConversationSeq;
use qim_store::retention::RetentionPolicy;
use qim_store::scylla::schema::Flavour;
use qim_store::scylla::{migrate, read_flavour, readiness, ScyllaConfig, ScyllaMessageStore};
use qim_store::testsuite::scylla_keyspace::migrate_retrying;
use qim_store::testsuite::MessageHarness;
use qim_store::ErrorKind;
use scylla::client::session::Session;
use scylla_support::{connect, describe, Keyspace, Scylla};

/// This file's keyspace (see [`Keyspace`]).
static KEYSPACE: Keyspace = Keyspace::new("scylla_message_contract");

mod contract {
    use super::*;
    qim_store::message_store_contract_suite!(Scylla::of(&KEYSPACE));
}

/// The durable seq high-water mark (`seq_high_water`), which the Redis hot tier leases from.
mod high_water {
    use super::*;
    qim_store::seq_high_water_contract_suite!(Scylla::of(&KEYSPACE));
}

/// A configuration like the suite's, for a keyspace of its own.
fn fresh_config(tag: &str) -> ScyllaConfig {
    let mut c = KEYSPACE.config().clone();
    c.keyspace = format!("{}_{tag}", qim_store::scylla::config::generated_test_keyspace());
    c
}

async fn drop_keyspace(session: &Session, keyspace: &str) {
    if let Err(e) = qim_testkit::scylla::drop_keyspace(session, keyspace).await {
        eprintln!("warning: could not drop the test keyspace: {e:#}");
    }
}

/// The tables and columns of `keyspace`, as the server describes them.
async fn schema_snapshot(session: &Session, keyspace: &str) -> Vec<(String, String, String, String)> {
    let rows = session
        .query_unpaged(
            "SELECT table_name, column_name, kind, type FROM system_schema.columns WHERE keyspace_name = ?",
            (keyspace,),
        )
        .await
        .expect("reading system_schema.columns")
        .into_rows_result()
        .expect("rows");
    let mut out: Vec<_> = rows.rows::<(String, String, String, String)>().expect("typed").map(|r| r.unwrap()).collect();
    out.sort();
    out
}

#[tokio::test]
async fn readiness_is_false_before_migrate_and_migrate_twice_changes_nothing() {
    let config = fresh_config("mig");
    let session = connect(&config).await;
    let before = readiness(&session, &config).await.expect("readiness answers");
    assert!(!before.is_ready(), "a keyspace never migrated is not ready");
    assert!(before.problems[0].contains("does not exist"), "{:?}", before.problems);
    let clock: Arc<ManualClock> = Arc::new(ManualClock::new(qim_store::testsuite::fixtures::T0));
    let second = connect(&config).await;
    let refused = ScyllaMessageStore::with_session(second, &config, RetentionPolicy::default(), clock).await;
    assert!(refused.is_err(), "connecting prepares only: it must fail, not create, without a schema");
    assert!(!readiness(&session, &config).await.unwrap().is_ready(), "connecting created nothing");

    migrate_retrying(&session, &config).await;
    assert!(readiness(&session, &config).await.unwrap().is_ready());
    let first = schema_snapshot(&session, &config.keyspace).await;
    assert!(!first.is_empty());
    migrate_retrying(&session, &config).await;
    assert_eq!(schema_snapshot(&session, &config.keyspace).await, first, "the second migrate changed the schema");
    assert!(readiness(&session, &config).await.unwrap().is_ready());
    drop_keyspace(&session, &config.keyspace).await;
}

#[tokio::test]
async fn migrate_refuses_an_existing_keyspace_with_another_rf() {
    let config = fresh_config("rf");
    let session = connect(&config).await;
    let other_rf = config.replication_factor + 1;
    session
        .query_unpaged(
            format!(
                "CREATE KEYSPACE {} WITH replication = {{'class': 'NetworkTopologyStrategy', '{}': {other_rf}}}",
                config.keyspace, config.local_dc
            ),
            &[],
        )
        .await
        .expect("creating a keyspace with another RF");
    let err = migrate(&session, &config).await.expect_err("migrate must refuse another RF");
    assert_eq!(err.kind(), ErrorKind::InvariantViolation, "{err}");
    assert!(err.to_string().contains(&config.keyspace) && err.to_string().contains("never altered"), "{err}");
    let state = readiness(&session, &config).await.unwrap();
    assert!(!state.is_ready());
    assert!(state.problems.iter().any(|p| p.contains("replication factor")), "{:?}", state.problems);
    assert!(state.problems.iter().any(|p| p.contains("message_commit")), "no table was created: {:?}", state.problems);
    drop_keyspace(&session, &config.keyspace).await;
}

/// Creates `keyspace` with the configured replication and one hand-made `message_commit` table.
async fn keyspace_with_commit_table(session: &Session, config: &ScyllaConfig, columns: &str) {
    let ks = &config.keyspace;
    let create = format!(
        "CREATE KEYSPACE {ks} WITH replication = {{'class': 'NetworkTopologyStrategy', '{}': {}}}",
        config.local_dc, config.replication_factor
    );
    session.query_unpaged(create, &[]).await.expect("creating the keyspace");
    let table = format!(
        "CREATE TABLE {ks}.message_commit ({columns}, PRIMARY KEY ((tenant_id, sender_id, client_message_id)))"
    );
    session.query_unpaged(table, &[]).await.expect("creating an older message_commit");
}

#[tokio::test]
async fn migrate_adds_only_the_known_nullable_columns_an_existing_table_lacks() {
    let config = fresh_config("cols");
    let session = connect(&config).await;
    // An older message_commit without committed_at (a column added by a later release).
    let older = "tenant_id blob, sender_id blob, client_message_id text, request_blob blob, commit_blob blob, \
                 state int, created_at bigint";
    keyspace_with_commit_table(&session, &config, older).await;
    let before = readiness(&session, &config).await.unwrap();
    assert!(before.problems.iter().any(|p| p.contains("message_commit.committed_at")), "{:?}", before.problems);
    migrate_retrying(&session, &config).await;
    let columns = schema_snapshot(&session, &config.keyspace).await;
    let added = columns.iter().find(|(t, c, _, _)| t == "message_commit" && c == "committed_at");
    assert_eq!(added.map(|(_, _, kind, ty)| (kind.as_str(), ty.as_str())), Some(("regular", "bigint")));
    assert!(readiness(&session, &config).await.unwrap().is_ready());
    drop_keyspace(&session, &config.keyspace).await;
}

#[tokio::test]
async fn migrate_refuses_a_column_of_another_type() {
    let config = fresh_config("type");
    let session = connect(&config).await;
    let wrong = "tenant_id blob, sender_id blob, client_message_id text, request_blob blob, commit_blob blob, \
                 state text, created_at bigint, committed_at bigint";
    keyspace_with_commit_table(&session, &config, wrong).await;
    let err = migrate(&session, &config).await.expect_err("a column of another type is refused");
    assert_eq!(err.kind(), ErrorKind::InvariantViolation, "{err}");
    assert!(err.to_string().contains("message_commit.state is text"), "{err}");
    let state = readiness(&session, &config).await.unwrap();
    assert!(state.problems.iter().any(|p| p.contains("message_commit.state")), "{:?}", state.problems);
    drop_keyspace(&session, &config.keyspace).await;
}

#[tokio::test]
async fn a_data_centre_the_cluster_does_not_have_is_refused_by_name() {
    let mut config = fresh_config("dc");
    config.local_dc = "no_such_dc".to_owned();
    let session = connect(&config).await;
    let err = migrate(&session, &config).await.expect_err("an unknown DC must be refused");
    assert_eq!(err.kind(), ErrorKind::InvariantViolation, "{err}");
    assert!(err.to_string().contains("\"no_such_dc\" is not in the cluster"), "{err}");
    let state = readiness(&session, &config).await.unwrap();
    assert!(!state.is_ready() && state.problems[0].contains("no_such_dc"), "{:?}", state.problems);
}

#[tokio::test]
async fn the_local_stack_is_detected_as_cassandra() {
    let session = connect(KEYSPACE.config()).await;
    let flavour = read_flavour(&session).await.unwrap_or_else(|e| panic!("{}", describe(&e)));
    let expected = std::env::var("QIM_TEST_SCYLLA_FLAVOUR").map_or(Flavour::Cassandra, |v| {
        if v == "scylla" {
            Flavour::Scylla
        } else {
            Flavour::Cassandra
        }
    });
    assert_eq!(flavour, expected);
}

#[tokio::test]
async fn bit_63_values_are_refused_before_reaching_cql() {
    use qim_store::message::{Direction, HistoryQuery, ReadPosition};
    use qim_store::testsuite::fixtures::{clock, fresh_conversation, fresh_tenant, user, MembershipAuthorizer};

    let h = Scylla::of(&KEYSPACE);
    let store = h.open(RetentionPolicy::default(), clock()).await;
    let (t, conv) = (fresh_tenant(), fresh_conversation());
    let auth = MembershipAuthorizer::default();
    auth.admit(t, conv, user(1));
    let q = HistoryQuery {
        tenant: t,
        conversation: conv,
        viewer: user(1),
        direction: Direction::Older,
        anchor: Some(ConversationSeq(1 << 63)),
        max_items: 10,
        max_bytes: 1 << 20,
    };
    let err = store.history_page(&q, &auth).await.expect_err("anchor with bit 63");
    assert_eq!(err.kind(), ErrorKind::InvariantViolation, "{err}");
    let pos = ReadPosition { conversation: conv, read_through: ConversationSeq(u64::MAX) };
    let err = store.conversation_summaries(t, user(1), &[pos]).await.expect_err("read position with bit 63");
    assert_eq!(err.kind(), ErrorKind::InvariantViolation, "{err}");
    let ok = ReadPosition { conversation: conv, read_through: ConversationSeq(i64::MAX as u64) };
    assert_eq!(store.conversation_summaries(t, user(1), &[ok]).await.unwrap()[0].last_seq, None);
}

#[tokio::test]
async fn a_mark_without_a_holder_column_value_moves_like_one_with_none() {
    // Rows from before the `holder` column have it null; they read, and move, as "no holder".
    let scylla = Scylla::of(&KEYSPACE);
    let marks = qim_store::testsuite::SeqHighWaterHarness::open(&scylla).await;
    let session = connect(KEYSPACE.config()).await;
    let (t, c) = (qim_store::testsuite::fixtures::fresh_tenant(), qim_store::testsuite::fixtures::fresh_conversation());
    let insert = format!(
        "INSERT INTO {}.seq_high_water (tenant_id, conversation_id, high_water) VALUES (?, ?, 7)",
        KEYSPACE.config().keyspace
    );
    session.query_unpaged(insert, (&t.0[..], &c.0[..])).await.expect("a legacy row");
    let legacy = marks.high_water(t, c).await.expect("read");
    assert_eq!(legacy, qim_store::HighWater { through: ConversationSeq(7), holder: String::new() });
    let to = qim_store::HighWater { through: ConversationSeq(71), holder: "run".into() };
    assert_eq!(marks.advance_high_water(t, c, &legacy, &to).await.expect("moved"), None);
    assert_eq!(marks.high_water(t, c).await.expect("read"), to);
    let raised = qim_store::HighWater { through: ConversationSeq(200), holder: String::new() };
    marks.raise_high_water(t, c, raised.through).await.expect("raised");
    assert_eq!(marks.high_water(t, c).await.expect("read"), raised, "a raise clears the holder");
    let next = qim_store::HighWater { through: ConversationSeq(264), holder: "other".into() };
    assert_eq!(marks.advance_high_water(t, c, &raised, &next).await.expect("moved"), None, "'' moves too");
}
