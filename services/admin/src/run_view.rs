//! An occurrence (a task) as the API shows it, with its failed attempts.

use chrono::{DateTime, Utc};
use punctual_shared::task::DeferReason;
use punctual_shared::task::TaskStatus;
use punctual_shared::timer::FieldError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// The columns of a [`RunView`] from `tasks t`, its failed attempts oldest first.
/// A status given in a query (`?status=`), or a problem naming the field.
pub fn parse_status(status: &str) -> Result<TaskStatus, FieldError> {
    status.parse().map_err(|e: String| FieldError::new("status", e))
}

pub const RUN_COLUMNS: &str =
    "t.id, t.timer_id, t.scheduled_at, t.shard, t.shards, t.address, t.due_at, t.status, t.attempt, t.claimed_at,
    t.started_at, t.finished_at, t.http_status, t.response_excerpt, t.error, t.duration_ms, t.deferred_reason,
    COALESCE((SELECT json_agg(json_build_object(
                'attempt', a.attempt, 'started_at', a.started_at, 'finished_at', a.finished_at,
                'http_status', a.http_status, 'error', a.error, 'duration_ms', a.duration_ms) ORDER BY a.attempt)
                FROM task_attempts a WHERE a.task_id = t.id), '[]'::json) AS failed_attempts";

/// An attempt that failed (it was retried, or the occurrence is dead).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FailedAttempt {
    pub attempt: i32,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub http_status: Option<i32>,
    pub error: Option<String>,
    pub duration_ms: Option<i32>,
}

/// One occurrence of a timer, or one shard of a fanned-out occurrence: its identity is
/// (`timer_id`, `scheduled_at`, `shard`).
#[derive(Debug, sqlx::FromRow, Serialize, ToSchema)]
pub struct RunView {
    /// The task's id (what a replay names).
    pub id: i64,
    pub timer_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    /// Which call of the occurrence, from 0 (0 when not fanned out).
    pub shard: i16,
    /// The calls the occurrence is split into (1 when not fanned out).
    pub shards: i16,
    /// The address a DNS broadcast's shard calls (none for other runs, and before the
    /// occurrence is split when due).
    pub address: Option<String>,
    /// When it is run: its scheduled time, or later for a retry.
    pub due_at: DateTime<Utc>,
    pub status: TaskStatus,
    /// The attempt running or last run, from 1.
    pub attempt: i32,
    pub claimed_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub http_status: Option<i16>,
    /// The start of the target's answer.
    pub response_excerpt: Option<String>,
    pub error: Option<String>,
    pub duration_ms: Option<i32>,
    /// Set when the occurrence was last deferred, until its next outcome: it waits, as the
    /// same attempt, because its target answered 429 or 503 with Retry-After
    /// (`retry_after`), or its target or namespace had no turn soon (`target_limit`,
    /// `namespace_limit`; docs/semantics.md, "Fairness").
    pub deferred_reason: Option<DeferReason>,
    #[schema(value_type = Vec<FailedAttempt>)]
    pub failed_attempts: sqlx::types::Json<Vec<FailedAttempt>>,
}
