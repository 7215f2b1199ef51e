//! Two writer processes behind one address (Redis mode, the same Redis): every send goes to one
//! instance and its retry to the other, and the retry gets the first answer; seqs stay unique
//! and without holes per conversation, `created_at` never decreases as the seq grows, each
//! instance mints its message ids under its own leased writer id, and the run passes the
//! checker end to end.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use qim_tests::checker::{self, CheckInput};
use qim_tests::services::{Pipeline, PipelineEnv, Service, ServiceBinaries, ServiceKind};
use qim_tests::workload::{self, Ack, Plan};

/// Per conversation, the acks by seq.
fn by_conversation(acks: &[Ack]) -> BTreeMap<&str, BTreeMap<u64, &Ack>> {
    let mut out: BTreeMap<&str, BTreeMap<u64, &Ack>> = BTreeMap::new();
    for a in acks {
        let previous = out.entry(a.conversation.as_str()).or_default().insert(a.conversation_seq, a);
        assert!(previous.is_none(), "seq {} of {} acknowledged twice", a.conversation_seq, a.conversation);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_behind_one_address_answer_retries_alike_and_never_share_a_seq() {
    let bins = ServiceBinaries::locate().expect("service binaries");
    let env = PipelineEnv::fresh("two-writers").await.expect("a fresh run (is the stack up?)");
    let pipeline = Pipeline::start(&bins, &env).await.expect("the pipeline starts");
    let port = qim_testkit::ports::free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut second = Service::start(ServiceKind::Writer, &bins, &env, &[("QIM_WRITER_HTTP_ADDR", addr.as_str())])
        .await
        .expect("a second writer starts beside the first");

    // Every second send retried: its first attempt on one instance, the retry on the other.
    let plan = Plan::generate(47, 160, 4, &[12], 2);
    let bases = [pipeline.writer.base_url().to_owned(), second.base_url().to_owned()];
    let report = workload::run_behind(&bases, None, &plan, 8, true).await.expect("the workload runs");
    assert_eq!(report.acks.len(), 160);
    assert_eq!(report.retries_matched, 80, "every second send was retried");
    assert_eq!(report.retries_mismatched, 0, "a retry on the other instance got another answer");

    for (conversation, acks) in by_conversation(&report.acks) {
        let seqs: Vec<u64> = acks.keys().copied().collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "{conversation}: holes or gaps in {seqs:?}");
        let times: Vec<i64> = acks.values().map(|a| a.created_at).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{conversation}: created_at went back: {times:?}");
    }
    let ids: HashSet<&str> = report.acks.iter().map(|a| a.message_id.as_str()).collect();
    assert_eq!(ids.len(), 160, "two sends got one message id");
    let writers: HashSet<u16> = report.acks.iter().map(|a| a.writer_id().expect("a 16-byte hex message id")).collect();
    assert_eq!(writers.len(), 2, "each instance mints under its own writer id: {writers:?}");

    pipeline.converge(&report.acks, Duration::from_secs(90)).await.expect("converges");
    let status = second.terminate().await.expect("the second writer stops");
    assert!(status.success(), "the second writer exited with {status}");
    pipeline.stop().await.expect("clean stop");
    let input = CheckInput::new(env.clone(), &plan, report.acks.clone(), report.retries_mismatched);
    let verdict = checker::check(&input).await.expect("the checker reads everything");
    println!("{verdict}");
    assert!(verdict.is_ok(), "{verdict}");
    assert_eq!(verdict.counts.acked, 160);
    assert_eq!(verdict.counts.mailbox_entries, verdict.counts.expected_mailbox_entries);
}
