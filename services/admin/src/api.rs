//! The REST API's handlers: `/v1/timers` and its sub-resources.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use punctual_shared::schedule::{to_millis, ScheduleKind};
use punctual_shared::target_guard::TargetGuard;
use punctual_shared::task;
use punctual_shared::timer::{Action, FieldError, NewTimer, ScheduleColumns, TimerRow, TimerSpec, DEFAULT_TIMEOUT_MS};
use serde::Deserialize;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::secret_headers::SecretHeaders;
use punctual_shared::api_key::Role;

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub metrics: Metrics,
    /// Which callback addresses are allowed (`PUNCTUAL_CALLBACK_ALLOW`).
    pub guard: Arc<TargetGuard>,
    /// Which callback headers no answer shows.
    pub secret_headers: SecretHeaders,
    /// The shortest time between two fires of one timer (`PUNCTUAL_MIN_FIRE_INTERVAL_MS`).
    pub min_fire_interval: chrono::Duration,
    /// The most live timers a namespace holds (`PUNCTUAL_NAMESPACE_MAX_TIMERS`).
    pub namespace_max_timers: i64,
}

impl AppState {
    /// A timer as answered: its secret headers redacted.
    fn view(&self, row: &TimerRow, now: DateTime<Utc>) -> Value {
        let mut view = row.to_view(now);
        self.secret_headers.redact(&mut view);
        view
    }
}

/// A callback URL whose host is a literal address the executor would refuse is refused
/// here already; a host name is judged when the executor resolves it, at every call.
fn check_target(guard: &TargetGuard, timer: &NewTimer) -> Result<(), ApiError> {
    let Action::Http(http) = &timer.action else {
        return Ok(());
    };
    guard.check_url(&http.url).map_err(|refused| FieldError::new("action.http.url", refused.to_string()).into())
}

/// How many of a cron schedule's next fires are compared with the minimum interval.
const DENSITY_SAMPLE: usize = 100;

/// A timer may not fire more often than `min` allows: an interval below it, or a schedule
/// with two of its next fires closer than it, is refused.
fn check_density(min: chrono::Duration, timer: &NewTimer) -> Result<(), ApiError> {
    let now = Utc::now();
    let fires = timer.schedule.upcoming(now, now, DENSITY_SAMPLE);
    let closest = fires.windows(2).map(|w| w[1] - w[0]).min();
    match closest {
        Some(gap) if gap < min => {
            let field = if matches!(timer.schedule.kind, ScheduleKind::Interval { .. }) {
                "schedule.every_ms"
            } else {
                "schedule.cron"
            };
            Err(FieldError::new(
                field,
                format!(
                    "fires {} ms apart; this service allows one fire every {} ms at most (PUNCTUAL_MIN_FIRE_INTERVAL_MS)",
                    gap.num_milliseconds(),
                    min.num_milliseconds()
                ),
            )
            .into())
        }
        _ => Ok(()),
    }
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/timers", post(create_timer).get(list_timers))
        .route("/v1/timers/{id}", get(get_timer).patch(patch_timer).delete(delete_timer))
        .route("/v1/timers/{id}/pause", post(pause_timer))
        .route("/v1/timers/{id}/resume", post(resume_timer))
        .route("/v1/timers/{id}/runs", get(list_runs))
        .route("/v1/tasks", get(list_tasks))
        .route("/v1/tasks/replay", post(replay_tasks))
        .route("/v1/tasks/{id}/replay", post(replay_task))
        .with_state(state)
}

/// Parses a JSON body, naming the field at fault when its shape is wrong.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(headers: &HeaderMap, body: &Bytes) -> Result<T, ApiError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.contains("+json"));
    if !is_json {
        return Err(ApiError::BadRequest {
            field: None,
            detail: "expected a JSON body with Content-Type: application/json".into(),
        });
    }
    let value: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::BadRequest { field: None, detail: e.to_string() })?;
    if let Some(field) = nul_in(&value, "") {
        // Postgres stores no NUL in text or jsonb: refused here rather than failing there.
        return Err(FieldError::new(field, "must not contain the NUL character (\\u0000)").into());
    }
    from_value(value)
}

/// Reads a request's JSON as `T`, naming the field at fault when its shape is wrong.
fn from_value<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // serde names a missing field in its message only: the problem names it too.
        let missing = inner.to_string().strip_prefix("missing field `").and_then(|m| m.split('`').next()).map(|m| {
            if path == "." {
                m.to_owned()
            } else {
                format!("{path}.{m}")
            }
        });
        let field = missing.or((path != ".").then_some(path));
        let detail = match &field {
            Some(f) => format!("{f}: {inner}"),
            None => inner.to_string(),
        };
        ApiError::BadRequest { field, detail }
    })
}

/// The path of the first string (or object key) that holds a NUL character, if any.
fn nul_in(value: &Value, path: &str) -> Option<String> {
    let join = |key: &str| if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") };
    match value {
        Value::String(s) if s.contains('\0') => Some(if path.is_empty() { ".".to_owned() } else { path.to_owned() }),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| nul_in(item, &format!("{path}[{i}]"))),
        Value::Object(map) => map.iter().find_map(|(key, item)| {
            if key.contains('\0') {
                Some(join(&key.replace('\0', "\\u0000")))
            } else {
                nul_in(item, &join(key))
            }
        }),
        _ => None,
    }
}

/// A page size: 100 unless given, at most 1000.
pub(crate) fn page_limit(limit: Option<i64>) -> Result<i64, ApiError> {
    let limit = limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::BadRequest {
            field: Some("limit".into()),
            detail: "limit: must be between 1 and 1000".into(),
        });
    }
    Ok(limit)
}

pub(crate) fn parse_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id)
        .map_err(|_| ApiError::BadRequest { field: Some("id".into()), detail: format!("id: not a timer id: {id:?}") })
}

fn not_found(id: Uuid) -> ApiError {
    ApiError::NotFound(format!("no timer with id {id}"))
}

async fn create_timer(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    caller.require(Role::Write)?;
    let mut spec: Value = parse_json(&headers, &body)?;
    state.secret_headers.restore(&mut spec, None)?;
    let timer = from_value::<TimerSpec>(spec)?.validate()?;
    caller.require_in(&timer.namespace, Role::Write)?;
    check_target(&state.guard, &timer)?;
    check_density(state.min_fire_interval, &timer)?;
    let row = insert_timer(&state.pool, &timer, state.namespace_max_timers).await?;
    state.metrics.timers_created.inc();
    tracing::info!(timer_id = %row.id, namespace = %row.namespace, name = %row.name, "timer created");
    let location = format!("/v1/timers/{}", row.id);
    Ok((StatusCode::CREATED, [(header::LOCATION, location)], Json(state.view(&row, Utc::now()))))
}

/// The columns a timer's definition is written to, in the order [`bind_definition`] binds
/// them ($1 to $28).
const DEFINITION_COLUMNS: &str = "namespace, name, schedule_kind, run_at, delay_ms, interval_ms, cron_expr, timezone,
     start_at, end_at, dst_gap, action_kind, http_method, http_url, http_headers, http_body, http_timeout_ms,
     kafka_topic, kafka_key, kafka_headers, kafka_value,
     retry_max_attempts, retry_initial_ms, retry_multiplier, retry_max_ms,
     misfire_policy, catchup_window_ms, overlap_policy";
const DEFINITION_PARAMS: &str =
    "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
     $21, $22, $23, $24, $25, $26, $27, $28";
/// The first parameter after the definition's.
const NEXT_PARAM: usize = 29;

type TimerQuery<'q> = sqlx::query::QueryAs<'q, sqlx::Postgres, TimerRow, sqlx::postgres::PgArguments>;

fn bind_definition<'q>(query: TimerQuery<'q>, t: &'q NewTimer, s: &'q ScheduleColumns) -> TimerQuery<'q> {
    let query = query
        .bind(&t.namespace)
        .bind(&t.name)
        .bind(&s.schedule_kind)
        .bind(s.run_at)
        .bind(s.delay_ms)
        .bind(s.interval_ms)
        .bind(&s.cron_expr)
        .bind(&s.timezone)
        .bind(s.start_at)
        .bind(s.end_at)
        .bind(&s.dst_gap)
        .bind(match &t.action {
            Action::Http(_) => "http",
            Action::Kafka(_) => "kafka",
        });
    // The columns of the other kind keep their defaults.
    let query = match &t.action {
        Action::Http(h) => query
            .bind(&h.method)
            .bind(Some(&h.url))
            .bind(json!(h.headers))
            .bind(&h.body)
            .bind(h.timeout_ms)
            .bind(None::<&str>)
            .bind(None::<&str>)
            .bind(json!({}))
            .bind(None::<&Value>),
        Action::Kafka(k) => query
            .bind("POST")
            .bind(None::<&str>)
            .bind(json!({}))
            .bind(None::<&Value>)
            .bind(DEFAULT_TIMEOUT_MS)
            .bind(Some(&k.topic))
            .bind(&k.key)
            .bind(json!(k.headers))
            .bind(Some(&k.value)),
    };
    query
        .bind(t.retry.max_attempts)
        .bind(t.retry.initial_ms)
        .bind(t.retry.multiplier)
        .bind(t.retry.max_ms)
        .bind(t.misfire_policy.as_str())
        .bind(t.catchup_window_ms)
        .bind(t.overlap_policy.as_str())
}

fn name_conflict(t: &NewTimer) -> ApiError {
    ApiError::Conflict {
        field: Some("name".into()),
        detail: format!("a timer named {:?} already exists in namespace {:?}", t.name, t.namespace),
    }
}

/// Inserts the timer for the planner to pick up (`plan_status = 'new'`, which also
/// notifies the scanners), exactly as a plain SQL insert would: one path for both. A
/// namespace holding `max_timers` live timers takes no more (creates in one namespace take
/// turns, so the count holds).
async fn insert_timer(pool: &PgPool, t: &NewTimer, max_timers: i64) -> Result<TimerRow, ApiError> {
    let s = ScheduleColumns::from(&t.schedule);
    let created_at = to_millis(Utc::now());
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('timers ' || $1))").bind(&t.namespace).execute(&mut *tx).await?;
    let live: i64 = sqlx::query_scalar("SELECT count(*) FROM timers WHERE namespace = $1 AND state <> 'deleted'")
        .bind(&t.namespace)
        .fetch_one(&mut *tx)
        .await?;
    if live >= max_timers {
        return Err(ApiError::QuotaExceeded(format!(
            "namespace {:?} holds {live} timers, its quota (PUNCTUAL_NAMESPACE_MAX_TIMERS): delete some first",
            t.namespace
        )));
    }
    let sql = format!(
        "INSERT INTO timers ({DEFINITION_COLUMNS}, created_at, updated_at)
         VALUES ({DEFINITION_PARAMS}, ${NEXT_PARAM}, ${NEXT_PARAM}) RETURNING *"
    );
    let row = match bind_definition(sqlx::query_as(&sql), t, &s).bind(created_at).fetch_one(&mut *tx).await {
        Ok(row) => row,
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Err(name_conflict(t)),
        Err(e) => return Err(e.into()),
    };
    tx.commit().await?;
    Ok(row)
}

/// `PATCH /v1/timers/{id}`: changes any of name, schedule, action, retry and the policies.
/// The body carries the `revision` the client read; if the timer changed since, nothing is
/// written and the answer is 409. The merged timer is checked as a whole, like a new one.
async fn patch_timer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Write)?;
    let id = parse_id(&id)?;
    let patch: serde_json::Map<String, Value> = parse_json(&headers, &body)?;
    let revision = match patch.get("revision") {
        Some(v) => v.as_i64().ok_or_else(|| ApiError::BadRequest {
            field: Some("revision".into()),
            detail: "revision: must be an integer".into(),
        })?,
        None => {
            return Err(ApiError::BadRequest {
                field: Some("revision".into()),
                detail: "revision: required: the revision you read (every change of the timer bumps it), so that \
                         concurrent edits are not lost"
                    .into(),
            })
        }
    };
    let current = fetch_timer(&state.pool, &caller, id).await?;
    let view = current.to_view(Utc::now());
    let mut spec = serde_json::Map::new();
    for key in
        ["namespace", "name", "schedule", "action", "retry", "misfire_policy", "catchup_window_ms", "overlap_policy"]
    {
        spec.insert(key.to_owned(), view[key].clone());
    }
    for (key, value) in patch {
        match key.as_str() {
            // Read-only: `version` follows the schedule and action.
            "revision" | "version" => {}
            "namespace" if value != view["namespace"] => {
                return Err(
                    FieldError::new("namespace", "cannot be changed; create a timer in the other namespace").into()
                )
            }
            k if spec.contains_key(k) => {
                spec.insert(key, value);
            }
            _ => {
                return Err(ApiError::BadRequest { field: Some(key.clone()), detail: format!("{key}: unknown field") })
            }
        }
    }
    let mut spec = Value::Object(spec);
    state.secret_headers.restore(&mut spec, Some(&view))?;
    let spec: TimerSpec = from_value(spec)?;
    let timer = spec.validate()?;
    check_target(&state.guard, &timer)?;
    check_density(state.min_fire_interval, &timer)?;
    let s = ScheduleColumns::from(&timer.schedule);
    let sql = format!(
        "UPDATE timers SET ({DEFINITION_COLUMNS}) = ROW({DEFINITION_PARAMS})
          WHERE id = ${NEXT_PARAM} AND revision = ${} AND state <> 'deleted' RETURNING *",
        NEXT_PARAM + 1
    );
    let updated = match bind_definition(sqlx::query_as(&sql), &timer, &s)
        .bind(id)
        .bind(revision)
        .fetch_optional(&state.pool)
        .await
    {
        Ok(row) => row,
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Err(name_conflict(&timer)),
        Err(e) => return Err(e.into()),
    };
    match updated {
        Some(row) => {
            tracing::info!(timer_id = %id, version = row.version, "timer changed");
            Ok(Json(state.view(&row, Utc::now())))
        }
        None => {
            let now = fetch_timer(&state.pool, &caller, id).await?;
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

/// A live timer the caller sees; one in a namespace it cannot see is answered exactly as
/// an unknown id.
pub(crate) async fn fetch_timer(pool: &PgPool, caller: &Caller, id: Uuid) -> Result<TimerRow, ApiError> {
    sqlx::query_as::<_, TimerRow>(
        "SELECT * FROM timers WHERE id = $1 AND state <> 'deleted' AND ($2::text[] IS NULL OR namespace = ANY($2))",
    )
    .bind(id)
    .bind(caller.visible())
    .fetch_optional(pool)
    .await?
    .ok_or_else(|| not_found(id))
}

async fn get_timer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let row = fetch_timer(&state.pool, &caller, parse_id(&id)?).await?;
    Ok(Json(state.view(&row, Utc::now())))
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    namespace: Option<String>,
    limit: Option<i64>,
    /// Cursor: the last id of the previous page.
    after: Option<Uuid>,
}

async fn list_timers(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::BadRequest { field: None, detail: e.body_text() })?;
    let limit = page_limit(q.limit)?;
    if let Some(namespace) = &q.namespace {
        caller.require_in(namespace, Role::Read)?;
    }
    let rows = sqlx::query_as::<_, TimerRow>(
        "SELECT * FROM timers
          WHERE state <> 'deleted' AND ($1::text IS NULL OR namespace = $1) AND ($2::uuid IS NULL OR id > $2)
            AND ($4::text[] IS NULL OR namespace = ANY($4))
          ORDER BY id LIMIT $3",
    )
    .bind(&q.namespace)
    .bind(q.after)
    .bind(limit)
    .bind(caller.visible())
    .fetch_all(&state.pool)
    .await?;
    let now = Utc::now();
    let next = (rows.len() as i64 == limit).then(|| rows.last().map(|r| r.id)).flatten();
    Ok(Json(json!({
        "timers": rows.iter().map(|r| state.view(r, now)).collect::<Vec<_>>(),
        "next_after": next,
    })))
}

/// Sets the state of a live timer; the schema's trigger does the rest (a resumed timer
/// goes back to the planner, which continues from now).
async fn set_state(pool: &PgPool, caller: &Caller, id: &str, new_state: &str) -> Result<TimerRow, ApiError> {
    caller.require(Role::Write)?;
    let id = parse_id(id)?;
    sqlx::query_as::<_, TimerRow>(
        "UPDATE timers SET state = $2
          WHERE id = $1 AND state <> 'deleted' AND ($3::text[] IS NULL OR namespace = ANY($3)) RETURNING *",
    )
    .bind(id)
    .bind(new_state)
    .bind(caller.visible())
    .fetch_optional(pool)
    .await?
    .ok_or_else(|| not_found(id))
}

async fn pause_timer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let row = set_state(&state.pool, &caller, &id, "paused").await?;
    Ok(Json(state.view(&row, Utc::now())))
}

async fn resume_timer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let row = set_state(&state.pool, &caller, &id, "active").await?;
    Ok(Json(state.view(&row, Utc::now())))
}

/// Deleting keeps the row (and its history) with `state = 'deleted'`; occurrences not yet
/// started are cancelled by the executor, a run in flight completes.
async fn delete_timer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    set_state(&state.pool, &caller, &id, "deleted").await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
struct RunsQuery {
    limit: Option<i64>,
    status: Option<String>,
}

/// A task as the API shows it, with its failed attempts (oldest first).
pub(crate) const RUN_COLUMNS: &str = "t.id, t.timer_id, t.scheduled_at, t.due_at, t.status, t.attempt, t.claimed_at,
    t.started_at, t.finished_at, t.http_status, t.response_excerpt, t.error, t.duration_ms,
    COALESCE((SELECT json_agg(json_build_object(
                'attempt', a.attempt, 'started_at', a.started_at, 'finished_at', a.finished_at,
                'http_status', a.http_status, 'error', a.error, 'duration_ms', a.duration_ms) ORDER BY a.attempt)
                FROM task_attempts a WHERE a.task_id = t.id), '[]'::json) AS failed_attempts";

#[derive(Debug, sqlx::FromRow, serde::Serialize)]
pub(crate) struct RunRow {
    pub id: i64,
    pub timer_id: Uuid,
    pub due_at: DateTime<Utc>,
    pub failed_attempts: Value,
    pub scheduled_at: DateTime<Utc>,
    pub status: String,
    pub attempt: i32,
    pub claimed_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub http_status: Option<i16>,
    pub response_excerpt: Option<String>,
    pub error: Option<String>,
    pub duration_ms: Option<i32>,
}

async fn list_runs(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    query: Result<Query<RunsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&id)?;
    let Query(q) = query.map_err(|e| ApiError::BadRequest { field: None, detail: e.body_text() })?;
    let limit = page_limit(q.limit)?;
    fetch_timer(&state.pool, &caller, id).await?;
    let runs = sqlx::query_as::<_, RunRow>(&format!(
        "SELECT {RUN_COLUMNS} FROM tasks t
          WHERE timer_id = $1 AND ($2::text IS NULL OR status = $2)
          ORDER BY scheduled_at DESC LIMIT $3"
    ))
    .bind(id)
    .bind(&q.status)
    .bind(limit)
    .fetch_all(&state.pool)
    .await?;
    Ok(Json(json!({ "runs": runs })))
}

#[derive(Debug, Deserialize)]
struct TasksQuery {
    status: String,
    namespace: Option<String>,
    limit: Option<i64>,
}

/// `GET /v1/tasks?status=dead[&namespace=…]`: tasks in one status across timers, newest
/// first (for operators: what is dead, what is stuck).
async fn list_tasks(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<TasksQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::BadRequest { field: Some("status".into()), detail: e.body_text() })?;
    let limit = page_limit(q.limit)?;
    if let Some(namespace) = &q.namespace {
        caller.require_in(namespace, Role::Read)?;
    }
    let runs = sqlx::query_as::<_, RunRow>(&format!(
        "SELECT {RUN_COLUMNS} FROM tasks t JOIN timers tm ON tm.id = t.timer_id
          WHERE t.status = $1 AND ($2::text IS NULL OR tm.namespace = $2)
            AND ($4::text[] IS NULL OR tm.namespace = ANY($4))
          ORDER BY t.due_at DESC LIMIT $3"
    ))
    .bind(&q.status)
    .bind(&q.namespace)
    .bind(limit)
    .bind(caller.visible())
    .fetch_all(&state.pool)
    .await?;
    Ok(Json(json!({ "tasks": runs })))
}

/// `POST /v1/tasks/{id}/replay`: a dead task runs again, now, as a further attempt.
async fn replay_task(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Write)?;
    let id: i64 = id
        .parse()
        .map_err(|_| ApiError::BadRequest { field: Some("id".into()), detail: format!("id: not a task id: {id:?}") })?;
    let replayed = task::replay(&state.pool, &visible_tasks(&state.pool, &caller, &[id]).await?).await?;
    if replayed.is_empty() {
        let status: Option<String> = sqlx::query_scalar(
            "SELECT t.status FROM tasks t JOIN timers tm ON tm.id = t.timer_id
              WHERE t.id = $1 AND ($2::text[] IS NULL OR tm.namespace = ANY($2))",
        )
        .bind(id)
        .bind(caller.visible())
        .fetch_optional(&state.pool)
        .await?;
        return Err(match status {
            None => ApiError::NotFound(format!("no task with id {id}")),
            Some(s) => ApiError::Conflict {
                field: None,
                detail: format!("task {id} is {s}, not dead: only dead tasks are replayed"),
            },
        });
    }
    Ok(Json(json!({ "replayed": replayed })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplayRequest {
    ids: Vec<i64>,
}

/// Those of `ids` that are tasks of timers the caller sees.
async fn visible_tasks(pool: &PgPool, caller: &Caller, ids: &[i64]) -> Result<Vec<i64>, ApiError> {
    Ok(sqlx::query_scalar(
        "SELECT t.id FROM tasks t JOIN timers tm ON tm.id = t.timer_id
          WHERE t.id = ANY($1) AND ($2::text[] IS NULL OR tm.namespace = ANY($2))",
    )
    .bind(ids)
    .bind(caller.visible())
    .fetch_all(pool)
    .await?)
}

/// `POST /v1/tasks/replay {"ids": [...]}`: replays the dead ones among `ids` (of those the
/// caller sees).
async fn replay_tasks(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    caller.require(Role::Write)?;
    let request: ReplayRequest = parse_json(&headers, &body)?;
    if request.ids.is_empty() || request.ids.len() > 10_000 {
        return Err(ApiError::BadRequest { field: Some("ids".into()), detail: "ids: give 1 to 10000 task ids".into() });
    }
    let replayed = task::replay(&state.pool, &visible_tasks(&state.pool, &caller, &request.ids).await?).await?;
    Ok(Json(json!({ "replayed": replayed })))
}
