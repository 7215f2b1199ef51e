//! The Scylla test keyspace a test process shares, migrated once.

use crate::scylla::{migrate, open_session, ScyllaConfig};

/// This process's test keyspace ([`ScyllaConfig::test_from_env`]: a fresh
/// `qim_test_<pid>_<nanos>` unless `QIM_TEST_SCYLLA_KEYSPACE` names one), created and migrated
/// by the first caller; later callers (any runtime) wait for it and get the same configuration.
///
/// # Panics
///
/// When the test cluster is not configured, Cassandra does not answer (the message says how to
/// start the local stack), or the migration fails.
pub async fn migrated_test_keyspace() -> ScyllaConfig {
    static CONFIG: tokio::sync::OnceCell<ScyllaConfig> = tokio::sync::OnceCell::const_new();
    CONFIG
        .get_or_init(|| async {
            let config = ScyllaConfig::test_from_env().unwrap_or_else(|e| panic!("{e}"));
            let session = open_session(&config).await.unwrap_or_else(|e| {
                panic!("{e}; start the local stack with `deploy/local/stack up` (or point QIM_TEST_SCYLLA_HOSTS at a cluster)")
            });
            migrate(&session, &config).await.unwrap_or_else(|e| panic!("migrating test keyspace {}: {e}", config.keyspace));
            config
        })
        .await
        .clone()
}
