//! The cluster's figures for dashboards and alerts (backlog, planner lead, buckets without
//! a live owner), read every [`EVERY`] by the scanner holding bucket 0, so that one
//! scanner reads them however many run. The others report 0: aggregate with `max`. A
//! failed read leaves the figures as they were; the time of the last good one tells how
//! old they are.

use std::sync::Arc;
use std::time::Duration;

use punctual_shared::periodic::Ticks;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::leases::Ownership;
use crate::metrics::ClusterGauges;

/// How often the figures are read.
pub const EVERY: Duration = Duration::from_secs(5);
/// The bucket whose owner reads them.
const READER_BUCKET: i16 = 0;
/// Counting stops here, so that a huge backlog costs a bounded read.
const BACKLOG_COUNT_LIMIT: i64 = 1_000_000;

/// One reading. Each figure comes from an index: pending tasks by due time, planned timers
/// by next plan time, and the 1,024 bucket rows.
#[derive(Debug, sqlx::FromRow)]
struct Figures {
    due_backlog: i64,
    due_oldest_seconds: Option<f64>,
    planner_lead_seconds: Option<f64>,
    buckets_unowned: i64,
    scanners_live: i64,
}

async fn read(pool: &PgPool) -> Result<Figures, sqlx::Error> {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM (SELECT 1 FROM tasks
                                        WHERE status = 'pending' AND due_at <= now() - interval '1 second'
                                        LIMIT $1) due) AS due_backlog,
                (SELECT extract(epoch FROM now() - min(due_at))::float8 FROM tasks
                  WHERE status = 'pending' AND due_at <= now() - interval '1 second') AS due_oldest_seconds,
                (SELECT extract(epoch FROM min(next_plan_at) - now())::float8 FROM timers
                  WHERE plan_status = 'planned' AND state = 'active') AS planner_lead_seconds,
                (SELECT count(*) FROM buckets b
                  WHERE NOT EXISTS (SELECT 1 FROM scanners s WHERE s.id = b.owner AND s.lease_until > now()))
                  AS buckets_unowned,
                (SELECT count(*) FROM scanners WHERE lease_until > now()) AS scanners_live",
    )
    .bind(BACKLOG_COUNT_LIMIT)
    .fetch_one(pool)
    .await
}

pub async fn run(pool: PgPool, ownership: Arc<Ownership>, gauges: ClusterGauges, token: CancellationToken) {
    let mut ticks = Ticks::every(EVERY, token);
    while ticks.next().await {
        if !ownership.holds_bucket(READER_BUCKET) {
            set(&gauges, None);
            continue;
        }
        // Bounded, so that a read stuck behind a busy database leaves a visible gap
        // (punctual_cluster_figures_read_timestamp_seconds stops moving), not a hung task.
        match tokio::time::timeout(EVERY, read(&pool)).await {
            Ok(Ok(figures)) => {
                set(&gauges, Some(&figures));
                gauges.read_at.set(chrono::Utc::now().timestamp_millis() as f64 / 1_000.0);
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "reading the cluster's figures failed; will retry"),
            Err(_) => tracing::warn!("reading the cluster's figures took longer than {EVERY:?}; will retry"),
        }
    }
}

fn set(gauges: &ClusterGauges, figures: Option<&Figures>) {
    gauges.due_backlog.set(figures.map_or(0, |f| f.due_backlog));
    gauges.due_oldest_seconds.set(figures.and_then(|f| f.due_oldest_seconds).unwrap_or(0.0));
    gauges.planner_lead_seconds.set(figures.and_then(|f| f.planner_lead_seconds).unwrap_or(0.0));
    gauges.buckets_unowned.set(figures.map_or(0, |f| f.buckets_unowned));
    gauges.scanners_live.set(figures.map_or(0, |f| f.scanners_live));
    if figures.is_none() {
        gauges.read_at.set(0.0);
    }
}
