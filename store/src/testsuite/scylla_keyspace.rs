//! The Scylla test keyspaces a test *run* shares, each migrated once.
//!
//! `cargo test` runs a binary's tests as threads of one process; cargo-nextest runs every test
//! in a process of its own. A migration takes seconds and a single-node Cassandra with a small
//! heap runs out of memory after a few hundred keyspaces, so a keyspace is shared by a run, not
//! by a process. Under nextest the run is `NEXTEST_RUN_ID`: its processes agree on a label's
//! keyspace name, and on whether that keyspace is migrated yet, through files under the temp
//! dir ([`run_dir`]), each read and written under an exclusive lock on it (the lock goes with
//! the process, so a process that dies mid-migration leaves the work to the next one). Under
//! `cargo test` the run is the process.
//!
//! A generated name is `qim_test_<owner pid>_<nanos>` with the owner the nextest runner (a test
//! process's parent) or the process itself, so the sweep of leftover keyspaces
//! (`qim_testkit::scylla`) keeps it while its run lasts and drops it after.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use scylla::client::session::Session;

use crate::error::StoreError;
use crate::scylla::config::test_keyspace_owned_by;
use crate::scylla::{migrate, open_session, ScyllaConfig};

/// The variable cargo-nextest sets to one id for every test process of a run.
const NEXTEST_RUN_ID: &str = "NEXTEST_RUN_ID";

/// The run's default test keyspace ([`ScyllaConfig::test_from_env`]; the keyspace
/// `QIM_TEST_SCYLLA_KEYSPACE` names, or the run's generated `default` one), migrated once per
/// run; every caller of the run (any process, any runtime) gets the same configuration.
///
/// # Panics
///
/// When the test cluster is not configured, Cassandra does not answer (the message says how to
/// start the local stack), or the migration fails.
pub async fn migrated_test_keyspace() -> ScyllaConfig {
    let mut config = ScyllaConfig::test_from_env().unwrap_or_else(|e| panic!("{e}"));
    if std::env::var_os("QIM_TEST_SCYLLA_KEYSPACE").is_none() {
        config.keyspace = run_keyspace_name("default");
    }
    migrate_once_per_run(&config).await;
    config
}

/// The name of this run's keyspace `label` (chosen by the run's first caller; labels keep
/// apart the suites that must not share a keyspace). Nothing is created: see
/// [`migrate_once_per_run`].
///
/// # Panics
///
/// When the run's agreement file can not be used (the message names it).
pub fn run_keyspace_name(label: &str) -> String {
    static NAMES: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    let mut names = NAMES.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    names
        .entry(label.to_owned())
        .or_insert_with(|| match nextest_run() {
            Some(run) => {
                let path = run_dir(&run).join(format!("{label}.name"));
                agree(&path, || test_keyspace_owned_by(std::os::unix::process::parent_id()))
                    .unwrap_or_else(|e| panic!("the run's keyspace file {}: {e}", path.display()))
            }
            None => test_keyspace_owned_by(std::process::id()),
        })
        .clone()
}

/// Migrates `config`'s keyspace unless this run already did in `config`'s cluster: the first
/// caller migrates, later ones (any process, any runtime) wait for it. A run's tests may use
/// more than one cluster (the fault stack's tests have their own, `qim_testkit::fault_stack`),
/// so a keyspace of the same name is migrated once in each.
///
/// # Panics
///
/// When Cassandra does not answer, the migration fails, or the run's agreement file can not be
/// used (the message names it).
pub async fn migrate_once_per_run(config: &ScyllaConfig) {
    type Cells = Mutex<HashMap<String, Arc<tokio::sync::OnceCell<()>>>>;
    static MIGRATED: OnceLock<Cells> = OnceLock::new();
    let cell = MIGRATED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(format!("{}@{}", config.keyspace, config.hosts.join(",")))
        .or_default()
        .clone();
    cell.get_or_init(|| async {
        let Some(run) = nextest_run() else { return migrate_or_panic(config).await };
        let path = run_dir(&run).join(format!("{}@{}.migrated", config.keyspace, cluster_tag(&config.hosts)));
        let locked = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || lock(&path)).await.expect("the lock task ends")
        };
        let mut file = locked.unwrap_or_else(|e| panic!("the run's migration file {}: {e}", path.display()));
        if read(&mut file).unwrap_or_else(|e| panic!("reading {}: {e}", path.display())).is_empty() {
            migrate_or_panic(config).await;
            write(&mut file, "migrated").unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        }
        // The lock goes with `file`.
    })
    .await;
}

/// The keyspace `label` of this run, migrated: [`run_keyspace_name`] in `base`'s cluster,
/// then [`migrate_once_per_run`].
pub async fn shared_test_keyspace(label: &str, base: &ScyllaConfig) -> ScyllaConfig {
    let config = ScyllaConfig { keyspace: run_keyspace_name(label), ..base.clone() };
    migrate_once_per_run(&config).await;
    config
}

fn nextest_run() -> Option<String> {
    std::env::var(NEXTEST_RUN_ID).ok().filter(|run| !run.is_empty())
}

/// The contact points as a file name's part: `127.0.0.1:9042` → `127_0_0_1_9042`.
fn cluster_tag(hosts: &[String]) -> String {
    hosts.join("+").chars().map(|c| if c.is_ascii_alphanumeric() || c == '+' { c } else { '_' }).collect()
}

/// Where the processes of nextest run `run` agree on their keyspaces.
fn run_dir(run: &str) -> PathBuf {
    std::env::temp_dir().join("qim-test-runs").join(run)
}

/// The value in `path`, or (when it is empty) `make()`, written there first; under the file's lock.
fn agree(path: &Path, make: impl FnOnce() -> String) -> std::io::Result<String> {
    let mut file = lock(path)?;
    let found = read(&mut file)?;
    if !found.is_empty() {
        return Ok(found);
    }
    let made = make();
    write(&mut file, &made)?;
    Ok(made)
}

/// `path`, created if missing, opened for reading and writing and locked exclusively (blocks
/// until the process holding it releases it or exits).
fn lock(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
    file.lock()?;
    Ok(file)
}

fn read(file: &mut File) -> std::io::Result<String> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_string(&mut text)?;
    Ok(text.trim().to_owned())
}

fn write(file: &mut File, text: &str) -> std::io::Result<()> {
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

async fn migrate_or_panic(config: &ScyllaConfig) {
    let session = open_session(config).await.unwrap_or_else(|e| {
        panic!(
            "{}; start the local stack with `deploy/local/stack up` (or point QIM_TEST_SCYLLA_HOSTS at a cluster)",
            describe(&e)
        )
    });
    migrate_retrying(&session, config).await;
}

/// How long [`migrate_retrying`] keeps retrying a migration the server did not answer.
const MIGRATION_PATIENCE: Duration = Duration::from_secs(90);

/// Migrates `config`'s keyspace through `session`, retrying while the server is `Unavailable`
/// (a single-node test server busy with a test run's load times out on schema changes; every
/// statement of the migration is idempotent, so a retry is safe), for up to
/// [`MIGRATION_PATIENCE`].
///
/// # Panics
///
/// When the migration fails otherwise or the server stays unavailable; the message has the
/// error's causes.
pub async fn migrate_retrying(session: &Session, config: &ScyllaConfig) {
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times()
        .with_total_delay(Some(MIGRATION_PATIENCE));
    (|| migrate(session, config))
        .retry(backoff)
        .when(|e: &StoreError| e.kind().is_retryable())
        .notify(|e, pause| eprintln!("migrating test keyspace {} again in {pause:?}: {}", config.keyspace, describe(e)))
        .await
        .unwrap_or_else(|e| panic!("migrating test keyspace {}: {}", config.keyspace, describe(&e)));
}

/// `err` followed by each of its causes, `: `-separated (a `StoreError`'s display names only
/// the step that failed; the driver's reason is its source).
pub fn describe(err: &StoreError) -> String {
    let mut out = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        out.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    out
}
