//! Fault injection, SIGKILL chaos (issue 9): a steady send load while the writer, the archiver
//! and the dispatcher are killed with SIGKILL and restarted, in turn, [`KILLS`] times in all;
//! then the pipeline converges and the invariant checker must find nothing lost and nothing
//! duplicated.

use std::time::Duration;

use qim_tests::faults::{self, Load, Shape};
use qim_tests::services::{Pipeline, PipelineEnv, ServiceBinaries, ServiceKind};
use qim_tests::workload::Plan;

/// Kills in all (each service a third of them).
const KILLS: u32 = 30;
/// Sends the plan holds (the load stops once the kills are done, or when these run out).
const SENDS: usize = 20_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_pipeline_survives_tens_of_sigkills_under_load() {
    let bins = ServiceBinaries::locate().expect("service binaries");
    let env = PipelineEnv::fresh("chaos").await.expect("a fresh run");
    let mut p = Pipeline::start(&bins, &env).await.expect("the pipeline starts");
    let plan = Plan::generate(0xc4a05, SENDS, 40, &[10, 60], 8);
    let shape = Shape { batch: 10, concurrency: 4, pause: Duration::from_millis(100) };
    let load = Load::start(p.writer.base_url(), &plan, shape).await.expect("the load starts");
    let mut kills = 0;
    for i in 0..KILLS {
        // 0.4–1.4 s of load between kills, varied but reproducible.
        tokio::time::sleep(Duration::from_millis(400 + u64::from(i * 7919 % 1000))).await;
        let kind = ServiceKind::ALL[(i % 3) as usize];
        let s = match kind {
            ServiceKind::Writer => &mut p.writer,
            ServiceKind::Archiver => &mut p.archiver,
            ServiceKind::Dispatcher => &mut p.dispatcher,
        };
        assert!(s.is_running(), "{kind} died by itself before kill {i}:\n{}", s.log_tail(30));
        s.kill9().await;
        kills += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
        s.restart(&[]).await.unwrap_or_else(|e| panic!("{kind} restarts after kill {i}: {e:#}"));
        println!("chaos: kill {kills} ({kind}), {} acknowledged so far", load.acked());
    }
    assert!(!load.is_finished(), "the load ran out before the kills were done: raise SENDS");
    let report = load.stop().await.expect("every send is acknowledged despite the kills");
    p.converge(&report.acks, Duration::from_secs(300)).await.expect("the pipeline converges");
    let figures = faults::verify("chaos", &env, &plan, &report, kills, 0)
        .await
        .expect("zero lost, zero logical duplicates, every invariant holds");
    p.stop().await.expect("every service stops cleanly");
    assert_eq!(figures.kills, KILLS);
    assert!(figures.messages > 500, "too little load to mean anything: {figures}");
}
