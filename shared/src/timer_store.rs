//! Every write of `timers`, in one place: the API's (a new timer, a new definition, a change
//! of state), the planner's (plans, and rows out of range marked invalid) and the
//! resealing of secret header values. One exception: retention's `pruned_through`, written
//! by the statement that prunes the occurrences (`task::prune_batch`), so that no crash can fall
//! between the two.
//!
//! The API's writes take the namespaces the caller sees (`visible`, `None` for all): a
//! timer of another namespace is not found, as an unknown id is.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::bucket::{owned_join, Held, MEMBER};
use crate::schedule::{to_millis, KindName};
use crate::timer::{Action, NewTimer, ScheduleColumns, TimerRow, DEFAULT_TIMEOUT_MS};
use crate::timer_state::{PlanStatus, TimerState};

/// Why a timer was not written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("a timer named {name:?} already exists in namespace {namespace:?}")]
    NameTaken { namespace: String, name: String },
    #[error("namespace {namespace:?} holds {live} timers, its quota")]
    QuotaExceeded { namespace: String, live: i64 },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// The columns a timer's definition is written to, in the order [`bind_definition`] binds
/// them ($1 to $31).
const DEFINITION_COLUMNS: &str = "namespace, name, schedule_kind, run_at, delay_ms, interval_ms, cron_expr, timezone,
     start_at, end_at, dst_gap, action_kind, http_method, http_url, http_headers, http_body, http_timeout_ms,
     kafka_topic, kafka_key, kafka_headers, kafka_value,
     retry_max_attempts, retry_initial_ms, retry_multiplier, retry_max_ms,
     misfire_policy, catchup_window_ms, overlap_policy, fan_out_shards, fan_out_urls, fan_out_dns";
const DEFINITION_PARAMS: &str =
    "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
     $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31";
/// The first parameter after the definition's.
const NEXT_PARAM: usize = 32;

type TimerQuery<'q> = sqlx::query::QueryAs<'q, sqlx::Postgres, TimerRow, sqlx::postgres::PgArguments>;

fn bind_definition<'q>(query: TimerQuery<'q>, t: &'q NewTimer, s: &'q ScheduleColumns) -> TimerQuery<'q> {
    let (fan_out_shards, fan_out_urls, fan_out_dns) = t.fan_out.columns();
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
        .bind(fan_out_shards)
        .bind(fan_out_urls)
        .bind(fan_out_dns)
}

fn name_taken(t: &NewTimer) -> StoreError {
    StoreError::NameTaken { namespace: t.namespace.clone(), name: t.name.clone() }
}

/// Inserts the timer for the planner to pick up (`plan_status = 'new'`, which also
/// notifies the scanners), exactly as a plain SQL insert would: one path for both. A
/// namespace holding `max_timers` live timers (0: no quota) takes no more (creates in one
/// namespace take turns, so the count holds).
pub async fn insert(pool: &PgPool, t: &NewTimer, max_timers: i64) -> Result<TimerRow, StoreError> {
    let s = ScheduleColumns::from(&t.schedule);
    let created_at = to_millis(Utc::now());
    let mut tx = pool.begin().await?;
    sqlx::query!("SELECT pg_advisory_xact_lock(hashtext('timers ' || $1))", t.namespace).execute(&mut *tx).await?;
    let live = sqlx::query_scalar!(
        r#"SELECT count(*) AS "live!" FROM timers WHERE namespace = $1 AND state <> 'deleted'"#,
        t.namespace
    )
    .fetch_one(&mut *tx)
    .await?;
    if max_timers > 0 && live >= max_timers {
        return Err(StoreError::QuotaExceeded { namespace: t.namespace.clone(), live });
    }
    let sql = format!(
        "INSERT INTO timers ({DEFINITION_COLUMNS}, created_at, updated_at)
         VALUES ({DEFINITION_PARAMS}, ${NEXT_PARAM}, ${NEXT_PARAM}) RETURNING *"
    );
    let row = match bind_definition(sqlx::query_as(&sql), t, &s).bind(created_at).fetch_one(&mut *tx).await {
        Ok(row) => row,
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Err(name_taken(t)),
        Err(e) => return Err(e.into()),
    };
    tx.commit().await?;
    Ok(row)
}

/// Writes a new definition of a live timer of the `visible` namespaces, if it is still at
/// `revision`; `None` if it is not (or is gone).
pub async fn update_definition(
    pool: &PgPool,
    visible: Option<&[String]>,
    id: Uuid,
    revision: i64,
    timer: &NewTimer,
) -> Result<Option<TimerRow>, StoreError> {
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
        .bind(visible)
        .fetch_optional(pool)
        .await
    {
        Ok(row) => Ok(row),
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Err(name_taken(timer)),
        Err(e) => Err(e.into()),
    }
}

/// Sets the state of a live timer of the `visible` namespaces, with the operator's note on
/// why (none clears the last); `None` if there is no such timer. The schema's trigger does
/// the rest (a resumed timer goes back to the planner, which continues from now).
pub async fn set_state(
    pool: &PgPool,
    visible: Option<&[String]>,
    id: Uuid,
    new_state: TimerState,
    note: Option<&str>,
) -> Result<Option<TimerRow>, sqlx::Error> {
    crate::query_timer_rows!(
        "UPDATE timers SET state = $2, state_note = $4
          WHERE id = $1 AND state <> 'deleted' AND ($3::text[] IS NULL OR namespace = ANY($3)) RETURNING",
        "",
        id,
        new_state as _,
        visible,
        note
    )
    .fetch_optional(pool)
    .await
}

/// The LIKE pattern of the names that begin with `prefix`: LIKE's own characters in it
/// match themselves.
pub fn name_prefix_pattern(prefix: &str) -> String {
    format!("{}%", prefix.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"))
}

/// The timers a bulk change names: one namespace's (which the caller has checked it may
/// change), narrowed by a LIKE pattern of names, a list of ids, and a kind of schedule (the
/// filters of the timer list, so that "all matching" is what the list showed).
pub struct Selection<'a> {
    pub namespace: &'a str,
    pub name_pattern: Option<&'a str>,
    pub ids: Option<&'a [Uuid]>,
    pub schedule_kind: Option<KindName>,
}

/// The timers of a selection ($1 namespace, $2 name pattern, $3 ids, $5 kind of schedule)
/// in the states a bulk change changes ($4).
const SELECTED: &str = "namespace = $1 AND state = ANY($4)
    AND ($2::text IS NULL OR name LIKE $2) AND ($3::uuid[] IS NULL OR id = ANY($3))
    AND ($5::text IS NULL OR schedule_kind = $5)";

/// Sets the state of at most `limit` of the selected timers that are in one of the states
/// `from` to `to`, in one statement, clearing their notes; returns their ids and whether
/// more are left.
pub async fn set_states(
    pool: &PgPool,
    selection: &Selection<'_>,
    from: &[TimerState],
    to: TimerState,
    limit: i64,
) -> Result<(Vec<Uuid>, bool), sqlx::Error> {
    let from: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
    let kind = selection.schedule_kind.map(KindName::as_str);
    let changed: Vec<Uuid> = sqlx::query_scalar(&format!(
        "UPDATE timers SET state = $6, state_note = NULL
          WHERE id IN (SELECT id FROM timers WHERE {SELECTED} ORDER BY id LIMIT $7 FOR UPDATE)
            AND state = ANY($4)
         RETURNING id"
    ))
    .bind(selection.namespace)
    .bind(selection.name_pattern)
    .bind(selection.ids)
    .bind(&from)
    .bind(kind)
    .bind(to)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    let more = changed.len() as i64 == limit
        && sqlx::query_scalar::<_, bool>(&format!("SELECT EXISTS (SELECT 1 FROM timers WHERE {SELECTED})"))
            .bind(selection.namespace)
            .bind(selection.name_pattern)
            .bind(selection.ids)
            .bind(from)
            .bind(kind)
            .fetch_one(pool)
            .await?;
    Ok((changed, more))
}

/// Marks invalid, unread, up to `limit` new timers of the buckets `held` holds whose values
/// are out of the schema's range (rows stored before the schema bounded them, which the
/// check exempts only as invalid: a far instant cannot even be decoded). Returns how many.
pub async fn mark_out_of_range(tx: &mut PgConnection, held: &Held, limit: i64) -> Result<u64, sqlx::Error> {
    let owned = owned_join("ob", "punctual_bucket(timers.id)");
    Ok(sqlx::query(&format!(
        "WITH {MEMBER}
         UPDATE timers t SET plan_status = 'invalid', next_plan_at = NULL, invalid_reason = o.reason
           FROM (SELECT timers.id,
                        punctual_timer_out_of_range(run_at, start_at, end_at, created_at,
                                                    delay_ms, interval_ms, catchup_window_ms) AS reason
                   FROM timers {owned}
                  WHERE plan_status = 'new'
                  ORDER BY created_at LIMIT $3 FOR UPDATE OF timers SKIP LOCKED) o
          WHERE t.id = o.id AND o.reason IS NOT NULL"
    ))
    .bind(&held.owner)
    .bind(held.epochs_by_bucket())
    .bind(limit)
    .execute(&mut *tx)
    .await?
    .rows_affected())
}

/// Where the planner left a timer: its status, the next time to plan it, and why it
/// cannot be planned.
pub struct PlanWrite<'a> {
    pub id: Uuid,
    pub plan_status: PlanStatus,
    pub next_plan_at: Option<DateTime<Utc>>,
    pub invalid_reason: Option<&'a str>,
}

/// Writes the planner's pass over its timers, in one statement.
pub async fn write_plans(tx: &mut PgConnection, writes: &[PlanWrite<'_>]) -> Result<(), sqlx::Error> {
    if writes.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = writes.iter().map(|w| w.id).collect();
    let statuses: Vec<&str> = writes.iter().map(|w| w.plan_status.as_str()).collect();
    let nexts: Vec<Option<DateTime<Utc>>> = writes.iter().map(|w| w.next_plan_at).collect();
    let reasons: Vec<Option<&str>> = writes.iter().map(|w| w.invalid_reason).collect();
    sqlx::query!(
        "UPDATE timers t SET plan_status = u.plan_status, next_plan_at = u.next_plan_at, invalid_reason = u.reason
           FROM UNNEST($1::uuid[], $2::text[], $3::timestamptz[], $4::text[]) AS u(id, plan_status, next_plan_at, reason)
          WHERE t.id = u.id",
        &ids,
        &statuses as _,
        &nexts as _,
        &reasons as _
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The header values of one timer as read, and sealed again.
pub struct Resealed<'a> {
    pub id: Uuid,
    pub http_headers: (&'a Value, &'a Value),
    pub kafka_headers: (&'a Value, &'a Value),
}

/// Writes header values sealed again (`SET LOCAL punctual.resealing` on `tx` first: the
/// trigger then leaves version and revision as they are), unless the timer changed since
/// they were read: its new values are sealed by their writer. Returns whether it wrote.
pub async fn reseal_headers(tx: &mut PgConnection, resealed: &Resealed<'_>) -> Result<bool, sqlx::Error> {
    let changed = sqlx::query!(
        "UPDATE timers SET http_headers = $3, kafka_headers = $4
          WHERE id = $1 AND http_headers = $2 AND kafka_headers = $5",
        resealed.id,
        resealed.http_headers.0,
        resealed.http_headers.1,
        resealed.kafka_headers.1,
        resealed.kafka_headers.0
    )
    .execute(&mut *tx)
    .await?;
    Ok(changed.rows_affected() > 0)
}
