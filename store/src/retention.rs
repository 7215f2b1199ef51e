//! History retention, exactly as ADR-0019 decides it.
//!
//! - `default`: `QIM_DEFAULT_HISTORY_RETENTION_DAYS` days (1..=3650, default 30 in services);
//!   [`RetentionPolicy::default()`] (the library default) never expires it: only the service
//!   entry points inject the configured period.
//! - `ephemeral_24h`: 24 hours, whatever the configuration.
//! - `compliance_hold`: never expires automatically.
//! - `tenant_custom`: the tenant policy source does not exist yet, so it fails closed to "never".
//!
//! Expiry is `created_at + retention`; both tiers use the same moment (the Redis expiry index
//! score and the archive's remaining TTL are fixed at write time).

use std::time::Duration;

use crate::ids::{UnixMillis, MILLIS_PER_DAY};

/// The variable that configures the default retention.
pub const RETENTION_DAYS_VAR: &str = "QIM_DEFAULT_HISTORY_RETENTION_DAYS";
/// Default retention days injected by services when the variable is unset.
pub const DEFAULT_RETENTION_DAYS: u32 = 30;
/// Largest legal retention (about 10 years, below ScyllaDB's 20-year TTL limit).
pub const MAX_RETENTION_DAYS: u32 = 3650;
/// Lifetime of `ephemeral_24h` messages.
pub const EPHEMERAL_MILLIS: i64 = 24 * 60 * 60 * 1000;

/// How long a message's history is kept.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum RetentionClass {
    /// The deployment's configured period.
    Default,
    /// 24 hours.
    Ephemeral24h,
    /// Never expires; only the compliance process may lift it.
    ComplianceHold,
    /// Tenant policy; not implemented, so never expires (fails closed).
    TenantCustom,
}

impl RetentionClass {
    /// Every class, in wire order.
    pub const ALL: [RetentionClass; 4] = [
        RetentionClass::Default,
        RetentionClass::Ephemeral24h,
        RetentionClass::ComplianceHold,
        RetentionClass::TenantCustom,
    ];

    /// The API/wire name (`default`, `ephemeral_24h`, `compliance_hold`, `tenant_custom`).
    pub const fn as_str(self) -> &'static str {
        match self {
            RetentionClass::Default => "default",
            RetentionClass::Ephemeral24h => "ephemeral_24h",
            RetentionClass::ComplianceHold => "compliance_hold",
            RetentionClass::TenantCustom => "tenant_custom",
        }
    }

    /// Parses an API name; unknown names are `None` (callers answer 4xx).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

/// A retention configuration value that must stop the service from starting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetentionConfigError {
    /// Not a whole number.
    #[error("{var}={value:?} is not a whole number of days (legal: 1..={MAX_RETENTION_DAYS})")]
    NotANumber {
        /// The variable's name.
        var: &'static str,
        /// What it held.
        value: String,
    },
    /// Outside 1..=3650.
    #[error("{var}={days} is out of range (legal: 1..={MAX_RETENTION_DAYS})")]
    OutOfRange {
        /// The variable's name.
        var: &'static str,
        /// What it held.
        days: u64,
    },
}

/// Remaining lifetime to write with a row: whole seconds, at least 1.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct TtlSeconds(pub u32);

/// The one retention policy both tiers follow.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct RetentionPolicy {
    /// `None`: `default` never expires (the library default; services always inject days).
    default_days: Option<u32>,
}

impl RetentionPolicy {
    /// A policy whose `default` class lives `days` days (1..=3650).
    pub fn with_default_days(days: u32) -> Result<Self, RetentionConfigError> {
        if !(1..=MAX_RETENTION_DAYS).contains(&days) {
            return Err(RetentionConfigError::OutOfRange { var: RETENTION_DAYS_VAR, days: days.into() });
        }
        Ok(Self { default_days: Some(days) })
    }

    /// Parses the variable's value as a service reads it: `None` (unset) means 30 days.
    pub fn from_env_value(value: Option<&str>) -> Result<Self, RetentionConfigError> {
        let Some(raw) = value else {
            return Self::with_default_days(DEFAULT_RETENTION_DAYS);
        };
        let days: u64 = raw
            .trim()
            .parse()
            .map_err(|_| RetentionConfigError::NotANumber { var: RETENTION_DAYS_VAR, value: raw.to_owned() })?;
        let days =
            u32::try_from(days).map_err(|_| RetentionConfigError::OutOfRange { var: RETENTION_DAYS_VAR, days })?;
        Self::with_default_days(days)
    }

    /// Reads `QIM_DEFAULT_HISTORY_RETENTION_DAYS` from the process environment.
    pub fn from_env() -> Result<Self, RetentionConfigError> {
        Self::from_env_value(std::env::var(RETENTION_DAYS_VAR).ok().as_deref())
    }

    /// The configured `default` period in days, if any.
    pub const fn default_days(&self) -> Option<u32> {
        self.default_days
    }

    /// How long `class` lives; `None` means never expires.
    pub fn retention(&self, class: RetentionClass) -> Option<Duration> {
        self.retention_millis(class).map(|ms| Duration::from_millis(ms.unsigned_abs()))
    }

    fn retention_millis(&self, class: RetentionClass) -> Option<i64> {
        match class {
            RetentionClass::Default => self.default_days.map(|d| i64::from(d) * MILLIS_PER_DAY),
            RetentionClass::Ephemeral24h => Some(EPHEMERAL_MILLIS),
            RetentionClass::ComplianceHold | RetentionClass::TenantCustom => None,
        }
    }

    /// The moment a message created at `created_at` expires; `None` means never.
    pub fn expires_at(&self, class: RetentionClass, created_at: UnixMillis) -> Option<UnixMillis> {
        self.retention_millis(class).map(|ms| created_at.plus_millis(ms))
    }

    /// The TTL an archive write made at `now` must carry so the row vanishes at the original
    /// expiry: the remaining time rounded up to whole seconds, at least 1 s once expired (an
    /// expired record is never resurrected); `None` for classes that never expire.
    pub fn remaining_ttl(&self, class: RetentionClass, created_at: UnixMillis, now: UnixMillis) -> Option<TtlSeconds> {
        let expires = self.expires_at(class, created_at)?;
        Some(ttl_until(expires, now))
    }
}

/// Whole seconds from `now` until `expires`, rounded up, at least 1, capped at `u32::MAX`.
pub fn ttl_until(expires: UnixMillis, now: UnixMillis) -> TtlSeconds {
    let remaining = expires.0.saturating_sub(now.0);
    if remaining <= 0 {
        return TtlSeconds(1);
    }
    let secs = (remaining + 999) / 1000;
    TtlSeconds(u32::try_from(secs).unwrap_or(u32::MAX).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: UnixMillis = UnixMillis(1_790_000_000_000);

    #[test]
    fn library_default_never_expires_default_class() {
        let p = RetentionPolicy::default();
        assert_eq!(p.expires_at(RetentionClass::Default, T0), None);
        assert_eq!(p.expires_at(RetentionClass::Ephemeral24h, T0), Some(T0.plus_millis(EPHEMERAL_MILLIS)));
    }

    #[test]
    fn services_default_to_thirty_days() {
        let p = RetentionPolicy::from_env_value(None).unwrap();
        assert_eq!(p.default_days(), Some(30));
        assert_eq!(p.expires_at(RetentionClass::Default, T0), Some(T0.plus_millis(30 * MILLIS_PER_DAY)));
    }

    #[test]
    fn configured_days_apply_to_default_only() {
        let p = RetentionPolicy::from_env_value(Some("7")).unwrap();
        assert_eq!(p.retention(RetentionClass::Default), Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(p.retention(RetentionClass::Ephemeral24h), Some(Duration::from_secs(86_400)));
        assert_eq!(p.retention(RetentionClass::ComplianceHold), None);
        assert_eq!(p.retention(RetentionClass::TenantCustom), None);
    }

    #[test]
    fn illegal_days_name_the_variable() {
        for bad in ["0", "3651", "-1", "thirty", "", "99999999999"] {
            let err = RetentionPolicy::from_env_value(Some(bad)).unwrap_err();
            assert!(err.to_string().contains(RETENTION_DAYS_VAR), "{bad}: {err}");
        }
        assert!(RetentionPolicy::from_env_value(Some("1")).is_ok());
        assert!(RetentionPolicy::from_env_value(Some("3650")).is_ok());
    }

    #[test]
    fn remaining_ttl_rounds_up_and_never_resurrects() {
        let p = RetentionPolicy::with_default_days(30).unwrap();
        let now = T0.plus_millis(1);
        // 30 days minus 1 ms remain: rounded up to the full 30 days in seconds.
        assert_eq!(p.remaining_ttl(RetentionClass::Default, T0, now), Some(TtlSeconds(30 * 86_400)));
        let late = T0.plus_millis(EPHEMERAL_MILLIS - 1500);
        assert_eq!(p.remaining_ttl(RetentionClass::Ephemeral24h, T0, late), Some(TtlSeconds(2)));
        let expired = T0.plus_millis(EPHEMERAL_MILLIS);
        assert_eq!(p.remaining_ttl(RetentionClass::Ephemeral24h, T0, expired), Some(TtlSeconds(1)));
        let long_gone = T0.plus_millis(400 * MILLIS_PER_DAY);
        assert_eq!(p.remaining_ttl(RetentionClass::Default, T0, long_gone), Some(TtlSeconds(1)));
        assert_eq!(p.remaining_ttl(RetentionClass::ComplianceHold, T0, now), None);
        assert_eq!(p.remaining_ttl(RetentionClass::TenantCustom, T0, now), None);
    }

    #[test]
    fn class_names_round_trip() {
        for c in RetentionClass::ALL {
            assert_eq!(RetentionClass::parse(c.as_str()), Some(c));
        }
        assert_eq!(RetentionClass::parse("forever"), None);
    }
}
