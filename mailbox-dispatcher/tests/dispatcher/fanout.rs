//! A message to a 10 000-member group, through the router and the shard workers on the real
//! stack: every member's mailbox holds exactly one entry, at the seq of its shard's record, and
//! every lane watermark of every shard passes that record.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use qim_store::ids::{ConversationId, TenantId};
use qim_store::mailbox::{shard_of, MailboxSeq, ShardId};
use support::{add_members, fresh, mailbox_of, message, users, wait_for, watermarks, Fixture, Kind, EPOCH, SHARDS};

async fn ten_thousand_members(kind: Kind) {
    let f = Fixture::new(kind).await;
    let (tenant, conversation) = (fresh(TenantId), fresh(ConversationId));
    let members = users(10_000);
    add_members(f.members().await.as_ref(), tenant, conversation, &members).await;
    let d = f.start().await;
    let record = message(tenant, conversation, 1, members[0]);
    let started = Instant::now();
    f.produce_message(&record).await;

    // Fresh topics: the record is offset 0 of every shard's partition.
    let store = f.mailbox().await;
    wait_for("every lane of every shard to pass the record", Duration::from_secs(180), || {
        let store = Arc::clone(&store);
        async move {
            for shard in 0..SHARDS {
                if watermarks(store.as_ref(), ShardId(shard)).await.iter().any(|w| *w != Some(0)) {
                    return false;
                }
            }
            true
        }
    })
    .await;
    eprintln!("{kind:?}: 10 000 entries dispatched in {:?}", started.elapsed());

    let want = MailboxSeq::from_offset(EPOCH, 0).unwrap();
    let mut checks = tokio::task::JoinSet::new();
    for chunk in members.chunks(500) {
        let (store, chunk) = (Arc::clone(&store), chunk.to_vec());
        checks.spawn(async move {
            for u in chunk {
                let got = mailbox_of(store.as_ref(), tenant, u).await;
                assert_eq!(
                    got,
                    vec![(want, record.message_id)],
                    "mailbox of {u} (shard {:?})",
                    shard_of(&tenant, &u, SHARDS)
                );
            }
        });
    }
    while let Some(done) = checks.join_next().await {
        done.unwrap();
    }
    d.stop().await;
}

both_backends!(ten_thousand_members);
