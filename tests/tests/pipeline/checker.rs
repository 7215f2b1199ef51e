//! The invariant checker against a real pipeline run: it accepts a clean run, and it names the
//! violation when an acknowledgement is forged, an archived row is deleted, an archive TTL is
//! wrong, or a mailbox is wiped. A checker that cannot fail proves nothing.

use std::time::Duration;

use qim_store::ids::{ConversationId, MessageId, TenantId, UserId};
use qim_store::scylla::schema::SEQ_BUCKET_SIZE;
use qim_tests::checker::{self, files, CheckInput, Invariant, Verdict};
use qim_tests::services::{Pipeline, PipelineEnv, ServiceBinaries};
use qim_tests::stack;
use qim_tests::workload::{self, Plan};

fn names(v: &Verdict, invariant: Invariant, needle: &str) -> bool {
    v.of(invariant).any(|x| x.detail.contains(needle))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_accepts_a_clean_run_and_names_each_sabotage() {
    let bins = ServiceBinaries::locate().expect("service binaries");
    let env = PipelineEnv::fresh("checker").await.expect("a fresh run (is the stack up?)");
    let pipeline = Pipeline::start(&bins, &env).await.expect("the pipeline starts");
    let plan = Plan::generate(21, 120, 8, &[60, 3], 6);
    let report = workload::run(pipeline.writer.base_url(), None, &plan, 8, true).await.expect("the workload runs");
    pipeline.converge(&report.acks, Duration::from_secs(90)).await.expect("converges");
    pipeline.stop().await.expect("clean stop");

    let input = CheckInput::new(env.clone(), &plan, report.acks.clone(), report.retries_mismatched);
    let clean = checker::check(&input).await.expect("the checker reads everything");
    println!("{clean}");
    assert!(clean.is_ok(), "{clean}");
    assert_eq!(clean.counts.acked, 120);
    assert_eq!(clean.counts.in_kafka, 120);
    assert_eq!(clean.counts.archived + clean.counts.expired, 120);
    assert_eq!(clean.counts.hot, 120);
    assert!(clean.counts.expected_mailbox_entries > 120);
    assert_eq!(clean.counts.mailbox_entries, clean.counts.expected_mailbox_entries);
    assert!(clean.counts.lanes_advanced > 0 && clean.counts.lane_dispatches_verified > 0);
    let facts = files::WorkloadFacts { retries_mismatched: report.retries_mismatched, ..Default::default() };
    files::save(&env.run_dir, &env, &plan, &report.acks, &facts).expect("saving the run files");
    let (code, out) = qim_check(&env.run_dir);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("verdict: OK"), "{out}");

    // Forged acknowledgements: a wrong seq, a message that was never sent, a retry answered twice.
    let mut forged = input.clone();
    let victim = forged.acks[0].clone();
    forged.acks[0].conversation_seq += 1000;
    let mut ghost = victim.clone();
    ghost.client_message_id = "never-sent".into();
    ghost.message_id = "0123456789abcdef0123456789abcdef".into();
    forged.acks.push(ghost);
    let mut retry = forged.acks[1].clone();
    retry.conversation_seq += 1;
    forged.acks.push(retry);
    let v = checker::check(&forged).await.expect("check");
    assert!(names(&v, Invariant::AckMismatch, &victim.message_id), "{v}");
    assert!(names(&v, Invariant::Lost, "0123456789abcdef0123456789abcdef"), "{v}");
    assert!(names(&v, Invariant::RetryMismatch, &forged.acks[1].client_message_id), "{v}");

    // Sabotage the archive: delete one row, give another a TTL that is not the policy's.
    let session = stack::require_scylla().await;
    let ks = &env.keyspace;
    let bytes = |hex: &str| ConversationId::from_hex(hex).unwrap().0.to_vec();
    let deleted = &report.acks[2];
    let (t, c, seq) = (bytes(&deleted.tenant), bytes(&deleted.conversation), deleted.conversation_seq as i64);
    session
        .query_unpaged(
            format!("DELETE FROM {ks}.message_record WHERE tenant_id = ? AND conversation_id = ? AND seq_bucket = ? AND conversation_seq = ?"),
            (&t, &c, seq / SEQ_BUCKET_SIZE as i64, seq),
        )
        .await
        .expect("deleting an archived row");
    let retimed = report.acks.iter().find(|a| a.retention == "default" && a.message_id != deleted.message_id).unwrap();
    let (t2, c2, seq2) = (bytes(&retimed.tenant), bytes(&retimed.conversation), retimed.conversation_seq as i64);
    session
        .query_unpaged(
            format!("UPDATE {ks}.message_record USING TTL 3600 SET record_blob = ? WHERE tenant_id = ? AND conversation_id = ? AND seq_bucket = ? AND conversation_seq = ?"),
            (archived_blob(&session, ks, &t2, &c2, seq2).await, &t2, &c2, seq2 / SEQ_BUCKET_SIZE as i64, seq2),
        )
        .await
        .expect("rewriting an archived row's TTL");

    // Sabotage a mailbox: wipe one member's entries.
    let group = plan.conversations.iter().find(|c| c.members.len() == 60).unwrap();
    let user = &group.members[7];
    let mut redis = stack::require_redis().await;
    let base = format!(
        "{}:{{u:{}{}}}",
        env.redis_namespace,
        TenantId::from_hex(&plan.tenant).unwrap().to_hex(),
        UserId::from_hex(user).unwrap().to_hex()
    );
    let _: i64 = redis::cmd("DEL")
        .arg(format!("{base}:groups"))
        .arg(format!("{base}:seqs"))
        .query_async(&mut redis)
        .await
        .unwrap();

    let v = checker::check(&input).await.expect("check");
    println!("{v}");
    assert!(!v.is_ok());
    let deleted_id = MessageId::from_hex(&deleted.message_id).unwrap().to_string();
    assert!(names(&v, Invariant::Lost, &format!("{deleted_id} (seq {} of", deleted.conversation_seq)), "{v}");
    assert!(names(&v, Invariant::Retention, &MessageId::from_hex(&retimed.message_id).unwrap().to_string()), "{v}");
    let user_id = UserId::from_hex(user).unwrap().to_string();
    assert!(names(&v, Invariant::Lost, &format!("mailbox of {user_id}")), "{v}");
    assert!(names(&v, Invariant::Watermark, &user_id), "{v}");
    let (code, out) = qim_check(&env.run_dir);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("VIOLATIONS") && out.contains("lost: acked"), "{out}");
}

/// Runs the `qim-check` binary on `dir`: (exit code, stdout + stderr).
fn qim_check(dir: &std::path::Path) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_qim-check")).arg(dir).output().expect("running qim-check");
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

async fn archived_blob(session: &scylla::client::session::Session, ks: &str, t: &[u8], c: &[u8], seq: i64) -> Vec<u8> {
    let rows = session
        .query_unpaged(
            format!("SELECT record_blob FROM {ks}.message_record WHERE tenant_id = ? AND conversation_id = ? AND seq_bucket = ? AND conversation_seq = ?"),
            (t, c, seq / SEQ_BUCKET_SIZE as i64, seq),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    rows.single_row::<(Vec<u8>,)>().unwrap().0
}
