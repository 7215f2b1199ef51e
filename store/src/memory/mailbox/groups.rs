//! Turning a batch of entries into canonical event groups (shared rules of `append_batch`).

use std::collections::BTreeMap;

use crate::codec::validate_group;
use crate::error::{StoreError, StoreResult};
use crate::ids::{TenantId, UserId, MILLIS_PER_DAY};
use crate::mailbox::{EventGroup, MailboxEntry, MailboxSeq};

/// Groups `entries` by `(tenant, user, seq)`, sorts each group's events by (ordinal, event id)
/// and checks the group rules. Every entry of a group must carry the same expiry, aligned to the
/// end of a UTC day (so a bucket's proof covers every entry in it). Any violation is
/// `InvalidInput` and nothing is returned.
pub(crate) fn canonical_groups(entries: &[MailboxEntry]) -> StoreResult<Vec<EventGroup>> {
    let mut by_key: BTreeMap<(TenantId, UserId, MailboxSeq), EventGroup> = BTreeMap::new();
    for e in entries {
        if e.expires_at.0.rem_euclid(MILLIS_PER_DAY) != 0 {
            return Err(StoreError::InvalidInput(format!(
                "entry expiry {} is not the end of a UTC day",
                e.expires_at.0
            )));
        }
        let group = by_key.entry((e.tenant, e.user, e.seq)).or_insert_with(|| EventGroup {
            tenant: e.tenant,
            user: e.user,
            seq: e.seq,
            expires_at: e.expires_at,
            events: Vec::new(),
        });
        if group.expires_at != e.expires_at {
            return Err(StoreError::InvalidInput(format!("events of mailbox seq {} carry different expiries", e.seq)));
        }
        group.events.push(e.event.clone());
    }
    by_key
        .into_values()
        .map(|mut g| {
            g.events.sort_by_key(|e| (e.ordinal, e.event_id));
            validate_group(&g)
                .map_err(|reason| StoreError::InvalidInput(format!("mailbox seq {} of {}: {reason}", g.seq, g.user)))?;
            Ok(g)
        })
        .collect()
}
