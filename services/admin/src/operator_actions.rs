//! What operators do besides editing timers: run a timer now (`POST
//! /v1/timers/{id}/trigger`), run the occurrences of a past range (`POST
//! /v1/timers/{id}/backfill`), and see when a schedule would fire without creating
//! anything (`POST /v1/schedules/preview`).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use chrono::{DateTime, Utc};
use punctual_shared::audit::AuditAction;
use punctual_shared::schedule::to_millis;
use punctual_shared::task;
use punctual_shared::timer::{task_identity, FieldError, ScheduleSpec, TimerRow};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::audit;
use crate::auth::Caller;
use crate::error::{ApiError, Problem};
use crate::openapi::{Errors, UnknownTimer};
use crate::request::{parse_id, parse_json};
use crate::state::AppState;
use crate::timer_store;
use punctual_shared::api_key::Role;
use punctual_shared::timer_state::TimerState;

/// Most fire times one preview gives.
pub const MAX_PREVIEW: usize = 100;
/// Most occurrences one backfill adds.
pub const MAX_BACKFILL: usize = 1000;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(trigger_timer))
        .routes(routes!(backfill_timer))
        .routes(routes!(preview_schedule))
}

/// The timer, if it is active: only an active timer's occurrences run (409 otherwise).
async fn active_timer(state: &AppState, caller: &Caller, id: Uuid, action: &str) -> Result<TimerRow, ApiError> {
    caller.require(Role::Write)?;
    let timer = timer_store::fetch(&state.pool, caller, id).await?;
    if timer.state != TimerState::Active {
        return Err(ApiError::Conflict {
            field: None,
            detail: format!("timer {id} is {}: only an active timer is {action}", timer.state.as_str()),
        });
    }
    Ok(timer)
}

/// The occurrence a trigger added.
#[derive(Debug, Serialize, ToSchema)]
struct Triggered {
    /// Its task (its first shard's, for a fanned-out timer).
    task_id: i64,
    timer_id: Uuid,
    scheduled_at: DateTime<Utc>,
    /// Its identity: the callback's `Idempotency-Key` and `webhook-id` (a shard's is this,
    /// then `/` and the shard's index).
    idempotency_key: String,
    /// The calls it is split into (1 unless the timer fans out).
    shards: i32,
}

/// Runs an active timer now: one extra occurrence at this millisecond, with its own
/// identity (202: it runs within a second or so, through a scanner and an executor like
/// any other).
#[utoipa::path(
    post, path = "/v1/timers/{id}/trigger", tag = "operations",
    params(("id" = Uuid, Path, description = "The timer's id")),
    responses(
        (status = 202, description = "The occurrence added", body = Triggered),
        (status = 409, description = "The timer is not active", body = Problem,
         content_type = "application/problem+json"),
        UnknownTimer,
        Errors
    )
)]
async fn trigger_timer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Triggered>), ApiError> {
    let id = parse_id(&id)?;
    let timer = active_timer(&state, &caller, id, "triggered").await?;
    let at = to_millis(Utc::now());
    match task::add_occurrences(&state.pool, id, &[at]).await?.first().copied() {
        Some(task_id) => {
            tracing::info!(timer_id = %id, %at, task_id, "timer triggered");
            let detail = json!({"name": timer.name, "task_id": task_id, "scheduled_at": at});
            audit::record(
                &state,
                &caller,
                Some(&timer.namespace),
                AuditAction::TimerTriggered,
                Some(id.to_string()),
                detail,
            )
            .await;
            let triggered = Triggered {
                task_id,
                timer_id: id,
                scheduled_at: at,
                idempotency_key: task_identity(id, at),
                shards: timer.fan_out().map_or(1, |f| f.planned_shards().into()),
            };
            Ok((StatusCode::ACCEPTED, Json(triggered)))
        }
        // Paused or deleted meanwhile, or an occurrence at this very millisecond.
        None => Err(ApiError::Conflict {
            field: None,
            detail: format!("timer {id} changed or has an occurrence at {at} already: try again"),
        }),
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct BackfillRequest {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    /// Only count: how many occurrences the range holds and how many would be added,
    /// without adding any (200 instead of 202).
    #[serde(default)]
    dry_run: bool,
}

#[derive(Debug, Serialize, ToSchema)]
struct Backfilled {
    /// The schedule's occurrences in the range.
    occurrences: usize,
    /// Those added (the others existed already: they ran, or are planned).
    added: u64,
}

/// Runs the schedule's occurrences from `from` (included) to `to` (excluded, not after
/// now), at most 1,000, now, as occurrences of their own times (202). One that exists
/// already (it ran, or is planned) is not run again. With `dry_run`, only counts them
/// (200), so that a client can show what a backfill will add before it is confirmed.
#[utoipa::path(
    post, path = "/v1/timers/{id}/backfill", tag = "operations", request_body = BackfillRequest,
    params(("id" = Uuid, Path, description = "The timer's id")),
    responses(
        (status = 202, description = "The occurrences added", body = Backfilled),
        (status = 200, description = "A dry run: the occurrences that would be added", body = Backfilled),
        (status = 409, description = "The timer is not active", body = Problem,
         content_type = "application/problem+json"),
        UnknownTimer,
        Errors
    )
)]
async fn backfill_timer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<Backfilled>), ApiError> {
    caller.require(Role::Write)?;
    let id = parse_id(&id)?;
    let request: BackfillRequest = parse_json(&headers, &body)?;
    let now = Utc::now();
    if request.to > now {
        return Err(FieldError::new("to", "a backfill runs past occurrences: `to` must not be after now").into());
    }
    if request.from >= request.to {
        return Err(FieldError::new("from", "must be before `to`").into());
    }
    let timer = active_timer(&state, &caller, id, "backfilled").await?;
    let schedule = timer.schedule()?;
    let mut at = Vec::new();
    let mut next = schedule.first_from(timer.created_at, request.from);
    while let Some(t) = next.filter(|t| *t < request.to) {
        if at.len() == MAX_BACKFILL {
            return Err(FieldError::new(
                "to",
                format!("the range holds more than {MAX_BACKFILL} occurrences: backfill it in parts"),
            )
            .into());
        }
        at.push(t);
        next = schedule.next_after(timer.created_at, t);
    }
    if request.dry_run {
        let existing = task::existing_occurrences(&state.pool, id, &at).await?;
        let added = (at.len() as u64).saturating_sub(existing.max(0) as u64);
        return Ok((StatusCode::OK, Json(Backfilled { occurrences: at.len(), added })));
    }
    let added = task::backfill(&state.pool, id, &at).await?.len() as u64;
    tracing::info!(timer_id = %id, from = %request.from, to = %request.to, occurrences = at.len(), added, "timer backfilled");
    let detail = json!({"name": timer.name, "from": request.from, "to": request.to, "added": added});
    audit::record(&state, &caller, Some(&timer.namespace), AuditAction::TimerBackfilled, Some(id.to_string()), detail)
        .await;
    Ok((StatusCode::ACCEPTED, Json(Backfilled { occurrences: at.len(), added })))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct PreviewRequest {
    schedule: ScheduleSpec,
    /// How many fire times (10 unless given, at most [`MAX_PREVIEW`]).
    count: Option<usize>,
    /// From when (now unless given); an interval counts from it as from a creation.
    from: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, ToSchema)]
struct Preview {
    fire_times: Vec<DateTime<Utc>>,
}

/// The next fire times of a schedule, checked exactly as a timer's is, without creating
/// anything.
#[utoipa::path(
    post, path = "/v1/schedules/preview", tag = "operations", request_body = PreviewRequest,
    responses((status = 200, description = "The fire times", body = Preview), Errors)
)]
async fn preview_schedule(headers: HeaderMap, body: Bytes) -> Result<Json<Preview>, ApiError> {
    let request: PreviewRequest = parse_json(&headers, &body)?;
    let count = request.count.unwrap_or(10);
    if !(1..=MAX_PREVIEW).contains(&count) {
        return Err(FieldError::new("count", format!("must be between 1 and {MAX_PREVIEW}, got {count}")).into());
    }
    let schedule = request.schedule.validate()?;
    let from = request.from.unwrap_or_else(Utc::now);
    Ok(Json(Preview { fire_times: schedule.upcoming(from, from, count) }))
}
