//! The retention pass: the scanner holding bucket 0 deletes old finished occurrences (one
//! scanner at a time: bucket 0 has one owner, and each batch is conditional on it).

use std::sync::Arc;
use std::time::Duration;

use punctual_shared::task;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::leases::Ownership;
use crate::metrics::Metrics;

/// Tasks looked at by one statement.
const BATCH: i64 = 5_000;
/// Between batches, so that a long backlog of history is deleted without crowding out the
/// hot path.
const PAUSE: Duration = Duration::from_millis(20);
/// The bucket whose owner runs retention.
const RUNNER_BUCKET: i16 = 0;

pub struct Retention {
    pub pool: PgPool,
    pub ownership: Arc<Ownership>,
    /// Finished occurrences older than this are deleted.
    pub keep: Duration,
    /// How often a pass runs.
    pub every: Duration,
    pub metrics: Metrics,
}

impl Retention {
    pub async fn run(self, token: CancellationToken) {
        let mut tick = tokio::time::interval(self.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = token.cancelled() => return,
                _ = tick.tick() => {}
            }
            match self.pass(&token).await {
                Ok(0) => {}
                Ok(deleted) => tracing::info!(deleted, "retention: old finished occurrences deleted"),
                Err(e) => {
                    self.metrics.scan_errors.inc();
                    tracing::warn!(error = %e, "retention pass failed; will retry");
                }
            }
        }
    }

    /// One pass, if this scanner holds the runner's bucket; returns how many were deleted.
    async fn pass(&self, token: &CancellationToken) -> Result<u64, sqlx::Error> {
        let mut after = 0;
        let mut deleted = 0;
        loop {
            let (writing, held) = self.ownership.for_writing().await;
            if !held.holds(RUNNER_BUCKET) {
                return Ok(deleted);
            }
            let batch = task::prune_batch(&self.pool, &held, RUNNER_BUCKET, after, BATCH, self.keep).await?;
            drop(writing);
            deleted += batch.deleted as u64;
            self.metrics.pruned.inc_by(batch.deleted as u64);
            match batch.last_id {
                Some(last) if !batch.reached_young => after = last,
                _ => return Ok(deleted),
            }
            tokio::select! {
                _ = token.cancelled() => return Ok(deleted),
                _ = tokio::time::sleep(PAUSE) => {}
            }
        }
    }
}
