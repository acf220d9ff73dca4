//! `GET /v1/namespaces/{namespace}/stats`: a namespace at a glance, for a console's front
//! page: its timers by state, and its occurrences of the last hour by status with their
//! failed attempts.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::Json;
use chrono::{DateTime, Duration, Utc};
use punctual_shared::task::{self, TaskStatus};
use punctual_shared::timer::check_namespace;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::openapi::Errors;
use crate::state::AppState;
use punctual_shared::api_key::Role;
use punctual_shared::timer_state::{COUNTED_STATE, COUNTED_STATES, NOT_DELETED};

/// Occurrence statuses as counted: waiting (pending, claimed), running, succeeded, dead, cancelled.
const OCCURRENCE_STATUSES: [&str; 5] = ["waiting", "running", "succeeded", "dead", "cancelled"];

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(namespace_stats))
}

#[derive(Debug, Serialize, ToSchema)]
struct NamespaceStats {
    namespace: String,
    /// Timers not deleted, by state: active, paused, invalid, finished.
    timers: BTreeMap<String, i64>,
    last_hour: LastHour,
}

/// The occurrences scheduled from `from` to `to`.
#[derive(Debug, Serialize, ToSchema)]
struct LastHour {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    /// By status: waiting, running, succeeded, dead, cancelled.
    occurrences: BTreeMap<String, i64>,
    /// Attempts that failed (each retried or dead occurrence has at least one).
    failed_attempts: i64,
}

/// A namespace at a glance: its timers by state, and the occurrences scheduled in the last
/// hour by status with their failed attempts.
#[utoipa::path(
    get, path = "/v1/namespaces/{namespace}/stats", tag = "namespaces",
    params(("namespace" = String, Path, description = "The namespace")),
    responses((status = 200, description = "The namespace's stats", body = NamespaceStats), Errors)
)]
async fn namespace_stats(
    State(state): State<AppState>,
    caller: Caller,
    Path(namespace): Path<String>,
) -> Result<Json<NamespaceStats>, ApiError> {
    check_namespace(&namespace)?;
    caller.require_in(&namespace, Role::Read)?;
    let to = Utc::now();
    let from = to - Duration::hours(1);
    let mut timers: BTreeMap<String, i64> = COUNTED_STATES.iter().map(|s| ((*s).to_owned(), 0)).collect();
    let counted: Vec<(String, i64)> = sqlx::query_as(&format!(
        "SELECT {COUNTED_STATE}, count(*) FROM timers WHERE namespace = $1 AND {NOT_DELETED} GROUP BY 1"
    ))
    .bind(&namespace)
    .fetch_all(&state.pool)
    .await?;
    timers.extend(counted);
    let by_status = task::stats::by_status(&state.pool, &namespace, from, to).await?;
    let mut occurrences: BTreeMap<String, i64> = OCCURRENCE_STATUSES.iter().map(|s| ((*s).to_owned(), 0)).collect();
    let mut failed_attempts = 0;
    for count in by_status {
        // Planned or claimed: waiting, either way, for its due time.
        let status = match count.status {
            TaskStatus::Pending | TaskStatus::Claimed => "waiting",
            other => other.as_str(),
        };
        *occurrences.entry(status.to_owned()).or_default() += count.occurrences;
        failed_attempts += count.failed_attempts;
    }
    Ok(Json(NamespaceStats { namespace, timers, last_hour: LastHour { from, to, occurrences, failed_attempts } }))
}
