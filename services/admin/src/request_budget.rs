//! The admin's request budgets, kept per key (an API key, a client address): `rate`
//! requests a second in bursts of up to twice as many.

use std::hash::Hash;
use std::num::NonZeroU32;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

pub fn keyed<K: Hash + Eq + Clone>(rate: NonZeroU32) -> DefaultKeyedRateLimiter<K> {
    let burst = rate.saturating_mul(NonZeroU32::new(2).expect("2 is not zero"));
    RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
}
