//! `GET /v1/live`: each namespace's last minute, for the console's live page and for any
//! script that polls: fires a second, lag, failures, deferrals and the due backlog. Read
//! from Postgres, which every deployment has, not from Prometheus, which some do not run.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::Json;
use chrono::{DateTime, Utc};
use punctual_shared::api_key::Role;
use punctual_shared::task::stats::{self, NamespaceBacklog, Recent};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::openapi::Errors;
use crate::request;
use crate::state::AppState;

/// The oldest due tasks read for the backlog: beyond it, counts stop (`backlog_capped`).
const BACKLOG_READ: i64 = 100_000;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(live))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct LiveQuery {
    /// The window, in seconds: 60 unless given, from 5 to 3600.
    window_seconds: Option<i32>,
}

/// The namespaces the key sees, each over the window.
#[derive(Debug, Serialize, ToSchema)]
struct Live {
    at: DateTime<Utc>,
    window_seconds: i32,
    namespaces: Vec<NamespaceLive>,
    /// The backlog was read only up to its 100,000 oldest tasks (of the namespaces the key
    /// sees): the counts are at least these.
    backlog_capped: bool,
}

/// One namespace over the window: its occurrences scheduled within it, and its due backlog
/// now. A namespace with neither is left out.
#[derive(Debug, Default, Serialize, ToSchema, PartialEq)]
struct NamespaceLive {
    namespace: String,
    /// Occurrences started, per second of the window.
    fires_per_second: f64,
    /// Occurrences scheduled within the window.
    scheduled: i64,
    /// Of them, started: running, finished by a call, or waiting for a retry.
    started: i64,
    succeeded: i64,
    /// Failed their last attempt.
    dead: i64,
    /// Attempts that failed, retried or not.
    failed_attempts: i64,
    /// Waiting for a later turn after an executor deferred them.
    deferred: i64,
    /// From the scheduled time to the first attempt's start, in milliseconds.
    lag_p50_ms: Option<f64>,
    lag_p99_ms: Option<f64>,
    /// Pending tasks due more than a second ago.
    backlog: i64,
    /// How long ago the oldest of them was due, in seconds.
    backlog_oldest_seconds: Option<f64>,
}

/// Joins the window's figures and the backlog by namespace (both sorted by it).
fn by_namespace(recent: Vec<Recent>, backlog: Vec<NamespaceBacklog>, window_seconds: i32) -> Vec<NamespaceLive> {
    let mut all: BTreeMap<String, NamespaceLive> = BTreeMap::new();
    for r in recent {
        let entry = all
            .entry(r.namespace.clone())
            .or_insert_with(|| NamespaceLive { namespace: r.namespace, ..Default::default() });
        entry.fires_per_second = r.started as f64 / f64::from(window_seconds);
        entry.scheduled = r.scheduled;
        entry.started = r.started;
        entry.succeeded = r.succeeded;
        entry.dead = r.dead;
        entry.failed_attempts = r.failed_attempts;
        entry.deferred = r.deferred;
        entry.lag_p50_ms = r.lag_p50_ms;
        entry.lag_p99_ms = r.lag_p99_ms;
    }
    for b in backlog {
        let entry = all
            .entry(b.namespace.clone())
            .or_insert_with(|| NamespaceLive { namespace: b.namespace, ..Default::default() });
        entry.backlog = b.due;
        entry.backlog_oldest_seconds = b.oldest_seconds;
    }
    all.into_values().collect()
}

/// Each namespace the key sees over the last minute (or `window_seconds`): fires a second,
/// lag p50 and p99, failures, deferrals, and the due backlog now. Poll it for a live view.
#[utoipa::path(
    get, path = "/v1/live", tag = "namespaces", params(LiveQuery),
    responses((status = 200, description = "The namespaces' recent figures", body = Live), Errors)
)]
async fn live(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<LiveQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Live>, ApiError> {
    let q = request::query(query, Some("window_seconds"))?;
    caller.require(Role::Read)?;
    let window_seconds = request::bounded("window_seconds", q.window_seconds, 60, 5..=3600)?;
    let at = Utc::now();
    let recent = stats::recent(&state.pool, caller.visible(), window_seconds).await?;
    let backlog = stats::backlog_by_namespace(&state.pool, caller.visible(), BACKLOG_READ).await?;
    let backlog_capped = backlog.iter().map(|b| b.due).sum::<i64>() >= BACKLOG_READ;
    Ok(Json(Live { at, window_seconds, namespaces: by_namespace(recent, backlog, window_seconds), backlog_capped }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recent(namespace: &str, started: i64) -> Recent {
        Recent {
            namespace: namespace.into(),
            scheduled: started + 1,
            started,
            succeeded: started,
            dead: 0,
            failed_attempts: 2,
            deferred: 1,
            lag_p50_ms: Some(12.0),
            lag_p99_ms: Some(80.0),
        }
    }

    #[test]
    fn a_namespace_with_only_a_backlog_or_only_fires_is_listed_once_in_order() {
        let backlog = vec![
            NamespaceBacklog { namespace: "a".into(), due: 3, oldest_seconds: Some(4.5) },
            NamespaceBacklog { namespace: "c".into(), due: 7, oldest_seconds: Some(1.5) },
        ];
        let live = by_namespace(vec![recent("b", 120), recent("c", 30)], backlog, 60);
        let names: Vec<&str> = live.iter().map(|n| n.namespace.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!((live[0].backlog, live[0].started, live[0].fires_per_second), (3, 0, 0.0));
        assert_eq!((live[1].backlog, live[1].fires_per_second), (0, 2.0));
        assert_eq!((live[2].backlog, live[2].fires_per_second, live[2].deferred), (7, 0.5, 1));
    }
}
