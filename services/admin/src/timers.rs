//! `/v1/timers`: create, read, list, change, pause, resume and delete timers.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use chrono::Utc;
use punctual_shared::api_key::Role;
use punctual_shared::audit::AuditAction;
use punctual_shared::schedule::KindName;
use punctual_shared::timer::{FieldError, TimerSpec};
use punctual_shared::timer_state::TimerState;
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::audit;
use crate::auth::Caller;
use crate::error::{ApiError, Problem};
use crate::openapi::{Errors, UnknownTimer};
use crate::request::{self, from_value, page_limit, parse_id, parse_json};
use crate::state::AppState;
use crate::timer_policy;
use crate::timer_store;
use crate::timer_view::{TimerPage, TimerPatch, TimerView};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_timer, list_timers))
        .routes(routes!(get_timer, patch_timer, delete_timer))
        .routes(routes!(pause_timer))
        .routes(routes!(resume_timer))
}

/// Creates a timer. The answer is the stored timer with its `id` and `next_fire_times`.
#[utoipa::path(
    post, path = "/v1/timers", tag = "timers", request_body = TimerSpec,
    responses(
        (status = 201, description = "Created", body = TimerView, headers(("location" = String))),
        (status = 409, description = "A timer of that name exists in the namespace, or the namespace holds its quota \
                                      of timers", body = Problem, content_type = "application/problem+json"),
        Errors
    )
)]
async fn create_timer(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    caller.require(Role::Write)?;
    let mut spec: Value = parse_json(&headers, &body)?;
    state.secret_headers.restore(&mut spec, None)?;
    let mut timer = from_value::<TimerSpec>(spec)?.validate()?;
    caller.require_in(&timer.namespace, Role::Write)?;
    let limits = timer_policy::check(&state, &timer).await?;
    state.secret_headers.seal(&state.secret_keys, &mut timer.action)?;
    let row = timer_store::insert(&state.pool, &timer, i64::from(limits.max_timers)).await?;
    state.metrics.timers_created.inc();
    tracing::info!(timer_id = %row.id, namespace = %row.namespace, name = %row.name, "timer created");
    let detail = json!({"name": row.name});
    audit::record(&state, &caller, Some(&row.namespace), AuditAction::TimerCreated, Some(row.id.to_string()), detail)
        .await;
    let location = format!("/v1/timers/{}", row.id);
    Ok((StatusCode::CREATED, [(header::LOCATION, location)], Json(state.view(&row, Utc::now()))))
}

/// Changes any of name, schedule, action, retry and the policies. The body carries the
/// `revision` read; if the timer changed since, nothing is written and the answer is 409.
/// The merged timer is checked as a whole, like a new one.
#[utoipa::path(
    patch, path = "/v1/timers/{id}", tag = "timers", request_body = TimerPatch,
    params(("id" = Uuid, Path, description = "The timer's id")),
    responses(
        (status = 200, description = "Changed", body = TimerView),
        (status = 409, description = "The timer is at another revision, or the name is taken", body = Problem,
         content_type = "application/problem+json"),
        UnknownTimer,
        Errors
    )
)]
async fn patch_timer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<TimerView>, ApiError> {
    caller.require(Role::Write)?;
    let id = parse_id(&id)?;
    let mut patch: Value = parse_json(&headers, &body)?;
    let current = timer_store::fetch(&state.pool, &caller, id).await?;
    let stored = TimerView::from_row(&current, Utc::now());
    // Secret headers sent back as read (redacted) keep their stored values.
    let stored_value = serde_json::to_value(&stored).map_err(|e| ApiError::BadRequest {
        field: None,
        detail: format!("the stored timer cannot be read back: {e}"),
    })?;
    state.secret_headers.restore(&mut patch, Some(&stored_value))?;
    let patch: TimerPatch = from_value(patch)?;
    if patch.namespace.as_ref().is_some_and(|ns| *ns != stored.namespace) {
        return Err(FieldError::new("namespace", "cannot be changed; create a timer in the other namespace").into());
    }
    let revision = patch.revision;
    let mut timer = patch.apply(stored.to_spec()).validate()?;
    state.secret_headers.check_broadcast(&timer, &stored_value)?;
    timer_policy::check(&state, &timer).await?;
    state.secret_headers.seal(&state.secret_keys, &mut timer.action)?;
    match timer_store::update_definition(&state.pool, &caller, id, revision, &timer).await? {
        Some(row) => {
            tracing::info!(timer_id = %id, version = row.version, "timer changed");
            let detail = json!({"name": row.name, "revision": row.revision});
            audit::record(
                &state,
                &caller,
                Some(&row.namespace),
                AuditAction::TimerChanged,
                Some(id.to_string()),
                detail,
            )
            .await;
            Ok(Json(state.view(&row, Utc::now())))
        }
        None => {
            let now = timer_store::fetch(&state.pool, &caller, id).await?;
            Err(ApiError::Conflict {
                field: Some("revision".into()),
                detail: format!(
                    "revision: the timer is at revision {}, not {revision}: read it again and retry",
                    now.revision
                ),
            })
        }
    }
}

/// One timer.
#[utoipa::path(
    get, path = "/v1/timers/{id}", tag = "timers",
    params(("id" = Uuid, Path, description = "The timer's id")),
    responses(
        (status = 200, description = "The timer", body = TimerView),
        UnknownTimer,
        Errors
    )
)]
async fn get_timer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<TimerView>, ApiError> {
    let row = timer_store::fetch(&state.pool, &caller, parse_id(&id)?).await?;
    Ok(Json(state.view(&row, Utc::now())))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Only this namespace's timers.
    namespace: Option<String>,
    /// Page size: 100 unless given, at most 1000.
    limit: Option<i64>,
    /// Cursor: the previous page's `next_after`.
    after: Option<Uuid>,
    /// Only the timers whose name begins with this.
    name_prefix: Option<String>,
    /// Only the timers in this state (`active` or `paused`).
    state: Option<TimerState>,
    /// Only the timers of this kind of schedule.
    schedule_kind: Option<KindName>,
}

/// The timers the key sees, by id.
#[utoipa::path(
    get, path = "/v1/timers", tag = "timers", params(ListQuery),
    responses((status = 200, description = "A page of timers", body = TimerPage), Errors)
)]
async fn list_timers(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<TimerPage>, ApiError> {
    let q = request::query(query, None)?;
    let limit = page_limit(q.limit)?;
    if let Some(namespace) = &q.namespace {
        caller.require_in(namespace, Role::Read)?;
    }
    if q.state == Some(TimerState::Deleted) {
        return Err(FieldError::new("state", "deleted timers are not listed: active or paused").into());
    }
    let filter = timer_store::ListFilter {
        namespace: q.namespace.as_deref(),
        name_pattern: q.name_prefix.as_deref().map(punctual_shared::timer_store::name_prefix_pattern),
        state: q.state,
        schedule_kind: q.schedule_kind,
    };
    let rows = timer_store::list(&state.pool, &caller, &filter, q.after, limit).await?;
    let now = Utc::now();
    let next_after = (rows.len() as i64 == limit).then(|| rows.last().map(|r| r.id)).flatten();
    Ok(Json(TimerPage { timers: rows.iter().map(|r| state.view(r, now)).collect(), next_after }))
}

/// The most characters a pause's or resume's note may have.
const NOTE_MAX_CHARS: usize = 500;

/// The optional body of a pause or resume: why, for whoever looks at the timer next.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StateChange {
    /// Why (at most 500 characters); kept beside the state until its next change.
    note: Option<String>,
}

/// The note of a pause or resume: its body is optional, and an empty note is none.
fn state_note(headers: &HeaderMap, body: &Bytes) -> Result<Option<String>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    // `null` is no note, as no body is.
    let change: Option<StateChange> = parse_json(headers, body)?;
    let note = change.and_then(|c| c.note).map(|n| n.trim().to_owned()).filter(|n| !n.is_empty());
    if note.as_ref().is_some_and(|n| n.chars().count() > NOTE_MAX_CHARS) {
        return Err(FieldError::new("note", format!("at most {NOTE_MAX_CHARS} characters")).into());
    }
    Ok(note)
}

async fn set_state(
    state: &AppState,
    caller: &Caller,
    id: &str,
    new_state: TimerState,
    note: Option<String>,
) -> Result<TimerView, ApiError> {
    caller.require(Role::Write)?;
    let row = timer_store::set_state(&state.pool, caller, parse_id(id)?, new_state, note.as_deref()).await?;
    let action = match new_state {
        TimerState::Active => AuditAction::TimerResumed,
        TimerState::Paused => AuditAction::TimerPaused,
        TimerState::Deleted => AuditAction::TimerDeleted,
    };
    let detail = match &note {
        Some(note) => json!({"name": row.name, "note": note}),
        None => json!({"name": row.name}),
    };
    audit::record(state, caller, Some(&row.namespace), action, Some(row.id.to_string()), detail).await;
    Ok(state.view(&row, Utc::now()))
}

/// Pauses a timer: nothing fires until it is resumed. The body, optional, gives a note on
/// why, shown with the timer until its state changes again.
#[utoipa::path(
    post, path = "/v1/timers/{id}/pause", tag = "timers",
    params(("id" = Uuid, Path, description = "The timer's id")),
    request_body(content = Option<StateChange>, description = "Optional: a note on why"),
    responses(
        (status = 200, description = "Paused", body = TimerView),
        UnknownTimer,
        Errors
    )
)]
async fn pause_timer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<TimerView>, ApiError> {
    let note = state_note(&headers, &body)?;
    Ok(Json(set_state(&state, &caller, &id, TimerState::Paused, note).await?))
}

/// Resumes a timer from now on, without the occurrences missed meanwhile. The body,
/// optional, gives a note on why; without one, the pause's note is cleared.
#[utoipa::path(
    post, path = "/v1/timers/{id}/resume", tag = "timers",
    params(("id" = Uuid, Path, description = "The timer's id")),
    request_body(content = Option<StateChange>, description = "Optional: a note on why"),
    responses(
        (status = 200, description = "Active", body = TimerView),
        UnknownTimer,
        Errors
    )
)]
async fn resume_timer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<TimerView>, ApiError> {
    let note = state_note(&headers, &body)?;
    Ok(Json(set_state(&state, &caller, &id, TimerState::Active, note).await?))
}

/// Deletes a timer: the row (and its history) stays with `state = 'deleted'`; occurrences
/// not yet started are cancelled by the executor, a run in flight completes.
#[utoipa::path(
    delete, path = "/v1/timers/{id}", tag = "timers",
    params(("id" = Uuid, Path, description = "The timer's id")),
    responses(
        (status = 204, description = "Deleted"),
        UnknownTimer,
        Errors
    )
)]
async fn delete_timer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    set_state(&state, &caller, &id, TimerState::Deleted, None).await?;
    Ok(StatusCode::NO_CONTENT)
}
