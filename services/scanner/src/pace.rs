//! The scan loop's pace: the scan interval while scans find work, doubling while they find
//! none, up to the idle interval; and what wakes it sooner.

use std::time::Duration;

use tokio::sync::Notify;

/// What wakes the scan loop before its interval is up.
#[derive(Debug, Default)]
pub struct Wakes {
    /// A timer written (`punctual_timers`) or buckets acquired: a scan at once.
    pub now: Notify,
    /// A task made pending (`punctual_tasks`): a scan at once while backed off. Otherwise
    /// the next scan, a scan interval away at most, takes it anyway, and under load a scan
    /// for each notification would only add scans.
    pub pending: Notify,
}

/// How long the scan loop waits between scans.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    base: Duration,
    idle: Duration,
    current: Duration,
}

impl Pace {
    pub fn new(base: Duration, idle: Duration) -> Self {
        Self { base, idle: idle.max(base), current: base }
    }

    /// The wait after a scan that found work (or failed: try again soon) or found none.
    pub fn after(&mut self, found_work: bool) -> Duration {
        self.current = if found_work { self.base } else { (self.current * 2).min(self.idle) };
        self.current
    }

    /// Whether the loop waits longer than the scan interval now.
    pub fn backed_off(&self) -> bool {
        self.current > self.base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_while_scans_find_nothing_and_is_the_interval_again_after_work() {
        let ms = Duration::from_millis;
        let mut pace = Pace::new(ms(200), ms(2_000));
        assert!(!pace.backed_off());
        let waits: Vec<u128> = (0..6).map(|_| pace.after(false).as_millis()).collect();
        assert_eq!(waits, [400, 800, 1_600, 2_000, 2_000, 2_000]);
        assert!(pace.backed_off());
        assert_eq!(pace.after(true), ms(200));
        assert!(!pace.backed_off());
        // An idle interval equal to the scan interval: no backoff.
        let mut steady = Pace::new(ms(200), ms(200));
        assert_eq!(steady.after(false), ms(200));
        assert!(!steady.backed_off());
    }
}
