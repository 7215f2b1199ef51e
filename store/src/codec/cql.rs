//! The one conversion between `u64` domain values and CQL `bigint`.

use crate::error::StoreError;

/// Converts a `u64` for a CQL `bigint` column; a value with bit 63 set would read back negative,
/// so it is refused with `InvariantViolation` and never written.
pub fn u64_to_i64(what: &str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| {
        StoreError::InvariantViolation(format!("{what}={value} has bit 63 set and can not be a CQL bigint"))
    })
}

/// Converts a CQL `bigint` back; a negative value was never written by us, so it is corrupt.
pub fn i64_to_u64(what: &str, value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::CorruptEntry(format!("{what}={value} is negative")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn bit_63_is_refused_both_ways() {
        assert_eq!(u64_to_i64("seq", 0).unwrap(), 0);
        assert_eq!(u64_to_i64("seq", i64::MAX as u64).unwrap(), i64::MAX);
        assert_eq!(u64_to_i64("seq", 1 << 63).unwrap_err().kind(), ErrorKind::InvariantViolation);
        assert_eq!(u64_to_i64("seq", u64::MAX).unwrap_err().kind(), ErrorKind::InvariantViolation);
        assert_eq!(i64_to_u64("seq", -1).unwrap_err().kind(), ErrorKind::CorruptEntry);
        assert_eq!(i64_to_u64("seq", 42).unwrap(), 42);
    }
}
