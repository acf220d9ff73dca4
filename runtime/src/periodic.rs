//! Work repeated at a fixed period until cancelled: `while ticks.next().await { … }`.

use std::time::Duration;

use tokio::time::{Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

pub struct Ticks {
    interval: Interval,
    token: CancellationToken,
}

impl Ticks {
    /// Every `period`, the first tick at once. A tick missed while the work ran late is
    /// not made up: the next comes a period after the late one.
    pub fn every(period: Duration, token: CancellationToken) -> Self {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self { interval, token }
    }

    /// Every `period`, the first tick a period from now.
    pub fn every_from_now(period: Duration, token: CancellationToken) -> Self {
        let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self { interval, token }
    }

    /// Waits for the next tick: `true`, or `false` once cancelled.
    pub async fn next(&mut self) -> bool {
        tokio::select! {
            // A cancelled token wins over a tick that is due too.
            biased;
            _ = self.token.cancelled() => false,
            _ = self.interval.tick() => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ticks_until_cancelled() {
        let period = Duration::from_millis(50);
        let token = CancellationToken::new();
        let start = tokio::time::Instant::now();
        let mut at_once = Ticks::every(period, token.clone());
        let mut later = Ticks::every_from_now(period, token.clone());
        assert!(at_once.next().await);
        assert!(start.elapsed() < period);
        assert!(later.next().await);
        assert!(start.elapsed() >= period);
        token.cancel();
        assert!(!at_once.next().await);
        assert!(!later.next().await);
    }
}
