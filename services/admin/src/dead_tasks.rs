//! `/v1/tasks`: occurrences in one status across timers (what is dead, what is stuck), and
//! replaying dead ones.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::Json;
use chrono::{DateTime, Utc};
use punctual_shared::api_key::Role;
use punctual_shared::audit::AuditAction;
use punctual_shared::task::{self, TaskStatus};
use punctual_shared::timer::FieldError;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgPool;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::audit;
use crate::auth::Caller;
use crate::error::{ApiError, Problem};
use crate::openapi::Errors;
use crate::request::{self, page_limit, parse_json};
use crate::run_view::{parse_status, RunView, RUN_COLUMNS};
use crate::state::AppState;

/// Most tasks one replay names.
pub const MAX_REPLAY: usize = 10_000;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_tasks)).routes(routes!(replay_tasks)).routes(routes!(replay_task))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct TasksQuery {
    #[param(value_type = TaskStatus)]
    status: String,
    /// Only this namespace's tasks.
    namespace: Option<String>,
    /// Scheduled at or after this. For `succeeded` and `cancelled`, which grow with the
    /// whole history, a day before `to` unless given; for the others, no bound.
    from: Option<DateTime<Utc>>,
    /// Scheduled before this (default: now, for `succeeded` and `cancelled`).
    to: Option<DateTime<Utc>>,
    /// Page size: 100 unless given, at most 1000.
    limit: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TaskList {
    pub tasks: Vec<RunView>,
}

/// The tasks replayed.
#[derive(Debug, Serialize, ToSchema)]
pub struct Replayed {
    pub replayed: Vec<i64>,
}

/// Tasks in one status across the timers the key sees, latest due first; those that
/// succeeded or were cancelled within a range of scheduled times (the last day unless
/// given).
#[utoipa::path(
    get, path = "/v1/tasks", tag = "runs", params(TasksQuery),
    responses((status = 200, description = "The tasks", body = TaskList), Errors)
)]
async fn list_tasks(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<TasksQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<TaskList>, ApiError> {
    let q = request::query(query, Some("status"))?;
    let limit = page_limit(q.limit)?;
    let status = parse_status(&q.status)?;
    if let Some(namespace) = &q.namespace {
        caller.require_in(namespace, Role::Read)?;
    }
    // The statuses a task ends in have no index of their own: their listing is bounded in
    // time (the scheduled time's BRIN index), so that no read walks the whole history.
    let bounded = matches!(status, TaskStatus::Succeeded | TaskStatus::Cancelled);
    let to = q.to.or_else(|| bounded.then(Utc::now));
    let from = q.from.or_else(|| to.filter(|_| bounded).map(|to| to - chrono::Duration::days(1)));
    if let (Some(from), Some(to)) = (from, to) {
        if from >= to {
            return Err(FieldError::new("from", "must be before `to`").into());
        }
    }
    let tasks = sqlx::query_as::<_, RunView>(&list_statement())
        .bind(status)
        .bind(&q.namespace)
        .bind(limit)
        .bind(caller.visible())
        .bind(from)
        .bind(to)
        .fetch_all(&state.pool)
        .await?;
    Ok(Json(TaskList { tasks }))
}

/// The listing's statement: $1 status, $2 namespace, $3 limit, $4 the namespaces the key
/// sees, $5 and $6 the range of scheduled times. Public for the test that reads its plan.
pub fn list_statement() -> String {
    format!(
        "SELECT {RUN_COLUMNS} FROM tasks t JOIN timers tm ON tm.id = t.timer_id
          WHERE t.status = $1 AND ($2::text IS NULL OR tm.namespace = $2)
            AND ($4::text[] IS NULL OR tm.namespace = ANY($4))
            AND ($5::timestamptz IS NULL OR t.scheduled_at >= $5)
            AND ($6::timestamptz IS NULL OR t.scheduled_at < $6)
          ORDER BY t.due_at DESC LIMIT $3"
    )
}

/// Those of `ids` that are tasks of timers the caller sees, with their namespaces.
async fn visible_tasks(pool: &PgPool, caller: &Caller, ids: &[i64]) -> Result<Vec<(i64, String)>, ApiError> {
    let rows = sqlx::query!(
        "SELECT t.id, tm.namespace FROM tasks t JOIN timers tm ON tm.id = t.timer_id
          WHERE t.id = ANY($1) AND ($2::text[] IS NULL OR tm.namespace = ANY($2))",
        ids,
        caller.visible()
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|row| (row.id, row.namespace)).collect())
}

/// Replays the dead ones of `visible` and records them in the audit log, one entry per
/// namespace.
async fn replay_visible(state: &AppState, caller: &Caller, visible: &[(i64, String)]) -> Result<Vec<i64>, ApiError> {
    let ids: Vec<i64> = visible.iter().map(|(id, _)| *id).collect();
    let replayed = task::replay(&state.pool, &ids).await?;
    let mut by_namespace: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for (id, namespace) in visible.iter().filter(|(id, _)| replayed.contains(id)) {
        by_namespace.entry(namespace.as_str()).or_default().push(*id);
    }
    for (namespace, tasks) in by_namespace {
        let detail = json!({ "tasks": tasks });
        audit::record(state, caller, Some(namespace), AuditAction::TasksReplayed, None, detail).await;
    }
    Ok(replayed)
}

/// Runs a dead task again, now, as a further attempt.
#[utoipa::path(
    post, path = "/v1/tasks/{id}/replay", tag = "runs",
    params(("id" = i64, Path, description = "The task's id")),
    responses(
        (status = 200, description = "Replayed", body = Replayed),
        (status = 404, description = "No such task (or not the key's)", body = Problem,
         content_type = "application/problem+json"),
        (status = 409, description = "The task is not dead", body = Problem, content_type = "application/problem+json"),
        Errors
    )
)]
async fn replay_task(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Replayed>, ApiError> {
    caller.require(Role::Write)?;
    let id: i64 = id
        .parse()
        .map_err(|_| ApiError::BadRequest { field: Some("id".into()), detail: format!("id: not a task id: {id:?}") })?;
    let replayed = replay_visible(&state, &caller, &visible_tasks(&state.pool, &caller, &[id]).await?).await?;
    if replayed.is_empty() {
        let status = sqlx::query_scalar!(
            r#"SELECT t.status AS "status: TaskStatus" FROM tasks t JOIN timers tm ON tm.id = t.timer_id
              WHERE t.id = $1 AND ($2::text[] IS NULL OR tm.namespace = ANY($2))"#,
            id,
            caller.visible()
        )
        .fetch_optional(&state.pool)
        .await?;
        return Err(match status {
            None => ApiError::NotFound(format!("no task with id {id}")),
            Some(s) => ApiError::Conflict {
                field: None,
                detail: format!("task {id} is {}, not dead: only dead tasks are replayed", s.as_str()),
            },
        });
    }
    Ok(Json(Replayed { replayed }))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ReplayRequest {
    /// 1 to 10,000 task ids.
    ids: Vec<i64>,
}

/// Replays the dead ones among `ids` (of the tasks the key sees); the others are left.
#[utoipa::path(
    post, path = "/v1/tasks/replay", tag = "runs", request_body = ReplayRequest,
    responses((status = 200, description = "The tasks replayed", body = Replayed), Errors)
)]
async fn replay_tasks(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Replayed>, ApiError> {
    caller.require(Role::Write)?;
    let request: ReplayRequest = parse_json(&headers, &body)?;
    if request.ids.is_empty() || request.ids.len() > MAX_REPLAY {
        return Err(ApiError::BadRequest {
            field: Some("ids".into()),
            detail: format!("ids: give 1 to {MAX_REPLAY} task ids"),
        });
    }
    let replayed = replay_visible(&state, &caller, &visible_tasks(&state.pool, &caller, &request.ids).await?).await?;
    Ok(Json(Replayed { replayed }))
}
