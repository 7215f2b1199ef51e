//! The service harness against the real stack: the three binaries start on an isolated run
//! without a warning (but the one for their disabled authentication), a small workload goes
//! through the writer (every seventh send retried, without leaving a seq hole), the pipeline
//! converges, a killed service restarts, and SIGTERM stops everything with exit 0.

use std::time::Duration;

use qim_tests::services::{Pipeline, PipelineEnv, ServiceBinaries};
use qim_tests::workload::{self, Plan, PlannedSend};

/// The one warning a clean start of the harness gives on purpose: its services run without
/// authentication (`QIM_AUTH_DISABLED`).
const AUTH_DISABLED: &str = "authentication is disabled";

/// Seqs below each conversation's highest acknowledged one that no acknowledgement holds.
fn holes(acks: &[qim_tests::workload::Ack]) -> usize {
    let mut seqs: std::collections::HashMap<&str, std::collections::BTreeSet<u64>> = Default::default();
    for a in acks {
        seqs.entry(a.conversation.as_str()).or_default().insert(a.conversation_seq);
    }
    seqs.values().map(|s| usize::try_from(s.last().copied().unwrap_or(0)).unwrap_or(0) - s.len()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_starts_converges_restarts_and_stops() {
    let bins = ServiceBinaries::locate().expect("service binaries");
    let env = PipelineEnv::fresh("harness").await.expect("a fresh run (is the stack up?)");
    let mut pipeline = Pipeline::start(&bins, &env).await.expect("the pipeline starts");
    for service in [&pipeline.writer, &pipeline.archiver, &pipeline.dispatcher] {
        let log = std::fs::read_to_string(service.log_path()).expect("the service's log");
        let warnings: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ") && !l.contains(AUTH_DISABLED)).collect();
        assert!(warnings.is_empty(), "{} warned at a clean start: {warnings:#?}", service.kind().name());
    }

    let plan = Plan::generate(11, 60, 5, &[40], 7);
    let report = workload::run(pipeline.writer.base_url(), None, &plan, 8, true).await.expect("the workload runs");
    assert_eq!(report.acks.len(), 60);
    assert_eq!(report.retries_mismatched, 0);
    assert_eq!(holes(&report.acks), 0, "a clean run leaves no seq hole, retries included");
    pipeline.converge(&report.acks, Duration::from_secs(60)).await.expect("converges");

    let first = pipeline.archiver.pid();
    pipeline.archiver.kill9().await;
    assert!(!pipeline.archiver.is_running());
    pipeline.archiver.restart(&[]).await.expect("the archiver restarts");
    assert_ne!(pipeline.archiver.pid(), first);
    assert_eq!(pipeline.archiver.starts(), 2);

    let sends = plan.sends[..20]
        .iter()
        .map(|s| PlannedSend {
            client_message_id: format!("{}-after-restart", s.client_message_id),
            retry: false,
            ..s.clone()
        })
        .collect();
    let more = Plan { tenant: plan.tenant.clone(), conversations: plan.conversations.clone(), sends };
    let second = workload::run(pipeline.writer.base_url(), None, &more, 4, true).await.expect("more sends");
    let all: Vec<_> = report.acks.iter().chain(&second.acks).cloned().collect();
    pipeline.converge(&all, Duration::from_secs(60)).await.expect("converges again");
    assert_eq!(holes(&all), 0, "nor does a restarted archiver");
    pipeline.stop().await.expect("every service exits 0 on SIGTERM");
}
