//! Retry policy: how many attempts, and how long to wait between them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::timer::FieldError;

/// Per timer. Defaults: 3 attempts, waits of 1 s, 2 s (× 2 each time, at most 60 s),
/// each with up to ±20 % jitter so that many timers failing together do not retry in step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    #[serde(default = "defaults::max_attempts")]
    pub max_attempts: i32,
    #[serde(default = "defaults::initial_ms")]
    pub initial_ms: i32,
    #[serde(default = "defaults::multiplier")]
    pub multiplier: f64,
    #[serde(default = "defaults::max_ms")]
    pub max_ms: i32,
}

mod defaults {
    pub fn max_attempts() -> i32 {
        3
    }
    pub fn initial_ms() -> i32 {
        1_000
    }
    pub fn multiplier() -> f64 {
        2.0
    }
    pub fn max_ms() -> i32 {
        60_000
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: defaults::max_attempts(),
            initial_ms: defaults::initial_ms(),
            multiplier: defaults::multiplier(),
            max_ms: defaults::max_ms(),
        }
    }
}

/// The share of a wait that jitter may add or remove.
pub const JITTER: f64 = 0.2;

impl RetryPolicy {
    /// The same bounds as the schema's CHECK constraints, with the field named.
    pub fn validate(self) -> Result<Self, FieldError> {
        if !(1..=100).contains(&self.max_attempts) {
            return Err(FieldError::new("retry.max_attempts", "must be between 1 and 100"));
        }
        if self.initial_ms < 1 {
            return Err(FieldError::new("retry.initial_ms", "must be at least 1"));
        }
        if !(1.0..=10.0).contains(&self.multiplier) {
            return Err(FieldError::new("retry.multiplier", "must be between 1.0 and 10.0"));
        }
        if self.max_ms < 1 {
            return Err(FieldError::new("retry.max_ms", "must be at least 1"));
        }
        Ok(self)
    }

    /// Whether a failed attempt number `attempt` (from 1) leaves another one.
    pub fn has_attempt_after(&self, attempt: i32) -> bool {
        attempt < self.max_attempts
    }

    /// The wait after failed attempt `attempt` (from 1): initial × multiplier^(attempt−1),
    /// at most max, then jittered by `jitter` in [-1, 1] × JITTER.
    pub fn backoff(&self, attempt: i32, jitter: f64) -> Duration {
        let exp = self.multiplier.powi((attempt - 1).clamp(0, 64));
        let base = (self.initial_ms as f64 * exp).min(self.max_ms as f64);
        let jittered = base * (1.0 + JITTER * jitter.clamp(-1.0, 1.0));
        Duration::from_millis(jittered.max(0.0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_its_cap() {
        let p = RetryPolicy::default();
        let waits: Vec<u64> = (1..=8).map(|a| p.backoff(a, 0.0).as_millis() as u64).collect();
        assert_eq!(waits, vec![1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]);
    }

    #[test]
    fn jitter_stays_within_its_share() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff(2, 1.0).as_millis(), 2_400);
        assert_eq!(p.backoff(2, -1.0).as_millis(), 1_600);
        assert_eq!(p.backoff(2, 7.0).as_millis(), 2_400);
    }

    #[test]
    fn attempts_are_bounded() {
        let p = RetryPolicy { max_attempts: 2, ..Default::default() };
        assert!(p.has_attempt_after(1));
        assert!(!p.has_attempt_after(2));
        assert_eq!(RetryPolicy { max_attempts: 0, ..p }.validate().unwrap_err().field, "retry.max_attempts");
        assert_eq!(RetryPolicy { multiplier: 0.5, ..p }.validate().unwrap_err().field, "retry.multiplier");
    }
}
