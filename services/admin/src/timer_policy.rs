//! What a namespace's policy and the service's settings allow a timer, checked when one is
//! written through the API (the executor checks what it acts on again, since a timer may
//! be written with SQL).

use chrono::Utc;
use punctual_shared::fan_out::FanOutKind;
use punctual_shared::kafka_topics;
use punctual_shared::namespace_policy::{self, NamespaceLimits};
use punctual_shared::schedule::ScheduleKind;
use punctual_shared::target_guard::{Refused, TargetGuard};
use punctual_shared::timer::{Action, FieldError, NewTimer};

use crate::error::ApiError;
use crate::state::AppState;

/// Every check of a timer about to be stored against its namespace's policy (read here,
/// once): its target, how often it fires, and the topic it publishes to. Returns the
/// namespace's limits, for its quota.
pub async fn check(state: &AppState, timer: &NewTimer) -> Result<NamespaceLimits, ApiError> {
    let stored = namespace_policy::get(&state.pool, &timer.namespace).await?;
    let policy = stored.effective();
    let limits = stored.limits.effective_with(&state.namespace_defaults());
    check_target(&state.guard.with(&policy.callback_allow), timer)?;
    check_density(chrono::Duration::milliseconds(i64::from(limits.min_fire_interval_ms)), timer)?;
    if let Action::Kafka(kafka) = &timer.action {
        if let Some(refused) = kafka_topics::refusal(&kafka.topic, &policy.kafka_topics, &state.service_topics) {
            return Err(FieldError::new("action.kafka.topic", refused).into());
        }
    }
    Ok(limits)
}

/// A callback URL (the action's, and a broadcast's) whose host is a literal address the
/// executor would refuse is refused here already; a host name is judged when the executor
/// resolves it, at every call.
fn check_target(guard: &TargetGuard, timer: &NewTimer) -> Result<(), ApiError> {
    let Action::Http(http) = &timer.action else {
        return Ok(());
    };
    let refused = |field: String| move |refused: Refused| ApiError::from(FieldError::new(field, refused.to_string()));
    guard.check_url(&http.url).map_err(refused("action.http.url".to_owned()))?;
    if let FanOutKind::Urls(urls) = &timer.fan_out {
        for (i, url) in urls.iter().enumerate() {
            guard.check_url(url).map_err(refused(format!("fan_out.broadcast[{i}]")))?;
        }
    }
    Ok(())
}

/// How many of a cron schedule's next fires are compared with the minimum interval.
const DENSITY_SAMPLE: usize = 100;

/// A timer may not fire more often than `min` allows: an interval below it, or a schedule
/// with two of its next fires closer than it, is refused.
fn check_density(min: chrono::Duration, timer: &NewTimer) -> Result<(), ApiError> {
    let now = Utc::now();
    let fires = timer.schedule.upcoming(now, now, DENSITY_SAMPLE);
    let closest = fires.windows(2).map(|w| w[1] - w[0]).min();
    match closest {
        Some(gap) if gap < min => {
            let field = if matches!(timer.schedule.kind, ScheduleKind::Interval { .. }) {
                "schedule.every_ms"
            } else {
                "schedule.cron"
            };
            Err(FieldError::new(
                field,
                format!(
                    "fires {} ms apart; its namespace allows one fire every {} ms at most (its policy's min_fire_interval_ms, by default PUNCTUAL_MIN_FIRE_INTERVAL_MS)",
                    gap.num_milliseconds(),
                    min.num_milliseconds()
                ),
            )
            .into())
        }
        _ => Ok(()),
    }
}
