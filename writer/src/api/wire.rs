//! Parsing of the API's wire values: ids, enums, numbers. Every failure names the field.

use qim_runtime::http::ApiError;
use qim_store::ids::{ConversationId, IdError, TenantId};
use serde::Deserialize;
use utoipa::IntoParams;

/// The `{tenant}` and `{conversation}` of a conversation's routes.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ConversationPath {
    /// The tenant (32 hex digits).
    #[param(pattern = "^[0-9a-fA-F]{32}$")]
    tenant: String,
    /// The conversation (32 hex digits).
    #[param(pattern = "^[0-9a-fA-F]{32}$")]
    conversation: String,
}

impl ConversationPath {
    /// Both ids, or 400 naming the malformed one.
    pub fn ids(&self) -> Result<(TenantId, ConversationId), ApiError> {
        Ok((
            id("tenant", &self.tenant, TenantId::from_hex)?,
            id("conversation", &self.conversation, ConversationId::from_hex)?,
        ))
    }
}

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
