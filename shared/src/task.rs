//! Tasks (one per occurrence) and their state machine, in one place.
//!
//! ```text
//! plan────────────────┐ due within the planning scanner's lookahead: written claimed
//!  ▼                  ▼
//! pending ──claim──▶ claimed ──start──▶ running ──finish──▶ succeeded
//!    ▲  ▲               │ lease expired: claimable again        │   failed, retryable: ──▶ pending (later due_at)
//!    │  └───────────────┘ (scanner died or froze, message lost) │   failed, no attempt left ──▶ dead
//!    └────────────────────────────── replay ──── dead            └── (timer paused, deleted or edited) ──▶ cancelled
//! ```
//!
//! Every transition is one conditional SQL statement over a batch of tasks, so a service
//! never re-spells a transition and a redelivered or stale request changes nothing. The
//! statements are written for batches because they are the hot path. An occurrence
//! planned within its scanner's lookahead is inserted claimed; most start without a write
//! (see [`start`]); so an occurrence usually costs two row writes, the insert and the
//! outcome, each shared with the other tasks of its batch. Sending the message writes
//! nothing: the claim's lease covers a message that never arrives.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::{FromRow, PgExecutor, PgPool, Row};
use uuid::Uuid;

use crate::bucket::{bucket_of, owned_join, Held, MEMBER};
use crate::namespace_policy;
use crate::retry::RetryPolicy;
use crate::timer::task_identity;

/// Where an occurrence stands (`tasks.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum TaskStatus {
    /// Planned, waiting for its due time (or for a retry's).
    Pending,
    /// Claimed by a scanner, which publishes it when due.
    Claimed,
    /// Started by an executor.
    Running,
    Succeeded,
    /// Failed its last attempt (or had no turn within the hour).
    Dead,
    /// Not run: its timer changed or was paused, or a policy (misfire, overlap) skipped it.
    Cancelled,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 6] = [
        TaskStatus::Pending,
        TaskStatus::Claimed,
        TaskStatus::Running,
        TaskStatus::Succeeded,
        TaskStatus::Dead,
        TaskStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Claimed => "claimed",
            TaskStatus::Running => "running",
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::Dead => "dead",
            TaskStatus::Cancelled => "cancelled",
        }
    }
}

impl std::str::FromStr for TaskStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskStatus::ALL.into_iter().find(|status| status.as_str() == s).ok_or_else(|| {
            let names: Vec<&str> = TaskStatus::ALL.iter().map(|status| status.as_str()).collect();
            format!("{s:?} is none of {}", names.join(", "))
        })
    }
}

/// An occurrence to insert.
#[derive(Debug, Clone)]
pub struct PlannedTask {
    pub timer_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    pub timer_version: i64,
}

/// Which of the occurrences a plan writes are written claimed, and by whom: a scanner
/// that plans occurrences due within its lookahead claims them in the same write, rather
/// than inserting them pending and claiming them with a second write moments later. Only
/// the occurrences of buckets it still holds (the statement checks) are written claimed.
#[derive(Debug, Clone)]
pub struct PlanClaim<'a> {
    pub held: &'a Held,
    /// Occurrences due before this are written claimed.
    pub due_before: DateTime<Utc>,
    /// Past each occurrence's due time, as in [`claim`].
    pub lease: Duration,
}

/// What [`plan`] wrote.
#[derive(Debug, Default)]
pub struct Planned {
    /// Rows inserted or re-planned.
    pub written: u64,
    /// Those written claimed, for the claimer to hold and publish.
    pub claimed: Vec<ClaimedTask>,
}

/// A row written by [`plan`].
#[derive(sqlx::FromRow)]
struct PlannedRow {
    id: i64,
    timer_id: Uuid,
    scheduled_at: DateTime<Utc>,
    due_at: DateTime<Utc>,
    bucket: i16,
    attempt: i32,
    lease_until: Option<DateTime<Utc>>,
    epoch: Option<i64>,
}

/// Inserts occurrences; an occurrence that exists already is left alone, unless it was
/// planned from an older version of its timer and has not started, in which case it is
/// re-planned from the new version (if a scanner holds its claim, it keeps it). With
/// `claim`, those due before `claim.due_before` are written claimed by `claim.held`'s
/// owner, at their buckets' epochs (one write instead of an insert and a claim).
pub async fn plan(
    db: impl PgExecutor<'_>,
    tasks: &[PlannedTask],
    claim: Option<&PlanClaim<'_>>,
) -> Result<Planned, sqlx::Error> {
    if tasks.is_empty() {
        return Ok(Planned::default());
    }
    let timer_ids: Vec<Uuid> = tasks.iter().map(|t| t.timer_id).collect();
    let scheduled: Vec<DateTime<Utc>> = tasks.iter().map(|t| t.scheduled_at).collect();
    let versions: Vec<i64> = tasks.iter().map(|t| t.timer_version).collect();
    let buckets: Vec<i16> = tasks.iter().map(|t| bucket_of(t.timer_id)).collect();
    let nobody = Held::none("");
    let held = claim.map_or(&nobody, |c| c.held);
    // With no claim, `owned` is empty and `s < NULL` never true: every row is written
    // pending. A row comes back with its lease only if this statement claimed it (`now()`
    // is the transaction's start, so `claimed_at = now()` tells this claim from an earlier
    // one). A re-planned occurrence whose claim is still held stays with its holder, which
    // publishes it once, and runs from the new version; giving it a second claim would
    // have two scanners publish it, and both messages would run.
    let still_held = "tasks.status = 'claimed' AND tasks.lease_until > now()";
    let keep_if_held = |col: &str| format!("{col} = CASE WHEN {still_held} THEN tasks.{col} ELSE EXCLUDED.{col} END");
    let keep: Vec<String> = ["status", "attempt", "due_at", "claim_owner", "claim_epoch", "claimed_at", "lease_until"]
        .map(keep_if_held)
        .into();
    let rows: Vec<PlannedRow> = sqlx::query_as(&format!(
        "WITH {MEMBER}
         INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket,
                            status, claim_owner, claim_epoch, claimed_at, lease_until)
         SELECT t, s, s, v, b,
                CASE WHEN c THEN 'claimed' ELSE 'pending' END,
                CASE WHEN c THEN $1 END,
                CASE WHEN c THEN epoch END,
                CASE WHEN c THEN now() END,
                CASE WHEN c THEN GREATEST(s, now()) + $8::interval END
           FROM (SELECT u.*, ob.epoch, s < $7 AND ob.epoch IS NOT NULL AS c
                   FROM UNNEST($3::uuid[], $4::timestamptz[], $5::bigint[], $6::smallint[]) AS u(t, s, v, b)
                   LEFT {}) AS x
         ON CONFLICT (timer_id, scheduled_at) DO UPDATE
            SET timer_version = EXCLUDED.timer_version, {}, error = NULL, finished_at = NULL
          WHERE tasks.timer_version < EXCLUDED.timer_version
            AND tasks.status IN ('pending', 'claimed', 'cancelled')
         RETURNING id, timer_id, scheduled_at, due_at, bucket, attempt,
                   CASE WHEN status = 'claimed' AND claim_owner = $1 AND claimed_at = now() THEN lease_until END
                     AS lease_until,
                   claim_epoch AS epoch",
        owned_join("ob", "u.b"),
        keep.join(", ")
    ))
    .bind(&held.owner)
    .bind(held.epochs_by_bucket())
    .bind(&timer_ids)
    .bind(&scheduled)
    .bind(&versions)
    .bind(&buckets)
    .bind(claim.map(|c| c.due_before))
    .bind(claim.map_or(Duration::ZERO, |c| c.lease))
    .fetch_all(db)
    .await?;
    let written = rows.len() as u64;
    let claimed = rows
        .into_iter()
        .filter_map(|r| {
            Some(ClaimedTask {
                lease_until: r.lease_until?,
                epoch: r.epoch?,
                id: r.id,
                timer_id: r.timer_id,
                scheduled_at: r.scheduled_at,
                due_at: r.due_at,
                bucket: r.bucket,
                attempt: r.attempt,
                reclaimed: false,
            })
        })
        .collect();
    Ok(Planned { written, claimed })
}

/// A task claimed by a scanner, to be published at `due_at`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ClaimedTask {
    pub id: i64,
    pub timer_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    pub due_at: DateTime<Utc>,
    pub bucket: i16,
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
    "t.id, t.timer_id, t.scheduled_at, t.due_at, t.bucket, t.claim_epoch AS epoch, t.attempt, t.lease_until";

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

/// A task that the executor now runs, with its timer's action and retry policy.
#[derive(Debug, Clone)]
pub struct StartedTask {
    pub id: i64,
    pub timer_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
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
    pub fn identity(&self) -> String {
        task_identity(self.timer_id, self.scheduled_at)
    }
}

/// What a timer does when it fires: columns that change only with the timer's version.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Action {
    /// The timer's namespace, which never changes: whose signing secrets sign the call.
    pub namespace: String,
    pub action_kind: String,
    pub http_method: String,
    pub http_url: Option<String>,
    pub http_headers: Value,
    pub http_body: Option<Value>,
    pub http_timeout_ms: i32,
    pub kafka_topic: Option<String>,
    pub kafka_key: Option<String>,
    pub kafka_headers: Value,
    pub kafka_value: Option<Value>,
}

/// A timer's retry policy, as read with a task's start.
#[derive(sqlx::FromRow)]
struct RetryColumns {
    retry_max_attempts: i32,
    retry_initial_ms: i32,
    retry_multiplier: f64,
    retry_max_ms: i32,
}

impl From<RetryColumns> for RetryPolicy {
    fn from(r: RetryColumns) -> Self {
        RetryPolicy {
            max_attempts: r.retry_max_attempts,
            initial_ms: r.retry_initial_ms,
            multiplier: r.retry_multiplier,
            max_ms: r.retry_max_ms,
        }
    }
}

/// The actions an executor has read, by timer, each at the version it was read at. A
/// timer's action changes only with its version, so [`start`] decodes the action of a
/// version once instead of with every task: decoding fourteen columns (two of them JSON)
/// a task was a measured part of the executor's CPU (docs/BENCHMARKS.md, item 17). The
/// retry policy is not part of it: it may change without a new version, so it is read
/// with each start.
#[derive(Debug, Default)]
pub struct ActionCache {
    by_timer: Mutex<HashMap<Uuid, (i64, Arc<Action>)>>,
}

/// At most this many timers' actions are kept; the cache starts over when full.
const MAX_CACHED_ACTIONS: usize = 100_000;

impl ActionCache {
    fn get(&self, timer_id: Uuid, version: i64) -> Option<Arc<Action>> {
        let by_timer = self.by_timer.lock().expect("action cache lock");
        by_timer.get(&timer_id).filter(|(v, _)| *v == version).map(|(_, action)| action.clone())
    }

    fn put(&self, timer_id: Uuid, version: i64, action: Arc<Action>) {
        let mut by_timer = self.by_timer.lock().expect("action cache lock");
        if by_timer.len() >= MAX_CACHED_ACTIONS && !by_timer.contains_key(&timer_id) {
            by_timer.clear();
        }
        by_timer.insert(timer_id, (version, action));
    }

    pub fn len(&self) -> usize {
        self.by_timer.lock().expect("action cache lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The columns of a started task's timer (`tm`): its action ([`Action`]).
const ACTION_COLUMNS: &str =
    "tm.namespace, tm.action_kind, tm.http_method, tm.http_url, tm.http_headers, tm.http_body, tm.http_timeout_ms,
    tm.kafka_topic, tm.kafka_key, tm.kafka_headers, tm.kafka_value";

/// The columns of a started task's timer (`tm`): its retry policy.
const RETRY_COLUMNS: &str = "tm.retry_max_attempts, tm.retry_initial_ms, tm.retry_multiplier, tm.retry_max_ms";

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
        "SELECT t.id, t.timer_id, t.scheduled_at, t.attempt, t.due_at, t.claim_epoch AS epoch, now() AS started_at,
                tm.version AS timer_version,
                tm.schedule_kind IN ('interval', 'cron') AS recurring, {ACTION_COLUMNS}, {RETRY_COLUMNS},
                (t.status = 'claimed' AND tm.state = 'active' AND tm.version = t.timer_version
                 AND tm.overlap_policy = 'allow' AND tm.action_kind = 'http'
                 AND t.lease_until > greatest(now(), t.due_at) + (tm.http_timeout_ms + $3) * interval '1 millisecond')
                   AS unmarked
           FROM UNNEST($1::bigint[], $2::int[], $4::bigint[]) AS m(id, attempt, epoch)
           JOIN tasks t ON t.id = m.id
           JOIN timers tm ON tm.id = t.timer_id
          WHERE t.attempt = m.attempt AND t.claim_epoch = m.epoch
            AND t.due_at <= now() + $5 * interval '1 millisecond'"
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
                   (tm.state = 'active' AND tm.version = t.timer_version) AS current, tm.overlap_policy
              FROM UNNEST($1::bigint[], $2::int[], $4::bigint[]) AS m(id, attempt, epoch)
              JOIN tasks t ON t.id = m.id
              JOIN timers tm ON tm.id = t.timer_id
             WHERE t.attempt = m.attempt AND t.claim_epoch = m.epoch
               AND t.due_at <= now() + $5 * interval '1 millisecond'
             FOR UPDATE OF t
         ), placed AS (
            -- A batch can hold several occurrences of one timer (messages that bunched up):
            -- they are judged in order, as if they had come one after the other.
            SELECT l.*,
                   row_number() OVER (PARTITION BY l.timer_id
                                      ORDER BY (l.startable AND l.current) DESC, l.scheduled_at, l.id) AS place,
                   EXISTS (SELECT 1 FROM tasks o
                            WHERE o.timer_id = l.timer_id AND o.status = 'running' AND o.id <> l.id) AS busy
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
            RETURNING t.id, t.timer_id, t.scheduled_at, t.attempt, t.due_at, t.started_at
         )
         SELECT w.verdict, s.id, s.timer_id, s.scheduled_at, s.attempt, s.due_at, s.started_at, {ACTION_COLUMNS},
                {RETRY_COLUMNS}
           FROM waiting w
           LEFT JOIN started s ON s.id = w.id
           LEFT JOIN timers tm ON tm.id = s.timer_id"
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
         ), missed AS (
            SELECT t.id, tm.misfire_policy,
                   t.scheduled_at < now() - tm.catchup_window_ms * interval '1 millisecond' AS beyond_window,
                   row_number() OVER (PARTITION BY t.timer_id ORDER BY t.scheduled_at DESC) AS newest
              FROM late l JOIN tasks t ON t.id = l.id JOIN timers tm ON tm.id = t.timer_id
         )
         UPDATE tasks t SET status = 'cancelled', finished_at = now(),
                error = 'misfired (' || m.misfire_policy || ')'
           FROM missed m
          WHERE t.id = m.id AND t.status IN ('pending', 'claimed')
            AND (m.misfire_policy = 'skip'
                 OR (m.misfire_policy = 'fire_once' AND m.newest > 1)
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

/// What becomes of a task after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Succeeded,
    /// Back to pending, due again at this time, as the next attempt.
    Retry {
        due_at: DateTime<Utc>,
    },
    /// No attempt left (or a failure not worth retrying).
    Dead,
    /// Not run, and not to be: its target is paused for its namespace. No attempt is
    /// counted.
    Cancelled,
    /// Back to pending, due again at this time, as the same attempt: the occurrence could
    /// not run now for a reason that is no failure of its own, and counts no attempt.
    Defer {
        due_at: DateTime<Utc>,
        reason: DeferReason,
    },
}

/// Why an occurrence was deferred (`punctual_deferred_total{reason}`, the task's
/// `deferred_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum DeferReason {
    /// Its target answered `429` or `503` with `Retry-After`.
    RetryAfter,
    /// Its target had as many calls in flight as it is allowed, with more waiting than
    /// a turn would come for soon: the call was not made.
    TargetLimit,
    /// Likewise its namespace (the namespace's `max_concurrent_calls`).
    NamespaceLimit,
}

impl DeferReason {
    pub const ALL: [DeferReason; 3] = [DeferReason::RetryAfter, DeferReason::TargetLimit, DeferReason::NamespaceLimit];

    pub fn as_str(self) -> &'static str {
        match self {
            DeferReason::RetryAfter => "retry_after",
            DeferReason::TargetLimit => "target_limit",
            DeferReason::NamespaceLimit => "namespace_limit",
        }
    }
}

/// How an attempt ended, and what comes next.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub task_id: i64,
    /// The attempt this is the outcome of: a task since moved on is left alone.
    pub attempt: i32,
    pub started_at: DateTime<Utc>,
    pub next: Next,
    pub http_status: Option<i16>,
    pub response_excerpt: Option<String>,
    pub error: Option<String>,
    pub duration_ms: i32,
}

/// Writes back the outcomes of running tasks (marked running, or still claimed when they
/// started without a mark): → succeeded | pending (retry, or deferred as the same attempt)
/// | dead. Each failed attempt is also kept in `task_attempts`; a deferral is not an
/// attempt, and the task's own columns say why it waits. Returns how many tasks changed
/// (a task finished by another executor, or at another attempt, is left alone).
pub async fn finish(db: &PgPool, outcomes: &[Outcome]) -> Result<u64, sqlx::Error> {
    if outcomes.is_empty() {
        return Ok(0);
    }
    let ids: Vec<i64> = outcomes.iter().map(|o| o.task_id).collect();
    let statuses: Vec<&str> = outcomes
        .iter()
        .map(|o| match o.next {
            Next::Succeeded => "succeeded",
            Next::Retry { .. } => "pending",
            Next::Dead => "dead",
            Next::Cancelled => "cancelled",
            // Stored as pending: the statement below keeps its attempt.
            Next::Defer { .. } => "deferred",
        })
        .collect();
    let due: Vec<Option<DateTime<Utc>>> = outcomes
        .iter()
        .map(|o| match o.next {
            Next::Retry { due_at } | Next::Defer { due_at, .. } => Some(due_at),
            _ => None,
        })
        .collect();
    let reasons: Vec<Option<&str>> = outcomes
        .iter()
        .map(|o| match o.next {
            Next::Defer { reason, .. } => Some(reason.as_str()),
            _ => None,
        })
        .collect();
    let codes: Vec<Option<i16>> = outcomes.iter().map(|o| o.http_status).collect();
    let excerpts: Vec<Option<&str>> = outcomes.iter().map(|o| o.response_excerpt.as_deref()).collect();
    let errors: Vec<Option<&str>> = outcomes.iter().map(|o| o.error.as_deref()).collect();
    let durations: Vec<i32> = outcomes.iter().map(|o| o.duration_ms).collect();
    let attempts: Vec<i32> = outcomes.iter().map(|o| o.attempt).collect();
    let started: Vec<DateTime<Utc>> = outcomes.iter().map(|o| o.started_at).collect();
    let result = sqlx::query(
        "WITH v AS (
            SELECT * FROM UNNEST($1::bigint[], $2::text[], $3::timestamptz[], $4::smallint[], $5::text[], $6::text[],
                                 $7::int[], $8::int[], $9::timestamptz[], $10::text[])
                AS v(id, status, due_at, http_status, excerpt, error, duration_ms, attempt, started_at, deferred_reason)
         ), history AS (
            INSERT INTO task_attempts (task_id, attempt, started_at, http_status, error, response_excerpt, duration_ms)
            SELECT t.id, t.attempt, v.started_at, v.http_status, v.error, v.excerpt, v.duration_ms
              FROM tasks t JOIN v ON v.id = t.id AND v.attempt = t.attempt
             WHERE t.status IN ('running', 'claimed') AND v.status NOT IN ('succeeded', 'deferred', 'cancelled')
            ON CONFLICT DO NOTHING
         )
         UPDATE tasks t
            SET status = CASE WHEN v.status = 'deferred' THEN 'pending' ELSE v.status END,
                started_at = v.started_at,
                attempt = CASE WHEN v.status = 'pending' THEN t.attempt + 1 ELSE t.attempt END,
                due_at = COALESCE(v.due_at, t.due_at),
                finished_at = CASE WHEN v.status IN ('pending', 'deferred') THEN NULL ELSE now() END,
                claim_owner = NULL, lease_until = NULL,
                claim_epoch = CASE WHEN v.status IN ('pending', 'deferred') THEN NULL ELSE t.claim_epoch END,
                http_status = v.http_status, response_excerpt = v.excerpt, error = v.error,
                duration_ms = v.duration_ms, deferred_reason = v.deferred_reason
           FROM v
          WHERE t.id = v.id AND t.attempt = v.attempt AND t.status IN ('running', 'claimed')",
    )
    .bind(&ids)
    .bind(&statuses)
    .bind(&due)
    .bind(&codes)
    .bind(&excerpts)
    .bind(&errors)
    .bind(&durations)
    .bind(&attempts)
    .bind(&started)
    .bind(&reasons)
    .execute(db)
    .await?;
    Ok(result.rows_affected())
}

/// Replays dead tasks: dead → pending, as a further attempt, due within their namespace's
/// catch-up budget (see [`namespace_policy::book_catch_up`]): at once for a few, spread
/// over the following seconds for many, oldest first. Returns the ids replayed (tasks not
/// dead are left alone).
pub async fn replay(db: &PgPool, ids: &[i64]) -> Result<Vec<i64>, sqlx::Error> {
    let mut tx = db.begin().await?;
    let dead: Vec<(i64, String)> = sqlx::query_as(
        "SELECT t.id, tm.namespace FROM tasks t JOIN timers tm ON tm.id = t.timer_id
          WHERE t.id = ANY($1) AND t.status = 'dead'
          ORDER BY tm.namespace, t.scheduled_at, t.id
            FOR UPDATE OF t",
    )
    .bind(ids)
    .fetch_all(&mut *tx)
    .await?;
    let mut replayed = Vec::with_capacity(dead.len());
    let mut due = Vec::with_capacity(dead.len());
    for namespace in dead.chunk_by(|a, b| a.1 == b.1) {
        let (first, apart) = namespace_policy::book_catch_up(&mut tx, &namespace[0].1, namespace.len()).await?;
        for (i, (id, _)) in namespace.iter().enumerate() {
            replayed.push(*id);
            due.push(first + apart * i as i32);
        }
    }
    let replayed = sqlx::query_scalar(
        "UPDATE tasks t SET status = 'pending', due_at = v.due_at, attempt = attempt + 1, finished_at = NULL,
                claim_owner = NULL, claim_epoch = NULL, lease_until = NULL, deferred_reason = NULL
           FROM UNNEST($1::bigint[], $2::timestamptz[]) AS v(id, due_at)
          WHERE t.id = v.id AND t.status = 'dead'
         RETURNING t.id",
    )
    .bind(&replayed)
    .bind(&due)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(replayed)
}

/// Adds occurrences of an active timer at the times `at`, due at once, beside its
/// schedule's (the operator's trigger): each is claimed, published and run like any
/// other, with its own identity, so one that exists already (it ran, or is planned) is
/// left alone and never runs twice. Returns the ids of those added: none when the timer is
/// not active.
pub async fn add_occurrences(db: &PgPool, timer_id: Uuid, at: &[DateTime<Utc>]) -> Result<Vec<i64>, sqlx::Error> {
    let now = vec![Utc::now(); at.len()];
    insert_occurrences(db, timer_id, at, &now).await
}

/// As [`add_occurrences`], for a backfill: due within the timer's namespace's catch-up
/// budget (see [`namespace_policy::book_catch_up`]), oldest first.
pub async fn backfill(db: &PgPool, timer_id: Uuid, at: &[DateTime<Utc>]) -> Result<Vec<i64>, sqlx::Error> {
    let mut tx = db.begin().await?;
    let namespace: Option<String> = sqlx::query_scalar("SELECT namespace FROM timers WHERE id = $1")
        .bind(timer_id)
        .fetch_optional(&mut *tx)
        .await?;
    let Some(namespace) = namespace else {
        return Ok(Vec::new());
    };
    let (first, apart) = namespace_policy::book_catch_up(&mut tx, &namespace, at.len()).await?;
    let due: Vec<DateTime<Utc>> = (0..at.len()).map(|i| first + apart * i as i32).collect();
    let added = insert_occurrences(&mut *tx, timer_id, at, &due).await?;
    tx.commit().await?;
    Ok(added)
}

async fn insert_occurrences(
    db: impl sqlx::PgExecutor<'_>,
    timer_id: Uuid,
    at: &[DateTime<Utc>],
    due: &[DateTime<Utc>],
) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, status)
         SELECT tm.id, s.at, s.due_at, tm.version, $4, 'pending'
           FROM timers tm, UNNEST($2::timestamptz[], $3::timestamptz[]) AS s(at, due_at)
          WHERE tm.id = $1 AND tm.state = 'active'
         ON CONFLICT (timer_id, scheduled_at) DO NOTHING
         RETURNING id",
    )
    .bind(timer_id)
    .bind(at)
    .bind(due)
    .bind(bucket_of(timer_id))
    .fetch_all(db)
    .await
}

/// The Kafka message for a due task. The key is the task identity; the value carries
/// what the executor needs to find the task row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskMessage {
    pub task_id: i64,
    pub timer_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    pub attempt: i32,
    /// When this attempt is due: the executor does not run it before. The scanner publishes
    /// a little ahead of it (`PUNCTUAL_PUBLISH_LEAD_MS`), so that the message's way to the
    /// executor and the start are over when it is due. Absent in messages of older
    /// scanners, which published at the due time: those run at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<DateTime<Utc>>,
    /// The task's bucket, and the epoch its scanner held the bucket at when it claimed the
    /// task: a message from a superseded epoch runs nothing.
    pub bucket: i16,
    pub epoch: i64,
}

impl TaskMessage {
    pub fn key(&self) -> String {
        task_identity(self.timer_id, self.scheduled_at)
    }
}

/// The dead-letter message of a task that failed its last attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub task_id: i64,
    pub timer_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    pub idempotency_key: String,
    pub attempts: i32,
    pub http_status: Option<i16>,
    pub last_error: Option<String>,
}

impl From<&ClaimedTask> for TaskMessage {
    fn from(t: &ClaimedTask) -> Self {
        Self {
            task_id: t.id,
            timer_id: t.timer_id,
            scheduled_at: t.scheduled_at,
            attempt: t.attempt,
            due_at: Some(t.due_at),
            bucket: t.bucket,
            epoch: t.epoch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metric's label, the JSON and the column all spell a reason alike; `ALL` holds
    /// each once, in declaration order (the executor counts by the enum's index).
    #[test]
    fn a_defer_reason_is_spelled_alike_everywhere() {
        for (i, reason) in DeferReason::ALL.into_iter().enumerate() {
            assert_eq!(serde_json::to_value(reason).unwrap(), reason.as_str());
            assert_eq!(reason as usize, i);
        }
    }

    #[test]
    fn message_round_trips_and_keys_by_identity() {
        let m = TaskMessage {
            task_id: 7,
            timer_id: Uuid::nil(),
            scheduled_at: DateTime::parse_from_rfc3339("2026-12-24T18:00:00.5Z").unwrap().with_timezone(&Utc),
            attempt: 1,
            due_at: Some(DateTime::parse_from_rfc3339("2026-12-24T18:00:01Z").unwrap().with_timezone(&Utc)),
            bucket: 3,
            epoch: 12,
        };
        let v = serde_json::to_vec(&m).unwrap();
        assert_eq!(serde_json::from_slice::<TaskMessage>(&v).unwrap(), m);
        assert_eq!(m.key(), "00000000-0000-0000-0000-000000000000:2026-12-24T18:00:00.500Z");
        // Without a due time: due at once.
        let undated = br#"{"task_id":7,"timer_id":"00000000-0000-0000-0000-000000000000","scheduled_at":"2026-12-24T18:00:00.5Z","attempt":1,"bucket":3,"epoch":12}"#;
        assert_eq!(serde_json::from_slice::<TaskMessage>(undated).unwrap(), TaskMessage { due_at: None, ..m });
        // A message of a scanner from before bucket leases has no epoch: not run (its task
        // is claimed again when its lease expires).
        let unfenced = br#"{"task_id":7,"timer_id":"00000000-0000-0000-0000-000000000000","scheduled_at":"2026-12-24T18:00:00.5Z","attempt":1}"#;
        assert!(serde_json::from_slice::<TaskMessage>(unfenced).is_err());
    }
}
