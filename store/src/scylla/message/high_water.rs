//! [`SeqHighWater`] on `seq_high_water`: one row per conversation (`high_water`, `holder`), no
//! TTL, never deleted.
//!
//! The mark moves only by LWT (LOCAL_SERIAL): `INSERT ... IF NOT EXISTS` from the mark never
//! moved, `UPDATE ... IF high_water = ? AND holder = ?` from any other. A failed condition
//! answers the current mark (read by column name). A CAS Paxos gave up on (its outcome unknown)
//! is sent again unchanged: refused with the mark at exactly this move's target (its holder
//! included), it was this move that landed. Once per lease block of a conversation, and once per revalidation after Redis
//! lost state: a rare control path, where DESIGN allows LWTs. Reads are LOCAL_QUORUM, which sees
//! every acknowledged LWT (its commit is written at LOCAL_QUORUM).

use async_trait::async_trait;

use super::ScyllaMessageStore;
use crate::codec::{i64_to_u64, u64_to_i64};
use crate::error::StoreResult;
use crate::ids::{ConversationId, ConversationSeq, TenantId};
use crate::scylla::cql::{contention_pause, corrupt, paxos_timed_out, unavailable, LwtOutcome};

/// Times one move is sent while Paxos gives up on it (contention) before `Unavailable`.
const MAX_UNCERTAIN_ATTEMPTS: usize = 16;
use crate::seq_high_water::{check_move, HighWater, SeqHighWater};

#[async_trait]
impl SeqHighWater for ScyllaMessageStore {
    async fn high_water(&self, tenant: TenantId, conversation: ConversationId) -> StoreResult<HighWater> {
        let what = format!("reading the seq high-water mark of {conversation}");
        let rows = self
            .inner
            .session
            .execute_unpaged(&self.inner.st.select_high_water, (&tenant.0[..], &conversation.0[..]))
            .await
            .map_err(|e| unavailable(what.clone(), e))?
            .into_rows_result()
            .map_err(|e| corrupt(&what, e))?;
        match rows.maybe_first_row::<(Option<i64>, Option<String>)>().map_err(|e| corrupt(&what, e))? {
            Some((Some(m), holder)) => Ok(HighWater {
                through: ConversationSeq(i64_to_u64("seq high-water mark", m)?),
                holder: holder.unwrap_or_default(),
            }),
            Some((None, _)) | None => Ok(HighWater::default()),
        }
    }

    async fn advance_high_water(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        expected: &HighWater,
        to: &HighWater,
    ) -> StoreResult<Option<HighWater>> {
        check_move(expected, to)?;
        let (t, c) = (&tenant.0[..], &conversation.0[..]);
        let target = u64_to_i64("seq high-water mark", to.through.0)?;
        let what =
            format!("moving the seq high-water mark of {conversation} from {} to {}", expected.through, to.through);
        let st = &self.inner.st;
        let mut uncertain = false;
        let mut attempt = 0;
        let result = loop {
            let result = if *expected == HighWater::default() {
                self.inner.session.execute_unpaged(&st.init_high_water, (t, c, target, &to.holder)).await
            } else {
                let from = u64_to_i64("seq high-water mark", expected.through.0)?;
                // No holder reads as "": stored as '' or, in rows from before the column, as null.
                let alternative = (!expected.holder.is_empty()).then_some(expected.holder.as_str());
                let values = (target, &to.holder, t, c, from, expected.holder.as_str(), alternative);
                self.inner.session.execute_unpaged(&st.cas_high_water, values).await
            };
            match result {
                Err(e) if paxos_timed_out(&e) && attempt + 1 < MAX_UNCERTAIN_ATTEMPTS => {
                    uncertain = true;
                    contention_pause(attempt).await;
                    attempt += 1;
                }
                other => break other,
            }
        };
        let outcome = LwtOutcome::read(&what, result.map_err(|e| unavailable(what.clone(), e))?)?;
        if outcome.applied() {
            return Ok(None);
        }
        let through = outcome.bigint(&what, "high_water")?.unwrap_or(0);
        let current = HighWater {
            through: ConversationSeq(i64_to_u64("seq high-water mark", through)?),
            holder: outcome.text(&what, "holder")?.unwrap_or_default(),
        };
        // An earlier attempt whose outcome was unknown landed: the mark is this move's target.
        if uncertain && current == *to {
            return Ok(None);
        }
        Ok(Some(current))
    }
}
