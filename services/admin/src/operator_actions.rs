//! What operators do besides editing timers: run a timer now (`POST
//! /v1/timers/{id}/trigger`), run the occurrences of a past range (`POST
//! /v1/timers/{id}/backfill`), and see when a schedule would fire without creating
//! anything (`POST /v1/schedules/preview`).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use punctual_shared::schedule::to_millis;
use punctual_shared::task;
use punctual_shared::timer::{task_identity, FieldError, ScheduleSpec, TimerRow};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::api::{fetch_timer, parse_id, parse_json, AppState};
use crate::auth::Caller;
use crate::error::ApiError;
use punctual_shared::api_key::Role;

/// Most fire times one preview gives.
pub const MAX_PREVIEW: usize = 100;
/// Most occurrences one backfill adds.
pub const MAX_BACKFILL: usize = 1000;

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/timers/{id}/trigger", post(trigger))
        .route("/v1/timers/{id}/backfill", post(backfill))
        .route("/v1/schedules/preview", post(preview))
        .with_state(state)
}

/// The timer, if it is active: only an active timer's occurrences run (409 otherwise).
async fn active_timer(state: &AppState, caller: &Caller, id: Uuid, action: &str) -> Result<TimerRow, ApiError> {
    caller.require(Role::Write)?;
    let timer = fetch_timer(&state.pool, caller, id).await?;
    if timer.state != "active" {
        return Err(ApiError::Conflict {
            field: None,
            detail: format!("timer {id} is {}: only an active timer is {action}", timer.state),
        });
    }
    Ok(timer)
}

/// The occurrence a trigger added.
#[derive(Debug, Serialize)]
struct Triggered {
    task_id: i64,
    timer_id: Uuid,
    scheduled_at: DateTime<Utc>,
    /// Its identity: the callback's `Idempotency-Key` and `webhook-id`.
    idempotency_key: String,
}

/// `POST /v1/timers/{id}/trigger`: one extra occurrence, now (202: it runs within a
/// second or so, through the scanner and an executor like any other).
async fn trigger(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Triggered>), ApiError> {
    let id = parse_id(&id)?;
    active_timer(&state, &caller, id, "triggered").await?;
    let at = to_millis(Utc::now());
    match task::add_occurrences(&state.pool, id, &[at]).await?.first().copied() {
        Some(task_id) => {
            tracing::info!(timer_id = %id, %at, task_id, "timer triggered");
            let triggered =
                Triggered { task_id, timer_id: id, scheduled_at: at, idempotency_key: task_identity(id, at) };
            Ok((StatusCode::ACCEPTED, Json(triggered)))
        }
        // Paused or deleted meanwhile, or an occurrence at this very millisecond.
        None => Err(ApiError::Conflict {
            field: None,
            detail: format!("timer {id} changed or has an occurrence at {at} already: try again"),
        }),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BackfillRequest {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
}

#[derive(Debug, Serialize)]
struct Backfilled {
    /// The schedule's occurrences in the range.
    occurrences: usize,
    /// Those added (the others existed already: they ran, or are planned).
    added: u64,
}

/// `POST /v1/timers/{id}/backfill {"from", "to"}`: the schedule's occurrences from `from`
/// (included) to `to` (excluded, not after now), at most [`MAX_BACKFILL`], run now as
/// occurrences of their own times (202). One that exists already is not run again.
async fn backfill(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<Backfilled>), ApiError> {
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
    let added = task::add_occurrences(&state.pool, id, &at).await?.len() as u64;
    tracing::info!(timer_id = %id, from = %request.from, to = %request.to, occurrences = at.len(), added, "timer backfilled");
    Ok((StatusCode::ACCEPTED, Json(Backfilled { occurrences: at.len(), added })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PreviewRequest {
    schedule: ScheduleSpec,
    /// How many fire times (10 unless given, at most [`MAX_PREVIEW`]).
    count: Option<usize>,
    /// From when (now unless given); an interval counts from it as from a creation.
    from: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize)]
struct Preview {
    fire_times: Vec<DateTime<Utc>>,
}

/// `POST /v1/schedules/preview`: the next fire times of a schedule, checked exactly as a
/// timer's is, without creating anything.
async fn preview(headers: HeaderMap, body: Bytes) -> Result<Json<Preview>, ApiError> {
    let request: PreviewRequest = parse_json(&headers, &body)?;
    let count = request.count.unwrap_or(10);
    if !(1..=MAX_PREVIEW).contains(&count) {
        return Err(FieldError::new("count", format!("must be between 1 and {MAX_PREVIEW}, got {count}")).into());
    }
    let schedule = request.schedule.validate()?;
    let from = request.from.unwrap_or_else(Utc::now);
    Ok(Json(Preview { fire_times: schedule.upcoming(from, from, count) }))
}
