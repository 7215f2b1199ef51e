//! Fault injection, failpoint crashes (issue 9): for every state boundary of the writer and
//! every durable step of the archiver and the dispatcher, the service is restarted with that
//! failpoint armed (`FAILPOINTS=<name>=return(abort)`), a batch of sends makes it abort there
//! mid-stream, it is restarted without the failpoint, and the batch completes. At the end the
//! pipeline converges and the invariant checker must find nothing lost and nothing duplicated.
//!
//! Needs the service binaries built with the `failpoints` feature: `cargo test --workspace`
//! does that (the writer's and archiver's test builds turn the `fail` crate's feature on); a
//! failpoint that does not fire fails the test saying so.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use qim_tests::faults::{self, Load, Shape};
use qim_tests::services::{Pipeline, PipelineEnv, ServiceBinaries, ServiceKind};
use qim_tests::workload::{Plan, Report};

/// The writer's commit state boundaries.
const WRITER: [&str; 4] =
    ["writer::after_reserve", "writer::after_record", "writer::after_publish", "writer::after_outbox"];
/// The archiver's durable steps.
const ARCHIVER: [&str; 4] = [
    "archiver::after_dead_letter",
    "archiver::after_archive",
    "archiver::after_watermark",
    "archiver::before_store_offset",
];
/// The dispatcher's durable steps (router and shard worker).
const DISPATCHER: [&str; 6] = [
    "dispatcher::router_before_store_offset",
    "dispatcher::worker_after_begin",
    "dispatcher::worker_after_chunk_write",
    "dispatcher::worker_after_chunk_complete",
    "dispatcher::worker_after_advance",
    "dispatcher::worker_before_store_offset",
];
/// Sends per failpoint.
const BATCH: usize = 40;
/// How long an armed service may take to reach its failpoint.
const CRASH_WITHIN: Duration = Duration::from_secs(90);
/// SIGABRT: what `return(abort)` ends the process with.
const SIGABRT: i32 = 6;

fn service(p: &mut Pipeline, kind: ServiceKind) -> &mut qim_tests::services::Service {
    match kind {
        ServiceKind::Writer => &mut p.writer,
        ServiceKind::Archiver => &mut p.archiver,
        ServiceKind::Dispatcher => &mut p.dispatcher,
    }
}

/// Crashes `kind` once at each of `points`, then checks the whole run.
async fn crash_at_each(label: &str, kind: ServiceKind, points: &[&str]) {
    let bins = ServiceBinaries::locate().expect("service binaries");
    let env = PipelineEnv::fresh(label).await.expect("a fresh run");
    let mut p = Pipeline::start(&bins, &env).await.expect("the pipeline starts");
    let plan = Plan::generate(0xfa11 + points.len() as u64, points.len() * BATCH, 12, &[25, 120], 6);
    let shape = Shape { batch: BATCH, concurrency: 8, pause: Duration::ZERO };
    // Members first (the writer is not armed yet); the load below then sends one batch per point.
    let load = Load::start(p.writer.base_url(), &Plan { sends: Vec::new(), ..plan.clone() }, shape).await;
    load.expect("members added").finish().await.expect("no sends");
    let mut report = Report::default();
    let mut kills = 0;
    for (i, point) in points.iter().enumerate() {
        // Caught up first, so the armed service starts with nothing to do and crashes mid-batch.
        p.converge(&report.acks, Duration::from_secs(180)).await.expect("caught up before arming");
        let armed = format!("{point}=return(abort)");
        service(&mut p, kind).restart(&[("FAILPOINTS", &armed)]).await.expect("the armed service starts");
        let sends = plan.sends[i * BATCH..(i + 1) * BATCH].to_vec();
        let batch = Plan { tenant: plan.tenant.clone(), conversations: Vec::new(), sends };
        let load = Load::start(p.writer.base_url(), &batch, shape).await.expect("the batch starts");
        let status = service(&mut p, kind).wait_exit(CRASH_WITHIN).await;
        let status = status.unwrap_or_else(|| {
            panic!("{point} did not fire within {CRASH_WITHIN:?}: were the binaries built with the failpoints feature?")
        });
        assert_eq!(status.signal(), Some(SIGABRT), "{point}: the service ended with {status}, not an abort");
        kills += 1;
        service(&mut p, kind).restart(&[]).await.expect("the service restarts without the failpoint");
        faults::load::merge(&mut report, load.finish().await.expect("the batch completes after the restart"));
        println!("{label}: crashed at {point}, restarted; {} acknowledged so far", report.acks.len());
    }
    p.converge(&report.acks, Duration::from_secs(300)).await.expect("the pipeline converges");
    let figures = faults::verify(label, &env, &plan, &report, kills, 0)
        .await
        .expect("zero lost, zero logical duplicates, every invariant holds");
    p.stop().await.expect("every service stops cleanly");
    assert_eq!(figures.kills as usize, points.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_writer_crashes_at_every_state_boundary() {
    crash_at_each("fp_writer", ServiceKind::Writer, &WRITER).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_archiver_crashes_at_every_durable_step() {
    crash_at_each("fp_archiver", ServiceKind::Archiver, &ARCHIVER).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_dispatcher_crashes_at_every_durable_step() {
    crash_at_each("fp_dispatch", ServiceKind::Dispatcher, &DISPATCHER).await;
}
