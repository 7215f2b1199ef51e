//! What the gates share: the run on the three-node mode, extra service instances, the stack's
//! node kills, and the load.

use std::path::PathBuf;
use std::time::Duration;

use qim_tests::services::{PipelineEnv, Service, ServiceBinaries, ServiceKind};
use qim_tests::stack::Endpoints;

/// A fresh run on the three-node mode: its topics on the three brokers (RF 3), its keyspace on
/// the ring (RF 3, SimpleStrategy's datacenter1), the shared stack's Redis.
pub async fn ring_env(label: &str) -> PipelineEnv {
    PipelineEnv::fresh_at(label, Endpoints::rf3(), 3)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n(the gates need the three-node mode: `deploy/local/stack rf3 up`)"))
}

/// One more instance of `kind` beside the run's first, on a port of its own; `extra` as for
/// [`Service::start`].
pub async fn another(kind: ServiceKind, bins: &ServiceBinaries, env: &PipelineEnv, extra: &[(&str, &str)]) -> Service {
    let addr = format!("127.0.0.1:{}", qim_testkit::ports::free_port());
    let mut all: Vec<(&str, &str)> = vec![(kind.http_addr_var(), addr.as_str())];
    all.extend_from_slice(extra);
    Service::start(kind, bins, env, &all).await.unwrap_or_else(|e| panic!("another {}: {e:#}", kind.name()))
}

/// `deploy/local/stack rf3 ARGS...`; panics with its output when it fails.
pub async fn rf3(args: &[&str]) {
    let stack = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/local/stack");
    let out = tokio::process::Command::new(&stack)
        .arg("rf3")
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("running {} rf3 {}: {e}", stack.display(), args.join(" ")));
    assert!(
        out.status.success(),
        "stack rf3 {} failed: {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Brings every killed node back and waits until the cluster is whole (`rf3 up`).
pub async fn heal() {
    rf3(&["up"]).await;
}

/// Sends per test under faults: `QIM_GATE_SENDS`, default 400.
pub fn sends() -> usize {
    std::env::var("QIM_GATE_SENDS").ok().and_then(|v| v.trim().parse().ok()).filter(|n| *n > 0).unwrap_or(400)
}

/// How long a run under faults may take to converge after its last acknowledgement.
pub const CONVERGE: Duration = Duration::from_secs(180);
