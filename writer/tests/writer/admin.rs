//! The writer binary's administrative subcommands, run as an operator would: `check-config`
//! (exit 0, or 2 naming each bad variable) and `migrate` against the local stack's Cassandra
//! (creates, then verifies unchanged; refuses a different replication factor). Fails, never
//! skips, when Cassandra is missing.

use std::process::{Command, Output};

fn writer(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qim-writer"));
    cmd.args(args);
    for (name, _) in std::env::vars().filter(|(k, _)| k.starts_with("QIM_")) {
        cmd.env_remove(name);
    }
    cmd.envs(env.iter().copied()).output().expect("running qim-writer")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The Scylla variables the writer needs in either backend (they have no defaults); nothing
/// connects to them in `check-config`.
const SCYLLA: [(&str, &str); 4] = [
    ("QIM_SCYLLA_HOSTS", "10.0.0.1:9042"),
    ("QIM_SCYLLA_KEYSPACE", "qim"),
    ("QIM_SCYLLA_DC", "dc1"),
    ("QIM_SCYLLA_RF", "3"),
];

/// `check-config` with [`SCYLLA`] and `env`.
fn check_config(env: &[(&str, &str)]) -> Output {
    writer(&["check-config"], &[&SCYLLA[..], env].concat())
}

#[test]
fn check_config_prints_the_resolved_environment() {
    let secret = "a-secret-of-at-least-thirty-two-bytes";
    let out = check_config(&[("QIM_AUTH_HS256_SECRET", secret)]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("QIM_STORE_BACKEND=redis"), "{stdout}");
    assert!(stdout.contains("QIM_SCYLLA_HOSTS=10.0.0.1:9042"), "{stdout}");
    assert!(stdout.contains("QIM_WRITER_HTTP_ADDR=127.0.0.1:8080"), "{stdout}");
    assert!(stdout.contains("QIM_AUTH_HS256_SECRET=(set, redacted)"), "{stdout}");
    assert!(!stdout.contains(secret), "the secret is redacted: {stdout}");
}

#[test]
fn check_config_refuses_an_api_without_keys_and_unusable_keys() {
    let out = check_config(&[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("QIM_AUTH_HS256_SECRET") && stderr.contains("QIM_AUTH_DISABLED"), "{stderr}");
    let keys = qim_testkit::tokens::keys_dir();
    let not_a_key = keys.join("jwks.json");
    let out = check_config(&[("QIM_AUTH_PUBLIC_KEY_FILE", not_a_key.to_str().unwrap())]);
    assert_eq!(out.status.code(), Some(2), "a JWK set is not a PEM key");
    let missing = keys.join("no-such-file.pem");
    let out = check_config(&[("QIM_AUTH_JWKS_FILE", missing.to_str().unwrap())]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no-such-file.pem"), "{}", text(&out.stderr));
    let jwks = keys.join("jwks.json");
    let out = check_config(&[("QIM_AUTH_JWKS_FILE", jwks.to_str().unwrap())]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
}

#[test]
fn check_config_names_every_bad_variable() {
    let out = writer(
        &["check-config"],
        &[("QIM_STORE_BACKEND", "sqlite"), ("QIM_WRITER_HTTP_ADDR", "everywhere"), ("QIM_MAX_BODYBYTES", "1")],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    for var in ["QIM_STORE_BACKEND", "QIM_WRITER_HTTP_ADDR", "QIM_MAX_BODYBYTES"] {
        assert!(stderr.contains(var), "{var} missing from: {stderr}");
    }
}

/// Seed 000: the Scylla cluster is required configuration. Without it `check-config`, a start
/// and `migrate` exit before connecting anything, naming every unset variable, in either backend
/// (the Redis backend reads the Scylla archive too).
#[test]
fn the_scylla_cluster_has_no_default() {
    for backend in ["redis", "scylla"] {
        let base = [("QIM_STORE_BACKEND", backend), ("QIM_AUTH_DISABLED", "true")];
        for args in [&["check-config"][..], &["serve"], &["migrate"]] {
            let out = writer(args, &base);
            assert_eq!(out.status.code(), Some(2), "{backend} {args:?}: {}", text(&out.stderr));
            let stderr = text(&out.stderr);
            for (var, _) in SCYLLA {
                assert!(stderr.contains(var), "{backend} {args:?}: {var} not named in {stderr}");
            }
            assert!(stderr.contains("is not set"), "{stderr}");
        }
        let all_but_dc: Vec<_> = SCYLLA.iter().copied().filter(|(k, _)| *k != "QIM_SCYLLA_DC").collect();
        let out = writer(&["check-config"], &[&base[..], &all_but_dc].concat());
        assert_eq!(out.status.code(), Some(2));
        let stderr = text(&out.stderr);
        assert!(stderr.contains("QIM_SCYLLA_DC: is not set (unset: QIM_SCYLLA_DC)"), "{stderr}");
    }
}

#[test]
fn an_unknown_subcommand_is_a_usage_error() {
    let out = writer(&["serve-everything"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("Usage: qim-writer"), "{stderr}");
    assert!(stderr.contains("serve-everything"), "the error names the word: {stderr}");
}

#[test]
fn help_lists_every_variable_with_its_default() {
    let out = writer(&["--help"], &[]);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    for sub in ["serve", "check-config", "migrate"] {
        assert!(help.contains(sub), "{sub} missing from: {help}");
    }
    let vars =
        qim_runtime::env::variables(&<qim_writer::config::WriterEnv as qim_runtime::env::Environment>::command());
    assert!(vars.len() > 20, "{vars:?}");
    for var in vars {
        assert!(help.contains(&format!("  {} [default:", var.name)), "{} missing from: {help}", var.name);
    }
}

#[test]
fn migrate_creates_then_verifies_and_never_alters_replication() {
    let hosts = std::env::var("QIM_TEST_SCYLLA_HOSTS").expect(
        "QIM_TEST_SCYLLA_HOSTS is not set: the Scylla tests need an explicit test cluster (deploy/local/test sets it)",
    );
    let dc = std::env::var("QIM_TEST_SCYLLA_DC").expect("QIM_TEST_SCYLLA_DC is not set (deploy/local/test sets it)");
    let keyspace = format!("qim_admin_{}", std::process::id());
    // One node here: RF 3 passes the production check and Cassandra accepts it for DDL.
    let env = [
        ("QIM_SCYLLA_HOSTS", hosts.as_str()),
        ("QIM_SCYLLA_KEYSPACE", keyspace.as_str()),
        ("QIM_SCYLLA_RF", "3"),
        ("QIM_AUTH_DISABLED", "true"),
        ("QIM_SCYLLA_DC", dc.as_str()),
    ];
    let first = writer(&["migrate"], &env);
    assert!(
        first.status.success(),
        "migrate failed (is Cassandra up? start it with `deploy/local/stack up`): {}",
        text(&first.stderr)
    );
    assert!(text(&first.stdout).contains(&format!("keyspace {keyspace} ready")));
    let second = writer(&["migrate"], &env);
    assert!(second.status.success(), "a second migrate verifies: {}", text(&second.stderr));
    let other_rf = [env[0], env[1], ("QIM_SCYLLA_RF", "5"), env[3], env[4]];
    let refused = writer(&["migrate"], &other_rf);
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).contains("never altered"), "{}", text(&refused.stderr));
    drop_keyspace(&hosts, &keyspace);
}

fn drop_keyspace(hosts: &str, keyspace: &str) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let session = scylla::client::session_builder::SessionBuilder::new()
            .known_nodes(hosts.split(','))
            .build()
            .await
            .expect("Cassandra answered migrate a moment ago");
        session.query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), &[]).await.expect("dropping the keyspace");
    });
}
