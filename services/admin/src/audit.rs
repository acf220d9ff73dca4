//! The audit log through the API: every change made through it is recorded ([`record`],
//! called by the handlers that change something, once the change is made), and `GET
//! /v1/audit` lists the changes of the namespaces the key sees.

use axum::extract::{Query, State};
use axum::Json;
use punctual_shared::api_key::Role;
use punctual_shared::audit::{self, AuditAction, AuditEntry, Change};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::openapi::Errors;
use crate::request::{self, page_limit};
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_audit))
}

/// Records a change the caller made. The change is made already: a failure to record it
/// is logged, not answered, since the change stands either way.
pub async fn record(
    state: &AppState,
    caller: &Caller,
    namespace: Option<&str>,
    action: AuditAction,
    target: Option<String>,
    detail: serde_json::Value,
) {
    let change = Change { key_id: caller.key_id, key_name: &caller.name, namespace, action, target, detail };
    if let Err(error) = audit::record(&state.pool, &change).await {
        tracing::error!(%error, ?action, key = %caller.name, "a change was made but not recorded in the audit log");
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct AuditQuery {
    /// Only this namespace's changes.
    namespace: Option<String>,
    /// Page size: 100 unless given, at most 1000.
    limit: Option<i64>,
    /// Cursor: the previous page's `next_before`.
    before: Option<i64>,
}

/// A page of the audit log, newest first.
#[derive(Debug, Serialize, ToSchema)]
struct AuditPage {
    entries: Vec<AuditEntry>,
    /// Pass as `before` for the next page; null on the last.
    next_before: Option<i64>,
}

/// Who changed what, and when, through the API (the console, the CLI and scripts alike):
/// the changes of the namespaces the key sees, newest first. An admin key also sees the
/// changes that belong to no namespace (API keys).
#[utoipa::path(
    get, path = "/v1/audit", tag = "keys", params(AuditQuery),
    responses((status = 200, description = "A page of the audit log", body = AuditPage), Errors)
)]
async fn list_audit(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<AuditPage>, ApiError> {
    let q = request::query(query, None)?;
    let limit = page_limit(q.limit)?;
    match &q.namespace {
        Some(namespace) => caller.require_namespace(namespace, Role::Read)?,
        None => caller.require(Role::Read)?,
    }
    let entries = audit::list(&state.pool, caller.visible(), q.namespace.as_deref(), q.before, limit).await?;
    let next_before = (entries.len() as i64 == limit).then(|| entries.last().map(|e| e.id)).flatten();
    Ok(Json(AuditPage { entries, next_before }))
}
