//! Revalidating a conversation's seq lease (steps 2–4 of "Revalidating" in the parent module):
//! holding the revalidation token while the durable mark is read and moved, and installing
//! the lease.

use super::*;

impl RedisMessageStore {
    /// Steps 2–4 of a revalidation (see the module docs), holding `token` in the copy of the
    /// data `run`; `seen`: the highest seq the allocation saw Redis hold (counter or history).
    pub(super) async fn revalidate(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        seen: u64,
        token: &str,
        run: &str,
    ) -> StoreResult<()> {
        let leases = self.leases()?;
        let mut mark = leases.high_water.high_water(tenant, conversation).await?;
        let restored = match (&leases.recent, mark.through.0) {
            (Some(recent), 1..) => Some(self.restore_recent(recent.as_ref(), tenant, conversation).await?),
            _ => None,
        };
        let known = seen.max(restored.as_ref().map_or(0, |r| r.highest_seq));
        let mut races = 0;
        let target = loop {
            let start = mark.through.0.max(known);
            let to = HighWater {
                through: ConversationSeq(checked_end(conversation, start, leases.block)?),
                holder: run.to_owned(),
            };
            match leases.high_water.advance_high_water(tenant, conversation, &mark, &to).await? {
                None => break to.through.0,
                Some(_) if races == MARK_RACES => {
                    return Err(StoreError::Unavailable {
                        message: format!(
                            "conversation {conversation}: its seq high-water mark kept moving while revalidating"
                        ),
                        source: None,
                    });
                }
                Some(now) => {
                    races += 1;
                    mark = now;
                }
            }
        };
        let args = ["revalidate", &target.to_string(), run, token, &mark.through.0.to_string()];
        let (outcome, rest) = self.install(tenant, conversation, &args).await?;
        if outcome != "ok" {
            tracing::info!(%conversation, reason = ?text(rest.first()), "seq lease revalidation raced; allocating again");
            self.release_token(tenant, conversation, token).await;
            return Ok(());
        }
        let installed_at = reply_number("message_lease_install", rest.first())?;
        counter!(SEQ_LEASES, "step" => if mark.through.0 == 0 { "first" } else { "revalidated" }).increment(1);
        counter!(SEQ_LEASE_SKIPPED).increment(installed_at.saturating_sub(known));
        if let Some(restored) = restored {
            tracing::info!(
                %conversation,
                high_water = mark.through.0,
                seen,
                resumes_after = installed_at,
                lease_through = target,
                records_restored = restored.restored,
                commits_restored = restored.commits_restored,
                "seq lease revalidated after redis lost state"
            );
        }
        Ok(())
    }

    /// Runs `message_lease_install.lua` with `args` (mode first); its status and the rest.
    pub(super) async fn install(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        args: &[&str],
    ) -> StoreResult<(String, Vec<Value>)> {
        let mut invocation = LEASE_INSTALL.prepare_invoke();
        for k in &self.lease_keys(tenant, conversation) {
            invocation.key(k);
        }
        for a in args {
            invocation.arg(*a);
        }
        let reply = invoke(&self.con, "installing a seq lease", &invocation).await?;
        status("message_lease_install", &format_args!("conversation {conversation}"), reply)
    }

    /// Runs `revalidation` while renewing `token` every [`TOKEN_KEEP_EVERY`], so a restore that
    /// takes long keeps its token while a crashed process's token lapses within
    /// [`TOKEN_MILLIS`]. A renewal that fails is left to the install: it refuses a lapsed token.
    pub(super) async fn keeping_token<T>(
        &self,
        tenant: TenantId,
        conversation: ConversationId,
        token: &str,
        revalidation: impl std::future::Future<Output = StoreResult<T>>,
    ) -> StoreResult<T> {
        tokio::pin!(revalidation);
        let mut keep = tokio::time::interval_at(tokio::time::Instant::now() + TOKEN_KEEP_EVERY, TOKEN_KEEP_EVERY);
        loop {
            tokio::select! {
                result = &mut revalidation => return result,
                _ = keep.tick() => {
                    let millis = TOKEN_MILLIS.to_string();
                    if let Err(e) = self.install(tenant, conversation, &["keep", token, &millis]).await {
                        tracing::debug!(%conversation, error = %e, "renewing a revalidation token failed");
                    }
                }
            }
        }
    }

    /// Best effort: gives a revalidation token back after a failed revalidation, so the next
    /// send revalidates at once instead of waiting for the token to expire.
    pub(super) async fn release_token(&self, tenant: TenantId, conversation: ConversationId, token: &str) {
        if let Err(e) = self.install(tenant, conversation, &["release", token]).await {
            tracing::debug!(%conversation, error = %e, "giving a revalidation token back failed; it expires");
        }
    }
}
