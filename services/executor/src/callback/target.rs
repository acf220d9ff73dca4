//! A target's turns: how many calls at once it gets, growing while it keeps its pace.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;

use crate::turns::Turns;

/// How many calls at once a target gets: `min` always, up to `max` while it keeps its pace
/// (see [`Target`]); and how long a call may wait for its turn before it is deferred.
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

/// The turns of one target: at most `limit` calls at once. The limit starts at
/// `PUNCTUAL_MIN_CALLS_PER_TARGET` (16) and grows by one for each call that ends while
/// others wait or were held back within the last second, as long as the calls' running mean is at most [`PACE_FACTOR`] times the
/// shortest call of the last [`PACE_WINDOW_MS`], up to `max`. A slow target that keeps its
/// pace (a 100 ms answer stays near 100 ms) gets more calls at once, doubling in a round
/// trip as TCP's slow start does; when the calls take more than twice that (a target that
/// slows down as calls are added, or an executor short of CPU, whose calls then take longer
/// for its own reasons) the limit falls back by one a call: more calls at once would only
/// queue elsewhere.
///
/// Every call beyond the client's idle connections opens one, so the limit is also the
/// number of connections to the target. Starting at the maximum (512) made a load's first
/// second open hundreds of connections at once (at 10,000 fires/s the lag of the first 5 s
/// reached 469-571 ms, against 92 ms with 32), and keeping them made every call dearer: at
/// 20,000 fires/s offered, a fixed 16 delivered 18,001 and 19,999 fires/s in two runs at
/// 93-107 µs of CPU a fire, 32 delivered 18,326 at 105 µs, 512 delivered 16,132 at 117 µs
/// (docs/BENCHMARKS.md, item 15).
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
        }
    }

    /// A call ended at `ended`, after `took`. One more turn if others want one (waiting, or
    /// held back lately), the calls keep the target's
    /// pace and the limit has room; one turn fewer (the ending call's, which the caller then
    /// forgets) if the calls take more than twice that pace and the limit is above its
    /// start.
    pub(super) fn ended(&self, ended: Instant, took: Duration) -> Change {
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
        let mean_us = self.turns.record(took_us);
        let limit = self.turns.limit();
        let change = if mean_us <= shortest_us * PACE_FACTOR {
            if !self.turns.has_demand(ended) || limit >= self.max {
                return Change::Keep;
            }
            Change::Grow
        } else if mean_us > shortest_us * 2 * PACE_FACTOR && limit > self.first {
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
            tracing::debug!(calls_at_once = changed, mean_us, shortest_us, "a target's limit of calls changed");
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
    /// The call ended at `ended`, after `took` (a call given up on ends with its turn
    /// dropped, and does not count towards the limit).
    pub(super) fn end(self, ended: Instant, took: Duration) {
        if self.target.ended(ended, took) == Change::Shrink {
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
