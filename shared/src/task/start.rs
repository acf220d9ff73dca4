//! Starting: a message's task → running (or started without a write), under its timer's overlap
//! policy.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{FromRow, PgPool, Row};
use uuid::Uuid;

use super::action::{Action, ActionCache, RetryColumns, ACTION_COLUMNS, RETRY_COLUMNS};
use super::message::TaskMessage;
use crate::fan_out::Shard;
use crate::retry::RetryPolicy;
use crate::timer_state::TimerState;

/// A task that the executor now runs, with its timer's action and retry policy.
#[derive(Debug, Clone)]
pub struct StartedTask {
    pub id: i64,
    pub timer_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    /// Which call of its occurrence this is.
    pub shard: Shard,
    /// The address a shard of a DNS broadcast calls; none before the occurrence is split
    /// ([`split`](super::split)) and for any other task.
    pub address: Option<String>,
    pub attempt: i32,
    /// When the attempt is due, as the row says: a message published ahead of it (the
    /// scanner's lead) runs it then, not before, whatever the message says.
    pub due_at: DateTime<Utc>,
    pub started_at: DateTime<Utc>,
    /// As of the timer version the task was planned from; shared by the tasks of that
    /// version (see [`ActionCache`]).
    pub action: Arc<Action>,
    /// As the timer has it now: a change of retry policy changes no version.
    pub retry: RetryPolicy,
}

impl StartedTask {
    /// The call's identity: its occurrence's, and its shard's index if fanned out.
    pub fn identity(&self) -> String {
        self.shard.identity(self.timer_id, self.scheduled_at)
    }
}

/// A claim must outlive a run started without a mark by this much beyond the callback's
/// timeout.
const UNMARKED_RUN_MARGIN_MS: i32 = 2_000;

/// The most a scanner publishes ahead of a task's due time (`PUNCTUAL_PUBLISH_LEAD_MS` is
/// checked against it). A message for a task due later than that is not the scanner's, and
/// runs nothing; the scanner's own comes in time.
pub const MAX_PUBLISH_LEAD: Duration = Duration::from_secs(10);

/// What the executor asks to start: a message's task, attempt and epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartRequest {
    pub task_id: i64,
    pub attempt: i32,
    pub epoch: i64,
}

impl From<&TaskMessage> for StartRequest {
    fn from(m: &TaskMessage) -> Self {
        Self { task_id: m.task_id, attempt: m.attempt, epoch: m.epoch }
    }
}

/// Starts tasks for executor `owner`, from their messages. Returns only what the caller
/// must run; a redelivered message whose task finished, or is at another attempt, changes
/// nothing and is not returned, and neither does a message from an epoch that is not the
/// one its task was last claimed at (its scanner lost the bucket, and the task was claimed
/// again by the bucket's new owner, whose message runs it).
///
/// Most tasks start without a write: an HTTP callback of an active, unchanged timer whose
/// overlap policy is `allow`, and whose claim outlives the callback's timeout (plus a
/// margin), cannot be claimed again while it runs, so nothing else needs to know that it
/// runs; its outcome is written by [`finish`]. The others take the marked path,
/// [`start_marked`].
///
/// The read finds the batch's rows by key only and returns the verdict as a column: a
/// condition in `WHERE` would be estimated by the planner, and on tables not yet analysed
/// (a fresh database under load) it took three equality tests on `timers` to match one
/// row, scanned every timer in an outer loop and ran for 37 s a batch.
pub async fn start(
    db: &PgPool,
    owner: &str,
    tasks: &[StartRequest],
    actions: &ActionCache,
) -> Result<Started, sqlx::Error> {
    let ids: Vec<i64> = tasks.iter().map(|t| t.task_id).collect();
    let attempts: Vec<i32> = tasks.iter().map(|t| t.attempt).collect();
    let epochs: Vec<i64> = tasks.iter().map(|t| t.epoch).collect();
    let rows: Vec<PgRow> = sqlx::query(&format!(
        "SELECT t.id, t.timer_id, t.scheduled_at, t.shard, t.shards, t.address, t.attempt, t.due_at,
                t.claim_epoch AS epoch,
                now() AS started_at,
                tm.version AS timer_version,
                tm.schedule_kind IN ('interval', 'cron') AS recurring, {ACTION_COLUMNS}, {RETRY_COLUMNS},
                (t.status = 'claimed' AND tm.state = '{active}' AND tm.version = t.timer_version
                 AND tm.overlap_policy = 'allow' AND tm.action_kind = 'http'
                 AND t.lease_until > greatest(now(), t.due_at) + (tm.http_timeout_ms + $3) * interval '1 millisecond')
                   AS unmarked
           FROM UNNEST($1::bigint[], $2::int[], $4::bigint[]) AS m(id, attempt, epoch)
           JOIN tasks t ON t.id = m.id
           JOIN timers tm ON tm.id = t.timer_id
          WHERE t.attempt = m.attempt AND t.claim_epoch = m.epoch
            AND t.due_at <= now() + $5 * interval '1 millisecond'",
        active = TimerState::Active.as_str(),
    ))
    .bind(&ids)
    .bind(&attempts)
    .bind(UNMARKED_RUN_MARGIN_MS)
    .bind(&epochs)
    .bind(MAX_PUBLISH_LEAD.as_millis() as i64)
    .fetch_all(db)
    .await?;
    // A message whose task is not at its attempt and epoch any more was delivered before.
    let mut report = Started {
        not_started: NotStarted { duplicate: (tasks.len() - rows.len()) as u64, ..NotStarted::default() },
        tasks: Vec::with_capacity(tasks.len()),
    };
    let mut marked = Vec::new();
    for row in &rows {
        let candidate = StartCandidate::from_row(row)?;
        if !candidate.unmarked {
            marked.push(StartRequest { task_id: candidate.id, attempt: candidate.attempt, epoch: candidate.epoch });
            continue;
        }
        // The action's columns come with every row (one statement, whatever the cache
        // holds), but are decoded only for a version not seen before. A one-shot timer's
        // version is never seen again: it is not kept.
        let cached = candidate.recurring.then(|| actions.get(candidate.timer_id, candidate.timer_version));
        let action = match cached.flatten() {
            Some(action) => action,
            None => {
                let action = Arc::new(Action::from_row(row)?);
                if candidate.recurring {
                    actions.put(candidate.timer_id, candidate.timer_version, action.clone());
                }
                action
            }
        };
        report.tasks.push(candidate.into_started(action));
    }
    if !marked.is_empty() {
        let from_marked = start_marked(db, owner, &marked).await?;
        report.tasks.extend(from_marked.tasks);
        report.not_started.add(&from_marked.not_started);
    }
    Ok(report)
}

/// What [`start`] and [`start_marked`] did with a batch of messages.
#[derive(Debug, Default)]
pub struct Started {
    /// The tasks to run now.
    pub tasks: Vec<StartedTask>,
    pub not_started: NotStarted,
}

/// Messages of a batch whose tasks did not start, by reason.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NotStarted {
    /// Delivered before: finished, running already, or of a superseded attempt or epoch.
    pub duplicate: u64,
    /// Cancelled: the timer was paused, deleted or changed since the task was planned.
    pub cancelled: u64,
    /// Cancelled by the overlap policy `skip` (or `buffer_one` with one waiting already).
    pub overlap_skipped: u64,
    /// Due again shortly, by the overlap policy `buffer_one`.
    pub overlap_deferred: u64,
}

impl NotStarted {
    fn add(&mut self, other: &NotStarted) {
        self.duplicate += other.duplicate;
        self.cancelled += other.cancelled;
        self.overlap_skipped += other.overlap_skipped;
        self.overlap_deferred += other.overlap_deferred;
    }
}

/// A row of [`start`]'s read: the task, its timer's version, and whether it may run
/// without a mark.
#[derive(sqlx::FromRow)]
struct StartCandidate {
    id: i64,
    timer_id: Uuid,
    scheduled_at: DateTime<Utc>,
    #[sqlx(flatten)]
    shard: Shard,
    address: Option<String>,
    attempt: i32,
    due_at: DateTime<Utc>,
    epoch: i64,
    started_at: DateTime<Utc>,
    timer_version: i64,
    /// An interval or cron timer, whose version fires again.
    recurring: bool,
    #[sqlx(flatten)]
    retry: RetryColumns,
    unmarked: bool,
}

impl StartCandidate {
    fn into_started(self, action: Arc<Action>) -> StartedTask {
        StartedTask {
            id: self.id,
            timer_id: self.timer_id,
            scheduled_at: self.scheduled_at,
            shard: self.shard,
            address: self.address,
            attempt: self.attempt,
            due_at: self.due_at,
            started_at: self.started_at,
            action,
            retry: self.retry.into(),
        }
    }
}

/// A row of [`start_marked`]: a task that runs, with its timer's action.
#[derive(sqlx::FromRow)]
struct MarkedStart {
    id: i64,
    timer_id: Uuid,
    scheduled_at: DateTime<Utc>,
    #[sqlx(flatten)]
    shard: Shard,
    address: Option<String>,
    attempt: i32,
    due_at: DateTime<Utc>,
    started_at: DateTime<Utc>,
    #[sqlx(flatten)]
    action: Action,
    #[sqlx(flatten)]
    retry: RetryColumns,
}

/// The marked start: → running, where the task is at the message's attempt and still
/// claimed, or running under another executor (which crashed, or lost the partition: the
/// run is repeated, with the same Idempotency-Key), and where the timer is still active
/// and unchanged since the task was planned. The others of the batch that are waiting are
/// cancelled, or deferred (overlap policy). A redelivered message whose task is running
/// here changes nothing.
pub async fn start_marked(db: &PgPool, owner: &str, tasks: &[StartRequest]) -> Result<Started, sqlx::Error> {
    let ids: Vec<i64> = tasks.iter().map(|t| t.task_id).collect();
    let attempts: Vec<i32> = tasks.iter().map(|t| t.attempt).collect();
    let epochs: Vec<i64> = tasks.iter().map(|t| t.epoch).collect();
    // verdict: 'none' (finished, or running here already); 'run'; 'cancel' (timer not
    // active or changed); 'skip' (overlap 'skip'; overlap 'buffer_one' with one already waiting);
    // 'defer' (overlap 'buffer_one': back to pending, due again shortly, until the running
    // occurrence ends). The rows are found by key and the status is judged in the verdict,
    // not in `WHERE`, for the reason given at [`start`]; locking a finished row of the
    // batch costs nothing, no one else writes it.
    let rows: Vec<PgRow> = sqlx::query(&format!(
        "WITH locked AS (
            SELECT t.id, t.timer_id, t.scheduled_at,
                   (t.status = 'claimed' OR (t.status = 'running' AND t.run_owner IS DISTINCT FROM $3)) AS startable,
                   (tm.state = '{active}' AND tm.version = t.timer_version) AS current, tm.overlap_policy
              FROM UNNEST($1::bigint[], $2::int[], $4::bigint[]) AS m(id, attempt, epoch)
              JOIN tasks t ON t.id = m.id
              JOIN timers tm ON tm.id = t.timer_id
             WHERE t.attempt = m.attempt AND t.claim_epoch = m.epoch
               AND t.due_at <= now() + $5 * interval '1 millisecond'
             FOR UPDATE OF t
         ), placed AS (
            -- A batch can hold several occurrences of one timer (messages that bunched up):
            -- they are judged in order, as if they had come one after the other. The shards
            -- of one occurrence share its place, and are not each other's previous run.
            SELECT l.*,
                   dense_rank() OVER (PARTITION BY l.timer_id
                                      ORDER BY (l.startable AND l.current) DESC, l.scheduled_at) AS place,
                   EXISTS (SELECT 1 FROM tasks o
                            WHERE o.timer_id = l.timer_id AND o.status = 'running'
                              AND o.scheduled_at <> l.scheduled_at) AS busy
              FROM locked l
         ), waiting AS (
            SELECT p.id,
                   CASE
                     WHEN NOT p.startable THEN 'none'
                     WHEN NOT p.current THEN 'cancel'
                     WHEN p.overlap_policy = 'allow' THEN 'run'
                     WHEN p.place = 1 AND NOT p.busy THEN 'run'
                     -- The first waiting after the one running (there or in the batch), unless
                     -- another occurrence outside the batch waits already.
                     WHEN p.overlap_policy = 'buffer_one' AND p.place = CASE WHEN p.busy THEN 1 ELSE 2 END
                      AND NOT EXISTS (SELECT 1 FROM tasks b
                                       WHERE b.timer_id = p.timer_id AND b.id <> ALL($1) AND b.attempt = 1
                                         AND b.scheduled_at <> p.scheduled_at AND b.shard = 0
                                         AND b.status IN ('pending', 'claimed')
                                         AND b.due_at > b.scheduled_at) THEN 'defer'
                     ELSE 'skip'
                   END AS verdict,
                   CASE WHEN p.current
                        THEN 'overlap: the previous run was still running'
                        ELSE 'timer paused, deleted or changed before the occurrence ran' END AS reason
              FROM placed p
         ), cancelled AS (
            UPDATE tasks t SET status = 'cancelled', finished_at = now(), error = w.reason
              FROM waiting w
             WHERE t.id = w.id AND w.verdict IN ('cancel', 'skip')
         ), deferred AS (
            UPDATE tasks t SET status = 'pending', due_at = now() + interval '200 milliseconds',
                   claim_owner = NULL, claim_epoch = NULL, lease_until = NULL
              FROM waiting w
             WHERE t.id = w.id AND w.verdict = 'defer'
         ), started AS (
            UPDATE tasks t SET status = 'running', started_at = now(), run_owner = $3
              FROM waiting w
             WHERE t.id = w.id AND w.verdict = 'run'
            RETURNING t.id, t.timer_id, t.scheduled_at, t.shard, t.shards, t.address, t.attempt, t.due_at,
                      t.started_at
         )
         SELECT w.verdict, s.id, s.timer_id, s.scheduled_at, s.shard, s.shards, s.address, s.attempt, s.due_at,
                s.started_at,
                {ACTION_COLUMNS},
                {RETRY_COLUMNS}
           FROM waiting w
           LEFT JOIN started s ON s.id = w.id
           LEFT JOIN timers tm ON tm.id = s.timer_id",
        active = TimerState::Active.as_str(),
    ))
    .bind(&ids)
    .bind(&attempts)
    .bind(owner)
    .bind(&epochs)
    .bind(MAX_PUBLISH_LEAD.as_millis() as i64)
    .fetch_all(db)
    .await?;
    // Messages whose task is not at their attempt and epoch have no row: delivered before.
    let mut report = Started {
        not_started: NotStarted { duplicate: (tasks.len() - rows.len()) as u64, ..NotStarted::default() },
        tasks: Vec::with_capacity(rows.len()),
    };
    for row in &rows {
        let verdict: &str = row.try_get("verdict")?;
        match verdict {
            "run" => {
                let row = MarkedStart::from_row(row)?;
                report.tasks.push(StartedTask {
                    id: row.id,
                    timer_id: row.timer_id,
                    scheduled_at: row.scheduled_at,
                    shard: row.shard,
                    address: row.address,
                    attempt: row.attempt,
                    due_at: row.due_at,
                    started_at: row.started_at,
                    action: Arc::new(row.action),
                    retry: row.retry.into(),
                });
            }
            "cancel" => report.not_started.cancelled += 1,
            "skip" => report.not_started.overlap_skipped += 1,
            "defer" => report.not_started.overlap_deferred += 1,
            _ => report.not_started.duplicate += 1,
        }
    }
    Ok(report)
}
