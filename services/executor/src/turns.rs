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
    /// Calls ended in the current pace window, which began at `window_us` (since `epoch`).
    ended_in_window: AtomicU64,
    window_us: AtomicU64,
    /// The time between two calls' ends over the last full window, in µs (0: none yet).
    ended_every_us: AtomicU64,
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
/// The window over which the calls' ends are counted for the door's pace; a count older
/// than two windows (no call ended since) is not used.
const PACE_WINDOW: Duration = Duration::from_secs(1);

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
            ended_in_window: AtomicU64::new(0),
            window_us: AtomicU64::new(0),
            ended_every_us: AtomicU64::new(0),
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

    /// A call ended at `ended` after `took_us`: returns the calls' running mean, in µs.
    pub fn record(&self, ended: Instant, took_us: u64) -> u64 {
        // A running mean (1/16 of each call), updated without a lock: a lost update between
        // two calls ending at once only makes it a little less exact.
        let mean_us = self.mean_us.load(Ordering::Relaxed);
        let mean_us = if mean_us == 0 { took_us.max(1) } else { mean_us - mean_us / 16 + took_us / 16 };
        self.mean_us.store(mean_us, Ordering::Relaxed);
        let now_us = self.micros_at(ended);
        let count = self.ended_in_window.fetch_add(1, Ordering::Relaxed) + 1;
        let began_us = self.window_us.load(Ordering::Relaxed);
        let elapsed_us = now_us.saturating_sub(began_us);
        if elapsed_us >= PACE_WINDOW.as_micros() as u64
            && self.window_us.compare_exchange(began_us, now_us, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            self.ended_every_us.store((elapsed_us / count).max(1), Ordering::Relaxed);
            self.ended_in_window.store(0, Ordering::Relaxed);
        }
        mean_us
    }

    fn mean(&self) -> Duration {
        Duration::from_micros(self.mean_us.load(Ordering::Relaxed))
    }

    /// The time between two turns at `now`, in µs (0 while no call has ended): the calls'
    /// mean over the limit, or the time between the calls' ends over the last second when
    /// that is shorter. The mean follows each call, so a stall of a few ms on this machine
    /// (every call in flight ends that much later) multiplies it for a moment, while the
    /// door goes on letting calls through at the pace it had: a wait or a booking from the
    /// mean alone turned 50 ms into seconds of calls held back.
    fn per_turn_us(&self, now: Instant) -> u64 {
        let by_mean = self.mean_us.load(Ordering::Relaxed) / self.limit().max(1) as u64;
        let every_us = self.ended_every_us.load(Ordering::Relaxed);
        let fresh = self.micros_at(now).saturating_sub(self.window_us.load(Ordering::Relaxed))
            < 2 * PACE_WINDOW.as_micros() as u64;
        let by_ends = if fresh { every_us } else { 0 };
        // 0 is "not known": the smaller of those known.
        [by_mean, by_ends].into_iter().filter(|us| *us > 0).min().unwrap_or(0)
    }

    /// How long a call that starts waiting at `now` should wait for its turn, from the
    /// calls waiting and the door's pace (zero while no call has ended).
    fn expected_wait(&self, now: Instant) -> Duration {
        let waiting = self.waiting.load(Ordering::Relaxed) as u64;
        Duration::from_micros(self.per_turn_us(now).saturating_mul(waiting + 1))
    }

    /// Books a later turn for a call held back at `now`, turns coming `per_turn` apart,
    /// and returns how long after `now` it is: after the turns booked before it, after the
    /// calls waiting here and after the door opens again, at least [`MIN_HOLD_BACK`].
    fn book_later(&self, now: Instant, per_turn: Duration) -> Duration {
        let per_turn_us = (per_turn.as_micros().min(u128::from(u64::MAX)) as u64).max(1);
        let now_us = self.micros_at(now);
        let soonest_us = (now_us + self.expected_wait(now).max(MIN_HOLD_BACK).as_micros() as u64)
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
            let per_turn = per_call / self.limit().max(1) as u32;
            return Err(HeldBack { wait: self.book_later(now, per_turn), asked: true });
        }
        if let Ok(permit) = self.semaphore.clone().try_acquire_owned() {
            return Ok(permit);
        }
        if self.expected_wait(now) > turn_wait {
            self.held_back_us.store(self.micros_at(now).max(1), Ordering::Relaxed);
            let per_turn = Duration::from_micros(self.per_turn_us(now));
            return Err(HeldBack { wait: self.book_later(now, per_turn), asked: false });
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
                let per_turn = match self.per_turn_us(now) {
                    0 => turn_wait / self.limit().max(1) as u32,
                    us => Duration::from_micros(us),
                };
                Err(HeldBack { wait: self.book_later(now, per_turn), asked: false })
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
        turns.record(Instant::now(), 10_000);
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
        turns.record(Instant::now(), 10_000_000);
        assert!(!turns.has_demand(Instant::now()));
        let _busy = turns.semaphore.clone().try_acquire_owned().unwrap();
        // Expected to wait 10 s: held back at once, without waiting.
        turns.take(Duration::from_secs(1), &gauge).await.unwrap_err();
        assert_eq!(turns.waiting.load(Ordering::Relaxed), 0);
        assert!(turns.has_demand(Instant::now()));
        assert!(!turns.has_demand(Instant::now() + DEMAND_MEMORY), "forgotten after a second");
    }

    /// A door that let 20,000 calls a second through over the last second, whose calls
    /// then take 40 ms for a moment (this machine stalled): 4,000 calls waiting are 0.2 s of
    /// turns at the pace it had, not 9 s at the mean's, so a call waits its turn rather
    /// than being held back at once, and one that waited in vain is booked at that pace.
    #[tokio::test]
    async fn a_moments_slow_calls_do_not_hold_back_calls_at_a_fast_doors_pace() {
        let gauge = IntGauge::new("waiting", "test").unwrap();
        let turns = Turns::new(16);
        let start = Instant::now();
        for i in 0..=20_000u64 {
            turns.record(start + Duration::from_micros(50 * i) + Duration::from_micros(1), 300);
        }
        for _ in 0..40 {
            turns.record(start + Duration::from_millis(1_001), 40_000);
        }
        assert!(turns.mean() > Duration::from_millis(30), "{:?}", turns.mean());
        assert!((45..=55).contains(&turns.per_turn_us(Instant::now())), "{}", turns.per_turn_us(Instant::now()));
        let _busy: Vec<_> = (0..16).map(|_| turns.semaphore.clone().try_acquire_owned().unwrap()).collect();
        turns.waiting.store(4_000, Ordering::Relaxed);
        let started = Instant::now();
        let turn_wait = Duration::from_millis(300);
        let (first, second) = tokio::join!(turns.take(turn_wait, &gauge), turns.take(turn_wait, &gauge));
        assert!(started.elapsed() >= Duration::from_millis(250), "waited for a turn: {:?}", started.elapsed());
        let (first, second) = (first.unwrap_err(), second.unwrap_err());
        let (first, second) = (first.wait.min(second.wait), first.wait.max(second.wait));
        assert!(first < Duration::from_millis(1_500), "{first:?}");
        assert!(second - first < Duration::from_millis(10), "{first:?} then {second:?}");
        // Two windows after the last call's end, that pace is not known any more: the mean's.
        assert_eq!(turns.per_turn_us(start + Duration::from_millis(3_100)), turns.mean().as_micros() as u64 / 16);
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
