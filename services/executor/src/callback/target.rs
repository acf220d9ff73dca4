//! A target's turns: how many calls at once it gets, growing while calls want turns.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;

use crate::turns::Turns;

/// How many calls at once a target gets: `min` always, up to `max` while calls want more
/// turns and the target answers (see [`Target`]); and how long a call may wait for its turn
/// before it is deferred.
#[derive(Debug, Clone, Copy)]
pub struct CallLimits {
    pub min: usize,
    pub max: usize,
    pub turn_wait: Duration,
}

/// Calls are answered at the target's own pace while their running mean is at most this
/// many times the shortest call of the current window.
const PACE_FACTOR: u64 = 2;
/// The window over which the shortest call is taken, so that one early fluke does not
/// stop the growth for good.
const PACE_WINDOW_MS: u64 = 10_000;
/// The window over which the calls asking for a turn are counted.
const RATE_WINDOW_MS: u64 = 1_000;

/// The turns of one target: at most `limit` calls at once. The limit starts at
/// `PUNCTUAL_MIN_CALLS_PER_TARGET` (16) and grows by one for each call the target answers
/// while others wait or were held back within the last second, up to `max` (doubling in a
/// round trip, as TCP's slow start does), as long as either
/// - the calls keep the target's pace: their running mean is at most [`PACE_FACTOR`] times
///   the shortest call of the last [`PACE_WINDOW_MS`]; or
/// - the limit is below what the calls aimed at the target need at its pace (Little's law:
///   the calls asking for a turn a second, times the shortest call).
///
/// It falls back by one (the ending call's turn), towards where it started, for each call
/// that shows the target strained (no answer within the timeout, a connection that failed,
/// a 5xx or a 429), and for each call that ends while the mean is above twice that pace
/// and the limit above what the calls need.
///
/// The pace alone cannot tell a target that slows down as calls are added from an
/// executor short of CPU, whose calls take longer for its own reasons: more calls at once
/// help neither a saturated machine nor a saturated target, but they are what a target
/// that answers each call in its own 300 ms needs when 200 a second are aimed at it, and
/// a limit held at 16 there deferred the calls held back ever further.
///
/// Every call beyond the client's idle connections opens one, so the limit is also the
/// number of connections to the target: growing it to `max` at once cost CPU on both
/// sides (docs/bench/history.md, item 15).
pub(super) struct Target {
    /// `scheme://host:port`.
    pub(super) key: Arc<str>,
    pub(super) turns: Turns,
    pub(super) first: usize,
    pub(super) max: usize,
    pub(super) epoch: Instant,
    /// The shortest call of the current window, in µs.
    pub(super) shortest_us: AtomicU64,
    /// When the current window began, in ms since `epoch`.
    pub(super) window_ms: AtomicU64,
    /// Calls that asked for a turn in the current rate window, which began at
    /// `rate_window_ms` (since `epoch`), and how many a second asked in the last one.
    asked: AtomicU64,
    rate_window_ms: AtomicU64,
    asked_per_second: AtomicU64,
}

impl Target {
    pub(super) fn new(key: &str, limits: CallLimits) -> Self {
        let max = limits.max.max(1);
        let first = limits.min.clamp(1, max);
        Target {
            key: key.into(),
            turns: Turns::new(first),
            first,
            max,
            epoch: Instant::now(),
            shortest_us: AtomicU64::new(u64::MAX),
            window_ms: AtomicU64::new(0),
            asked: AtomicU64::new(0),
            rate_window_ms: AtomicU64::new(0),
            asked_per_second: AtomicU64::new(0),
        }
    }

    /// A call asks for a turn at `at`: counted towards the calls a second aimed here.
    pub(super) fn asked(&self, at: Instant) {
        let now_ms = at.saturating_duration_since(self.epoch).as_millis() as u64;
        let began_ms = self.rate_window_ms.load(Ordering::Relaxed);
        let asked = self.asked.fetch_add(1, Ordering::Relaxed) + 1;
        let elapsed_ms = now_ms.saturating_sub(began_ms);
        if elapsed_ms >= RATE_WINDOW_MS
            && self.rate_window_ms.compare_exchange(began_ms, now_ms, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            // A window long past (no call for a while) counts as the second it ends.
            let per_second = asked * 1_000 / elapsed_ms.min(2 * RATE_WINDOW_MS);
            self.asked_per_second.store(per_second, Ordering::Relaxed);
            self.asked.store(0, Ordering::Relaxed);
        }
    }

    /// Calls at once the calls aimed here need at the target's pace (`shortest_us` a call).
    fn needed(&self, shortest_us: u64) -> usize {
        let per_second = self.asked_per_second.load(Ordering::Relaxed);
        (per_second.saturating_mul(shortest_us) / 1_000_000).min(self.max as u64) as usize
    }

    /// A call ended at `ended`, after `took`; `strained` if it showed the target strained.
    /// One more turn, one fewer (the ending call's, which the caller then forgets) or none
    /// (see [`Target`]).
    pub(super) fn ended(&self, ended: Instant, took: Duration, strained: bool) -> Change {
        let took_us = took.as_micros().min(u128::from(u64::MAX / (2 * PACE_FACTOR))) as u64;
        let now_ms = ended.saturating_duration_since(self.epoch).as_millis() as u64;
        let window_ms = self.window_ms.load(Ordering::Relaxed);
        let shortest_us = if now_ms.saturating_sub(window_ms) >= PACE_WINDOW_MS
            && self.window_ms.compare_exchange(window_ms, now_ms, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            self.shortest_us.store(took_us, Ordering::Relaxed);
            took_us
        } else {
            self.shortest_us.fetch_min(took_us, Ordering::Relaxed).min(took_us)
        };
        let mean_us = self.turns.record(ended, took_us);
        let limit = self.turns.limit();
        let needed = self.needed(shortest_us);
        let change = if strained {
            if limit <= self.first {
                return Change::Keep;
            }
            Change::Shrink
        } else if mean_us <= shortest_us * PACE_FACTOR || limit < needed {
            if limit >= self.max || !self.turns.has_demand(ended) {
                return Change::Keep;
            }
            Change::Grow
        } else if mean_us > shortest_us * 2 * PACE_FACTOR && limit > self.first.max(needed) {
            Change::Shrink
        } else {
            return Change::Keep;
        };
        let changed = if change == Change::Grow { limit + 1 } else { limit - 1 };
        if self.turns.limit.compare_exchange(limit, changed, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            // Another call changed it meanwhile; that one change is enough.
            return Change::Keep;
        }
        if changed.is_power_of_two() {
            tracing::debug!(target = %self.key, calls_at_once = changed, mean_us, shortest_us, needed, "a target's limit of calls changed");
        }
        if change == Change::Grow {
            self.turns.semaphore.add_permits(1);
        }
        change
    }

    #[cfg(test)]
    pub(super) fn limit(&self) -> usize {
        self.turns.limit()
    }
}

/// A call's turn at its target.
pub(super) struct Turn {
    pub(super) permit: OwnedSemaphorePermit,
    pub(super) target: Arc<Target>,
}

impl Turn {
    /// The call ended at `ended`, after `took`, `strained` or not (a call given up on ends
    /// with its turn dropped, and does not count towards the limit).
    pub(super) fn end(self, ended: Instant, took: Duration, strained: bool) {
        if self.target.ended(ended, took, strained) == Change::Shrink {
            self.permit.forget();
        }
    }
}

/// What a call's end did to its target's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    Grow,
    Shrink,
    Keep,
}
