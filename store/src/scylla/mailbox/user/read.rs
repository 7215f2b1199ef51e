//! One user's mailbox read and trimmed: range scans above the trim, gap and expired boundary,
//! and the monotonic trim.

use super::*;

impl ScyllaMailboxStore {
    /// `range_scan` after the argument checks (same epoch, `max_items >= 1`, `after <= up_to`).
    pub(in crate::scylla::mailbox) async fn scan(
        &self,
        tenant: TenantId,
        user: UserId,
        after: MailboxSeq,
        up_to: MailboxSeq,
        max_items: usize,
    ) -> StoreResult<MailboxPage> {
        let now = self.inner.clock.now();
        // Meta before floor: a writer raises the gap before its LWT drops an expired day, so
        // either the day is still listed (and its proof is read) or the raised gap is seen.
        let meta = self.read_meta(&tenant, &user).await?;
        let floor = self.read_floor(&tenant, &user).await?;
        if floor.is_none() && !meta.exists {
            return Ok(MailboxPage { groups: Vec::new(), covered: up_to });
        }
        let (trim, gap) = floor.unwrap_or_default();
        let expired = self.expired_boundary(&tenant, &user, &meta, now).await?;
        if let Some(boundary) = trim.max(gap).max(expired) {
            if after < boundary {
                return Err(StoreError::CursorExpired { earliest: boundary });
            }
        }
        let up = seq_i("up_to", up_to)?;
        let mut cursor = after;
        let mut groups: Vec<EventGroup> = Vec::new();
        let mut items = 0usize;
        loop {
            let result = self
                .session()
                .execute_unpaged(
                    &self.st().entry_range,
                    (&tenant.0[..], &user.0[..], seq_i("cursor", cursor)?, up, SCAN_BATCH as i32),
                )
                .await
                .map_err(db("reading mailbox groups"))?;
            let found = rows::<(i64, Option<Vec<u8>>)>(result, "mailbox entry")?;
            let n = found.len();
            for (raw_seq, bytes) in found {
                let seq = seq_from("mailbox seq", raw_seq)?;
                let bytes =
                    bytes.ok_or_else(|| StoreError::CorruptEntry(format!("mailbox group at {seq} has no bytes")))?;
                let group = crate::rules::accept_group(&bytes, seq, tenant, user, now)?;
                items += group.events.len();
                cursor = seq;
                groups.push(group);
                if items >= max_items {
                    return Ok(MailboxPage { groups, covered: seq });
                }
            }
            if n < SCAN_BATCH {
                return Ok(MailboxPage { groups, covered: up_to });
            }
        }
    }

    /// `truncate_before`: the trim cell is written with `through` as its write timestamp, so it
    /// only rises; the trim in force is read back.
    pub(in crate::scylla::mailbox) async fn truncate(
        &self,
        tenant: TenantId,
        user: UserId,
        through: MailboxSeq,
    ) -> StoreResult<MailboxSeq> {
        let s = seq_i("trim", through)?;
        self.session()
            .execute_unpaged(&self.st().floor_trim, (highest_wins_timestamp(s), s, &tenant.0[..], &user.0[..]))
            .await
            .map_err(db("raising a mailbox trim"))?;
        let stored = self.read_floor(&tenant, &user).await?.and_then(|(trim, _)| trim);
        Ok(stored.map_or(through, |t| t.max(through)))
    }
}
