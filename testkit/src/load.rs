//! A steady load for fault tests: cron timers firing every second within a bounded
//! window, and an audit of every callback a sink received against every occurrence due.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, DurationRound, Utc};
use punctual_shared::timer::task_identity;
use uuid::Uuid;

use crate::stack::dump_logs;
use crate::{Call, Sink, Stack};

pub struct Load {
    pub timers: Vec<Uuid>,
    pub start: DateTime<Utc>,
    seconds: i64,
}

impl Load {
    /// `timers` cron timers firing every second for `seconds` seconds from a whole second
    /// a few seconds ahead, inserted with one SQL statement, calling `sink`'s `/load`.
    pub async fn start(stack: &Stack, sink: &Sink, timers: i64, seconds: i64) -> Load {
        Self::start_with_overlap(stack, sink, timers, seconds, "allow").await
    }

    /// As [`Load::start`], the timers with the overlap policy `overlap` (`skip` marks every
    /// run `running` in the tasks table).
    pub async fn start_with_overlap(stack: &Stack, sink: &Sink, timers: i64, seconds: i64, overlap: &str) -> Load {
        let start = (Utc::now() + chrono::Duration::seconds(3)).duration_trunc(chrono::Duration::seconds(1)).unwrap();
        let timers: Vec<Uuid> = sqlx::query_scalar(
            "INSERT INTO timers (name, schedule_kind, cron_expr, start_at, end_at, http_url,
                                 retry_max_attempts, retry_initial_ms, retry_max_ms, overlap_policy)
             SELECT 'load-' || g, 'cron', '* * * * * *', $1, $2, $3, 8, 500, 4000, $5
               FROM generate_series(1, $4) AS g
             RETURNING id",
        )
        .bind(start)
        .bind(start + chrono::Duration::seconds(seconds))
        .bind(sink.url("/load"))
        .bind(timers)
        .bind(overlap)
        .fetch_all(&stack.db.pool)
        .await
        .unwrap();
        Load { timers, start, seconds }
    }

    pub fn at(&self, second: i64) -> DateTime<Utc> {
        self.start + chrono::Duration::seconds(second)
    }

    pub fn expected(&self) -> HashSet<String> {
        self.timers.iter().flat_map(|id| (0..self.seconds).map(move |s| task_identity(*id, self.at(s)))).collect()
    }

    /// Waits until every due occurrence has called the sink (or `timeout`), then until
    /// no repeat can still come ([`Stack::wait_settled`]), and counts.
    pub async fn audit(&self, stack: &Stack, sink: &Sink, timeout: Duration) -> Audit {
        self.audit_calls(stack, || sink.calls(), timeout).await
    }

    /// Until every due occurrence has called the sink (or `timeout`), starts again each
    /// service that exited on its own, as a supervisor would; returns which, and how they
    /// had exited.
    pub async fn supervise(
        &self,
        stack: &mut Stack,
        sink: &Sink,
        timeout: Duration,
    ) -> Vec<(String, std::process::ExitStatus)> {
        let mut restarted = Vec::new();
        self.wait_for_all(|| sink.calls(), timeout, || restarted.extend(stack.restart_exited())).await;
        restarted
    }

    /// Polls `calls` until every due occurrence is among them (true) or `timeout` passes
    /// (false), running `each_turn` before each look.
    pub async fn wait_for_all(
        &self,
        calls: impl Fn() -> Vec<Call>,
        timeout: Duration,
        mut each_turn: impl FnMut(),
    ) -> bool {
        let expected = self.expected();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            each_turn();
            let seen: HashSet<String> = calls().into_iter().filter_map(|c| c.idempotency_key).collect();
            if expected.iter().all(|k| seen.contains(k)) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// As `audit`, over the calls `calls` returns (several sinks, e.g.).
    pub async fn audit_calls(&self, stack: &Stack, calls: impl Fn() -> Vec<Call>, timeout: Duration) -> Audit {
        if self.wait_for_all(&calls, timeout, || {}).await && !stack.wait_settled(Some(&self.timers)).await {
            println!("the load had not settled: audited as it is");
        }
        let expected = self.expected();
        let mut counts: HashMap<String, usize> = HashMap::new();
        for c in calls() {
            *counts.entry(c.idempotency_key.unwrap_or_default()).or_default() += 1;
        }
        let calls = counts;
        let audit = Audit {
            expected: expected.len(),
            lost: expected.iter().filter(|k| !calls.contains_key(*k)).count(),
            duplicated: calls.values().map(|n| n.saturating_sub(1)).sum(),
            unexpected: calls.keys().filter(|k| !expected.contains(*k)).count(),
        };
        println!("{audit:?}");
        if audit.lost > 0 {
            println!("where the load's unfinished tasks stand:\n{}", self.unfinished(stack).await);
            println!("{}", dump_logs(stack));
        }
        audit
    }

    /// The load's tasks that did not succeed, counted by status, attempt and error: what
    /// a loss left behind.
    async fn unfinished(&self, stack: &Stack) -> String {
        let rows: Result<Vec<(String, i32, String, i64)>, _> = sqlx::query_as(
            "SELECT status::text, attempt, left(coalesce(error, ''), 120), count(*)
               FROM tasks WHERE timer_id = ANY($1) AND status <> 'succeeded'
              GROUP BY 1, 2, 3 ORDER BY 4 DESC LIMIT 20",
        )
        .bind(&self.timers)
        .fetch_all(&stack.db.pool)
        .await;
        match rows {
            Ok(rows) if rows.is_empty() => "  none: every task succeeded".into(),
            Ok(rows) => rows
                .iter()
                .map(|(status, attempt, error, n)| format!("  {n} × {status} (attempt {attempt}) {error}"))
                .collect::<Vec<_>>()
                .join("\n"),
            Err(e) => format!("  could not read the tasks: {e}"),
        }
    }
}

#[derive(Debug)]
pub struct Audit {
    pub expected: usize,
    pub lost: usize,
    pub duplicated: usize,
    pub unexpected: usize,
}

/// Waits until the load's second `s` (relative to its start).
pub async fn until(load: &Load, s: i64) {
    let wait = (load.at(s) - Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(wait).await;
}
