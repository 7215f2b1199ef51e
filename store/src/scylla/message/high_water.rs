//! [`SeqHighWater`] on `seq_high_water`: one row per conversation, no TTL, never deleted.
//!
//! A raise is `UPDATE ... USING TIMESTAMP <mark> SET high_water = <mark>`: the mark is its own
//! write timestamp, so when two raises meet (in any order, on any replica, after any repair) the
//! higher one wins, without an LWT. Both statements run at LOCAL_QUORUM, so a read sees every
//! raise acknowledged before it began.

use async_trait::async_trait;

use super::ScyllaMessageStore;
use crate::codec::{i64_to_u64, u64_to_i64};
use crate::error::StoreResult;
use crate::ids::{ConversationId, ConversationSeq, TenantId};
use crate::scylla::cql::{corrupt, unavailable};
use crate::seq_high_water::SeqHighWater;

#[async_trait]
impl SeqHighWater for ScyllaMessageStore {
    async fn high_water(&self, tenant: TenantId, conversation: ConversationId) -> StoreResult<ConversationSeq> {
        let what = format!("reading the seq high-water mark of {conversation}");
        let rows = self
            .inner
            .session
            .execute_unpaged(&self.inner.st.select_high_water, (&tenant.0[..], &conversation.0[..]))
            .await
            .map_err(|e| unavailable(what.clone(), e))?
            .into_rows_result()
            .map_err(|e| corrupt(&what, e))?;
        let mark = rows.maybe_first_row::<(Option<i64>,)>().map_err(|e| corrupt(&what, e))?;
        match mark.and_then(|(m,)| m) {
            Some(m) => Ok(ConversationSeq(i64_to_u64("seq high-water mark", m)?)),
            None => Ok(ConversationSeq(0)),
        }
    }

    async fn raise_high_water(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        to: ConversationSeq,
    ) -> StoreResult<()> {
        if to.0 == 0 {
            return Ok(());
        }
        let mark = u64_to_i64("seq high-water mark", to.0)?;
        let what = format!("raising the seq high-water mark of {conversation} to {mark}");
        self.inner
            .session
            .execute_unpaged(&self.inner.st.raise_high_water, (mark, mark, &tenant.0[..], &conversation.0[..]))
            .await
            .map_err(|e| unavailable(what, e))?;
        Ok(())
    }
}
