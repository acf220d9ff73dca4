//! `/v1/namespaces`: each namespace's policy, the limits its occurrences run under
//! (docs/semantics.md, "Fairness"), its quota of timers and their shortest interval, the
//! Kafka topics it may publish to and the private callback targets it may reach
//! ("Tenants"). Read by the namespace's readers; changed by admins only, since a tenant's
//! own key must not lift the limits and walls that protect the others.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use punctual_shared::api_key::Role;
use punctual_shared::audit::AuditAction;
use punctual_shared::kafka_topics::KafkaTopics;
use punctual_shared::namespace_policy::{self, NamespaceLimits, StoredLimits, StoredPolicy};
use punctual_shared::timer::check_namespace;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::audit;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::openapi::Errors;
use crate::request::parse_json;
use crate::state::AppState;
use crate::timer_view::null_is_default;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_namespaces)).routes(routes!(get_namespace, put_namespace, patch_namespace))
}

/// A namespace's policy.
#[derive(Debug, Serialize, ToSchema)]
struct Namespace {
    namespace: String,
    /// The limits in force: those set, the defaults for the others.
    limits: NamespaceLimits,
    /// The defaults, which a limit set to `null` returns to (`max_timers` and
    /// `min_fire_interval_ms` are the service's settings).
    default_limits: NamespaceLimits,
    /// The Kafka topics its timers may publish to: exact names, or prefixes ending in `*`
    /// (none unless listed; the service's own topics never).
    #[schema(value_type = Vec<String>, example = json!(["orders", "billing.*"]))]
    kafka_topics: KafkaTopics,
    /// Hosts and networks its callbacks may reach besides public addresses, added to what
    /// `PUNCTUAL_CALLBACK_ALLOW` opens for every namespace.
    #[schema(example = json!(["hooks.internal", "10.20.0.0/16"]))]
    callback_allow: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
struct NamespaceList {
    /// The namespaces with a policy of their own that the key sees, by name (the others
    /// have the defaults).
    namespaces: Vec<Namespace>,
}

/// `PUT` and `PATCH` body. With `PATCH` each field left out is kept; with `PUT` it is the
/// default. `null` returns a limit to its default.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct NamespacePatch {
    #[serde(default)]
    limits: LimitsPatch,
    /// Replaces the list of Kafka topics (`[]`: none).
    #[schema(value_type = Option<Vec<String>>)]
    kafka_topics: Option<KafkaTopics>,
    /// Replaces the callback allow-list (`[]`: public addresses only, and what the service
    /// opens for all).
    callback_allow: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct LimitsPatch {
    #[serde(default, deserialize_with = "null_is_default")]
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 1_000_000)]
    max_concurrent_calls: Option<Option<i32>>,
    #[serde(default, deserialize_with = "null_is_default")]
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 600_000)]
    max_callback_timeout_ms: Option<Option<i32>>,
    #[serde(default, deserialize_with = "null_is_default")]
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 1_000_000)]
    max_catch_up_per_second: Option<Option<i32>>,
    #[serde(default, deserialize_with = "null_is_default")]
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 1_000_000)]
    max_fires_per_second: Option<Option<i32>>,
    #[serde(default, deserialize_with = "null_is_default")]
    #[schema(value_type = Option<u32>, minimum = 0, maximum = 1_000_000_000)]
    max_timers: Option<Option<i32>>,
    #[serde(default, deserialize_with = "null_is_default")]
    #[schema(value_type = Option<u32>, minimum = 0, maximum = 86_400_000)]
    min_fire_interval_ms: Option<Option<i32>>,
}

impl NamespacePatch {
    /// The policy with this applied over `base`.
    fn apply(self, base: StoredPolicy) -> StoredPolicy {
        let (limits, now) = (self.limits, base.limits);
        StoredPolicy {
            limits: StoredLimits {
                max_concurrent_calls: limits.max_concurrent_calls.unwrap_or(now.max_concurrent_calls),
                max_callback_timeout_ms: limits.max_callback_timeout_ms.unwrap_or(now.max_callback_timeout_ms),
                max_catch_up_per_second: limits.max_catch_up_per_second.unwrap_or(now.max_catch_up_per_second),
                max_fires_per_second: limits.max_fires_per_second.unwrap_or(now.max_fires_per_second),
                max_timers: limits.max_timers.unwrap_or(now.max_timers),
                min_fire_interval_ms: limits.min_fire_interval_ms.unwrap_or(now.min_fire_interval_ms),
            },
            kafka_topics: self.kafka_topics.unwrap_or(base.kafka_topics),
            callback_allow: self.callback_allow.unwrap_or(base.callback_allow),
        }
    }
}

fn view(state: &AppState, namespace: String, stored: StoredPolicy) -> Namespace {
    let defaults = state.namespace_defaults();
    Namespace {
        namespace,
        limits: stored.limits.effective_with(&defaults),
        default_limits: defaults,
        kafka_topics: stored.kafka_topics,
        callback_allow: stored.callback_allow,
    }
}

/// The policies of the namespaces the key sees that have one of their own.
#[utoipa::path(
    get, path = "/v1/namespaces", tag = "namespaces",
    responses((status = 200, description = "The namespaces' policies", body = NamespaceList), Errors)
)]
async fn list_namespaces(State(state): State<AppState>, caller: Caller) -> Result<Json<NamespaceList>, ApiError> {
    caller.require(Role::Read)?;
    let stored = namespace_policy::list(&state.pool, caller.visible()).await?;
    let namespaces = stored.into_iter().map(|(ns, policy)| view(&state, ns, policy)).collect();
    Ok(Json(NamespaceList { namespaces }))
}

/// The namespace's policy: the limits in force and their defaults, its topics and its
/// callback allow-list. Every namespace has one, the default until an admin changes it.
#[utoipa::path(
    get, path = "/v1/namespaces/{namespace}", tag = "namespaces",
    params(("namespace" = String, Path, description = "The namespace")),
    responses((status = 200, description = "The namespace's policy", body = Namespace), Errors)
)]
async fn get_namespace(
    State(state): State<AppState>,
    caller: Caller,
    Path(ns): Path<String>,
) -> Result<Json<Namespace>, ApiError> {
    caller.require_namespace(&ns, Role::Read)?;
    let stored = namespace_policy::get(&state.pool, &ns).await?;
    Ok(Json(view(&state, ns, stored)))
}

/// Sets the namespace's whole policy (admin keys only): what the body leaves out is the
/// default. Executors apply it within 5 s; the API at the next write of a timer.
#[utoipa::path(
    put, path = "/v1/namespaces/{namespace}", tag = "namespaces",
    request_body = NamespacePatch,
    params(("namespace" = String, Path, description = "The namespace")),
    responses((status = 200, description = "The namespace's policy", body = Namespace), Errors)
)]
async fn put_namespace(
    State(state): State<AppState>,
    caller: Caller,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Namespace>, ApiError> {
    change(state, caller, ns, &headers, &body, false).await
}

/// Changes some of the namespace's policy (admin keys only): what the body leaves out is
/// kept. Executors apply it within 5 s; the API at the next write of a timer.
#[utoipa::path(
    patch, path = "/v1/namespaces/{namespace}", tag = "namespaces",
    request_body = NamespacePatch,
    params(("namespace" = String, Path, description = "The namespace")),
    responses((status = 200, description = "The namespace's policy, changed", body = Namespace), Errors)
)]
async fn patch_namespace(
    State(state): State<AppState>,
    caller: Caller,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Namespace>, ApiError> {
    change(state, caller, ns, &headers, &body, true).await
}

async fn change(
    state: AppState,
    caller: Caller,
    ns: String,
    headers: &HeaderMap,
    body: &Bytes,
    keep: bool,
) -> Result<Json<Namespace>, ApiError> {
    check_namespace(&ns)?;
    caller.require(Role::Admin)?;
    let patch: NamespacePatch = parse_json(headers, body)?;
    // Concurrent changes of one namespace take turns, so that neither loses the other's field.
    let mut tx = state.pool.begin().await?;
    sqlx::query!("SELECT pg_advisory_xact_lock(hashtext('namespaces ' || $1))", ns).execute(&mut *tx).await?;
    let base = if keep { namespace_policy::get(&mut *tx, &ns).await? } else { StoredPolicy::default() };
    let changed = patch.apply(base);
    changed.check()?;
    namespace_policy::put(&mut *tx, &ns, &changed).await?;
    tx.commit().await?;
    // The request as sent: what it changed, in the caller's words.
    let sent = serde_json::from_slice::<serde_json::Value>(body).unwrap_or_default();
    let detail = serde_json::json!({ "method": if keep { "PATCH" } else { "PUT" }, "body": sent });
    audit::record(&state, &caller, Some(&ns), AuditAction::NamespaceChanged, None, detail).await;
    Ok(Json(view(&state, ns, changed)))
}
