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
