//! Each namespace's policy (table `namespaces`, see [`punctual_shared::namespace_policy`]),
//! held in memory and read again every few seconds, and the turns of its calls in this
//! executor: a call is limited, and a topic checked, without a query, and a changed policy
//! applies within [`REFRESH_INTERVAL`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use punctual_runtime::periodic::Ticks;
use punctual_shared::kafka_topics;
use punctual_shared::namespace_policy::{self, NamespaceLimits, NamespacePolicy};
use punctual_shared::target_guard::TargetGuard;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::turns::{Turns, MIN_HOLD_BACK};
use punctual_shared::unpoisoned;

/// How often the limits are read again.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Default)]
pub struct Namespaces {
    /// The namespaces with a policy of their own; the others have the default.
    policies: RwLock<HashMap<String, NamespacePolicy>>,
    /// The service's own topics (tasks, dead letters), which no timer may publish to.
    service_topics: Vec<String>,
    /// One entry per namespace run since the start.
    states: Mutex<HashMap<String, Arc<NamespaceState>>>,
}

/// What this executor keeps of one namespace: the turns of its calls and the pace of its
/// fires, at its limits.
pub struct NamespaceState {
    pub limits: NamespaceLimits,
    /// At most `max_concurrent_calls` calls at once.
    pub turns: Turns,
    /// At most `max_fires_per_second`.
    pub rate: Rate,
}

impl Namespaces {
    pub fn new(service_topics: Vec<String>) -> Self {
        Namespaces { service_topics, ..Default::default() }
    }

    pub fn limits(&self, namespace: &str) -> NamespaceLimits {
        unpoisoned::read(&self.policies).get(namespace).map(|p| p.limits).unwrap_or_default()
    }

    /// What the namespace's callbacks may reach beyond the service's guard (nothing more
    /// for most).
    pub fn callback_allow(&self, namespace: &str) -> TargetGuard {
        let policies = unpoisoned::read(&self.policies);
        policies.get(namespace).map(|p| p.callback_allow.clone()).unwrap_or_default()
    }

    /// Why the namespace's timers may not publish to `topic`, or `None`: a timer written
    /// with SQL is not checked by the API.
    pub fn kafka_refusal(&self, namespace: &str, topic: &str) -> Option<String> {
        let policies = unpoisoned::read(&self.policies);
        let allowed = policies.get(namespace).map(|p| &p.kafka_topics);
        kafka_topics::refusal(topic, allowed.unwrap_or(&Default::default()), &self.service_topics)
    }

    /// The namespace's state at its current limits. A changed limit starts a new count:
    /// the calls in flight under the old one are not counted against the new one, so for
    /// as long as they run the namespace may have both.
    pub fn state(&self, namespace: &str) -> Arc<NamespaceState> {
        let limits = self.limits(namespace);
        let mut states = unpoisoned::lock(&self.states);
        match states.get(namespace) {
            Some(held) if held.limits == limits => held.clone(),
            _ => {
                let fresh = Arc::new(NamespaceState {
                    limits,
                    turns: Turns::new(limits.max_concurrent_calls as usize),
                    rate: Rate::new(limits.max_fires_per_second),
                });
                states.insert(namespace.to_owned(), fresh.clone());
                fresh
            }
        }
    }

    pub async fn refresh(&self, pool: &PgPool) -> Result<(), sqlx::Error> {
        let policies = namespace_policy::all(pool).await?;
        *unpoisoned::write(&self.policies) = policies;
        Ok(())
    }

    /// Refreshes every [`REFRESH_INTERVAL`] until cancelled; a failed read keeps the
    /// limits held.
    pub async fn refresh_periodically(self: Arc<Self>, pool: PgPool, token: CancellationToken) {
        let mut ticks = Ticks::every_from_now(REFRESH_INTERVAL, token);
        while ticks.next().await {
            if let Err(e) = self.refresh(&pool).await {
                tracing::warn!(error = %e, "reading the namespaces' limits failed; the ones held still apply");
            }
        }
    }
}

/// At most a number of fires a second, in bursts of up to a second's worth (a generic cell
/// rate). A fire beyond it is not admitted but given a later time, spread at the rate
/// after the others turned away: it is deferred to then and tries again, as a new fire,
/// so that a burst drains at the rate while one past it does not hold slots reserved.
pub struct Rate {
    per_fire_us: u64,
    burst_us: u64,
    epoch: Instant,
    /// The theoretical arrival time of the next fire, in µs since `epoch`.
    tat_us: AtomicU64,
    /// The time given to the last fire turned away, in µs since `epoch`.
    booked_us: AtomicU64,
}

impl Rate {
    pub fn new(per_second: u32) -> Self {
        let per_fire_us = 1_000_000 / u64::from(per_second.max(1));
        Rate {
            per_fire_us,
            burst_us: 1_000_000,
            epoch: Instant::now(),
            tat_us: AtomicU64::new(0),
            booked_us: AtomicU64::new(0),
        }
    }

    /// Admits a fire now, or `Err(wait)`: how long until it should try again.
    pub fn admit(&self) -> Result<(), Duration> {
        // Counted from a burst before `epoch`, so that a new rate has a burst to give.
        let now_us = self.epoch.elapsed().as_micros() as u64 + self.burst_us;
        let mut tat = self.tat_us.load(Ordering::Relaxed);
        while tat <= now_us {
            let slot = tat.max(now_us.saturating_sub(self.burst_us));
            match self.tat_us.compare_exchange_weak(tat, slot + self.per_fire_us, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(current) => tat = current,
            }
        }
        let soonest = tat.max(now_us + MIN_HOLD_BACK.as_micros() as u64);
        let mut booked = self.booked_us.load(Ordering::Relaxed);
        loop {
            let at = booked.max(soonest);
            match self.booked_us.compare_exchange_weak(
                booked,
                at + self.per_fire_us,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Err(Duration::from_micros(at - now_us)),
                Err(current) => booked = current,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_admits_a_seconds_worth_at_once_then_spreads_the_others() {
        let rate = Rate::new(10);
        let admitted = (0..30).filter(|_| rate.admit().is_ok()).count();
        assert!((10..=11).contains(&admitted), "a second's worth at once: {admitted}");
        let waits: Vec<Duration> = (0..5).map(|_| rate.admit().unwrap_err()).collect();
        assert!(waits[0] >= MIN_HOLD_BACK, "{waits:?}");
        for pair in waits.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_millis(99), "spread at the rate: {waits:?}");
        }
        std::thread::sleep(Duration::from_millis(250));
        assert!(rate.admit().is_ok(), "admitted again as the rate allows");
    }
}
