//! Who a request acts for, and the checks every `/v1` handler makes with it.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;

use qim_store::ids::{TenantId, UserId};

use crate::http::ApiError;

/// What a token allows. A token's `scope` claim lists them, space-separated (as OAuth 2.0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Send messages as the token's user.
    Send,
    /// Read as the token's user: history, summaries, members, the user's mailbox.
    Read,
    /// Change the membership of the tenant's conversations.
    Admin,
    /// A trusted gateway: sends and reads as any user of its tenant whom the request names
    /// (membership still applies; administration needs `admin` too).
    Gateway,
}

impl Scope {
    /// Every scope, in the order `name` lists them.
    pub const ALL: [Scope; 4] = [Scope::Send, Scope::Read, Scope::Admin, Scope::Gateway];

    /// The scope's name in a token's `scope` claim.
    pub const fn name(self) -> &'static str {
        match self {
            Scope::Send => "send",
            Scope::Read => "read",
            Scope::Admin => "admin",
            Scope::Gateway => "gateway",
        }
    }

    const fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of scopes; names it does not know are ignored (a token may carry other services' scopes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scopes(u8);

impl Scopes {
    /// The scopes named in a space-separated `scope` claim.
    pub fn parse(claim: &str) -> Self {
        Self(
            claim
                .split_ascii_whitespace()
                .filter_map(|name| Scope::ALL.into_iter().find(|s| s.name() == name))
                .fold(0, |bits, s| bits | s.bit()),
        )
    }

    /// Whether `scope` is in the set.
    pub const fn has(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }
}

/// A verified token's identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The only tenant the token reaches (claim `tenant`).
    pub tenant: TenantId,
    /// The token's user (claim `sub`, 32 hex digits); `None` when `sub` names a service (a
    /// gateway's token may).
    pub user: Option<UserId>,
    /// What the token allows (claim `scope`).
    pub scopes: Scopes,
}

/// Who a `/v1` request acts for: put in the request's extensions by
/// [`authenticate`](super::authenticate) and taken by handlers as an extractor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// Authentication is disabled (`QIM_AUTH_DISABLED=true`): the request may name anyone of any
    /// tenant. Development stacks only.
    Anyone,
    /// A verified token.
    Token(Identity),
}

impl Caller {
    /// `Ok` when the request may act as `user` of `tenant` with `scope`: the token is that
    /// user's and carries `scope`, or it is a gateway's of that tenant. Otherwise 403.
    ///
    /// # Errors
    ///
    /// 403 `forbidden`, saying which of tenant, scope or user does not match.
    pub fn act_as(&self, tenant: TenantId, user: UserId, scope: Scope) -> Result<(), ApiError> {
        let Caller::Token(id) = self else { return Ok(()) };
        same_tenant(id, tenant)?;
        if id.scopes.has(Scope::Gateway) {
            return Ok(());
        }
        if !id.scopes.has(scope) {
            return Err(forbidden(format!("the token lacks the `{}` scope", scope.name())));
        }
        match id.user {
            Some(own) if own == user => Ok(()),
            _ => Err(forbidden(format!("the token does not act for user {}", user.to_hex()))),
        }
    }

    /// `Ok` when the request may change `tenant`'s memberships (scope `admin` of that tenant).
    ///
    /// # Errors
    ///
    /// 403 `forbidden`.
    pub fn administer(&self, tenant: TenantId) -> Result<(), ApiError> {
        let Caller::Token(id) = self else { return Ok(()) };
        same_tenant(id, tenant)?;
        if id.scopes.has(Scope::Admin) {
            Ok(())
        } else {
            Err(forbidden("the token lacks the `admin` scope".to_owned()))
        }
    }

    /// Whether the request may see all of `tenant` without being a member: an admin's or a
    /// gateway's token of that tenant, or authentication disabled.
    pub fn oversees(&self, tenant: TenantId) -> bool {
        match self {
            Caller::Anyone => true,
            Caller::Token(id) => id.tenant == tenant && (id.scopes.has(Scope::Admin) || id.scopes.has(Scope::Gateway)),
        }
    }

    /// The token's own user, for routes that name nobody else; 403 when the token has none.
    ///
    /// # Errors
    ///
    /// 403 `forbidden` for a token whose `sub` is not a user.
    pub fn own_user(&self) -> Result<Option<UserId>, ApiError> {
        match self {
            Caller::Anyone => Ok(None),
            Caller::Token(Identity { user: Some(u), .. }) => Ok(Some(*u)),
            Caller::Token(_) => Err(forbidden("the token names no user".to_owned())),
        }
    }
}

fn same_tenant(id: &Identity, tenant: TenantId) -> Result<(), ApiError> {
    if id.tenant == tenant {
        Ok(())
    } else {
        Err(forbidden(format!("the token does not reach tenant {}", tenant.to_hex())))
    }
}

fn forbidden(message: String) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            tracing::error!(path = %parts.uri.path(), "a route takes a caller but is not behind authentication");
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the route is not behind authentication")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u8) -> TenantId {
        TenantId::from_hex(&format!("{n:032x}")).unwrap()
    }
    fn u(n: u8) -> UserId {
        UserId::from_hex(&format!("{n:032x}")).unwrap()
    }
    fn token(tenant: u8, user: Option<u8>, scopes: &str) -> Caller {
        Caller::Token(Identity { tenant: t(tenant), user: user.map(u), scopes: Scopes::parse(scopes) })
    }

    #[test]
    fn scopes_parse_known_names_and_ignore_others() {
        let s = Scopes::parse("  read other:thing send ");
        assert!(s.has(Scope::Read) && s.has(Scope::Send));
        assert!(!s.has(Scope::Admin) && !s.has(Scope::Gateway));
        assert_eq!(Scopes::parse(""), Scopes::default());
    }

    #[test]
    fn a_user_acts_only_as_itself_in_its_tenant_with_the_scope() {
        let c = token(1, Some(7), "send read");
        assert!(c.act_as(t(1), u(7), Scope::Send).is_ok());
        assert_eq!(c.act_as(t(1), u(8), Scope::Send).unwrap_err().status, StatusCode::FORBIDDEN);
        assert_eq!(c.act_as(t(2), u(7), Scope::Send).unwrap_err().status, StatusCode::FORBIDDEN);
        assert!(token(1, Some(7), "read").act_as(t(1), u(7), Scope::Send).is_err());
        assert!(c.administer(t(1)).is_err());
        assert!(!c.oversees(t(1)));
    }

    #[test]
    fn a_gateway_names_anyone_of_its_tenant_only() {
        let g = token(1, None, "gateway");
        assert!(g.act_as(t(1), u(9), Scope::Send).is_ok());
        assert!(g.act_as(t(2), u(9), Scope::Send).is_err());
        assert!(g.administer(t(1)).is_err(), "administration needs admin");
        assert!(g.oversees(t(1)) && !g.oversees(t(2)));
        assert!(g.own_user().is_err());
    }

    #[test]
    fn an_admin_administers_its_tenant_only() {
        let a = token(1, Some(3), "admin");
        assert!(a.administer(t(1)).is_ok());
        assert!(a.administer(t(2)).is_err());
        assert!(a.act_as(t(1), u(3), Scope::Send).is_err(), "admin alone does not send");
    }

    #[test]
    fn with_authentication_disabled_anything_goes() {
        assert!(Caller::Anyone.act_as(t(1), u(1), Scope::Send).is_ok());
        assert!(Caller::Anyone.administer(t(5)).is_ok());
        assert_eq!(Caller::Anyone.own_user().unwrap(), None);
    }
}
