//! What every handler shares.

use std::sync::Arc;

use chrono::{DateTime, Utc};
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
}

impl AppState {
    /// A timer as answered: its secret headers redacted.
    pub fn view(&self, row: &TimerRow, now: DateTime<Utc>) -> TimerView {
        let mut view = TimerView::from_row(row, now);
        self.secret_headers.redact(&mut view);
        view
    }
}
