//! Server TTLs of the rows the store writes: whole seconds, rounded up, within the servers' limit.

use crate::ids::UnixMillis;
use crate::retention::ttl_until;

/// The TTL in seconds that makes a row written at `now` vanish at `expires` (at least 1).
pub(super) fn ttl_secs(expires: UnixMillis, now: UnixMillis) -> i32 {
    i32::try_from(ttl_until(expires, now).0).unwrap_or(MAX_TTL_SECS).min(MAX_TTL_SECS)
}

/// Scylla and Cassandra refuse TTLs above 20 years.
pub(super) const MAX_TTL_SECS: i32 = 630_720_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up_never_resurrect_and_stay_under_the_server_limit() {
        let now = UnixMillis(1_790_000_000_000);
        assert_eq!(ttl_secs(now.plus_millis(1_500), now), 2);
        assert_eq!(ttl_secs(now, now), 1);
        assert_eq!(ttl_secs(now.plus_millis(-5_000), now), 1);
        assert_eq!(ttl_secs(now.plus_millis(i64::MAX / 2), now), MAX_TTL_SECS);
    }
}
