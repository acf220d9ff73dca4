//! `GET /v1/timers/{id}/runs`: a timer's occurrences, newest first.

use axum::extract::{Path, Query, State};
use axum::Json;
use punctual_shared::task::TaskStatus;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::openapi::{Errors, UnknownTimer};
use crate::request::{self, page_limit, parse_id};
use crate::run_view::{parse_status, RunView, RUN_COLUMNS};
use crate::state::AppState;
use crate::timer_store;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_timer_runs))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct RunsQuery {
    /// Page size: 100 unless given, at most 1000.
    limit: Option<i64>,
    /// Only the occurrences in this status.
    #[param(value_type = Option<TaskStatus>)]
    status: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RunList {
    pub runs: Vec<RunView>,
}

/// A timer's latest occurrences, newest first, each with its failed attempts.
#[utoipa::path(
    get, path = "/v1/timers/{id}/runs", tag = "runs",
    params(("id" = uuid::Uuid, Path, description = "The timer's id"), RunsQuery),
    responses(
        (status = 200, description = "The timer's latest runs", body = RunList),
        UnknownTimer,
        Errors
    )
)]
async fn list_timer_runs(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    query: Result<Query<RunsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<RunList>, ApiError> {
    let id = parse_id(&id)?;
    let q = request::query(query, None)?;
    let limit = page_limit(q.limit)?;
    let status = q.status.as_deref().map(parse_status).transpose()?;
    timer_store::fetch(&state.pool, &caller, id).await?;
    let runs = sqlx::query_as::<_, RunView>(&format!(
        "SELECT {RUN_COLUMNS} FROM tasks t
          WHERE timer_id = $1 AND ($2::text IS NULL OR status = $2)
          ORDER BY scheduled_at DESC, shard LIMIT $3"
    ))
    .bind(id)
    .bind(status)
    .bind(limit)
    .fetch_all(&state.pool)
    .await?;
    Ok(Json(RunList { runs }))
}
