//! A partition handed over while quiet: records finished by one instance, then no record more.
//! Every lane watermark must still pass them, although the next owner has nothing new to read
//! (this is what stalled the Scylla rebalance test: the instance that left had finished its
//! records and stored their offsets, but its last page of watermark advances never ran).
//!
//! Watermarks advance only once an hour here, so the only advances are the ones a handover
//! makes: the leaving instance's last page, or the next owner reading again the records whose
//! offsets were not stored because a watermark had not passed them.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use qim_store::ids::{ConversationId, TenantId, UserId};
use qim_store::mailbox::{shard_of, DispatchId, DispatchManifest, ShardId};
use support::{fresh, mailboxes_of, message, wait_for, wait_groups_settled, watermarks, Fixture, Kind, EPOCH, SHARDS};

/// Two records per shard of 12 recipients each; returns the manifests and each shard's last
/// offset.
async fn produce(f: &Fixture, tenant: TenantId) -> (Vec<(u64, DispatchManifest)>, HashMap<ShardId, u64>) {
    let mut sent = Vec::new();
    let mut last = HashMap::new();
    for shard in (0..SHARDS).map(ShardId) {
        for _ in 0..2 {
            let users: Vec<UserId> = std::iter::repeat_with(|| fresh(UserId))
                .filter(|u| shard_of(&tenant, u, SHARDS) == shard)
                .take(12)
                .collect();
            let record = message(tenant, fresh(ConversationId), 1, users[0]);
            let id = DispatchId { message_id: record.message_id, shard };
            let m = DispatchManifest::new(id, qim_mailbox_dispatcher::router::route::message_ref(&record), users);
            let offset = f.produce_dispatch(&m).await;
            last.insert(shard, offset);
            sent.push((offset, m));
        }
    }
    (sent, last)
}

async fn finished_then_handed_over_while_quiet(kind: Kind) {
    let mut f = Fixture::new(kind).await;
    f.config.advance_every = Duration::from_secs(3600);
    let store = f.mailbox().await;
    let tenant = fresh(TenantId);
    let (sent, last) = produce(&f, tenant).await;

    let a = f.start().await;
    wait_for("every record's chunks written and completed", Duration::from_secs(120), || {
        let (store, sent) = (store.clone(), &sent);
        async move {
            for (_, m) in sent {
                match store.dispatch_progress(m.id).await.expect("dispatch progress") {
                    Some(p) if p.is_complete() => {}
                    _ => return false,
                }
            }
            true
        }
    })
    .await;
    a.stop().await;
    for (shard, end) in &last {
        let wms = watermarks(store.as_ref(), *shard).await;
        assert!(
            wms.iter().all(|w| w.is_some_and(|w| w >= *end)),
            "shard {}: the leaving instance's last page did not pass offset {end}: {wms:?}",
            shard.0
        );
    }

    // The next owner finds nothing to read, and nothing has to move.
    let b = f.start().await;
    wait_groups_settled(&f.config.kafka, 1).await;
    b.stop().await;
    for (offset, m) in &sent {
        let seq = qim_store::mailbox::MailboxSeq::from_offset(EPOCH, *offset).unwrap();
        for (u, got) in mailboxes_of(store.as_ref(), tenant, m.recipients.iter().copied()).await {
            assert_eq!(got, vec![(seq, m.id.message_id)], "mailbox of {u}");
        }
    }
}

both_backends!(finished_then_handed_over_while_quiet);
