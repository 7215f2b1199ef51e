//! The binary's startup discipline: `check-config` names every bad variable (exit 2) without
//! connecting, and `run` exits non-zero, naming the mismatch, when the dispatch topic's
//! partitions differ from `QIM_MAILBOX_SHARDS`.

use crate::support;

use std::process::{Command, Stdio};
use std::time::Duration;

use support::{free_port, Fixture, Kind};

fn binary() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qim-mailbox-dispatcher"));
    cmd.env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
    cmd
}

/// The Scylla variables the dispatcher needs in either backend (they have no defaults);
/// `check-config` connects to nothing.
const SCYLLA: [(&str, &str); 4] = [
    ("QIM_SCYLLA_HOSTS", "10.0.0.1:9042"),
    ("QIM_SCYLLA_KEYSPACE", "qim"),
    ("QIM_SCYLLA_DC", "dc1"),
    ("QIM_SCYLLA_RF", "3"),
];

#[test]
fn check_config_validates_without_connecting() {
    let ok = binary().arg("check-config").envs(SCYLLA).env("QIM_AUTH_DISABLED", "true").output().unwrap();
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    let out = String::from_utf8_lossy(&ok.stdout);
    for line in [
        "QIM_MAILBOX_SHARDS=8",
        "QIM_DISPATCH_ADVANCE_MILLIS=250",
        "QIM_DISPATCHER_DLQ_TOPIC=qim.mailbox.dlq.v1",
        "QIM_RATE_LIMIT_USER_PER_SEC=50",
    ] {
        assert!(out.contains(line), "{line} missing from:\n{out}");
    }

    let bad = binary()
        .arg("check-config")
        .env("QIM_MAILBOX_EPOCH", "70000")
        .env("QIM_DISPATCH_CHUNKS_IN_FLIGHT", "0")
        .env("QIM_DISPATCH_ADVANCE_MILLIS", "soon")
        .env("QIM_MAILBOX_SHARD", "8")
        .env("QIM_RATE_LIMIT_TENANT_PER_SEC", "-1")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    for name in [
        "QIM_MAILBOX_EPOCH",
        "QIM_DISPATCH_CHUNKS_IN_FLIGHT",
        "QIM_DISPATCH_ADVANCE_MILLIS",
        "QIM_MAILBOX_SHARD ",
        "QIM_RATE_LIMIT_TENANT_PER_SEC",
    ] {
        assert!(err.contains(name), "{name} not named in:\n{err}");
    }

    let unknown = binary().arg("serve-forever").output().unwrap();
    assert_eq!(unknown.status.code(), Some(2));

    // No Scylla cluster named: refused before connecting, in either backend, every variable named.
    for backend in ["redis", "scylla"] {
        for sub in ["check-config", "run"] {
            let out =
                binary().arg(sub).env("QIM_STORE_BACKEND", backend).env("QIM_AUTH_DISABLED", "true").output().unwrap();
            assert_eq!(out.status.code(), Some(2), "{backend} {sub}");
            let err = String::from_utf8_lossy(&out.stderr);
            for (name, _) in SCYLLA {
                assert!(err.contains(name), "{backend} {sub}: {name} not named in:\n{err}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_a_dispatch_topic_with_other_partitions_than_shards() {
    let f = Fixture::new(Kind::Redis).await;
    let mut cmd = binary();
    cmd.arg("run");
    for (k, v) in f.binary_env(free_port()) {
        cmd.env(k, v);
    }
    // The fixture's dispatch topic has 8 partitions.
    cmd.env("QIM_MAILBOX_SHARDS", "4").stdout(Stdio::null()).stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let out =
        tokio::time::timeout(Duration::from_secs(60), tokio::task::spawn_blocking(move || child.wait_with_output()))
            .await
            .expect("the binary exits within 60 s")
            .unwrap()
            .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has 8 partitions but QIM_MAILBOX_SHARDS=4"), "{err}");
}
