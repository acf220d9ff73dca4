//! A timer as the API answers it, and the body of a change to one.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use punctual_shared::fan_out::FanOut;
use punctual_shared::policy::{MisfirePolicy, OverlapPolicy};
use punctual_shared::retry::RetryPolicy;
use punctual_shared::timer::{
    Action, ActionSpec, HttpAction, HttpActionSpec, KafkaAction, KafkaActionSpec, ScheduleSpec, TimerRow, TimerSpec,
};
use punctual_shared::timer_state::{PlanStatus, TimerState};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

/// How many of its next fire times a timer's answer lists.
const NEXT_FIRE_TIMES: usize = 5;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TimerView {
    pub id: Uuid,
    pub namespace: String,
    pub name: String,
    pub schedule: ScheduleSpec,
    pub action: Action,
    pub retry: RetryPolicy,
    pub misfire_policy: MisfirePolicy,
    pub catchup_window_ms: i64,
    pub overlap_policy: OverlapPolicy,
    /// Present when each occurrence is split into shards.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fan_out: Option<FanOut>,
    pub state: TimerState,
    /// Why it was last paused or resumed, as the operator put it.
    pub state_note: Option<String>,
    /// Bumped by every change of the schedule or action.
    pub version: i64,
    /// Bumped by every change of the timer: what a PATCH is conditional on.
    pub revision: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub plan_status: PlanStatus,
    pub invalid_reason: Option<String>,
    /// The next (at most 5) fire times of an active timer.
    pub next_fire_times: Vec<DateTime<Utc>>,
}

/// A header map as stored; values that are not strings (a SQL insert may write them) are
/// shown as their JSON text.
fn headers(stored: &Value) -> BTreeMap<String, String> {
    stored
        .as_object()
        .map(|map| {
            map.iter()
                .map(|(name, value)| {
                    let value = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
                    (name.clone(), value)
                })
                .collect()
        })
        .unwrap_or_default()
}

impl TimerView {
    /// The row as stored, whether or not it is valid: a timer inserted with SQL that the
    /// planner refused is shown as it is, with its `invalid_reason`.
    pub fn from_row(row: &TimerRow, now: DateTime<Utc>) -> Self {
        let mut schedule = ScheduleSpec { start_at: row.start_at, end_at: row.end_at, ..Default::default() };
        match row.schedule_kind.as_str() {
            "once" => schedule.at = row.run_at,
            "delay" => schedule.delay_ms = row.delay_ms,
            "interval" => schedule.every_ms = row.interval_ms,
            _ => {
                schedule.cron = row.cron_expr.clone();
                schedule.timezone = Some(row.timezone.clone());
                schedule.dst_gap = Some(row.dst_gap);
            }
        }
        let action = if row.action_kind == "kafka" {
            Action::Kafka(KafkaAction {
                topic: row.kafka_topic.clone().unwrap_or_default(),
                key: row.kafka_key.clone(),
                headers: headers(&row.kafka_headers),
                value: row.kafka_value.clone().unwrap_or(Value::Null),
            })
        } else {
            Action::Http(HttpAction {
                method: row.http_method.clone(),
                url: row.http_url.clone().unwrap_or_default(),
                headers: headers(&row.http_headers),
                body: row.http_body.clone(),
                timeout_ms: row.http_timeout_ms,
            })
        };
        let next_fire_times = match (row.state, row.schedule()) {
            (TimerState::Active, Ok(s)) => s.upcoming(row.created_at, now, NEXT_FIRE_TIMES),
            _ => Vec::new(),
        };
        Self {
            id: row.id,
            namespace: row.namespace.clone(),
            name: row.name.clone(),
            schedule,
            action,
            retry: RetryPolicy {
                max_attempts: row.retry_max_attempts,
                initial_ms: row.retry_initial_ms,
                multiplier: row.retry_multiplier,
                max_ms: row.retry_max_ms,
            },
            misfire_policy: row.misfire_policy,
            catchup_window_ms: row.catchup_window_ms,
            overlap_policy: row.overlap_policy,
            fan_out: row.fan_out().ok().as_ref().and_then(FanOut::of),
            state: row.state,
            state_note: row.state_note.clone(),
            version: row.version,
            revision: row.revision,
            created_at: row.created_at,
            updated_at: row.updated_at,
            plan_status: row.plan_status,
            invalid_reason: row.invalid_reason.clone(),
            next_fire_times,
        }
    }

    /// The timer's definition, as a body that would create it.
    pub fn to_spec(&self) -> TimerSpec {
        let action = match &self.action {
            Action::Http(h) => ActionSpec {
                http: Some(HttpActionSpec {
                    method: Some(h.method.clone()),
                    url: h.url.clone(),
                    headers: h.headers.clone(),
                    body: h.body.clone(),
                    timeout_ms: Some(h.timeout_ms.into()),
                }),
                kafka: None,
            },
            Action::Kafka(k) => ActionSpec {
                http: None,
                kafka: Some(KafkaActionSpec {
                    topic: k.topic.clone(),
                    key: k.key.clone(),
                    headers: k.headers.clone(),
                    value: k.value.clone(),
                }),
            },
        };
        TimerSpec {
            namespace: Some(self.namespace.clone()),
            name: self.name.clone(),
            schedule: self.schedule.clone(),
            action,
            retry: Some(self.retry),
            misfire_policy: Some(self.misfire_policy),
            catchup_window_ms: Some(self.catchup_window_ms),
            overlap_policy: Some(self.overlap_policy),
            fan_out: self.fan_out.clone(),
        }
    }
}

/// `PATCH /v1/timers/{id}`: the revision read, and the fields to change; a field left out
/// keeps its value. `retry` is replaced as a whole (its fields left out take their
/// defaults); `null` sets `retry`, a policy or `catchup_window_ms` back to its default.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TimerPatch {
    /// The timer's `revision` as read: if it changed since, nothing is written (409).
    pub revision: i64,
    /// Ignored: it follows the schedule and action.
    #[serde(default)]
    pub version: Option<i64>,
    /// Cannot change: if given, it must be the timer's.
    #[serde(default, deserialize_with = "not_null")]
    pub namespace: Option<String>,
    #[serde(default, deserialize_with = "not_null")]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "not_null")]
    pub schedule: Option<ScheduleSpec>,
    #[serde(default, deserialize_with = "not_null")]
    pub action: Option<ActionSpec>,
    #[serde(default, deserialize_with = "null_is_default")]
    #[schema(value_type = Option<RetryPolicy>)]
    pub retry: Option<Option<RetryPolicy>>,
    #[serde(default, deserialize_with = "null_is_default")]
    #[schema(value_type = Option<MisfirePolicy>)]
    pub misfire_policy: Option<Option<MisfirePolicy>>,
    #[serde(default, deserialize_with = "null_is_default")]
    #[schema(value_type = Option<i64>)]
    pub catchup_window_ms: Option<Option<i64>>,
    #[serde(default, deserialize_with = "null_is_default")]
    #[schema(value_type = Option<OverlapPolicy>)]
    pub overlap_policy: Option<Option<OverlapPolicy>>,
    /// Applies from the next occurrence not yet started; `null`: one call an occurrence.
    #[serde(default, deserialize_with = "null_is_default")]
    #[schema(value_type = Option<FanOut>)]
    pub fan_out: Option<Option<FanOut>>,
}

/// A field that, when given, is not `null`.
fn not_null<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(de: D) -> Result<Option<T>, D::Error> {
    Option::<T>::deserialize(de)?
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom("must not be null: leave the field out to keep its value"))
}

/// A field given (`Some`), as a value or as `null` (`Some(None)`: its default).
pub(crate) fn null_is_default<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    de: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(de).map(Some)
}

impl TimerPatch {
    /// `current` with the fields this patch gives.
    pub fn apply(self, current: TimerSpec) -> TimerSpec {
        TimerSpec {
            namespace: current.namespace,
            name: self.name.unwrap_or(current.name),
            schedule: self.schedule.unwrap_or(current.schedule),
            action: self.action.unwrap_or(current.action),
            retry: self.retry.unwrap_or(current.retry),
            misfire_policy: self.misfire_policy.unwrap_or(current.misfire_policy),
            catchup_window_ms: self.catchup_window_ms.unwrap_or(current.catchup_window_ms),
            overlap_policy: self.overlap_policy.unwrap_or(current.overlap_policy),
            fan_out: self.fan_out.unwrap_or(current.fan_out),
        }
    }
}

/// A page of timers.
#[derive(Debug, Serialize, ToSchema)]
pub struct TimerPage {
    pub timers: Vec<TimerView>,
    /// Pass as `after` for the next page; null on the last.
    pub next_after: Option<Uuid>,
}
