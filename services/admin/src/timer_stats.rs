//! `punctual_timers`: timers by state, counted every [`EVERY`] (one aggregate over the
//! timers not deleted; the whole table is read, hence not on every scrape).

use std::time::Duration;

use punctual_runtime::periodic::Ticks;
use punctual_shared::timer_state::{COUNTED_STATE, COUNTED_STATES, NOT_DELETED};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

pub const EVERY: Duration = Duration::from_secs(15);

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
          WHERE {NOT_DELETED}
          GROUP BY 1, 2"
    ))
    .bind(by_namespace)
    .fetch_all(pool)
    .await
}
