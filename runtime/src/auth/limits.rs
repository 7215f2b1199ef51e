//! Per-tenant and per-user request rate limits (GCRA, `governor`): a token's tenant and, for a
//! user's token, the user each get a budget of requests per second, refilled continuously, with
//! one second's worth as the burst.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use qim_store::ids::{TenantId, UserId};

use super::caller::{Identity, Scope};
use super::metrics::{RATE_LIMITED, RATE_LIMIT_PER_SECOND};

/// Checks between two sweeps of keys idle long enough to be back at a full burst.
const SWEEP_EVERY: u64 = 16_384;

/// Requests per second allowed; `None` is unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateLimitConfig {
    /// All requests of one tenant's tokens.
    pub per_tenant: Option<NonZeroU32>,
    /// One user's requests (tokens naming a user; a gateway's calls count for its tenant only).
    pub per_user: Option<NonZeroU32>,
}

/// A request over a limit: which one, and when to try again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limited {
    /// `tenant` or `user`.
    pub limit: &'static str,
    /// The earliest a retry can pass.
    pub retry_after: Duration,
}

/// The live limiters of one service.
pub struct RateLimits {
    tenant: Option<DefaultKeyedRateLimiter<TenantId>>,
    user: Option<DefaultKeyedRateLimiter<(TenantId, UserId)>>,
    clock: DefaultClock,
    checks: AtomicU64,
}

impl RateLimits {
    /// Limiters for `config`; exports the configured rates (0 = unlimited).
    pub fn new(config: RateLimitConfig) -> Self {
        for (rate, label) in [(config.per_tenant, "tenant"), (config.per_user, "user")] {
            metrics::gauge!(RATE_LIMIT_PER_SECOND, "limit" => label).set(rate.map_or(0.0, |r| f64::from(r.get())));
        }
        Self {
            tenant: config.per_tenant.map(|r| RateLimiter::keyed(Quota::per_second(r))),
            user: config.per_user.map(|r| RateLimiter::keyed(Quota::per_second(r))),
            clock: DefaultClock::default(),
            checks: AtomicU64::new(0),
        }
    }

    /// Counts one request of `id`.
    ///
    /// # Errors
    ///
    /// The tenant's or the user's budget is spent (counted under the rate-limited metric).
    pub fn check(&self, id: &Identity) -> Result<(), Limited> {
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.sweep();
        }
        let over = |limit: &'static str, not_until: governor::NotUntil<_>| {
            metrics::counter!(RATE_LIMITED, "limit" => limit).increment(1);
            Limited { limit, retry_after: not_until.wait_time_from(self.clock.now()) }
        };
        if let Some(tenants) = &self.tenant {
            tenants.check_key(&id.tenant).map_err(|n| over("tenant", n))?;
        }
        if let (Some(users), Some(user)) = (&self.user, id.user) {
            if !id.scopes.has(Scope::Gateway) {
                users.check_key(&(id.tenant, user)).map_err(|n| over("user", n))?;
            }
        }
        Ok(())
    }

    /// Forgets keys whose budget is full again, so idle tenants and users cost no memory.
    fn sweep(&self) {
        if let Some(l) = &self.tenant {
            l.retain_recent();
            l.shrink_to_fit();
        }
        if let Some(l) = &self.user {
            l.retain_recent();
            l.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::caller::Scopes;

    fn id(tenant: u8, user: u8, scopes: &str) -> Identity {
        Identity {
            tenant: TenantId::from_hex(&format!("{tenant:032x}")).unwrap(),
            user: UserId::from_hex(&format!("{user:032x}")).ok(),
            scopes: Scopes::parse(scopes),
        }
    }

    #[test]
    fn a_user_over_its_budget_waits_and_others_do_not() {
        let limits = RateLimits::new(RateLimitConfig { per_tenant: None, per_user: NonZeroU32::new(2) });
        let alice = id(1, 1, "send");
        assert!(limits.check(&alice).is_ok() && limits.check(&alice).is_ok());
        let over = limits.check(&alice).unwrap_err();
        assert_eq!(over.limit, "user");
        assert!(over.retry_after > Duration::ZERO && over.retry_after <= Duration::from_millis(500), "{over:?}");
        assert!(limits.check(&id(1, 2, "send")).is_ok(), "another user has its own budget");
    }

    #[test]
    fn a_tenant_budget_covers_its_gateway_and_users() {
        let limits = RateLimits::new(RateLimitConfig { per_tenant: NonZeroU32::new(3), per_user: NonZeroU32::new(1) });
        let gateway = id(1, 0xff, "gateway");
        assert!(limits.check(&gateway).is_ok() && limits.check(&gateway).is_ok(), "no user limit for a gateway");
        assert!(limits.check(&id(1, 1, "send")).is_ok());
        assert_eq!(limits.check(&id(1, 2, "send")).unwrap_err().limit, "tenant");
        assert!(limits.check(&id(2, 1, "send")).is_ok(), "another tenant has its own budget");
    }

    #[test]
    fn unlimited_is_the_absence_of_a_rate() {
        let limits = RateLimits::new(RateLimitConfig::default());
        let u = id(1, 1, "send");
        assert!((0..10_000).all(|_| limits.check(&u).is_ok()));
    }
}
