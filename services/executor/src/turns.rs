//! Turns behind one door (a target, a namespace): at most a limit of calls at once, the
//! others waiting; the calls' pace; and holding back a call whose turn would not come soon,
//! so that it does not wait in one of the executor's slots.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus::IntGauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The soonest a call held back is due again: sooner is not worth a round trip through
/// Postgres and Kafka.
pub const MIN_HOLD_BACK: Duration = Duration::from_secs(1);

pub struct Turns {
    pub(crate) semaphore: Arc<Semaphore>,
    pub(crate) limit: AtomicUsize,
    /// Calls waiting for a turn.
    pub(crate) waiting: AtomicUsize,
    epoch: Instant,
    /// The calls' running mean, in µs (0: none yet).
    mean_us: AtomicU64,
    /// When the next call held back is expected to get a turn, in µs since `epoch`: each
    /// held-back call books the turn after the last one booked, so that they come back
    /// spread at the calls' pace instead of all at once.
    booked_us: AtomicU64,
    /// Until when, in µs since `epoch`, the door asked not to be called (a target's
    /// `Retry-After`): no call is made before then.
    closed_until_us: AtomicU64,
    /// How long the door last asked to wait, in µs: while closed, held-back calls are
    /// booked as if it took `limit` calls in that time.
    asked_us: AtomicU64,
    /// When a call was last held back for want of a turn, in µs since `epoch` (0: never):
    /// demand beyond the limit, as much as a call waiting is.
    held_back_us: AtomicU64,
}

/// How long a held-back call counts as demand for more turns.
const DEMAND_MEMORY: Duration = Duration::from_secs(1);

/// A call not made: it is expected to get a turn after `wait`; `asked` when the door
/// asked not to be called yet, rather than being at its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldBack {
    pub wait: Duration,
    pub asked: bool,
}

impl Turns {
    pub fn new(limit: usize) -> Self {
        let limit = limit.max(1);
        Turns {
            semaphore: Arc::new(Semaphore::new(limit)),
            limit: AtomicUsize::new(limit),
            waiting: AtomicUsize::new(0),
            epoch: Instant::now(),
            mean_us: AtomicU64::new(0),
            booked_us: AtomicU64::new(0),
            closed_until_us: AtomicU64::new(0),
            asked_us: AtomicU64::new(0),
            held_back_us: AtomicU64::new(0),
        }
    }

    /// Whether calls want more turns than the limit gives: one waits, or one was held back
    /// within [`DEMAND_MEMORY`]. A call held back does not wait, so without the second a
    /// door whose calls are all held back would never be given more turns.
    pub fn has_demand(&self, now: Instant) -> bool {
        let held_back_us = self.held_back_us.load(Ordering::Relaxed);
        self.waiting.load(Ordering::Relaxed) > 0
            || (held_back_us > 0 && self.micros_at(now).saturating_sub(held_back_us) < DEMAND_MEMORY.as_micros() as u64)
    }

    fn micros_at(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_micros() as u64
    }

    /// The door asked not to be called for `wait` (a `429` or `503` with `Retry-After`):
    /// calls until then are held back, spread over the following turns.
    pub fn ask_to_wait(&self, wait: Duration) {
        let wait_us = wait.as_micros().min(u128::from(u64::MAX / 4)) as u64;
        self.closed_until_us.fetch_max(self.micros_at(Instant::now()) + wait_us, Ordering::Relaxed);
        self.asked_us.store(wait_us, Ordering::Relaxed);
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// A call took `took_us`: returns the calls' running mean, in µs.
    pub fn record(&self, took_us: u64) -> u64 {
        // A running mean (1/16 of each call), updated without a lock: a lost update between
        // two calls ending at once only makes it a little less exact.
        let mean_us = self.mean_us.load(Ordering::Relaxed);
        let mean_us = if mean_us == 0 { took_us.max(1) } else { mean_us - mean_us / 16 + took_us / 16 };
        self.mean_us.store(mean_us, Ordering::Relaxed);
        mean_us
    }

    fn mean(&self) -> Duration {
        Duration::from_micros(self.mean_us.load(Ordering::Relaxed))
    }

    /// How long a call that starts waiting now should wait for its turn, from the calls
    /// waiting and their pace (zero while no call has ended).
    fn expected_wait(&self) -> Duration {
        let waiting = self.waiting.load(Ordering::Relaxed) as u64;
        let limit = self.limit().max(1) as u64;
        Duration::from_micros(self.mean_us.load(Ordering::Relaxed).saturating_mul(waiting + 1) / limit)
    }

    /// Books a later turn for a call held back at `now`, whose calls take about `per_call`
    /// each, and returns how long after `now` it is: after the turns booked before it,
    /// after the calls waiting here and after the door opens again, at least
    /// [`MIN_HOLD_BACK`].
    fn book_later(&self, now: Instant, per_call: Duration) -> Duration {
        let limit = self.limit().max(1) as u64;
        let per_turn_us = (per_call.as_micros().min(u128::from(u64::MAX)) as u64 / limit).max(1);
        let now_us = self.micros_at(now);
        let soonest_us = (now_us + self.expected_wait().max(MIN_HOLD_BACK).as_micros() as u64)
            .max(self.closed_until_us.load(Ordering::Relaxed));
        let mut booked = self.booked_us.load(Ordering::Relaxed);
        loop {
            let turn_us = booked.max(soonest_us);
            match self.booked_us.compare_exchange_weak(
                booked,
                turn_us + per_turn_us,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Duration::from_micros(turn_us - now_us),
                Err(current) => booked = current,
            }
        }
    }

    /// A turn, waiting while the limit of calls is in flight, or `Err`: the door asked not
    /// to be called yet, or the turn would not come within `turn_wait` (expected from the calls waiting and their pace,
    /// or found by waiting that long), and the call is held back, booked after the others
    /// held back. A waiting call holds one of the executor's slots, so a door
    /// that cannot keep up (a black hole, a target slower than the traffic aimed at it, a
    /// namespace at its limit) would otherwise fill them all. `gauge` counts the calls
    /// waiting.
    pub async fn take(&self, turn_wait: Duration, gauge: &IntGauge) -> Result<OwnedSemaphorePermit, HeldBack> {
        let now = Instant::now();
        if self.micros_at(now) < self.closed_until_us.load(Ordering::Relaxed) {
            let per_call = Duration::from_micros(self.asked_us.load(Ordering::Relaxed)).max(self.mean());
            return Err(HeldBack { wait: self.book_later(now, per_call), asked: true });
        }
        if let Ok(permit) = self.semaphore.clone().try_acquire_owned() {
            return Ok(permit);
        }
        if self.expected_wait() > turn_wait {
            self.held_back_us.store(self.micros_at(now).max(1), Ordering::Relaxed);
            return Err(HeldBack { wait: self.book_later(now, self.mean()), asked: false });
        }
        let waited = {
            let _waiting = Waiting::new(gauge, &self.waiting);
            tokio::time::timeout(turn_wait, self.semaphore.clone().acquire_owned()).await
        };
        match waited {
            Ok(permit) => Ok(permit.expect("semaphore never closed")),
            // No turn came: more calls were waiting than the pace lets through in time. The
            // turn is booked at the calls' pace once one has ended; before that (a door that
            // never answers) a call is taken to last the whole wait.
            Err(_) => {
                let now = Instant::now();
                self.held_back_us.store(self.micros_at(now).max(1), Ordering::Relaxed);
                let per_call = if self.mean().is_zero() { turn_wait } else { self.mean() };
                Err(HeldBack { wait: self.book_later(now, per_call), asked: false })
            }
        }
    }
}

/// A call counted as waiting for its turn (in `punctual_callbacks_waiting` and in its
/// door's count) for as long as this lives: until the turn comes, or until the waiting
/// call is given up (its task aborted when the drain times out), so that neither count
/// stays raised by a call that no longer waits.
struct Waiting<'a> {
    gauge: &'a IntGauge,
    count: &'a AtomicUsize,
}

impl<'a> Waiting<'a> {
    fn new(gauge: &'a IntGauge, count: &'a AtomicUsize) -> Self {
        gauge.inc();
        count.fetch_add(1, Ordering::Relaxed);
        Waiting { gauge, count }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
        self.gauge.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls that waited in vain for a door whose pace is known come back at that pace,
    /// not a whole turn wait apart: a restarted executor's backlog at one target was
    /// otherwise spread over minutes.
    #[tokio::test]
    async fn calls_that_waited_in_vain_are_booked_at_the_known_pace() {
        let gauge = IntGauge::new("waiting", "test").unwrap();
        let turns = Turns::new(1);
        turns.record(10_000);
        let _busy = turns.semaphore.clone().try_acquire_owned().unwrap();
        let turn_wait = Duration::from_millis(200);
        let (first, second) = tokio::join!(turns.take(turn_wait, &gauge), turns.take(turn_wait, &gauge));
        let (first, second) = (first.unwrap_err(), second.unwrap_err());
        let (first, second) = (first.wait.min(second.wait), first.wait.max(second.wait));
        assert!(first >= MIN_HOLD_BACK, "{first:?}");
        // Booked a call's time (10 ms) apart, not the 200 ms wait.
        assert!(second - first < Duration::from_millis(100), "{first:?} then {second:?}");
        assert_eq!(gauge.get(), 0);
    }

    /// Before any call has ended, a call that waited in vain is taken to last the whole
    /// wait: a door that never answers gets its held-back calls spread that far apart.
    /// A held-back call is demand for more turns for a second, as a waiting one is.
    #[tokio::test]
    async fn a_call_held_back_is_demand_for_more_turns() {
        let gauge = IntGauge::new("waiting", "test").unwrap();
        let turns = Turns::new(1);
        turns.record(10_000_000);
        assert!(!turns.has_demand(Instant::now()));
        let _busy = turns.semaphore.clone().try_acquire_owned().unwrap();
        // Expected to wait 10 s: held back at once, without waiting.
        turns.take(Duration::from_secs(1), &gauge).await.unwrap_err();
        assert_eq!(turns.waiting.load(Ordering::Relaxed), 0);
        assert!(turns.has_demand(Instant::now()));
        assert!(!turns.has_demand(Instant::now() + DEMAND_MEMORY), "forgotten after a second");
    }

    #[tokio::test]
    async fn without_a_pace_calls_that_waited_in_vain_are_booked_a_wait_apart() {
        let gauge = IntGauge::new("waiting", "test").unwrap();
        let turns = Turns::new(1);
        let _busy = turns.semaphore.clone().try_acquire_owned().unwrap();
        let turn_wait = Duration::from_millis(200);
        let (first, second) = tokio::join!(turns.take(turn_wait, &gauge), turns.take(turn_wait, &gauge));
        let (first, second) = (first.unwrap_err(), second.unwrap_err());
        let (first, second) = (first.wait.min(second.wait), first.wait.max(second.wait));
        assert!(second - first >= Duration::from_millis(150), "{first:?} then {second:?}");
    }
}
