//! Misfires: occurrences waiting long after their due time, judged by their timer's misfire
//! policy.

use std::time::Duration;

use sqlx::PgPool;

use crate::bucket::{owned_join, Held, MEMBER};

/// Applies each timer's misfire policy to first attempts still waiting long after they
/// were due — pending, or claimed by a scanner whose lease has expired (the scanners were
/// down or far behind): with `skip` all are cancelled, with `fire_once` all but the latest
/// of each timer, with `fire_all` those older than the timer's catch-up window. In normal
/// operation nothing is that late and the statement reads nothing: two index range scans
/// (pending by due time, claimed by lease expiry) that find no row. Only the tasks of the
/// buckets `held` still holds are judged.
pub async fn cancel_misfired(db: &PgPool, held: &Held, threshold: Duration) -> Result<Misfired, sqlx::Error> {
    cancel_late(db, held, threshold, "t.lease_until < now()").await
}

/// As [`cancel_misfired`], for buckets just acquired (`acquired`, at their new epochs):
/// the claims of their former owner count as void whatever their lease says, so that a
/// claim taken over is judged late as an expired one would be before it is claimed again.
pub async fn cancel_misfired_taken(db: &PgPool, acquired: &Held, threshold: Duration) -> Result<Misfired, sqlx::Error> {
    cancel_late(db, acquired, threshold, "t.claim_epoch IS DISTINCT FROM ob.epoch").await
}

/// `void_claim`: when a claimed task's claim no longer stands.
async fn cancel_late(db: &PgPool, held: &Held, threshold: Duration, void_claim: &str) -> Result<Misfired, sqlx::Error> {
    if held.is_empty() {
        return Ok(Misfired::default());
    }
    let owned = owned_join("ob", "t.bucket");
    let policies: Vec<String> = sqlx::query_scalar(&format!(
        "WITH {MEMBER}, late AS (
            SELECT t.id FROM tasks t {owned}
             WHERE t.status = 'pending' AND t.due_at < now() - $3::interval AND t.attempt = 1
            UNION ALL
            SELECT t.id FROM tasks t {owned}
             WHERE t.status = 'claimed' AND {void_claim}
               AND t.due_at < now() - $3::interval AND t.attempt = 1
         ), latest AS (
            -- Each timer's latest late occurrence, over every bucket: a fanned-out
            -- occurrence's shards are in several buckets, perhaps of several scanners, and
            -- each of them keeps the same occurrence whole.
            SELECT lt.timer_id,
                   (SELECT max(o.scheduled_at) FROM tasks o
                     WHERE o.timer_id = lt.timer_id AND o.attempt = 1 AND o.status IN ('pending', 'claimed')
                       AND o.due_at < now() - $3::interval) AS scheduled_at
              FROM (SELECT DISTINCT t.timer_id FROM late l JOIN tasks t ON t.id = l.id) lt
         ), missed AS (
            SELECT t.id, tm.misfire_policy,
                   t.scheduled_at < now() - tm.catchup_window_ms * interval '1 millisecond' AS beyond_window,
                   t.scheduled_at < la.scheduled_at AS older
              FROM late l JOIN tasks t ON t.id = l.id JOIN timers tm ON tm.id = t.timer_id
              JOIN latest la ON la.timer_id = t.timer_id
         )
         UPDATE tasks t SET status = 'cancelled', finished_at = now(),
                error = 'misfired (' || m.misfire_policy || ')'
           FROM missed m
          WHERE t.id = m.id AND t.status IN ('pending', 'claimed')
            AND (m.misfire_policy = 'skip'
                 OR (m.misfire_policy = 'fire_once' AND m.older)
                 OR (m.misfire_policy = 'fire_all' AND m.beyond_window))
         RETURNING m.misfire_policy"
    ))
    .bind(&held.owner)
    .bind(held.epochs_by_bucket())
    .bind(threshold)
    .fetch_all(db)
    .await?;
    let mut misfired = Misfired::default();
    for policy in policies {
        match policy.as_str() {
            "skip" => misfired.skip += 1,
            "fire_once" => misfired.fire_once += 1,
            _ => misfired.fire_all += 1,
        }
    }
    Ok(misfired)
}

/// Occurrences cancelled by [`cancel_misfired`], by misfire policy.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Misfired {
    pub skip: u64,
    pub fire_once: u64,
    pub fire_all: u64,
}

impl Misfired {
    pub fn total(&self) -> u64 {
        self.skip + self.fire_once + self.fire_all
    }
}
