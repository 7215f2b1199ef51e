//! Replay/rebuild (issue 9, deliverable 4): after a workload converged, the run's Redis state
//! (hot tier, commit state, seq counters and leases, member cache, mailboxes) and its whole
//! keyspace (archive, seq high-water marks, membership) are wiped: a disaster only the topic
//! survives. The writer restarts and is ready at once (it reads nothing from the topic). The
//! archive is rebuilt by `qim-archiver replay --from earliest`, which also raises every
//! conversation's seq high-water mark to its highest replayed seq; the mailboxes by
//! `qim-mailbox-dispatcher replay --from earliest` (both of its groups from the earliest
//! offsets, the dispatch topic's first records giving every entry its old seq). Sends afterwards get seqs above
//! every earlier one (each conversation's first send revalidates its lease against the replayed
//! mark and writes its recent history back into the hot tier); every acknowledged message is
//! served by the writer's history API; the checker accepts.
//!
//! Kafka's own tool: the archiver's and the dispatcher's groups reset to the earliest offsets by
//! `kafka-consumer-groups --reset-offsets` while the services are stopped make them go through
//! both topics again when they restart, which changes nothing (README: replay), as the checker
//! confirms.

use std::collections::HashMap;
use std::time::Duration;

use qim_tests::checker::{self, CheckInput};
use qim_tests::services::{
    recreate_keyspace, reset_group_with_kafka_tool, run_command, wipe_redis_namespace, Pipeline, PipelineEnv, Service,
    ServiceBinaries, ServiceKind,
};
use qim_tests::workload::{self, Plan, PlannedSend};

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wiped_redis_and_archive_are_rebuilt_from_the_topic_and_no_seq_is_reissued() {
    let bins = ServiceBinaries::locate().expect("service binaries");
    let env = PipelineEnv::fresh("replay").await.expect("a fresh run (is the stack up?)");
    let pipeline = Pipeline::start(&bins, &env).await.expect("the pipeline starts");
    let plan = Plan::generate(31, 150, 6, &[40, 4], 5);
    let first = workload::run(pipeline.writer.base_url(), None, &plan, 8, true).await.expect("the workload runs");
    pipeline.converge(&first.acks, Duration::from_secs(90)).await.expect("converges");
    pipeline.stop().await.expect("clean stop");

    // Wipe: every Redis key of the run, and the archive keyspace.
    let keys = wipe_redis_namespace(&env).await.expect("wiping Redis");
    assert!(keys > 100, "the run had Redis state ({keys} keys)");
    recreate_keyspace(&env).await.expect("recreating the keyspace");

    // The writer is ready at once: nothing is read from the topic before it serves.
    let mut writer = Service::start(ServiceKind::Writer, &bins, &env, &[]).await.expect("the writer restarts");
    let log = strip_ansi(&std::fs::read_to_string(writer.log_path()).unwrap());
    assert!(!log.contains("unarchived tail scanned"), "no topic read before the first send: {log}");

    // Rebuild the archive by replay (the mailboxes once the members are back, below).
    let out = run_command(ServiceKind::Archiver, &bins, &env, &["replay", "--from", "earliest"]).await.expect("replay");
    assert!(out.contains(&format!("replayed {} records", first.acks.len())), "{out}");

    // More sends in the same conversations (the workload adds the members again first: the
    // membership table went with the keyspace): no seq may be reissued, though Redis and the
    // archive both lost every counter and lease; the replayed marks bound them.
    let sends: Vec<PlannedSend> = plan.sends[..60]
        .iter()
        .map(|s| PlannedSend { client_message_id: format!("{}-after-wipe", s.client_message_id), ..s.clone() })
        .collect();
    let more = Plan { sends, ..plan.clone() };
    let second = workload::run(writer.base_url(), None, &more, 8, true).await.expect("sends after the wipe");
    let mut highest: HashMap<&str, u64> = HashMap::new();
    for a in &first.acks {
        let h = highest.entry(a.conversation.as_str()).or_default();
        *h = (*h).max(a.conversation_seq);
    }
    for a in &second.acks {
        let before = highest.get(a.conversation.as_str()).copied().unwrap_or(0);
        assert!(
            a.conversation_seq > before,
            "seq {} of {} reissued (had reached {before})",
            a.conversation_seq,
            a.conversation
        );
    }

    // The mailboxes: both of the dispatcher's groups from the earliest offsets, up to where the
    // topics end now (the sends after the wipe included).
    let out =
        run_command(ServiceKind::Dispatcher, &bins, &env, &["replay", "--from", "earliest"]).await.expect("replay");
    let sent = first.acks.len() + second.acks.len();
    println!("qim-mailbox-dispatcher replay --from earliest: {out}");
    assert!(out.contains(&format!("replayed {sent} messages (router)")), "{out}");

    let archiver = Service::start(ServiceKind::Archiver, &bins, &env, &[]).await.expect("the archiver starts");
    let dispatcher = Service::start(ServiceKind::Dispatcher, &bins, &env, &[]).await.expect("the dispatcher starts");
    writer.restart(&[]).await.expect("the writer restarts once more");
    let pipeline = Pipeline::from_services(writer, archiver, dispatcher, &env);
    let acks: Vec<_> = first.acks.iter().chain(&second.acks).cloned().collect();
    pipeline.converge(&acks, Duration::from_secs(90)).await.expect("converges after the rebuild");

    // History from before the wipe is served through the writer's API, in every conversation.
    for c in &plan.conversations {
        let served = workload::history(pipeline.writer.base_url(), &plan.tenant, &c.id, &c.members[0]).await.unwrap();
        for a in acks.iter().filter(|a| a.conversation == c.id) {
            assert!(
                served.iter().any(|(id, seq)| *id == a.message_id && *seq == a.conversation_seq),
                "history lost {} (seq {})",
                a.message_id,
                a.conversation_seq
            );
        }
    }
    pipeline.stop().await.expect("clean stop");

    let input = CheckInput::new(env.clone(), &plan, acks, first.retries_mismatched + second.retries_mismatched);
    let verdict = checker::check(&input).await.expect("the checker reads everything");
    println!("{verdict}");
    assert!(verdict.is_ok(), "{verdict}");
    assert_eq!(verdict.counts.archived + verdict.counts.expired, input.acks.len());
    // In the hot tier again: every message of a conversation that was sent to after the wipe
    // (its lease revalidation wrote its recent history back); the others' hot tiers are not
    // trusted, and their history is read from the archive (checked above).
    assert_eq!(verdict.counts.hot + verdict.counts.hot_exempt, input.acks.len(), "{verdict}");
    let sent_after: std::collections::HashSet<&str> = second.acks.iter().map(|a| a.conversation.as_str()).collect();
    let restored = first.acks.iter().filter(|a| sent_after.contains(a.conversation.as_str())).count();
    assert!(verdict.counts.hot >= restored + second.acks.len(), "{verdict}");
    assert_eq!(verdict.counts.mailbox_entries, verdict.counts.expected_mailbox_entries);
}

/// `kafka-consumer-groups --reset-offsets --to-earliest` on every group of the archiver and the
/// dispatcher while they are stopped: restarted, they go through both topics again, and the
/// archive and the mailboxes stay exactly as they were (the checker accepts; no entry moved).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_reset_by_kafkas_own_tool_while_stopped_change_nothing() {
    let bins = ServiceBinaries::locate().expect("service binaries");
    let env = PipelineEnv::fresh("reset").await.expect("a fresh run (is the stack up?)");
    let pipeline = Pipeline::start(&bins, &env).await.expect("the pipeline starts");
    let plan = Plan::generate(37, 80, 4, &[20], 0);
    let report = workload::run(pipeline.writer.base_url(), None, &plan, 8, true).await.expect("the workload runs");
    pipeline.converge(&report.acks, Duration::from_secs(90)).await.expect("converges");
    pipeline.stop().await.expect("clean stop");

    let groups = [
        (env.archiver_group.clone(), &env.messages_topic),
        (format!("{}.router", env.dispatcher_group), &env.messages_topic),
        (format!("{}.shards", env.dispatcher_group), &env.dispatch_topic),
    ];
    for (group, topic) in &groups {
        let out =
            reset_group_with_kafka_tool(&env.kafka_brokers, group, topic).await.expect("the tool resets the group");
        assert!(out.contains(group.as_str()), "the tool names the group it reset: {out}");
    }

    let pipeline = Pipeline::start(&bins, &env).await.expect("the pipeline starts again");
    pipeline.converge(&report.acks, Duration::from_secs(90)).await.expect("converges after the reset");
    pipeline.stop().await.expect("clean stop");
    let input = CheckInput::new(env.clone(), &plan, report.acks.clone(), report.retries_mismatched);
    let verdict = checker::check(&input).await.expect("the checker reads everything");
    println!("{verdict}");
    assert!(verdict.is_ok(), "{verdict}");
    assert_eq!(verdict.counts.mailbox_entries, verdict.counts.expected_mailbox_entries);
}
