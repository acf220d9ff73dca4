//! Finishing: an attempt's outcome written back (succeeded, retried, deferred, dead).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

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
    let result = sqlx::query!(
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
        &ids,
        &statuses as _,
        &due as _,
        &codes as _,
        &excerpts as _,
        &errors as _,
        &durations,
        &attempts,
        &started,
        &reasons as _
    )
    .execute(db)
    .await?;
    Ok(result.rows_affected())
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
}
