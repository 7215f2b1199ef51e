//! The membership contract suite against the Scylla backend, plus checks of its table and of
//! failing closed on rows that are not what the schema says.
//!
//! Needs Cassandra (or ScyllaDB) at `QIM_TEST_SCYLLA_HOSTS` (default `127.0.0.1:9042`), DC
//! `QIM_TEST_SCYLLA_DC` (default `datacenter1`), RF `QIM_TEST_SCYLLA_RF` (default 1). The suite
//! runs in `QIM_TEST_SCYLLA_KEYSPACE`, or in a fresh `qim_test_<pid>_<nanos>` keyspace migrated
//! once per process (`migrate` creates `conversation_member` with the other tables). When the
//! server is missing, every test fails naming it and `deploy/local/stack up`; nothing is skipped.

use crate::scylla_support;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use qim_store::scylla::ScyllaMembershipStore;
use qim_store::testsuite::MembershipHarness;
use qim_store::MembershipStore;
use scylla_support::{connect, describe, Keyspace};

/// This file's keyspace (see [`Keyspace`]).
static KEYSPACE: Keyspace = Keyspace::new("scylla_membership_contract");

/// A store on its own session (each test has its own runtime) in the migrated test keyspace.
async fn open_store() -> ScyllaMembershipStore {
    let session = connect(KEYSPACE.config()).await;
    KEYSPACE.migrated(&session).await;
    ScyllaMembershipStore::with_session(session, KEYSPACE.config())
        .await
        .unwrap_or_else(|e| panic!("connecting the membership store: {}", describe(&e)))
}

/// Opens Scylla stores and keeps a typed handle to the last one.
#[derive(Default)]
struct Scylla {
    stores: Mutex<Vec<ScyllaMembershipStore>>,
}

#[async_trait]
impl MembershipHarness for Scylla {
    async fn open(&self) -> Arc<dyn MembershipStore> {
        let store = open_store().await;
        self.stores.lock().unwrap().push(store.clone());
        Arc::new(store)
    }
}

mod contract {
    use super::*;
    qim_store::membership_store_contract_suite!(Scylla::default());
}

/// Scylla-specific checks beyond the shared contract.
mod scylla_specific {
    use super::*;
    use qim_store::testsuite::fixtures::{assert_kind, fresh_conversation, fresh_tenant, user};
    use qim_store::ErrorKind;

    /// `migrate` created `conversation_member` with `(tenant_id, conversation_id)` as partition
    /// key and `user_id` as the (ascending) clustering column, and readiness requires it.
    #[tokio::test]
    async fn the_table_is_migrated_with_its_key() {
        let store = open_store().await;
        let rows = store
            .session()
            .query_unpaged(
                "SELECT column_name, kind, position, clustering_order, type FROM system_schema.columns \
                 WHERE keyspace_name = ? AND table_name = ?",
                (KEYSPACE.config().keyspace.as_str(), "conversation_member"),
            )
            .await
            .expect("reading system_schema.columns")
            .into_rows_result()
            .expect("rows");
        let mut columns: Vec<(String, String, i32, String, String)> =
            rows.rows().expect("typed").map(|r| r.expect("row")).collect();
        columns.sort();
        let col = |name: &str, kind: &str, position: i32, order: &str| {
            (name.to_owned(), kind.to_owned(), position, order.to_owned(), "blob".to_owned())
        };
        assert_eq!(
            columns,
            vec![
                col("conversation_id", "partition_key", 1, "none"),
                col("tenant_id", "partition_key", 0, "none"),
                col("user_id", "clustering", 0, "asc"),
            ]
        );
        let state = store.readiness().await.unwrap_or_else(|e| panic!("{}", describe(&e)));
        assert!(state.is_ready(), "{:?}", state.problems);
        assert!(qim_store::scylla::schema::TABLES.contains(&"conversation_member"));
    }

    /// A `user_id` that is not 16 bytes is `CorruptEntry` for every read.
    #[tokio::test]
    async fn a_user_id_of_another_length_fails_closed() {
        let store = open_store().await;
        let (t, c) = (fresh_tenant(), fresh_conversation());
        store.add_members(t, c, &[user(1)]).await.unwrap();
        let cql = format!(
            "INSERT INTO {}.conversation_member (tenant_id, conversation_id, user_id) VALUES (?, ?, ?)",
            KEYSPACE.config().keyspace
        );
        store.session().query_unpaged(cql, (&t.0[..], &c.0[..], &[0xffu8; 5][..])).await.expect("sabotage: short id");
        assert_kind(store.members_page(t, c, None, 10).await, ErrorKind::CorruptEntry, "a 5-byte user_id");
        assert!(store.is_member(t, c, user(1)).await.unwrap(), "reading one well-formed row is fine");
    }

    /// Two stores (as two writer processes would) add the same users at once: the membership is
    /// exact even though, without a conditional write, both may count a user.
    #[tokio::test]
    async fn concurrent_adds_keep_the_membership_exact() {
        let (a, b) = (open_store().await, open_store().await);
        let (t, c) = (fresh_tenant(), fresh_conversation());
        let users: Vec<_> = (0..300).map(user).collect();
        let (x, y) = tokio::join!(a.add_members(t, c, &users), b.add_members(t, c, &users));
        let counted = x.unwrap() + y.unwrap();
        assert!((300..=600).contains(&counted), "each user counted once or twice: {counted}");
        assert_eq!(qim_store::all_members(&a, t, c).await.unwrap(), users);
        assert_eq!(a.add_members(t, c, &users).await.unwrap(), 0);
    }

    /// A removal issued right after an add through the same store wins, whatever the wall
    /// clock does within the microsecond: the store's write timestamps strictly increase.
    #[tokio::test]
    async fn an_add_then_a_remove_through_one_store_apply_in_order() {
        let store = open_store().await;
        let t = fresh_tenant();
        for _ in 0..20 {
            let c = fresh_conversation();
            store.add_members(t, c, &[user(1)]).await.unwrap();
            store.remove_members(t, c, &[user(1)]).await.unwrap();
            store.add_members(t, c, &[user(1)]).await.unwrap();
            store.remove_members(t, c, &[user(1)]).await.unwrap();
            assert!(!store.is_member(t, c, user(1)).await.unwrap());
        }
    }
}
