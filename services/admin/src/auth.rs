//! Who is calling: every API request carries `Authorization: Bearer <key>`, which is looked
//! up by its digest (one indexed read) and becomes the request's [`Caller`]: a role and the
//! namespaces it sees. Then the key's request rate is checked. A client that sends too many
//! requests without a valid key is refused ([`FailedAuthLimiter`]): at once when it sends no
//! key, and when it sends one, after the lookup, of which such clients get only a few at a
//! time. So guessers cannot load the database, and a valid key behind the same address (a
//! proxy, a NAT) still passes.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::DefaultKeyedRateLimiter;
use punctual_shared::api_key::{self, ApiKey, Role};
use sqlx::PgPool;
use uuid::Uuid;

use tokio::sync::Semaphore;

use crate::client_address::TrustedProxies;
use crate::error::ApiError;
use crate::failed_auth::FailedAuthLimiter;
use crate::request_budget;

/// Authentication settings.
#[derive(Debug, Clone, clap::Args)]
pub struct AuthConfig {
    /// An admin key to create at start (if no key with it exists yet), so that the first
    /// keys can be made through the API. A revoked bootstrap key stays revoked.
    // A string, parsed at start: clap's error for a malformed value would print the value.
    #[arg(long, env = "PUNCTUAL_BOOTSTRAP_API_KEY", hide_env_values = true)]
    pub bootstrap_api_key: Option<String>,
    /// Serve every request as an admin, without keys. Only for a closed network; logged as
    /// a warning at start.
    #[arg(long, env = "PUNCTUAL_AUTH_DISABLED", default_value_t = false, action = clap::ArgAction::Set)]
    pub auth_disabled: bool,
    /// Requests per second one key may make to this admin instance (bursts of up to twice
    /// as many); 0 for no limit.
    #[arg(long, env = "PUNCTUAL_API_RATE_LIMIT", default_value_t = 50)]
    pub api_rate_limit: u32,
    /// Requests without a valid API key one client (an IPv4 address, an IPv6 /64) may make
    /// to this admin instance a second (bursts of up to twice as many) before its requests
    /// are refused (429) for a while; 0 for no limit.
    #[arg(long, env = "PUNCTUAL_API_FAILED_AUTH_LIMIT", default_value_t = 10)]
    pub failed_auth_limit: u32,
    /// Proxies in front of the admin (addresses and networks, comma-separated): behind one,
    /// a client is the address it forwarded (`X-Forwarded-For`), not the proxy's.
    #[arg(long, env = "PUNCTUAL_TRUSTED_PROXIES", default_value = "")]
    pub trusted_proxies: TrustedProxies,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            bootstrap_api_key: None,
            auth_disabled: false,
            api_rate_limit: 50,
            failed_auth_limit: 10,
            trusted_proxies: TrustedProxies::default(),
        }
    }
}

/// Lookups at once for clients past their budget of requests without a valid key.
const REFUSED_CLIENTS_LOOKUPS: usize = 2;

/// The key a request came with: what it may do and where.
#[derive(Debug, Clone)]
pub struct Caller {
    pub key_id: Option<Uuid>,
    /// The key's name (`auth disabled` when authentication is off).
    pub name: Arc<str>,
    pub role: Role,
    /// The namespaces the key sees; `None`: all of them (an admin key).
    namespaces: Option<Arc<[String]>>,
}

impl Caller {
    fn admin(key_id: Option<Uuid>, name: &str) -> Self {
        Self { key_id, name: name.into(), role: Role::Admin, namespaces: None }
    }

    /// 403 unless the key's role includes `role`.
    pub fn require(&self, role: Role) -> Result<(), ApiError> {
        if self.role >= role {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!(
                "this key's role is {}; this needs {} or above",
                self.role.as_str(),
                role.as_str()
            )))
        }
    }

    /// The namespaces the key sees, to bind as a `text[]` that is NULL for all of them: the
    /// one form every scoped query takes (`$n::text[] IS NULL OR namespace = ANY($n)`).
    pub fn visible(&self) -> Option<&[String]> {
        self.namespaces.as_deref()
    }

    pub fn sees(&self, namespace: &str) -> bool {
        self.namespaces.as_ref().is_none_or(|n| n.iter().any(|v| v == namespace))
    }

    /// 403 unless the key has `role` in `namespace`. For requests that name a namespace;
    /// one that names an id answers 404 for what the key cannot see, as for an unknown id.
    /// A namespace named in a path: a valid name (422 naming `namespace` otherwise), and
    /// one this key may use with `role`.
    pub fn require_namespace(&self, namespace: &str, role: Role) -> Result<(), ApiError> {
        punctual_shared::timer::check_namespace(namespace)?;
        self.require_in(namespace, role)
    }

    pub fn require_in(&self, namespace: &str, role: Role) -> Result<(), ApiError> {
        self.require(role)?;
        if self.sees(namespace) {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!("this key cannot use namespace {namespace:?}")))
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            // A route outside the authenticating layer: a wiring error, refused rather than served.
            tracing::error!(path = %parts.uri.path(), "a route without authentication asked for its caller");
            ApiError::Unauthenticated("this route is not authenticated".into())
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    #[error("PUNCTUAL_BOOTSTRAP_API_KEY is not an API key: pct_ and 43 base64url characters")]
    MalformedBootstrapKey,
    #[error("creating the bootstrap API key: {0}")]
    Database(#[from] sqlx::Error),
}

#[derive(Clone)]
pub struct Authenticator {
    pool: PgPool,
    disabled: bool,
    limiter: Option<Arc<DefaultKeyedRateLimiter<Uuid>>>,
    failed: Option<Arc<FailedAuthLimiter>>,
    refused_lookups: Arc<Semaphore>,
    proxies: TrustedProxies,
}

impl Authenticator {
    /// Creates the bootstrap key if it is new, and warns if authentication is off.
    pub async fn start(pool: PgPool, config: &AuthConfig) -> Result<Self, AuthSetupError> {
        let bootstrap = config.bootstrap_api_key.as_deref().map(str::trim).filter(|k| !k.is_empty());
        if let Some(key) = bootstrap {
            let key: ApiKey = key.parse().map_err(|_| AuthSetupError::MalformedBootstrapKey)?;
            if api_key::store(&pool, "bootstrap", &key, Role::Admin, &[]).await?.is_some() {
                tracing::info!(prefix = %key.shown_prefix(), "bootstrap API key created");
            }
        }
        if config.auth_disabled {
            tracing::warn!(
                "AUTHENTICATION IS OFF (PUNCTUAL_AUTH_DISABLED=true): anyone who reaches this port is an admin of \
                 every namespace"
            );
        }
        let limiter = NonZeroU32::new(config.api_rate_limit).map(|rate| Arc::new(request_budget::keyed(rate)));
        let failed = NonZeroU32::new(config.failed_auth_limit).map(|rate| Arc::new(FailedAuthLimiter::new(rate)));
        Ok(Self {
            pool,
            disabled: config.auth_disabled,
            limiter,
            failed,
            refused_lookups: Arc::new(Semaphore::new(REFUSED_CLIENTS_LOOKUPS)),
            proxies: config.trusted_proxies.clone(),
        })
    }

    /// The request's key, if it carries a well-formed one.
    fn key(headers: &HeaderMap) -> Result<ApiKey, ApiError> {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return Err(ApiError::Unauthenticated("send an API key: Authorization: Bearer <key>".into()));
        };
        // The scheme's name is case-insensitive (RFC 9110, 11.1).
        value
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .and_then(|(_, k)| k.trim().parse::<ApiKey>().ok())
            .ok_or_else(|| ApiError::Unauthenticated("the Authorization header is not Bearer <API key>".into()))
    }

    async fn caller(&self, key: &ApiKey) -> Result<Caller, ApiError> {
        let row = sqlx::query!(
            "SELECT id, name, role, namespaces FROM api_keys WHERE digest = $1 AND revoked_at IS NULL",
            key.digest()
        )
        .fetch_optional(&self.pool)
        .await?
        .map(|row| (row.id, row.name, row.role, row.namespaces));
        let Some((id, name, role, namespaces)) = row else {
            return Err(ApiError::Unauthenticated("unknown or revoked API key".into()));
        };
        let role: Role = role.parse().map_err(|e: String| {
            tracing::error!(key_id = %id, error = %e, "an API key with an unknown role");
            ApiError::Unauthenticated("unknown or revoked API key".into())
        })?;
        Ok(match role {
            Role::Admin => Caller::admin(Some(id), &name),
            role => Caller { key_id: Some(id), name: name.into(), role, namespaces: Some(namespaces.into()) },
        })
    }

    fn check_rate(&self, caller: &Caller) -> Result<(), ApiError> {
        let (Some(limiter), Some(key_id)) = (&self.limiter, caller.key_id) else {
            return Ok(());
        };
        limiter
            .check_key(&key_id)
            .map_err(|not_until| rate_limited(not_until.wait_time_from(DefaultClock::default().now())))
    }

    fn refused(&self, client: Option<IpAddr>) -> Option<Duration> {
        self.failed.as_ref()?.refused(client?)
    }

    fn count_failure(&self, peer: Option<IpAddr>) {
        if let (Some(failed), Some(peer)) = (&self.failed, peer) {
            if failed.failed(peer).is_some() {
                let client = crate::failed_auth::client_of(peer);
                tracing::warn!(
                    %peer,
                    %client,
                    "too many requests without a valid API key: this client (an IPv6 address's whole /64) is \
                     refused for a while"
                );
            }
        }
    }
}

fn rate_limited(wait: Duration) -> ApiError {
    ApiError::RateLimited { retry_after_s: wait.as_secs_f64().ceil().max(1.0) as u64 }
}

/// The layer in front of every API route: 401 without a valid key, 429 past its rate or
/// past the client's budget of requests without a valid key.
pub async fn authenticate(State(auth): State<Authenticator>, mut request: Request, next: Next) -> Response {
    let caller = if auth.disabled {
        Caller::admin(None, "auth disabled")
    } else {
        let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|info| info.0.ip());
        let client = peer.map(|peer| auth.proxies.client(peer, request.headers()));
        match authenticated(&auth, client, request.headers()).await {
            Ok(caller) => caller,
            Err(e) => return e.into_response(),
        }
    };
    if let Err(e) = auth.check_rate(&caller) {
        return e.into_response();
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

async fn authenticated(auth: &Authenticator, client: Option<IpAddr>, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let refused = auth.refused(client);
    let key = match Authenticator::key(headers) {
        Ok(key) => key,
        Err(e) => {
            return Err(match refused {
                Some(wait) => rate_limited(wait),
                None => {
                    auth.count_failure(client);
                    e
                }
            })
        }
    };
    // A refused client's key is looked up only while few such lookups run.
    let _lookup = match refused {
        Some(wait) => Some(auth.refused_lookups.try_acquire().map_err(|_| rate_limited(wait))?),
        None => None,
    };
    match (auth.caller(&key).await, refused) {
        (Err(ApiError::Unauthenticated(_)), Some(wait)) => Err(rate_limited(wait)),
        (Err(e @ ApiError::Unauthenticated(_)), None) => {
            auth.count_failure(client);
            Err(e)
        }
        (result, _) => result,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scoped(role: Role, namespaces: &[&str]) -> Caller {
        Caller {
            key_id: Some(Uuid::nil()),
            name: "test".into(),
            role,
            namespaces: Some(namespaces.iter().map(|n| n.to_string()).collect::<Vec<_>>().into()),
        }
    }

    #[test]
    fn a_scoped_key_sees_its_namespaces_with_its_role() {
        let writer = scoped(Role::Write, &["billing", "ops"]);
        assert!(writer.require_in("billing", Role::Write).is_ok());
        assert!(writer.require_in("billing", Role::Read).is_ok());
        assert!(matches!(writer.require_in("other", Role::Read), Err(ApiError::Forbidden(_))));
        assert!(matches!(writer.require(Role::Admin), Err(ApiError::Forbidden(_))));
        assert_eq!(writer.visible(), Some(&["billing".to_owned(), "ops".to_owned()][..]));
        let reader = scoped(Role::Read, &["billing"]);
        assert!(matches!(reader.require_in("billing", Role::Write), Err(ApiError::Forbidden(_))));
    }

    #[test]
    fn an_admin_sees_every_namespace() {
        let admin = Caller::admin(None, "test");
        assert!(admin.require_in("anything", Role::Admin).is_ok());
        assert_eq!(admin.visible(), None);
    }
}
