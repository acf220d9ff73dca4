//! Targets that fail everything: each namespace's run of failed calls to each target, and
//! the targets paused for a namespace (table `paused_targets`, read again every few
//! seconds). A target whose calls from one namespace have all failed for
//! `PUNCTUAL_PAUSE_FAILING_TARGET_AFTER_MS`, at least `PUNCTUAL_PAUSE_FAILING_TARGET_MIN_FAILURES`
//! times, is paused for that namespace: its occurrences aimed there end cancelled without
//! a call until the namespace resumes it (docs/semantics.md, "Fairness").

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use punctual_runtime::periodic::Ticks;
use punctual_shared::paused_target::{self, PausedTarget};
use punctual_shared::unpoisoned;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// How often the paused targets are read again.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(5);

/// Most runs of failures followed at once; beyond it they start over (a namespace calling
/// ever new failing hosts costs no unbounded memory, only later pauses).
const MAX_STREAKS: usize = 100_000;

/// When to pause a failing target.
#[derive(Debug, Clone, Copy)]
pub struct PauseRule {
    /// Failing for this long (zero: never pause).
    pub after: Duration,
    /// At least this many failed calls meanwhile.
    pub min_failures: u64,
}

/// A run of failed calls to one target from one namespace, with no success between.
struct Streak {
    since: Instant,
    failures: u64,
}

pub struct FailingTargets {
    rule: PauseRule,
    pool: PgPool,
    /// By namespace, then target.
    paused: RwLock<HashMap<String, HashMap<String, PausedTarget>>>,
    /// By namespace, then target: looked up without allocating, since every call's end
    /// looks.
    streaks: Mutex<HashMap<String, HashMap<String, Streak>>>,
}

impl FailingTargets {
    pub fn new(rule: PauseRule, pool: PgPool) -> Self {
        FailingTargets { rule, pool, paused: RwLock::default(), streaks: Mutex::default() }
    }

    /// The pause of `target` for `namespace`, if it is paused.
    pub fn paused(&self, namespace: &str, target: &str) -> Option<PausedTarget> {
        let paused = unpoisoned::read(&self.paused);
        paused.get(namespace).and_then(|targets| targets.get(target)).cloned()
    }

    /// A call of `namespace` to `target` succeeded (`error` None) or failed: returns the
    /// reason to pause the target when this failure makes the run long enough.
    pub fn record(&self, namespace: &str, target: &str, error: Option<&str>) -> Option<String> {
        if self.rule.after.is_zero() {
            return None;
        }
        let mut streaks = unpoisoned::lock(&self.streaks);
        let Some(error) = error else {
            if let Some(targets) = streaks.get_mut(namespace) {
                targets.remove(target);
            }
            return None;
        };
        if streaks.values().map(HashMap::len).sum::<usize>() >= MAX_STREAKS {
            streaks.clear();
        }
        let now = Instant::now();
        if !streaks.contains_key(namespace) {
            streaks.insert(namespace.to_owned(), HashMap::new());
        }
        let targets = streaks.get_mut(namespace)?;
        if !targets.contains_key(target) {
            targets.insert(target.to_owned(), Streak { since: now, failures: 0 });
        }
        let streak = targets.get_mut(target)?;
        streak.failures += 1;
        let failing_for = now - streak.since;
        if streak.failures < self.rule.min_failures || failing_for < self.rule.after {
            return None;
        }
        let reason = format!(
            "every call failed for {} s ({} calls), the last with: {error}",
            failing_for.as_secs(),
            streak.failures
        );
        targets.remove(target);
        Some(reason)
    }

    /// Pauses `target` for `namespace` here at once and in the table, for the other
    /// executors.
    pub async fn pause(&self, namespace: &str, target: &str, reason: &str) {
        tracing::warn!(namespace, target, reason, "pausing a target that fails everything");
        let pause = PausedTarget {
            namespace: namespace.to_owned(),
            target: target.to_owned(),
            reason: reason.to_owned(),
            paused_at: chrono::Utc::now(),
        };
        self.paused
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(namespace.to_owned())
            .or_default()
            .insert(target.to_owned(), pause);
        if let Err(e) = paused_target::pause(&self.pool, namespace, target, reason).await {
            // Paused here until the next refresh, which forgets it: it fails on, and is paused again.
            tracing::warn!(error = %e, namespace, target, "storing a target's pause failed");
        }
    }

    pub async fn refresh(&self) -> Result<(), sqlx::Error> {
        let mut by_namespace: HashMap<String, HashMap<String, PausedTarget>> = HashMap::new();
        for ((namespace, target), pause) in paused_target::all(&self.pool).await? {
            by_namespace.entry(namespace).or_default().insert(target, pause);
        }
        *unpoisoned::write(&self.paused) = by_namespace;
        Ok(())
    }

    /// Refreshes every [`REFRESH_INTERVAL`] until cancelled; a failed read keeps the
    /// pauses held.
    pub async fn refresh_periodically(self: std::sync::Arc<Self>, token: CancellationToken) {
        let mut ticks = Ticks::every_from_now(REFRESH_INTERVAL, token);
        while ticks.next().await {
            if let Err(e) = self.refresh().await {
                tracing::warn!(error = %e, "reading the paused targets failed; the pauses held still apply");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failing_targets(after: Duration, min_failures: u64) -> FailingTargets {
        let pool = sqlx::postgres::PgPoolOptions::new().connect_lazy("postgres://unused").unwrap();
        FailingTargets::new(PauseRule { after, min_failures }, pool)
    }

    #[tokio::test]
    async fn a_target_is_paused_after_failing_long_enough_often_enough_and_a_success_starts_over() {
        let failing = failing_targets(Duration::from_millis(50), 3);
        assert_eq!(failing.record("ns", "http://t:80", Some("HTTP 500")), None);
        assert_eq!(failing.record("ns", "http://t:80", Some("HTTP 500")), None);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(failing.record("ns", "http://t:80", None), None, "a success");
        assert_eq!(failing.record("ns", "http://t:80", Some("HTTP 500")), None, "starts over");
        assert_eq!(failing.record("other", "http://t:80", Some("HTTP 500")), None, "namespaces apart");
        failing.record("ns", "http://t:80", Some("HTTP 500"));
        assert_eq!(failing.record("ns", "http://t:80", Some("HTTP 500")), None, "three, not long enough");
        std::thread::sleep(Duration::from_millis(60));
        let reason = failing.record("ns", "http://t:80", Some("HTTP 503")).expect("paused");
        assert!(reason.contains("(4 calls)") && reason.ends_with("HTTP 503"), "{reason}");
        let never = failing_targets(Duration::ZERO, 1);
        assert_eq!(never.record("ns", "http://t:80", Some("x")), None);
    }
}
