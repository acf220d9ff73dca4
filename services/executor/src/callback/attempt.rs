//! What one attempt came to, and what that means for the task.

use std::time::Duration;

use chrono::Utc;
use punctual_shared::task::{DeferReason, Next, Outcome, StartedTask};

use super::{DEFER_WHILE_LATE_BY, MAX_RETRY_AFTER};

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub http_status: Option<u16>,
    pub excerpt: Option<String>,
    /// None on success.
    pub error: Option<String>,
    /// Worth another attempt: connection errors, timeouts, 5xx, 408 and 429.
    pub retryable: bool,
    /// The target's own `Retry-After`, in seconds or as an HTTP date.
    pub retry_after: Option<Duration>,
    pub duration: Duration,
    /// Not called: its target or its namespace had no turn soon enough, and one is
    /// expected after this long.
    pub held_back: Option<(Duration, DeferReason)>,
    /// Not called: its target is paused for its namespace.
    pub target_paused: bool,
}

impl Attempt {
    /// An attempt that ended in `error`, without an answer from the target.
    pub fn failed(error: String, retryable: bool, duration: Duration) -> Self {
        Attempt {
            http_status: None,
            excerpt: None,
            error: Some(error),
            retryable,
            retry_after: None,
            duration,
            held_back: None,
            target_paused: false,
        }
    }

    /// Not run: its namespace had taken its fires for now (`max_fires_per_second`), and its
    /// slot comes after `wait`. As [`Attempt::held_back`] otherwise.
    pub fn rate_held_back(per_second: u32, wait: Duration) -> Self {
        Attempt {
            held_back: Some((wait, DeferReason::NamespaceLimit)),
            ..Attempt::failed(
                format!("not run: its namespace's limit of {per_second} fires a second is taken for now"),
                false,
                Duration::ZERO,
            )
        }
    }

    /// Not called: its target or namespace (`reason`) was at its limit of calls, with a
    /// turn expected after `wait`. Deferred to it; when that is too late to defer, the
    /// occurrence is dead, not retried: a retry would find no sooner turn, and retrying
    /// them tripled what such a target's occurrences cost everyone (docs/bench/history.md,
    /// "Neighbours").
    pub(super) fn held_back(limit: usize, wait: Duration, reason: DeferReason) -> Self {
        let whose = if reason == DeferReason::NamespaceLimit { "namespace" } else { "target" };
        Attempt {
            held_back: Some((wait, reason)),
            ..Attempt::failed(
                format!("not called: its {whose} had {limit} calls in flight and no turn soon"),
                false,
                Duration::ZERO,
            )
        }
    }

    /// Not called: its target asked not to be called yet (`Retry-After`), and a turn after
    /// that is expected after `wait`; as [`Attempt::held_back`] otherwise.
    pub(super) fn asked_to_wait(wait: Duration) -> Self {
        Attempt {
            held_back: Some((wait, DeferReason::RetryAfter)),
            ..Attempt::failed("not called: its target asked to wait (Retry-After)".to_owned(), false, Duration::ZERO)
        }
    }

    /// Not called: its target is paused for its namespace.
    pub(super) fn paused(pause: &punctual_shared::paused_target::PausedTarget) -> Self {
        Attempt {
            target_paused: true,
            ..Attempt::failed(
                format!(
                    "not called: target {} paused for namespace {} since {} ({}); resume it with POST \
                     /v1/namespaces/{}/paused-targets/resume",
                    pause.target,
                    pause.namespace,
                    pause.paused_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    pause.reason,
                    pause.namespace
                ),
                false,
                Duration::ZERO,
            )
        }
    }

    /// Whether the action was carried out (called or published), whatever came of it.
    pub fn was_made(&self) -> bool {
        self.held_back.is_none() && !self.target_paused
    }

    /// An attempt that succeeded without an answer to keep (e.g. a published message).
    pub fn succeeded(duration: Duration) -> Self {
        Attempt {
            http_status: None,
            excerpt: None,
            error: None,
            retryable: false,
            retry_after: None,
            duration,
            held_back: None,
            target_paused: false,
        }
    }

    pub(super) fn from_status(status: u16, excerpt: String, retry_after: Option<Duration>, duration: Duration) -> Self {
        let ok = (200..300).contains(&status);
        Attempt {
            http_status: Some(status),
            excerpt: Some(excerpt),
            error: (!ok).then(|| format!("target answered HTTP {status}")),
            retryable: status >= 500 || status == 408 || status == 429,
            retry_after,
            duration,
            held_back: None,
            target_paused: false,
        }
    }

    /// Whether, why and how long the occurrence waits as the same attempt, while it would
    /// then be at most [`DEFER_WHILE_LATE_BY`] late: a call held back waits for its
    /// target's turn; a target that answered `429` or `503` with `Retry-After` asked to be
    /// called later, and is, at most the retry policy's longest backoff later.
    pub(super) fn deferral(&self, task: &StartedTask) -> Option<(Duration, DeferReason)> {
        let (wait, reason) = match self.held_back {
            Some(held_back) => held_back,
            None => {
                let asked = self.retry_after.filter(|_| matches!(self.http_status, Some(429 | 503)))?;
                (asked.min(Duration::from_millis(task.retry.max_ms.max(0) as u64)), DeferReason::RetryAfter)
            }
        };
        let late = (Utc::now() - task.scheduled_at).to_std().unwrap_or_default() + wait;
        (late <= DEFER_WHILE_LATE_BY).then_some((wait, reason))
    }

    /// Decides what becomes of the task: success; deferred, when the target asked to be
    /// called later; another attempt after the policy's backoff (or the target's
    /// Retry-After, when longer); or dead.
    pub fn into_outcome(mut self, task: &StartedTask, jitter: f64) -> Outcome {
        let policy = task.retry;
        let next = if self.error.is_none() {
            Next::Succeeded
        } else if self.target_paused {
            Next::Cancelled
        } else if let Some((wait, reason)) = self.deferral(task) {
            if let Some(error) = self.error.as_mut() {
                let after = if self.http_status.is_some() { " with Retry-After" } else { "" };
                error.push_str(&format!("{after}: deferred {} ms, not counted as an attempt", wait.as_millis()));
            }
            let due_at = Utc::now() + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::zero());
            Next::Defer { due_at, reason }
        } else if self.retryable && policy.has_attempt_after(task.attempt) {
            let wait = policy.backoff(task.attempt, jitter).max(self.retry_after.unwrap_or_default());
            Next::Retry { due_at: Utc::now() + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::zero()) }
        } else {
            Next::Dead
        };
        Outcome {
            task_id: task.id,
            attempt: task.attempt,
            started_at: task.started_at,
            next,
            http_status: self.http_status.map(|s| s as i16),
            response_excerpt: self.excerpt,
            error: self.error,
            duration_ms: self.duration.as_millis().min(i32::MAX as u128) as i32,
        }
    }
}

/// `Retry-After: <seconds>` or `Retry-After: <HTTP date>`.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let wait = if let Ok(seconds) = value.trim().parse::<u64>() {
        Duration::from_secs(seconds)
    } else {
        let at = chrono::DateTime::parse_from_rfc2822(value.trim()).ok()?;
        (at.with_timezone(&Utc) - Utc::now()).to_std().unwrap_or_default()
    };
    Some(wait.min(MAX_RETRY_AFTER))
}
