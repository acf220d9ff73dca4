//! `/v1/namespaces/{namespace}/paused-targets`: the callback targets paused for a namespace
//! because every call to them failed for a sustained time (docs/semantics.md, "Fairness"),
//! and their resumption once fixed.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use punctual_shared::api_key::Role;
use punctual_shared::audit::AuditAction;
use punctual_shared::paused_target::{self, PausedTarget};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::audit;
use crate::auth::Caller;
use crate::error::{ApiError, Problem};
use crate::openapi::Errors;
use crate::request::parse_json;
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_paused_targets)).routes(routes!(resume_paused_target))
}

#[derive(Debug, Serialize, ToSchema)]
struct PausedTargetList {
    paused_targets: Vec<PausedTarget>,
}

/// `POST …/resume` body: the target to resume, as listed.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct Resume {
    /// `scheme://host:port`.
    target: String,
}

/// The targets paused for the namespace: while paused, the namespace's occurrences aimed
/// at one end `cancelled` without a call.
#[utoipa::path(
    get, path = "/v1/namespaces/{namespace}/paused-targets", tag = "namespaces",
    params(("namespace" = String, Path, description = "The namespace")),
    responses((status = 200, description = "The paused targets", body = PausedTargetList), Errors)
)]
async fn list_paused_targets(
    State(state): State<AppState>,
    caller: Caller,
    Path(ns): Path<String>,
) -> Result<Json<PausedTargetList>, ApiError> {
    caller.require_namespace(&ns, Role::Read)?;
    Ok(Json(PausedTargetList { paused_targets: paused_target::list(&state.pool, &ns).await? }))
}

/// Resumes a paused target: executors call it again within 5 s.
#[utoipa::path(
    post, path = "/v1/namespaces/{namespace}/paused-targets/resume", tag = "namespaces",
    request_body = Resume,
    params(("namespace" = String, Path, description = "The namespace")),
    responses(
        (status = 204, description = "Resumed"),
        (status = 404, description = "The target is not paused for the namespace", body = Problem,
         content_type = "application/problem+json"),
        Errors
    )
)]
async fn resume_paused_target(
    State(state): State<AppState>,
    caller: Caller,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    caller.require_namespace(&ns, Role::Write)?;
    let Resume { target } = parse_json(&headers, &body)?;
    if !paused_target::resume(&state.pool, &ns, &target).await? {
        return Err(ApiError::NotFound(format!("target {target:?} is not paused for namespace {ns}")));
    }
    audit::record(&state, &caller, Some(&ns), AuditAction::TargetResumed, Some(target), serde_json::Value::Null).await;
    Ok(StatusCode::NO_CONTENT)
}
