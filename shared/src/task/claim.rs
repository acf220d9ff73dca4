//! Claims: due tasks claimed by a bucket's scanner for a lease, and claims taken over.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use crate::bucket::{owned_join, Held, MEMBER};
use crate::fan_out::Shard;

/// A task claimed by a scanner, to be published at `due_at`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ClaimedTask {
    pub id: i64,
    pub timer_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    pub due_at: DateTime<Utc>,
    pub bucket: i16,
    /// Which call of its occurrence this task is.
    #[sqlx(flatten)]
    pub shard: Shard,
    /// The bucket's epoch when claimed: the message carries it, and the executor runs the
    /// task only while the task is claimed at that epoch.
    pub epoch: i64,
    pub attempt: i32,
    pub lease_until: DateTime<Utc>,
    /// Claimed before, and claimed again without having started: its lease expired (its
    /// scanner died or froze, or its message was lost) or its bucket changed owner.
    pub reclaimed: bool,
}

/// The columns of a [`ClaimedTask`] returned by an `UPDATE tasks t`.
const CLAIMED_COLUMNS: &str =
    "t.id, t.timer_id, t.scheduled_at, t.due_at, t.bucket, t.shard, t.shards, t.claim_epoch AS epoch, t.attempt,
     t.lease_until";

/// Claims up to `limit` tasks of the buckets `held` still holds: pending ones due before
/// now + `lookahead` (first attempts and retries alike), and claimed ones whose lease has
/// expired without their task starting (their scanner died or froze, or their message
/// never reached an executor). Each row is locked with SKIP LOCKED, so concurrent
/// claimers never block on or share a task.
///
/// A lease runs `lease` past the task's due time (or past now, for a task already due),
/// not past the claim: how far ahead a task was claimed then does not shorten the time an
/// executor that is behind has to start it without a mark ([`start`]). Anchored at the
/// claim, a task planned 10 s ahead had 8 s of backlog before its start needed a write of
/// its own, and under overload those writes deepened the backlog that caused them.
pub async fn claim(
    db: impl PgExecutor<'_>,
    held: &Held,
    lookahead: Duration,
    lease: Duration,
    limit: i64,
) -> Result<Vec<ClaimedTask>, sqlx::Error> {
    if held.is_empty() {
        return Ok(Vec::new());
    }
    // Each row's epoch comes with its id: joining the holdings again in the UPDATE made
    // Postgres loop over every held bucket for every task (16 s for 5,000 tasks).
    let owned = owned_join("ob", "t.bucket");
    sqlx::query_as::<_, ClaimedTask>(&format!(
        "WITH {MEMBER}, due AS (
            SELECT t.id, ob.epoch FROM tasks t {owned}
             WHERE t.status = 'pending' AND t.due_at < now() + $4::interval
             ORDER BY t.due_at
             LIMIT $5
             FOR UPDATE OF t SKIP LOCKED
         ), expired AS (
            SELECT t.id, ob.epoch FROM tasks t {owned}
             WHERE t.status = 'claimed' AND t.lease_until < now()
             ORDER BY t.lease_until
             LIMIT $5
             FOR UPDATE OF t SKIP LOCKED
         )
         UPDATE tasks t
            SET status = 'claimed', claim_owner = $1, claim_epoch = c.epoch, claimed_at = now(),
                lease_until = GREATEST(t.due_at, now()) + $3::interval
           FROM (SELECT id, epoch, false AS reclaimed FROM due UNION ALL SELECT id, epoch, true FROM expired) c
          WHERE t.id = c.id
         RETURNING {CLAIMED_COLUMNS}, c.reclaimed"
    ))
    .bind(&held.owner)
    .bind(held.epochs_by_bucket())
    .bind(lease)
    .bind(lookahead)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// Claims again, at once, the tasks of buckets just acquired (`acquired`, at their new
/// epochs) that are still claimed under an earlier epoch: their former owner died, froze
/// or handed them over, and may never publish them, or may publish them with an epoch the
/// executor now refuses. A task whose message was already sent and that is running
/// without a mark is not run again by the new message: the executor running it skips a
/// message for a task it has in flight, and a task that finished is not claimed. The rows
/// are locked as they are chosen, so the update needs no second look at their status (with
/// one, Postgres paired every claimed row with every chosen one: 33 s for 10,000).
pub async fn reclaim_taken(db: &PgPool, acquired: &Held, lease: Duration) -> Result<Vec<ClaimedTask>, sqlx::Error> {
    if acquired.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as::<_, ClaimedTask>(&format!(
        "WITH {MEMBER}, taken AS (
            SELECT t.id, ob.epoch FROM tasks t {}
             WHERE t.status = 'claimed' AND t.claim_epoch IS DISTINCT FROM ob.epoch
             FOR UPDATE OF t
         )
         UPDATE tasks t
            SET claim_owner = $1, claim_epoch = k.epoch, claimed_at = now(),
                lease_until = GREATEST(t.due_at, now()) + $3::interval
           FROM taken k
          WHERE t.id = k.id
         RETURNING {CLAIMED_COLUMNS}, true AS reclaimed",
        owned_join("ob", "t.bucket")
    ))
    .bind(&acquired.owner)
    .bind(acquired.epochs_by_bucket())
    .bind(lease)
    .fetch_all(db)
    .await
}
