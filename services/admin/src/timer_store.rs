//! The API's timers: every read of timers as such (the counts of the stats join them by
//! namespace) and every write (made by `punctual_shared::timer_store`), each lookup by id
//! scoped to the caller's namespaces here, in one place: a timer of a namespace the caller
//! does not see is not found, whatever the handler.

use punctual_shared::schedule::KindName;
use punctual_shared::timer::{NewTimer, TimerRow};
use punctual_shared::timer_state::TimerState;
use punctual_shared::timer_store::{self, StoreError};
use sqlx::PgPool;
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;

fn not_found(id: Uuid) -> ApiError {
    ApiError::NotFound(format!("no timer with id {id}"))
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NameTaken { .. } => ApiError::Conflict { field: Some("name".into()), detail: e.to_string() },
            StoreError::QuotaExceeded { .. } => ApiError::QuotaExceeded(format!(
                "{e} (its policy's max_timers, by default PUNCTUAL_NAMESPACE_MAX_TIMERS): delete some first"
            )),
            StoreError::Database(e) => e.into(),
        }
    }
}

/// Inserts the timer ([`timer_store::insert`]).
pub async fn insert(pool: &PgPool, t: &NewTimer, max_timers: i64) -> Result<TimerRow, ApiError> {
    Ok(timer_store::insert(pool, t, max_timers).await?)
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
    Ok(timer_store::update_definition(pool, caller.visible(), id, revision, timer).await?)
}

/// A live timer the caller sees; one in a namespace it cannot see is answered exactly as
/// an unknown id.
pub async fn fetch(pool: &PgPool, caller: &Caller, id: Uuid) -> Result<TimerRow, ApiError> {
    punctual_shared::query_timer_rows!(
        "SELECT",
        "FROM timers WHERE id = $1 AND state <> $3 AND ($2::text[] IS NULL OR namespace = ANY($2))",
        id,
        caller.visible(),
        TimerState::Deleted.as_str()
    )
    .fetch_optional(pool)
    .await?
    .ok_or_else(|| not_found(id))
}

/// A page of the live timers the caller sees, by id, in one namespace or all.
/// What a listing of timers is narrowed to.
pub struct ListFilter<'a> {
    pub namespace: Option<&'a str>,
    /// A LIKE pattern of names.
    pub name_pattern: Option<String>,
    pub state: Option<TimerState>,
    pub schedule_kind: Option<KindName>,
}

pub async fn list(
    pool: &PgPool,
    caller: &Caller,
    filter: &ListFilter<'_>,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Vec<TimerRow>, ApiError> {
    // Planned for each request's own filters: one statement serves every combination, and
    // a plan cached for all of them (`$5 IS NULL OR name LIKE $5`) scans every timer by id
    // for a name prefix (1.4 s with 1,000,000 timers), where a plan for the prefix given
    // reads its few rows from the prefix index.
    let mut tx = pool.begin().await?;
    sqlx::query("SET LOCAL plan_cache_mode = force_custom_plan").execute(&mut *tx).await?;
    // `state <> 'deleted'` spelled out, not bound: the condition of the partial indexes
    // `timers_namespace_id` and `timers_namespace_name_prefix`, which a statement must
    // repeat for an index to serve it.
    let rows = punctual_shared::query_timer_rows!(
        "SELECT",
        "FROM timers
          WHERE state <> 'deleted' AND ($1::text IS NULL OR namespace = $1) AND ($2::uuid IS NULL OR id > $2)
            AND ($4::text[] IS NULL OR namespace = ANY($4))
            AND ($5::text IS NULL OR name LIKE $5) AND ($6::text IS NULL OR state = $6)
            AND ($7::text IS NULL OR schedule_kind = $7)
          ORDER BY id LIMIT $3",
        filter.namespace,
        after,
        limit,
        caller.visible(),
        filter.name_pattern.as_deref(),
        filter.state.map(TimerState::as_str),
        filter.schedule_kind.map(KindName::as_str)
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(rows)
}

/// Sets the state of a live timer the caller sees, with a note on why (none clears the last).
pub async fn set_state(
    pool: &PgPool,
    caller: &Caller,
    id: Uuid,
    new_state: TimerState,
    note: Option<&str>,
) -> Result<TimerRow, ApiError> {
    timer_store::set_state(pool, caller.visible(), id, new_state, note).await?.ok_or_else(|| not_found(id))
}
