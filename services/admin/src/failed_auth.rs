//! Requests without a valid API key (none, malformed, unknown or revoked), counted per
//! client. Past its budget a client's requests are refused with 429 for [`PENALTY`],
//! before any key is looked up: a valid key has a rate of its own ([`crate::auth`]), and
//! this bounds what a client without one makes the database do.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::DefaultKeyedRateLimiter;

use crate::request_budget;

/// How long a client past its budget is refused. Longer than the budget's refill of one
/// request, so that a client sending many at once is not let in again a moment later.
pub const PENALTY: Duration = Duration::from_secs(1);

/// Clients remembered before the first sweep of those whose budget is full again (or
/// whose penalty is over). After a sweep the next comes at twice the clients left, so a
/// failure costs amortized constant time however many clients are refused at once.
#[cfg(not(test))]
const FIRST_SWEEP_AT: usize = 10_000;
// Small in tests, so that one fills it well within a penalty.
#[cfg(test)]
const FIRST_SWEEP_AT: usize = 100;

pub struct FailedAuthLimiter {
    budget: DefaultKeyedRateLimiter<IpAddr>,
    budget_sweep_at: AtomicUsize,
    refusals: Mutex<Refusals>,
}

struct Refusals {
    until: HashMap<IpAddr, Instant>,
    sweep_at: usize,
}

/// The client an address belongs to: an IPv4 address, or the /64 network of an IPv6
/// one, since a single host is routinely given a whole /64 and could otherwise spread its
/// failures over as many addresses as it likes.
pub fn client_of(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(_) => peer,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(v6.to_bits() & !u128::from(u64::MAX))),
        },
    }
}

fn next_sweep_at(left: usize) -> usize {
    left.saturating_mul(2).max(FIRST_SWEEP_AT)
}

impl FailedAuthLimiter {
    /// `rate` failures a second per client, in bursts of up to twice as many.
    pub fn new(rate: NonZeroU32) -> Self {
        Self {
            budget: request_budget::keyed(rate),
            budget_sweep_at: AtomicUsize::new(FIRST_SWEEP_AT),
            refusals: Mutex::new(Refusals { until: HashMap::new(), sweep_at: FIRST_SWEEP_AT }),
        }
    }

    /// How long `peer`'s client must still wait, if it is refused now.
    pub fn refused(&self, peer: IpAddr) -> Option<Duration> {
        let refusals = self.refusals.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        refusals.until.get(&client_of(peer)).and_then(|until| until.checked_duration_since(Instant::now()))
    }

    /// Counts a failure of `peer`'s client; how long it must wait if that spent its budget.
    pub fn failed(&self, peer: IpAddr) -> Option<Duration> {
        let client = client_of(peer);
        // Two threads may both sweep; that costs time, never a refusal.
        if self.budget.len() >= self.budget_sweep_at.load(Ordering::Relaxed) {
            self.budget.retain_recent();
            self.budget_sweep_at.store(next_sweep_at(self.budget.len()), Ordering::Relaxed);
        }
        let not_until = self.budget.check_key(&client).err()?;
        let wait = not_until.wait_time_from(DefaultClock::default().now()).max(PENALTY);
        let now = Instant::now();
        let mut refusals = self.refusals.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if refusals.until.len() >= refusals.sweep_at {
            refusals.until.retain(|_, until| *until > now);
            refusals.sweep_at = next_sweep_at(refusals.until.len());
        }
        let until = refusals.until.entry(client).or_insert(now);
        *until = (*until).max(now + wait);
        Some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spend_budget(limiter: &FailedAuthLimiter, peer: IpAddr) -> Duration {
        (0..100).find_map(|_| limiter.failed(peer)).expect("a budget is spent within 100 failures")
    }

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

    #[test]
    fn an_ipv6_network_of_64_bits_is_one_client() {
        let limiter = FailedAuthLimiter::new(NonZeroU32::new(1).unwrap());
        let first: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        spend_budget(&limiter, first);
        let same_network: IpAddr = "2001:db8:1:2:ffff:ffff:ffff:ffff".parse().unwrap();
        assert!(limiter.refused(same_network).is_some());
        let next_network: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert!(limiter.refused(next_network).is_none());
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(client_of(mapped), "192.0.2.7".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn a_sweep_keeps_the_refused_and_comes_again_only_at_twice_the_clients_left() {
        let limiter = FailedAuthLimiter::new(NonZeroU32::new(1).unwrap());
        let first: IpAddr = "198.51.100.1".parse().unwrap();
        spend_budget(&limiter, first);
        for n in 0..FIRST_SWEEP_AT as u32 {
            spend_budget(&limiter, IpAddr::V4((0x0a00_0000 + n).into()));
        }
        let refusals = limiter.refusals.lock().unwrap();
        assert_eq!(refusals.until.len(), FIRST_SWEEP_AT + 1, "every client is still refused: the sweep kept them");
        assert_eq!(refusals.sweep_at, 2 * FIRST_SWEEP_AT);
        drop(refusals);
        assert!(limiter.refused(first).is_some());
    }
}
