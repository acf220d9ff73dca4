//! Requests without a valid API key (none, malformed, unknown or revoked), counted per
//! client address. Past its budget an address's requests are refused with 429 for
//! [`PENALTY`], before any key is looked up: a valid key has a rate of its own
//! ([`crate::auth`]), and this bounds what a client without one makes the database do.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// How long an address past its budget is refused. Longer than the budget's refill of one
/// request, so that a client sending many at once is not let in again a moment later.
pub const PENALTY: Duration = Duration::from_secs(1);

/// Past this many addresses remembered, the ones whose budget is full again are forgotten.
const MAX_TRACKED: usize = 10_000;

pub struct FailedAuthLimiter {
    budget: DefaultKeyedRateLimiter<IpAddr>,
    refused_until: Mutex<HashMap<IpAddr, Instant>>,
}

impl FailedAuthLimiter {
    /// `rate` failures a second per address, in bursts of up to twice as many.
    pub fn new(rate: NonZeroU32) -> Self {
        let burst = rate.saturating_mul(NonZeroU32::new(2).expect("2 is not zero"));
        Self {
            budget: RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst)),
            refused_until: Mutex::new(HashMap::new()),
        }
    }

    /// How long `peer` must still wait, if it is refused now.
    pub fn refused(&self, peer: IpAddr) -> Option<Duration> {
        let refused_until = self.refused_until.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        refused_until.get(&peer).and_then(|until| until.checked_duration_since(Instant::now()))
    }

    /// Counts a failure of `peer`'s; how long it must wait if that spent its budget.
    pub fn failed(&self, peer: IpAddr) -> Option<Duration> {
        if self.budget.len() > MAX_TRACKED {
            self.budget.retain_recent();
        }
        let not_until = self.budget.check_key(&peer).err()?;
        let wait = not_until.wait_time_from(DefaultClock::default().now()).max(PENALTY);
        let now = Instant::now();
        let mut refused_until = self.refused_until.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if refused_until.len() > MAX_TRACKED {
            refused_until.retain(|_, until| *until > now);
        }
        let until = refused_until.entry(peer).or_insert(now);
        *until = (*until).max(now + wait);
        Some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_past_its_budget_is_refused_and_others_are_not() {
        let limiter = FailedAuthLimiter::new(NonZeroU32::new(2).unwrap());
        let noisy: IpAddr = "192.0.2.1".parse().unwrap();
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..4 {
            assert_eq!(limiter.failed(noisy), None, "a burst of twice the rate is allowed");
        }
        assert!(limiter.refused(noisy).is_none());
        let wait = limiter.failed(noisy).expect("the fifth failure in a burst spends the budget");
        assert_eq!(wait, PENALTY);
        assert!(limiter.refused(noisy).is_some());
        assert!(limiter.refused(other).is_none());
        assert_eq!(limiter.failed(other), None);
    }
}
