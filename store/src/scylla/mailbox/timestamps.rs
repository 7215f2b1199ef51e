//! The client-side write timestamps that make every piece of monotonic mailbox state a cell no
//! stale writer can regress: the highest value wins, or the first receipt of the newest
//! generation wins.

/// The write timestamp under which the highest `value` (a seq or an offset, `>= 0`) wins
/// last-write-wins: `value - 2^63 + 1`. Every such timestamp lies in the past (at or before
/// 1970) — ScyllaDB's default `restrict_future_timestamp` refuses `USING TIMESTAMP` more than 3
/// days ahead — and none is the reserved `i64::MIN`. Only ever compared with timestamps of the
/// same rule: the cells written this way are written by nothing else.
pub const fn highest_wins_timestamp(value: i64) -> i64 {
    value + i64::MIN + 1
}

/// The highest generation (see [`first_wins_timestamp`]); [`calendar_generation`] reaches it in
/// 2068.
pub const MAX_GENERATION: i32 = (1 << 14) - 1;

/// Day 0 of [`calendar_generation`]: 2024-01-01T00:00:00Z.
pub const GENERATION_EPOCH_MILLIS: i64 = 1_704_067_200_000;

/// The lowest generation a dispatch may start at `now_millis`: whole days since
/// [`GENERATION_EPOCH_MILLIS`] (0 before it), at most [`MAX_GENERATION`]. Rows of a dispatch
/// expire [`DISPATCH_TTL_SECS`](super::DISPATCH_TTL_SECS) after their write, and until compaction purges them their
/// tombstones keep the write timestamps of their generation; a generation started after they
/// expired is at least 14 days later on the calendar, so its writes win over them.
pub const fn calendar_generation(now_millis: i64) -> i32 {
    let days = (now_millis - GENERATION_EPOCH_MILLIS).div_euclid(crate::ids::MILLIS_PER_DAY);
    if days < 0 {
        0
    } else if days > MAX_GENERATION as i64 {
        MAX_GENERATION
    } else {
        days as i32
    }
}

/// The write timestamp of the first-receipt row of `generation` (`0..=MAX_GENERATION`) observed
/// at `offset` (`0..2^47`): `generation * 2^48 - 2^62 - offset`. A newer generation beats every
/// older one, within a generation the lower offset wins, and every timestamp lies in the past.
pub const fn first_wins_timestamp(generation: i32, offset: i64) -> i64 {
    ((generation as i64) << 48) - (1 << 62) - offset
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_timestamps_order_values_and_stay_in_the_past() {
        let max_offset = (1i64 << 47) - 1;
        assert!(first_wins_timestamp(0, 10) > first_wins_timestamp(0, 15), "the lower offset wins");
        assert!(first_wins_timestamp(1, max_offset) > first_wins_timestamp(0, 0), "a newer generation wins");
        assert!(first_wins_timestamp(0, max_offset) > i64::MIN);
        assert!(first_wins_timestamp(MAX_GENERATION, 0) <= 0, "never in the future");
        assert!(highest_wins_timestamp(15) > highest_wins_timestamp(10), "the higher value wins");
        assert_eq!(highest_wins_timestamp(0), i64::MIN + 1, "never the reserved i64::MIN");
        assert_eq!(highest_wins_timestamp(i64::MAX), 0, "never in the future");
    }

    #[test]
    fn calendar_generations_count_days_and_stay_in_range() {
        let day = crate::ids::MILLIS_PER_DAY;
        assert_eq!(calendar_generation(0), 0, "before the epoch");
        assert_eq!(calendar_generation(GENERATION_EPOCH_MILLIS + day - 1), 0);
        assert_eq!(calendar_generation(GENERATION_EPOCH_MILLIS + 14 * day), 14);
        assert_eq!(calendar_generation(i64::MAX / 2), MAX_GENERATION);
        let now = 1_790_000_000_000;
        assert!(
            calendar_generation(now + 14 * day) - calendar_generation(now) == 14,
            "expiry is two weeks of generations"
        );
    }
}
