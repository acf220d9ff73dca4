//! `GET /v1/namespaces/{namespace}/runs`: a namespace's occurrences, newest first, each with
//! its failed attempts, filtered by status and by a range of scheduled times, paged by a
//! cursor (`next_before`: pass it as `before` for the next page).

use axum::extract::{Path, Query, State};
use axum::Json;
use chrono::{DateTime, Duration, Utc};
use punctual_shared::task::TaskStatus;
use punctual_shared::timer::{check_namespace, FieldError};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::openapi::Errors;
use crate::request::{self, page_limit};
use crate::run_view::{parse_status, RunView, RUN_COLUMNS};
use crate::state::AppState;
use punctual_shared::api_key::Role;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_namespace_runs))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct RunsQuery {
    #[param(value_type = Option<TaskStatus>)]
    status: Option<String>,
    /// Scheduled at or after this (default: a day before `to`).
    from: Option<DateTime<Utc>>,
    /// Scheduled before this (default: now).
    to: Option<DateTime<Utc>>,
    limit: Option<i64>,
    /// The cursor of the page before (`next_before`).
    before: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
struct RunsPage {
    runs: Vec<RunView>,
    /// Where the next page starts; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_before: Option<String>,
}

/// A cursor: the last run's scheduled time and id, `<RFC 3339>_<id>`.
fn cursor(run: &RunView) -> String {
    format!("{}_{}", run.scheduled_at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true), run.id)
}

fn parse_cursor(cursor: &str) -> Result<(DateTime<Utc>, i64), FieldError> {
    let invalid = || FieldError::new("before", "not a cursor: pass a page's next_before as it is");
    let (at, id) = cursor.rsplit_once('_').ok_or_else(invalid)?;
    Ok((at.parse().map_err(|_| invalid())?, id.parse().map_err(|_| invalid())?))
}

/// The namespace's occurrences scheduled in a range (the last day unless given), newest
/// first, each with its failed attempts, paged by a cursor.
#[utoipa::path(
    get, path = "/v1/namespaces/{namespace}/runs", tag = "runs",
    params(("namespace" = String, Path, description = "The namespace"), RunsQuery),
    responses((status = 200, description = "A page of runs", body = RunsPage), Errors)
)]
async fn list_namespace_runs(
    State(state): State<AppState>,
    caller: Caller,
    Path(namespace): Path<String>,
    query: Result<Query<RunsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<RunsPage>, ApiError> {
    check_namespace(&namespace)?;
    caller.require_in(&namespace, Role::Read)?;
    let q = request::query(query, None)?;
    let limit = page_limit(q.limit)?;
    let status = q.status.as_deref().map(parse_status).transpose()?;
    let to = q.to.unwrap_or_else(Utc::now);
    let from = q.from.unwrap_or(to - Duration::days(1));
    if from >= to {
        return Err(FieldError::new("from", "must be before `to`").into());
    }
    let before = q.before.as_deref().map(parse_cursor).transpose()?;
    // Through the namespace's timers and each one's (timer_id, scheduled_at) index: the
    // cost grows with the namespace and the range, never with the whole history.
    let runs = sqlx::query_as::<_, RunView>(&format!(
        "SELECT {RUN_COLUMNS}
           FROM timers tm
           JOIN tasks t ON t.timer_id = tm.id AND t.scheduled_at >= $2 AND t.scheduled_at < $3
          WHERE tm.namespace = $1
            AND ($4::text IS NULL OR t.status = $4)
            AND ($5::timestamptz IS NULL OR (t.scheduled_at, t.id) < ($5, $6))
          ORDER BY t.scheduled_at DESC, t.id DESC
          LIMIT $7"
    ))
    .bind(&namespace)
    .bind(from)
    .bind(to)
    .bind(status)
    .bind(before.map(|(at, _)| at))
    .bind(before.map(|(_, id)| id))
    .bind(limit)
    .fetch_all(&state.pool)
    .await?;
    let next_before = (runs.len() as i64 == limit).then(|| runs.last().map(cursor)).flatten();
    Ok(Json(RunsPage { runs, next_before }))
}
