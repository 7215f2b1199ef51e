//! Parsing of the API's wire values: ids, enums, numbers. Every failure names the field.

use qim_runtime::http::ApiError;
use qim_store::ids::IdError;

/// Parses a 32-hex-digit id of type `T`, naming `field` on failure.
pub fn id<T>(field: &str, text: &str, parse: fn(&str) -> Result<T, IdError>) -> Result<T, ApiError> {
    parse(text)
        .map_err(|_| ApiError::invalid(format!("{field} must be 32 hexadecimal digits (16 bytes), got {text:?}")))
}

/// Parses an enum value by its API name, listing the legal names on failure.
pub fn named<T: Copy>(field: &str, text: &str, all: &[T], name: fn(T) -> &'static str) -> Result<T, ApiError> {
    all.iter().copied().find(|v| name(*v) == text).ok_or_else(|| {
        let legal: Vec<&str> = all.iter().map(|v| name(*v)).collect();
        ApiError::invalid(format!("{field} {text:?} is not one of {}", legal.join(", ")))
    })
}

/// Checks `value` is in `lo..=hi`.
pub fn within(field: &str, value: usize, lo: usize, hi: usize) -> Result<usize, ApiError> {
    if (lo..=hi).contains(&value) {
        Ok(value)
    } else {
        Err(ApiError::invalid(format!("{field} must be in {lo}..={hi}, got {value}")))
    }
}
