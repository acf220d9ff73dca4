//! `punctual_timers`: timers by state, counted every [`EVERY`] (one aggregate over the
//! timers not deleted; the whole table is read, hence not on every scrape).

use std::time::Duration;

use punctual_runtime::periodic::Ticks;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

pub const EVERY: Duration = Duration::from_secs(15);

/// A timer's state as counted: `active`, `paused`, or, whatever that, `invalid` (refused by
/// the planner) or `finished` (nothing left to plan).
pub const COUNTED_STATE: &str = "CASE WHEN plan_status = 'invalid' THEN 'invalid'
                                      WHEN plan_status = 'done' THEN 'finished'
                                      ELSE state END";
/// Every value of [`COUNTED_STATE`].
pub const COUNTED_STATES: [&str; 4] = ["active", "paused", "invalid", "finished"];

#[derive(sqlx::FromRow)]
struct Count {
    state: String,
    namespace: String,
    timers: i64,
}

pub async fn run(pool: PgPool, metrics: Metrics, by_namespace: bool, token: CancellationToken) {
    let mut ticks = Ticks::every(EVERY, token);
    while ticks.next().await {
        match count(&pool, by_namespace).await {
            Ok(counts) => {
                metrics.timers.reset();
                for state in COUNTED_STATES {
                    if !by_namespace {
                        metrics.timers.with_label_values(&[state]).set(0);
                    }
                }
                for c in counts {
                    if by_namespace {
                        metrics.timers.with_label_values(&[c.state.as_str(), c.namespace.as_str()]).set(c.timers);
                    } else {
                        metrics.timers.with_label_values(&[c.state.as_str()]).set(c.timers);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "counting timers failed; will retry"),
        }
    }
}

async fn count(pool: &PgPool, by_namespace: bool) -> Result<Vec<Count>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {COUNTED_STATE} AS state, CASE WHEN $1 THEN namespace ELSE '' END AS namespace, count(*) AS timers
           FROM timers
          WHERE state <> 'deleted'
          GROUP BY 1, 2"
    ))
    .bind(by_namespace)
    .fetch_all(pool)
    .await
}
