//! Pruning (retention): finished occurrences older than the retention period are deleted, in short
//! batches walked along the primary key, so no statement holds locks for long and none
//! needs an index of its own (an index on `finished_at` would cost an entry on every fire).
//!
//! Task ids grow with planning, and occurrences are planned a few seconds ahead, so the
//! oldest occurrences have the smallest ids: a pass walks up from the smallest id and stops
//! at the first batch whose newest row is younger than the retention period. A row it
//! passes that is not yet deletable (still pending, or finished recently) is looked at
//! again by the next pass.

use std::time::Duration;

use sqlx::PgExecutor;

use crate::bucket::{owned_join, Held, MEMBER};

/// What one batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct PrunedBatch {
    /// The largest id looked at (the next batch starts after it); None when there was
    /// nothing left to look at.
    pub last_id: Option<i64>,
    pub deleted: i64,
    /// Whether the batch reached occurrences younger than the retention period.
    pub reached_young: bool,
}

/// Deletes, among the `limit` tasks after id `after`, those finished (succeeded, dead or
/// cancelled) more than `older_than` ago, with their attempts. One-shot timers first
/// record the occurrence in `pruned_through` ([`crate::timer::TimerRow::pruned_through`]),
/// in the same statement, so that no crash can fall between the two: the one write of
/// `timers` outside `timer_store`.
/// Conditional, in the same statement, on `held` holding `runner_bucket` (the lease that
/// makes one scanner at a time the one that prunes).
pub async fn prune_batch(
    db: impl PgExecutor<'_>,
    held: &Held,
    runner_bucket: i16,
    after: i64,
    limit: i64,
    older_than: Duration,
) -> Result<PrunedBatch, sqlx::Error> {
    sqlx::query_as(&format!(
        "WITH {MEMBER}, runner AS (
            SELECT 1 FROM (SELECT $6::smallint AS bucket) r {}
         ), scanned AS (
            SELECT id, timer_id, scheduled_at, status, finished_at FROM tasks
             WHERE id > $3 AND EXISTS (SELECT 1 FROM runner)
             ORDER BY id LIMIT $4
         ), doomed AS (
            SELECT id, timer_id, scheduled_at FROM scanned
             WHERE status IN ('succeeded', 'dead', 'cancelled') AND finished_at < now() - $5::interval
         ), marked AS (
            UPDATE timers tm SET pruned_through = GREATEST(tm.pruned_through, d.last)
              FROM (SELECT timer_id, max(scheduled_at) AS last FROM doomed GROUP BY timer_id) d
             WHERE tm.id = d.timer_id AND tm.schedule_kind IN ('once', 'delay')
         ), deleted AS (
            DELETE FROM tasks t USING doomed d
             WHERE t.id = d.id
               AND t.status IN ('succeeded', 'dead', 'cancelled') AND t.finished_at < now() - $5::interval
            RETURNING t.id
         )
         SELECT (SELECT max(id) FROM scanned) AS last_id,
                (SELECT count(*) FROM deleted) AS deleted,
                COALESCE((SELECT scheduled_at > now() - $5::interval FROM scanned ORDER BY id DESC LIMIT 1), false)
                  AS reached_young",
        owned_join("ob", "r.bucket")
    ))
    .bind(&held.owner)
    .bind(held.epochs_by_bucket())
    .bind(after)
    .bind(limit)
    .bind(older_than)
    .bind(runner_bucket)
    .fetch_one(db)
    .await
}
