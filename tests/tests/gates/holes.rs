//! Gates: holes. A reservation hole (a writer dies between reserving a seq and answering, while
//! another instance contends for the same conversation) and a source hole (a dispatch whose lane
//! work is unfinished, between two finished ones), both on the ring.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::{self, StreamExt};
use qim_store::mailbox::MailboxRetention;
use qim_store::scylla::ScyllaMailboxStore;
use qim_store::testsuite::{fixtures, mailbox};
use qim_tests::services::{Exposition, ServiceBinaries, ServiceKind};
use qim_tests::stack;
use qim_tests::workload::{self, Plan, PlannedSend};

use crate::support::{another, heal, rf3, ring_env};

/// The writers of these gates run in Scylla mode (LWT on the ring).
const SCYLLA: (&str, &str) = ("QIM_STORE_BACKEND", "scylla");
/// The writer counts the commits its recovery loop completed under this action.
const RECOVERED: (&str, &str) = ("action", "completed");
/// How long the surviving instance may take to finish the dead one's reservations.
const RECOVERY_WITHIN: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_hole_left_by_a_writer_killed_mid_commit_stays_a_hole() {
    let bins = ServiceBinaries::locate().expect("service binaries");
    let env = ring_env("gatehole").await;
    // `doomed` aborts (like kill -9) right after its 21st reservation, with other sends of the
    // conversation in flight on both instances; `survivor` finishes what it left after 2 s.
    let armed = [SCYLLA, ("FAILPOINTS", "writer::after_reserve=20*off->return(abort)")];
    let mut doomed = another(ServiceKind::Writer, &bins, &env, &armed).await;
    let survivor = another(
        ServiceKind::Writer,
        &bins,
        &env,
        &[SCYLLA, ("QIM_RECOVERY_GRACE_SECS", "2"), ("QIM_RECOVERY_INTERVAL_SECS", "1")],
    )
    .await;
    let (doomed_base, survivor_base) = (doomed.base_url().to_owned(), survivor.base_url().to_owned());
    let plan = Plan::generate(113, 160, 0, &[5], 0);
    let (contended, abandoned) = (part(&plan, 0..100), part(&plan, 100..160));
    workload::run(&survivor_base, None, &part(&plan, 0..0), 1, true).await.expect("members added");

    // One conversation, contended by both instances: the survivor's sends through the
    // workload (retried until answered), the doomed one's sent once each, never retried.
    let began = Instant::now();
    let survivor_load = {
        let (base, contended) = (survivor_base.clone(), contended.clone());
        tokio::spawn(async move { workload::run(&base, None, &contended, 4, true).await })
    };
    let answered: Vec<Option<(String, u64)>> = stream::iter(abandoned.sends.clone())
        .map(|send| once(&doomed_base, &plan.tenant, send))
        .buffered(8)
        .collect()
        .await;
    let status =
        doomed.wait_exit(Duration::from_secs(60)).await.expect("the armed writer aborts at its 21st reservation");
    assert_eq!(status.signal(), Some(libc::SIGABRT), "the armed writer ended with {status}, not an abort");
    // Past the recovery grace and a pass or two, so the first look below can already settle.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let contended = survivor_load.await.expect("the load task").expect("the survivor answers every send");
    assert_eq!(contended.acks.len(), 100);

    // The survivor's recovery loop drives the dead instance's unfinished commits to COMMITTED.
    let conversation = &plan.conversations[0];
    let read = || workload::history(&survivor_base, &plan.tenant, &conversation.id, &conversation.members[0]);
    let unanswered: BTreeSet<&str> = abandoned
        .sends
        .iter()
        .zip(&answered)
        .filter(|(_, a)| a.is_none())
        .map(|(s, _)| s.client_message_id.as_str())
        .collect();
    let deadline = Instant::now() + RECOVERY_WITHIN;
    let (recovered, settled) = loop {
        let metrics = scrape(&survivor_base).await;
        let (recovered, backlog) = (
            metrics.sum("qim_writer_recovery_actions_total", &[RECOVERED]),
            metrics.sum("qim_writer_recovery_backlog", &[]),
        );
        let first = read().await.expect("the history reads back");
        tokio::time::sleep(Duration::from_secs(3)).await;
        let second = read().await.expect("the history reads back");
        if recovered >= 1.0 && backlog == 0.0 && first == second {
            break (recovered, by_seq(&second));
        }
        assert!(
            Instant::now() < deadline,
            "recovery did not settle in {RECOVERY_WITHIN:?}: completed {recovered}, backlog {backlog}"
        );
    };
    let top = *settled.keys().last().expect("the history holds the contended sends");
    let holes: BTreeSet<u64> = (1..=top).filter(|s| !settled.contains_key(s)).collect();
    for ack in &contended.acks {
        assert_eq!(
            settled.get(&ack.conversation_seq),
            Some(&ack.message_id),
            "acknowledged send {} moved",
            ack.client_message_id
        );
    }
    for (send, answer) in abandoned.sends.iter().zip(&answered) {
        if let Some((id, seq)) = answer {
            assert_eq!(settled.get(seq), Some(id), "answered send {} is not in the history", send.client_message_id);
        }
    }

    // Every abandoned key, sent again (to the survivor), and then new sends through both: an
    // answer the history holds is given again; anything else gets a seq above all it held.
    // No later send fills a hole.
    let retried =
        workload::run(&survivor_base, None, &abandoned, 4, true).await.expect("the abandoned keys are answered");
    doomed.restart(&[SCYLLA]).await.expect("the writer restarts without the failpoint");
    let bases = [doomed.base_url().to_owned(), survivor_base.clone()];
    let fresh = Plan { sends: fresh_sends(&plan, 40), ..part(&plan, 0..0) };
    let fresh = workload::run_behind(&bases, None, &fresh, 4, true).await.expect("new sends are answered");
    let mut recovered_keys = 0;
    for ack in &retried.acks {
        let held = settled.iter().find(|(_, id)| **id == ack.message_id).map(|(seq, _)| *seq);
        match held {
            Some(seq) => {
                assert_eq!(ack.conversation_seq, seq, "retried key {} got another seq", ack.client_message_id);
                recovered_keys += usize::from(unanswered.contains(ack.client_message_id.as_str()));
            }
            None => assert!(
                ack.conversation_seq > top,
                "retried key {} got seq {} of the settled history",
                ack.client_message_id,
                ack.conversation_seq
            ),
        }
    }
    assert!(recovered_keys >= 1, "the reservation the abort interrupted was not completed by recovery");
    for ack in &fresh.acks {
        assert!(ack.conversation_seq > top, "a new send got seq {} at or below {top}", ack.conversation_seq);
    }
    let after = by_seq(&read().await.expect("the history reads back"));
    assert!(holes.iter().all(|h| !after.contains_key(h)), "a hole was filled: {holes:?}");
    let acks: Vec<_> = contended.acks.iter().chain(&retried.acks).chain(&fresh.acks).collect();
    assert_eq!(after.len(), acks.len(), "the history holds exactly the answered sends");
    for a in acks {
        assert_eq!(
            after.get(&a.conversation_seq),
            Some(&a.message_id),
            "send {} is not at its seq",
            a.client_message_id
        );
    }
    println!(
        "reservation-hole gate: {} of 60 sends to the doomed writer unanswered at its abort ({:.1?} in); the survivor's \
         recovery completed {recovered} commits; {recovered_keys} unanswered keys were in the settled history; seqs 1..={top} settled with \
         {} holes, none filled by {} retries and {} new sends",
        unanswered.len(),
        began.elapsed(),
        holes.len(),
        retried.acks.len(),
        fresh.acks.len(),
    );
    drop((doomed, survivor));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_hole_holds_every_lane_it_touches_even_with_a_node_down() {
    let env = ring_env("gatesource").await;
    let session = stack::connect_scylla_at(&env.scylla_hosts).await.expect("a session on the ring");
    let store =
        ScyllaMailboxStore::connect(Arc::new(session), &env.keyspace, MailboxRetention::default(), fixtures::clock())
            .await
            .expect("the mailbox store on the ring");
    let figures = mailbox::source_hole_holds_lanes_until_filled(&store, rf3(&["kill", "cassandra-3"])).await;
    heal().await;
    println!("source-hole gate (cassandra-3 down): {} lanes held at the hole, {} passed", figures.held, figures.passed);
    assert_eq!((figures.held, figures.passed), (2, 62));
}

/// The sends `range` of `plan`, with its tenant and conversations.
fn part(plan: &Plan, range: std::ops::Range<usize>) -> Plan {
    Plan { tenant: plan.tenant.clone(), conversations: plan.conversations.clone(), sends: plan.sends[range].to_vec() }
}

/// `n` sends of new keys, like the plan's last.
fn fresh_sends(plan: &Plan, n: usize) -> Vec<PlannedSend> {
    let last = plan.sends.last().expect("a plan with sends");
    (0..n)
        .map(|i| PlannedSend { client_message_id: format!("{}-after-{i}", last.client_message_id), ..last.clone() })
        .collect()
}

/// One attempt at `send` (no retry): its message id and seq when answered.
async fn once(base: &str, tenant: &str, send: PlannedSend) -> Option<(String, u64)> {
    let body = serde_json::json!({
        "tenant": tenant, "conversation": send.conversation, "sender": send.sender,
        "client_message_id": send.client_message_id, "body": send.body, "retention": send.retention,
    });
    let r = reqwest::Client::new().post(format!("{base}/v1/messages")).json(&body).send().await.ok()?;
    let a: serde_json::Value = r.error_for_status().ok()?.json().await.ok()?;
    Some((a["message_id"].as_str()?.to_owned(), a["conversation_seq"].as_u64()?))
}

/// A writer's `/metrics`, parsed.
async fn scrape(base: &str) -> Exposition {
    let r = reqwest::get(format!("{base}/metrics")).await.expect("the writer answers /metrics");
    Exposition::parse(&r.text().await.expect("a /metrics body"))
}

/// A history by seq.
fn by_seq(history: &[(String, u64)]) -> BTreeMap<u64, String> {
    history.iter().map(|(id, seq)| (*seq, id.clone())).collect()
}
