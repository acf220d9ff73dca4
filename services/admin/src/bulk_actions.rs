//! Pausing, resuming or deleting many timers at once, by filter: `POST
//! /v1/timers/bulk/{pause,resume,delete}` with `{"namespace", "name_prefix"?, "state"?,
//! "schedule_kind"?, "ids"?}`: the timer list's filters.
//! One statement changes at most [`MAX_PER_CALL`] timers; the answer says whether more
//! match, and the same call goes on with them.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use punctual_shared::audit::AuditAction;
use punctual_shared::schedule::KindName;
use punctual_shared::timer::{check_namespace, FieldError};
use punctual_shared::timer_state::TimerState;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::audit;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::openapi::Errors;
use crate::request::parse_json;
use crate::state::AppState;
use punctual_shared::api_key::Role;
use punctual_shared::timer_store;

/// Most timers one call changes.
pub const MAX_PER_CALL: i64 = 10_000;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(bulk_change_timers))
}

/// What a bulk call does to the matching timers.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum BulkAction {
    Pause,
    Resume,
    Delete,
}

/// Which timers: those of one namespace, narrowed as the timer list narrows them (a name
/// prefix, a state, a kind of schedule) or to a list of ids.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct Filter {
    namespace: String,
    name_prefix: Option<String>,
    /// Only the timers in this state (`active` or `paused`).
    state: Option<TimerState>,
    schedule_kind: Option<KindName>,
    ids: Option<Vec<Uuid>>,
}

#[derive(Debug, Serialize, ToSchema)]
struct BulkResult {
    /// The timers changed by this call.
    changed: Vec<Uuid>,
    /// Whether more timers match: call again for them.
    more: bool,
}

/// What an action does: the states it changes from, and the one it sets.
fn transition(action: &str) -> Option<(&'static [TimerState], TimerState)> {
    match action {
        "pause" => Some((&[TimerState::Active], TimerState::Paused)),
        "resume" => Some((&[TimerState::Paused], TimerState::Active)),
        "delete" => Some((&[TimerState::Active, TimerState::Paused], TimerState::Deleted)),
        _ => None,
    }
}

/// Pauses, resumes or deletes the namespace's timers that the filter names, at most
/// 10,000 a call; `more` says to call again for the rest.
#[utoipa::path(
    post, path = "/v1/timers/bulk/{action}", tag = "operations", request_body = Filter,
    params(("action" = inline(BulkAction), Path, description = "pause, resume or delete")),
    responses(
        (status = 200, description = "The timers changed", body = BulkResult),
        (status = 404, description = "No such bulk action", body = crate::error::Problem,
         content_type = "application/problem+json"),
        Errors
    )
)]
async fn bulk_change_timers(
    State(state): State<AppState>,
    caller: Caller,
    Path(action): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<BulkResult>, ApiError> {
    caller.require(Role::Write)?;
    let Some((from, to)) = transition(&action) else {
        return Err(ApiError::NotFound(format!("no bulk action {action:?}: use pause, resume or delete")));
    };
    let filter: Filter = parse_json(&headers, &body)?;
    check_namespace(&filter.namespace)?;
    caller.require_in(&filter.namespace, Role::Write)?;
    if filter.ids.as_ref().is_some_and(|ids| ids.len() as i64 > MAX_PER_CALL) {
        return Err(FieldError::new("ids", format!("at most {MAX_PER_CALL} ids")).into());
    }
    if filter.state == Some(TimerState::Deleted) {
        return Err(FieldError::new("state", "deleted timers are changed no more: active or paused").into());
    }
    // A state filter narrows the states the action changes (pausing paused timers changes none).
    let from: Vec<TimerState> = from.iter().copied().filter(|s| filter.state.is_none_or(|only| only == *s)).collect();
    let pattern = filter.name_prefix.as_deref().map(timer_store::name_prefix_pattern);
    let selection = timer_store::Selection {
        namespace: &filter.namespace,
        name_pattern: pattern.as_deref(),
        ids: filter.ids.as_deref(),
        schedule_kind: filter.schedule_kind,
    };
    let (changed, more) = if from.is_empty() {
        (Vec::new(), false)
    } else {
        timer_store::set_states(&state.pool, &selection, &from, to, MAX_PER_CALL).await?
    };
    tracing::info!(%action, namespace = %filter.namespace, changed = changed.len(), "bulk change");
    if !changed.is_empty() {
        let audited = match to {
            TimerState::Active => AuditAction::TimersResumed,
            TimerState::Paused => AuditAction::TimersPaused,
            TimerState::Deleted => AuditAction::TimersDeleted,
        };
        let detail = json!({"name_prefix": filter.name_prefix, "state": filter.state,
                            "schedule_kind": filter.schedule_kind, "timers": changed});
        audit::record(&state, &caller, Some(&filter.namespace), audited, None, detail).await;
    }
    Ok(Json(BulkResult { changed, more }))
}
