//! Every write of `timers` the API makes and every read of timers as such (the counts of
//! the stats join them by namespace), each lookup by id scoped to the caller's namespaces
//! here, in one place: a timer of a namespace the caller does not see is not found,
//! whatever the handler.

use chrono::Utc;
use punctual_shared::schedule::to_millis;
use punctual_shared::timer::{Action, NewTimer, ScheduleColumns, TimerRow, DEFAULT_TIMEOUT_MS};
use punctual_shared::timer_state::TimerState;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;

fn not_found(id: Uuid) -> ApiError {
    ApiError::NotFound(format!("no timer with id {id}"))
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
pub async fn insert(pool: &PgPool, t: &NewTimer, max_timers: i64) -> Result<TimerRow, ApiError> {
    let s = ScheduleColumns::from(&t.schedule);
    let created_at = to_millis(Utc::now());
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('timers ' || $1))").bind(&t.namespace).execute(&mut *tx).await?;
    let live: i64 = sqlx::query_scalar("SELECT count(*) FROM timers WHERE namespace = $1 AND state <> 'deleted'")
        .bind(&t.namespace)
        .fetch_one(&mut *tx)
        .await?;
    if max_timers > 0 && live >= max_timers {
        return Err(ApiError::QuotaExceeded(format!(
            "namespace {:?} holds {live} timers, its quota (its policy's max_timers, by default PUNCTUAL_NAMESPACE_MAX_TIMERS): delete some first",
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

/// Writes a new definition of a timer the caller sees, if it is still at `revision`;
/// `None` if it is not (or is gone).
pub async fn update_definition(
    pool: &PgPool,
    caller: &Caller,
    id: Uuid,
    revision: i64,
    timer: &NewTimer,
) -> Result<Option<TimerRow>, ApiError> {
    let s = ScheduleColumns::from(&timer.schedule);
    let sql = format!(
        "UPDATE timers SET ({DEFINITION_COLUMNS}) = ROW({DEFINITION_PARAMS})
          WHERE id = ${NEXT_PARAM} AND revision = ${} AND state <> 'deleted'
            AND (${}::text[] IS NULL OR namespace = ANY(${}))
          RETURNING *",
        NEXT_PARAM + 1,
        NEXT_PARAM + 2,
        NEXT_PARAM + 2
    );
    match bind_definition(sqlx::query_as(&sql), timer, &s)
        .bind(id)
        .bind(revision)
        .bind(caller.visible())
        .fetch_optional(pool)
        .await
    {
        Ok(row) => Ok(row),
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Err(name_conflict(timer)),
        Err(e) => Err(e.into()),
    }
}

/// A live timer the caller sees; one in a namespace it cannot see is answered exactly as
/// an unknown id.
pub async fn fetch(pool: &PgPool, caller: &Caller, id: Uuid) -> Result<TimerRow, ApiError> {
    sqlx::query_as::<_, TimerRow>(
        "SELECT * FROM timers WHERE id = $1 AND state <> 'deleted' AND ($2::text[] IS NULL OR namespace = ANY($2))",
    )
    .bind(id)
    .bind(caller.visible())
    .fetch_optional(pool)
    .await?
    .ok_or_else(|| not_found(id))
}

/// A page of the live timers the caller sees, by id, in one namespace or all.
pub async fn list(
    pool: &PgPool,
    caller: &Caller,
    namespace: Option<&str>,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Vec<TimerRow>, ApiError> {
    Ok(sqlx::query_as::<_, TimerRow>(
        "SELECT * FROM timers
          WHERE state <> 'deleted' AND ($1::text IS NULL OR namespace = $1) AND ($2::uuid IS NULL OR id > $2)
            AND ($4::text[] IS NULL OR namespace = ANY($4))
          ORDER BY id LIMIT $3",
    )
    .bind(namespace)
    .bind(after)
    .bind(limit)
    .bind(caller.visible())
    .fetch_all(pool)
    .await?)
}

/// Sets the state of a live timer the caller sees; the schema's trigger does the rest (a
/// resumed timer goes back to the planner, which continues from now).
pub async fn set_state(pool: &PgPool, caller: &Caller, id: Uuid, new_state: TimerState) -> Result<TimerRow, ApiError> {
    sqlx::query_as::<_, TimerRow>(
        "UPDATE timers SET state = $2
          WHERE id = $1 AND state <> 'deleted' AND ($3::text[] IS NULL OR namespace = ANY($3)) RETURNING *",
    )
    .bind(id)
    .bind(new_state.as_str())
    .bind(caller.visible())
    .fetch_optional(pool)
    .await?
    .ok_or_else(|| not_found(id))
}

/// The timers a bulk change names: one namespace's (which the caller has checked it may
/// change), narrowed by a LIKE pattern of names or a list of ids.
pub struct Selection<'a> {
    pub namespace: &'a str,
    pub name_pattern: Option<&'a str>,
    pub ids: Option<&'a [Uuid]>,
}

/// The timers of a selection ($1 namespace, $2 name pattern, $3 ids) in the states a bulk
/// change changes ($4).
const SELECTED: &str = "namespace = $1 AND state = ANY($4)
    AND ($2::text IS NULL OR name LIKE $2) AND ($3::uuid[] IS NULL OR id = ANY($3))";

/// Sets the state of at most `limit` of the selected timers that are in one of the states
/// `from` to `to`, in one statement; returns their ids and whether more are left.
pub async fn set_states(
    pool: &PgPool,
    selection: &Selection<'_>,
    from: &[TimerState],
    to: TimerState,
    limit: i64,
) -> Result<(Vec<Uuid>, bool), ApiError> {
    let from: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
    let changed: Vec<Uuid> = sqlx::query_scalar(&format!(
        "UPDATE timers SET state = $5
          WHERE id IN (SELECT id FROM timers WHERE {SELECTED} ORDER BY id LIMIT $6 FOR UPDATE)
            AND state = ANY($4)
         RETURNING id"
    ))
    .bind(selection.namespace)
    .bind(selection.name_pattern)
    .bind(selection.ids)
    .bind(&from)
    .bind(to.as_str())
    .bind(limit)
    .fetch_all(pool)
    .await?;
    let more = changed.len() as i64 == limit
        && sqlx::query_scalar::<_, bool>(&format!("SELECT EXISTS (SELECT 1 FROM timers WHERE {SELECTED})"))
            .bind(selection.namespace)
            .bind(selection.name_pattern)
            .bind(selection.ids)
            .bind(from)
            .fetch_one(pool)
            .await?;
    Ok((changed, more))
}
