//! `migrate`: creates or verifies the Scylla keyspace and tables (never alters an existing
//! keyspace), then re-checks readiness.

use qim_store::scylla::{migrate as migrate_keyspace, open_session, readiness, ScyllaConfig};

/// Migrates `config`'s keyspace; the summary, or the reason it failed.
pub async fn migrate(config: &ScyllaConfig) -> Result<String, String> {
    let session = open_session(config).await.map_err(|e| e.to_string())?;
    migrate_keyspace(&session, config).await.map_err(|e| format!("migrating keyspace {}: {e}", config.keyspace))?;
    let ready = readiness(&session, config).await.map_err(|e| e.to_string())?;
    if !ready.is_ready() {
        return Err(format!("keyspace {} is not ready after migrating: {ready:?}", config.keyspace));
    }
    Ok(format!(
        "keyspace {} ready in data centre {} with replication factor {}",
        config.keyspace, config.local_dc, config.replication_factor
    ))
}

/// Runs `migrate` against the production Scylla settings of `lookup`; an unset required
/// variable (`QIM_SCYLLA_HOSTS`, `_KEYSPACE`, `_DC`, `_RF`) fails before anything connects.
pub async fn migrate_from(lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    migrate(&ScyllaConfig::production_from(lookup).map_err(|e| e.to_string())?).await
}
