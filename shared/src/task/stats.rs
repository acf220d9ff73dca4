//! Reads of the tasks for the dashboards and the API's stats: the backlog of due tasks, and
//! a namespace's occurrences by status.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::TaskStatus;
use crate::timer_state::TimerState;

/// The due backlog: pending tasks due more than a second ago (counted up to `limit`, so that
/// a huge backlog costs a bounded read, through the index of pending tasks by due time),
/// and how long ago the oldest of them was due, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, sqlx::FromRow)]
pub struct Backlog {
    pub due: i64,
    pub oldest_seconds: Option<f64>,
}

pub async fn backlog(pool: &PgPool, limit: i64) -> Result<Backlog, sqlx::Error> {
    sqlx::query_as!(
        Backlog,
        r#"SELECT (SELECT count(*) FROM (SELECT 1 FROM tasks
                                        WHERE status = 'pending' AND due_at <= now() - interval '1 second'
                                        LIMIT $1) due) AS "due!",
                (SELECT extract(epoch FROM now() - min(due_at))::float8 FROM tasks
                  WHERE status = 'pending' AND due_at <= now() - interval '1 second') AS oldest_seconds"#,
        limit
    )
    .fetch_one(pool)
    .await
}

/// Occurrences of one status, and their failed attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct StatusCount {
    pub status: TaskStatus,
    pub occurrences: i64,
    /// Attempts that failed: all of a dead occurrence's, all but the last of the others.
    pub failed_attempts: i64,
}

/// The occurrences of `namespace`'s live timers scheduled within `from..=to`, by status.
/// Through the namespace's timers and each one's (timer_id, scheduled_at) index: the cost
/// grows with the namespace, never with the whole history.
pub async fn by_status(
    pool: &PgPool,
    namespace: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<StatusCount>, sqlx::Error> {
    sqlx::query_as!(
        StatusCount,
        r#"SELECT t.status AS "status: TaskStatus", count(*) AS "occurrences!",
                sum(CASE WHEN t.status = 'dead' THEN t.attempt ELSE t.attempt - 1 END)::bigint AS "failed_attempts!"
           FROM timers tm
           JOIN tasks t ON t.timer_id = tm.id AND t.scheduled_at >= $2 AND t.scheduled_at <= $3
          WHERE tm.namespace = $1 AND tm.state <> $4
          GROUP BY 1"#,
        namespace,
        from,
        to,
        TimerState::Deleted.as_str()
    )
    .fetch_all(pool)
    .await
}

/// Tasks still to run: pending (planned, a retry, a later turn), claimed or running.
pub async fn unfinished(pool: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "unfinished!" FROM tasks WHERE status IN ('pending', 'claimed', 'running')"#
    )
    .fetch_one(pool)
    .await
}

/// One namespace's recent occurrences, for a live view: those scheduled within the last
/// window (of `window_seconds`), how many started and how they ended, the lag of their first
/// attempts' starts, and those deferred to a later turn.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Recent {
    pub namespace: String,
    /// Scheduled within the window (up to now).
    pub scheduled: i64,
    /// Of them, started: running, finished by a call, or waiting for a retry.
    pub started: i64,
    pub succeeded: i64,
    pub dead: i64,
    /// Attempts that failed: all of a dead occurrence's, all but the last of the others.
    pub failed_attempts: i64,
    /// Pending again after an executor deferred them (a target's or the namespace's turn).
    pub deferred: i64,
    /// From the scheduled time to the first attempt's start, in milliseconds.
    pub lag_p50_ms: Option<f64>,
    pub lag_p99_ms: Option<f64>,
}

/// The occurrences scheduled within the last `window_seconds` of the `visible` namespaces'
/// timers (every namespace's with `None`), by namespace. Through the BRIN index of
/// scheduled times: the cost grows with the window's occurrences, not the history's.
///
/// A task's `started_at` is its latest attempt's (and a deferral or a cancellation at the
/// start sets it too): the first attempt's start of a retried occurrence is in its history.
pub async fn recent(
    pool: &PgPool,
    visible: Option<&[String]>,
    window_seconds: i32,
) -> Result<Vec<Recent>, sqlx::Error> {
    sqlx::query_as::<_, Recent>(
        "WITH w AS (
            SELECT tm.namespace, t.status, t.attempt, t.deferred_reason,
                   t.status IN ('running', 'succeeded', 'dead') OR t.attempt > 1 AS started,
                   extract(epoch FROM CASE WHEN t.attempt = 1 THEN t.started_at ELSE a.started_at END
                                      - t.scheduled_at) * 1000 AS lag_ms
              FROM tasks t JOIN timers tm ON tm.id = t.timer_id
              LEFT JOIN task_attempts a ON a.task_id = t.id AND a.attempt = 1 AND t.attempt > 1
             WHERE t.scheduled_at > now() - $1 * interval '1 second' AND t.scheduled_at <= now()
               AND ($2::text[] IS NULL OR tm.namespace = ANY($2))
         )
         SELECT namespace, count(*) AS scheduled, count(*) FILTER (WHERE started) AS started,
                count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
                count(*) FILTER (WHERE status = 'dead') AS dead,
                coalesce(sum(CASE WHEN status = 'dead' THEN attempt ELSE attempt - 1 END), 0)::bigint
                  AS failed_attempts,
                count(*) FILTER (WHERE status = 'pending' AND deferred_reason IS NOT NULL) AS deferred,
                percentile_cont(0.5) WITHIN GROUP (ORDER BY lag_ms) FILTER (WHERE started AND lag_ms IS NOT NULL)
                  AS lag_p50_ms,
                percentile_cont(0.99) WITHIN GROUP (ORDER BY lag_ms) FILTER (WHERE started AND lag_ms IS NOT NULL)
                  AS lag_p99_ms
           FROM w
          GROUP BY namespace
          ORDER BY namespace",
    )
    .bind(window_seconds)
    .bind(visible)
    .fetch_all(pool)
    .await
}

/// A namespace's due backlog: pending tasks due more than a second ago, and how long ago
/// the oldest was due, in seconds.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct NamespaceBacklog {
    pub namespace: String,
    pub due: i64,
    pub oldest_seconds: Option<f64>,
}

/// The due backlog of the `visible` namespaces, by namespace: at most `limit` of their
/// oldest due tasks are read (through the index of pending tasks by due time), so that a
/// huge backlog costs a bounded read; the counts then add up to `limit`, and each stops at
/// what was read.
pub async fn backlog_by_namespace(
    pool: &PgPool,
    visible: Option<&[String]>,
    limit: i64,
) -> Result<Vec<NamespaceBacklog>, sqlx::Error> {
    sqlx::query_as::<_, NamespaceBacklog>(
        "SELECT d.namespace, count(*) AS due, extract(epoch FROM now() - min(d.due_at))::float8 AS oldest_seconds
           FROM (SELECT tm.namespace, t.due_at
                   FROM tasks t JOIN timers tm ON tm.id = t.timer_id
                  WHERE t.status = 'pending' AND t.due_at <= now() - interval '1 second'
                    AND ($2::text[] IS NULL OR tm.namespace = ANY($2))
                  ORDER BY t.due_at LIMIT $1) d
          GROUP BY d.namespace
          ORDER BY d.namespace",
    )
    .bind(limit)
    .bind(visible)
    .fetch_all(pool)
    .await
}
