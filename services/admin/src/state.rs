//! What every handler shares.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use punctual_shared::namespace_policy::NamespaceLimits;
use punctual_shared::sealed::SecretKeys;
use punctual_shared::target_guard::TargetGuard;
use punctual_shared::timer::TimerRow;
use sqlx::PgPool;

use crate::metrics::Metrics;
use crate::secret_headers::SecretHeaders;
use crate::timer_view::TimerView;

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub metrics: Metrics,
    /// Which callback addresses are allowed (`PUNCTUAL_CALLBACK_ALLOW`).
    pub guard: Arc<TargetGuard>,
    /// Which callback headers no answer shows.
    pub secret_headers: SecretHeaders,
    /// The shortest time between two fires of one timer (`PUNCTUAL_MIN_FIRE_INTERVAL_MS`).
    pub min_fire_interval: chrono::Duration,
    /// The most live timers a namespace holds (`PUNCTUAL_NAMESPACE_MAX_TIMERS`).
    pub namespace_max_timers: i64,
    /// The service's own Kafka topics (tasks, dead letters), which no timer may publish to.
    pub service_topics: Arc<[String]>,
    /// The keys that seal secrets at rest (`PUNCTUAL_SECRET_KEY`).
    pub secret_keys: Arc<SecretKeys>,
}

impl AppState {
    /// The limits of a namespace without its own: the defaults, with the service's quota
    /// of timers and shortest fire interval.
    pub fn namespace_defaults(&self) -> NamespaceLimits {
        NamespaceLimits {
            max_timers: self.namespace_max_timers.clamp(0, i64::from(u32::MAX)) as u32,
            min_fire_interval_ms: self.min_fire_interval.num_milliseconds().clamp(0, i64::from(u32::MAX)) as u32,
            ..NamespaceLimits::default()
        }
    }

    /// A timer as answered: its secret headers redacted.
    pub fn view(&self, row: &TimerRow, now: DateTime<Utc>) -> TimerView {
        let mut view = TimerView::from_row(row, now);
        self.secret_headers.redact(&mut view);
        view
    }
}
