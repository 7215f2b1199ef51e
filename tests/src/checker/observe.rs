//! What the checker reads from the stores: the archive (CQL, with TTLs), the hot tier and the
//! mailboxes (through the `qim-store` Redis backends), and the lane watermarks.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use anyhow::Context;
use async_trait::async_trait;
use futures_util::{stream, StreamExt, TryStreamExt};
use qim_store::clock::SystemClock;
use qim_store::codec::decode_record;
use qim_store::ids::{ConversationId, ConversationSeq, TenantId, UserId};
use qim_store::mailbox::{EventGroup, LaneId, LaneWatermark, MailboxRetention, MailboxSeq, ShardEpoch, ShardId};
use qim_store::message::{Direction, HistoryQuery, MessageRecord, MAX_PAGE_ITEMS};
use qim_store::redis::{RedisMailboxStore, RedisMessageStore};
use qim_store::retention::RetentionPolicy;
use qim_store::scylla::schema::SEQ_BUCKET_SIZE;
use qim_store::{HistoryAuthorizer, MailboxStore, MessageStore, StoreResult};

use crate::services::PipelineEnv;

/// One `message_record` row of the archive with the TTL the server reported.
#[derive(Clone, Debug)]
pub struct ArchivedRow {
    /// The decoded record (`Err`: the blob did not decode).
    pub record: Result<MessageRecord, String>,
    /// The row's clustering seq.
    pub seq: u64,
    /// `TTL(record_blob)` in seconds; `None`: no TTL.
    pub ttl: Option<i32>,
    /// The matching `history_index` row's `expires_at`, `None` when that row is missing.
    pub index_expires_at: Option<Option<i64>>,
    /// Unix millis just before and just after the read (the TTL was taken in between).
    pub read_between: (i64, i64),
}

/// Reads every archived row of the given conversations, bucket by bucket up to `max_seq`.
///
/// # Errors
///
/// Cassandra does not answer.
pub async fn read_archive(
    env: &PipelineEnv,
    conversations: &[(TenantId, ConversationId, u64)],
) -> anyhow::Result<Vec<ArchivedRow>> {
    let config = env.scylla_config();
    let session = qim_store::scylla::open_session(&config).await.context("opening a Cassandra session")?;
    let ks = &config.keyspace;
    let records = session
        .prepare(format!(
            "SELECT conversation_seq, record_blob, TTL(record_blob) FROM {ks}.message_record \
             WHERE tenant_id = ? AND conversation_id = ? AND seq_bucket = ?"
        ))
        .await?;
    let index = session
        .prepare(format!(
            "SELECT conversation_seq, expires_at FROM {ks}.history_index WHERE tenant_id = ? AND conversation_id = ?"
        ))
        .await?;
    let mut out = Vec::new();
    for (tenant, conversation, max_seq) in conversations {
        let (t, c) = (tenant.0.to_vec(), conversation.0.to_vec());
        let idx = session.execute_unpaged(&index, (&t, &c)).await?.into_rows_result()?;
        let idx: HashMap<i64, Option<i64>> = idx.rows::<(i64, Option<i64>)>()?.collect::<Result<_, _>>()?;
        for bucket in 0..=(max_seq / SEQ_BUCKET_SIZE) {
            let before = qim_store::ids::UnixMillis::now().0;
            let rows = session.execute_unpaged(&records, (&t, &c, bucket as i64)).await?.into_rows_result()?;
            let after = qim_store::ids::UnixMillis::now().0;
            for row in rows.rows::<(i64, Vec<u8>, Option<i32>)>()? {
                let (seq, blob, ttl) = row?;
                out.push(ArchivedRow {
                    record: decode_record(&blob).map_err(|e| e.to_string()),
                    seq: seq as u64,
                    ttl,
                    index_expires_at: idx.get(&seq).copied(),
                    read_between: (before, after),
                });
            }
        }
    }
    Ok(out)
}

/// Lets the checker read any conversation.
struct Everyone;

#[async_trait]
impl HistoryAuthorizer for Everyone {
    async fn authorize_history(&self, _: TenantId, _: ConversationId, _: UserId) -> StoreResult<()> {
        Ok(())
    }
}

/// Every record the Redis hot tier holds for each conversation, in the order its history pages
/// return them (oldest first), and the conversations whose hot tier is not trusted (Redis lost
/// state and no send revalidated the conversation since: readers merge the archive in).
///
/// # Errors
///
/// Redis does not answer, or a page is refused.
pub async fn read_hot(
    env: &PipelineEnv,
    policy: RetentionPolicy,
    conversations: &[(TenantId, ConversationId)],
) -> anyhow::Result<(Vec<MessageRecord>, HashSet<(TenantId, ConversationId)>)> {
    let store = RedisMessageStore::open(&env.redis_config(), policy, Arc::new(SystemClock)).await?;
    let mut out = Vec::new();
    let mut untrusted = HashSet::new();
    for (tenant, conversation) in conversations {
        if !store.hot_tier_trusted(*tenant, *conversation).await.context("checking a hot tier's lease")? {
            untrusted.insert((*tenant, *conversation));
        }
        let mut anchor: Option<ConversationSeq> = None;
        loop {
            let query = HistoryQuery {
                tenant: *tenant,
                conversation: *conversation,
                viewer: UserId([0; 16]),
                direction: Direction::Newer,
                anchor,
                max_items: MAX_PAGE_ITEMS,
                max_bytes: usize::MAX / 2,
            };
            let page = store.history_page(&query, &Everyone).await.context("reading a hot-tier history page")?;
            let Some(last) = page.records.last() else { break };
            anchor = Some(last.seq);
            let more = page.has_more;
            out.extend(page.records);
            if !more {
                break;
            }
        }
    }
    Ok((out, untrusted))
}

/// Every event group in each user's mailbox (epoch 0, from the origin), ascending as
/// `range_scan` returns them.
///
/// # Errors
///
/// Redis does not answer, or a scan is refused.
pub async fn read_mailboxes(
    env: &PipelineEnv,
    users: &BTreeSet<(TenantId, UserId)>,
) -> anyhow::Result<HashMap<UserId, Vec<EventGroup>>> {
    let retention = MailboxRetention::days(30).map_err(anyhow::Error::msg)?;
    let store = RedisMailboxStore::open(&env.redis_config(), retention, Arc::new(SystemClock)).await?;
    let top = MailboxSeq::new(ShardEpoch(0), (1 << 47) - 1).context("the highest seq of epoch 0")?;
    let store = &store;
    stream::iter(users.iter().copied())
        .map(|(tenant, user)| async move {
            let mut after = MailboxSeq::origin(ShardEpoch(0));
            let mut groups = Vec::new();
            loop {
                let page = store.range_scan(tenant, user, after, top, 1000).await.context("scanning a mailbox")?;
                if page.groups.is_empty() || page.covered <= after {
                    break;
                }
                after = page.covered;
                groups.extend(page.groups);
            }
            anyhow::Ok((user, groups))
        })
        .buffer_unordered(32)
        .try_collect()
        .await
}

/// Every lane watermark of `shards` shards.
///
/// # Errors
///
/// Redis does not answer.
pub async fn read_watermarks(env: &PipelineEnv, shards: u16) -> anyhow::Result<Vec<LaneWatermark>> {
    let retention = MailboxRetention::days(30).map_err(anyhow::Error::msg)?;
    let store = RedisMailboxStore::open(&env.redis_config(), retention, Arc::new(SystemClock)).await?;
    let mut out = Vec::new();
    for shard in 0..shards {
        for lane in LaneId::all() {
            out.push(store.lane_watermark(ShardId(shard), lane).await?);
        }
    }
    Ok(out)
}
