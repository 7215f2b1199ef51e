//! Gate: LWT contention from two writer processes in Scylla mode on one conversation, with a
//! Cassandra node killed half-way (an LWT at LOCAL_SERIAL and the writes at LOCAL_QUORUM still
//! answer with one replica of three down): no seq shared, no key committed twice, `created_at`
//! in seq order.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use qim_tests::services::{Service, ServiceBinaries, ServiceKind};
use qim_tests::workload::{self, Plan};

use crate::support::{another, heal, rf3, ring_env};

const SCYLLA: &[(&str, &str)] = &[("QIM_STORE_BACKEND", "scylla")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lwt_contention_from_two_scylla_writers_never_shares_a_seq_even_with_a_node_down() {
    let bins = ServiceBinaries::locate().expect("service binaries");
    let env = ring_env("gatelwt").await;
    let first = Service::start(ServiceKind::Writer, &bins, &env, SCYLLA).await.expect("the first writer starts");
    let second = another(ServiceKind::Writer, &bins, &env, SCYLLA).await;
    let bases = [first.base_url().to_owned(), second.base_url().to_owned()];
    assert_ne!(bases[0], bases[1], "two instances, each at its own address");

    // One conversation, every send contended by both instances; every third retried on the
    // other instance.
    let plan = Plan::generate(61, 120, 0, &[6], 3);
    let began = Instant::now();
    let before = workload::run_behind(&bases, None, &plan_part(&plan, 0..60), 8, true).await.expect("sends");
    rf3(&["kill", "cassandra-3"]).await;
    let during = workload::run_behind(&bases, None, &plan_part(&plan, 60..120), 8, true).await;
    heal().await;
    let during = during.expect("sends with a node down (LOCAL_SERIAL and LOCAL_QUORUM with 2 of 3)");
    let acks: Vec<_> = before.acks.iter().chain(&during.acks).cloned().collect();
    println!(
        "lwt gate: {} sends through two scylla-mode writers in {:.1?}, 60 of them with cassandra-3 down; \
         {} retries on the other instance answered alike",
        acks.len(),
        began.elapsed(),
        before.retries_matched + during.retries_matched
    );
    assert_eq!(acks.len(), 120);
    assert_eq!(before.retries_mismatched + during.retries_mismatched, 0, "a retry got another answer");
    assert_eq!(before.retries_matched + during.retries_matched, 40);

    // Never a shared seq, never two messages for one key: the acks, and the history as stored.
    let mut by_seq = BTreeMap::new();
    for a in &acks {
        assert!(by_seq.insert(a.conversation_seq, a.message_id.clone()).is_none(), "seq {} shared", a.conversation_seq);
    }
    // And `created_at` never goes back as the seq grows (the conversation's clock in the CAS).
    let mut in_order: Vec<_> = acks.iter().map(|a| (a.conversation_seq, a.created_at)).collect();
    in_order.sort();
    assert!(in_order.windows(2).all(|w| w[0].1 <= w[1].1), "created_at went back: {in_order:?}");
    let keys: HashSet<&str> = acks.iter().map(|a| a.client_message_id.as_str()).collect();
    assert_eq!(keys.len(), 120);
    let conversation = &plan.conversations[0];
    let history = workload::history(&bases[0], &plan.tenant, &conversation.id, &conversation.members[0])
        .await
        .expect("the history reads back");
    let stored: BTreeMap<u64, String> = history.into_iter().map(|(id, seq)| (seq, id)).collect();
    assert_eq!(stored, by_seq, "the stored history differs from the acknowledged messages");
    let holes = by_seq.keys().last().copied().unwrap_or(0) - by_seq.len() as u64;
    println!("lwt gate: seqs 1..={} with {holes} holes (a lost LWT race leaves one)", by_seq.keys().last().unwrap());
}

/// The sends `range` of `plan`, with its tenant and conversations.
fn plan_part(plan: &Plan, range: std::ops::Range<usize>) -> Plan {
    Plan { tenant: plan.tenant.clone(), conversations: plan.conversations.clone(), sends: plan.sends[range].to_vec() }
}
