//! `GET /v1/timers/{id}/occurrences/{scheduled_at}`: one occurrence as a whole, with its
//! shards (docs/semantics.md, "Fan-out").

use axum::extract::{Path, State};
use axum::Json;
use chrono::{DateTime, Utc};
use punctual_shared::fan_out::occurrence_status;
use punctual_shared::task::TaskStatus;
use punctual_shared::timer::FieldError;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::openapi::{Errors, UnknownTimer};
use crate::request::parse_id;
use crate::run_view::{RunView, RUN_COLUMNS};
use crate::state::AppState;
use crate::timer_store;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_occurrence))
}

/// An occurrence: its status as a whole, and each of its calls (one, or one a shard).
#[derive(Debug, Serialize, ToSchema)]
pub struct OccurrenceView {
    pub timer_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    /// `dead` if any shard is dead; `succeeded` only when every shard succeeded; otherwise
    /// the least advanced unfinished shard's (`pending`, `claimed`, `running`), or
    /// `cancelled` when every shard finished and some were cancelled.
    pub status: TaskStatus,
    /// The calls it is split into (1 when not fanned out).
    pub shards: i16,
    /// Each shard's task, by index, with its failed attempts.
    pub runs: Vec<RunView>,
}

/// One occurrence of a timer as a whole, with each of its shards.
#[utoipa::path(
    get, path = "/v1/timers/{id}/occurrences/{scheduled_at}", tag = "runs",
    params(
        ("id" = Uuid, Path, description = "The timer's id"),
        ("scheduled_at" = DateTime<Utc>, Path, description = "The occurrence's time (RFC 3339), as its runs show it")
    ),
    responses(
        (status = 200, description = "The occurrence", body = OccurrenceView),
        UnknownTimer,
        Errors
    )
)]
async fn get_occurrence(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, scheduled_at)): Path<(String, String)>,
) -> Result<Json<OccurrenceView>, ApiError> {
    let id = parse_id(&id)?;
    let scheduled_at = DateTime::parse_from_rfc3339(&scheduled_at)
        .map_err(|e| FieldError::new("scheduled_at", format!("not an RFC 3339 time: {e}")))?
        .with_timezone(&Utc);
    timer_store::fetch(&state.pool, &caller, id).await?;
    let mut runs = sqlx::query_as::<_, RunView>(&format!(
        "SELECT {RUN_COLUMNS} FROM tasks t WHERE timer_id = $1 AND scheduled_at = $2 ORDER BY shard"
    ))
    .bind(id)
    .bind(scheduled_at)
    .fetch_all(&state.pool)
    .await?;
    // Shard 0 has the occurrence's number of shards as last planned: shards beyond it were
    // planned from a version with more, and end cancelled without running.
    let shards = runs.first().map_or(1, |r| r.shards);
    runs.retain(|r| r.shard < shards);
    let Some(status) = occurrence_status(runs.iter().map(|r| r.status)) else {
        return Err(ApiError::NotFound(format!("timer {id} has no occurrence at {scheduled_at}")));
    };
    Ok(Json(OccurrenceView { timer_id: id, scheduled_at, status, shards, runs }))
}
