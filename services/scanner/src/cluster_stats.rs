//! The cluster's figures for dashboards and alerts (backlog, planner lead, buckets without
//! a live owner), read every [`EVERY`] by the scanner holding bucket 0, so that one
//! scanner reads them however many run. The others report 0: aggregate with `max`. A
//! failed read leaves the figures as they were; the time of the last good one tells how
//! old they are.

use std::sync::Arc;
use std::time::Duration;

use punctual_runtime::periodic::Ticks;
use punctual_shared::task;
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

/// One reading. Each figure comes from an index: pending tasks by due time
/// ([`task::stats::backlog`]), planned timers by next plan time, and the 1,024 bucket rows.
#[derive(Debug)]
struct Figures {
    backlog: task::stats::Backlog,
    others: Others,
}

/// The figures of the timers, buckets and scanners.
#[derive(Debug, sqlx::FromRow)]
struct Others {
    planner_lead_seconds: Option<f64>,
    buckets_unowned: i64,
    scanners_live: i64,
}

async fn read(pool: &PgPool) -> Result<Figures, sqlx::Error> {
    let backlog = task::stats::backlog(pool, BACKLOG_COUNT_LIMIT).await?;
    // The timers' states spelled out, not bound: the partial index `timers_plan_due` serves
    // only a statement whose condition is its own (the one timer-state literal outside
    // shared::timer_state, whose tests check the index's spelling).
    let others = sqlx::query_as!(
        Others,
        r#"SELECT (SELECT extract(epoch FROM min(next_plan_at) - now())::float8 FROM timers
                  WHERE plan_status = 'planned' AND state = 'active') AS planner_lead_seconds,
                (SELECT count(*) FROM buckets b
                  WHERE NOT EXISTS (SELECT 1 FROM scanners s WHERE s.id = b.owner AND s.lease_until > now()))
                  AS "buckets_unowned!",
                (SELECT count(*) FROM scanners WHERE lease_until > now()) AS "scanners_live!""#
    )
    .fetch_one(pool)
    .await?;
    Ok(Figures { backlog, others })
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
    gauges.due_backlog.set(figures.map_or(0, |f| f.backlog.due));
    gauges.due_oldest_seconds.set(figures.and_then(|f| f.backlog.oldest_seconds).unwrap_or(0.0));
    gauges.planner_lead_seconds.set(figures.and_then(|f| f.others.planner_lead_seconds).unwrap_or(0.0));
    gauges.buckets_unowned.set(figures.map_or(0, |f| f.others.buckets_unowned));
    gauges.scanners_live.set(figures.map_or(0, |f| f.others.scanners_live));
    if figures.is_none() {
        gauges.read_at.set(0.0);
    }
}
