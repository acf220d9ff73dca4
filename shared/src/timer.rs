//! Timers: what users define, through the admin API (JSON) or plain SQL (a `timers` row).
//!
//! Both ways in end in the same checks: [`TimerSpec::validate`] for API input, and
//! [`TimerRow::schedule`] / [`TimerRow::action`] for rows the planner reads. Each
//! failure is a [`FieldError`] that names the field, so the API can answer with
//! problem+json and the planner can mark the row invalid with a reason.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::fan_out::{FanOut, FanOutKind};
use crate::policy::{MisfirePolicy, OverlapPolicy, DEFAULT_CATCHUP_WINDOW_MS};
use crate::retry::RetryPolicy;
use crate::schedule::{check_span, CronSchedule, DstGap, KindName, Schedule, ScheduleKind};
use crate::timer_state::{PlanStatus, TimerState};

pub const DEFAULT_NAMESPACE: &str = "default";
pub const DEFAULT_TIMEOUT_MS: i32 = 10_000;
pub const MAX_TIMEOUT_MS: i64 = 600_000;
const HTTP_METHODS: [&str; 7] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

/// A rejected input, with the field it is about (dotted path, as in the API's JSON).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

impl From<crate::schedule::ScheduleError> for FieldError {
    fn from(e: crate::schedule::ScheduleError) -> Self {
        FieldError::new(e.field(), e.to_string())
    }
}

/// `POST /v1/timers` body.
#[derive(Debug, Clone, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "namespace": "billing", "name": "nightly-invoices",
    "schedule": {"cron": "0 0 2 * * *", "timezone": "Europe/Berlin"},
    "action": {"http": {"method": "POST", "url": "https://hooks.example.com/invoices", "body": {"run": "nightly"}}}
}))]
pub struct TimerSpec {
    /// 1 to 64 characters of a-z, 0-9, '.', '_' or '-'; `default` unless given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    pub schedule: ScheduleSpec,
    pub action: ActionSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misfire_policy: Option<MisfirePolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catchup_window_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_policy: Option<OverlapPolicy>,
    /// Each occurrence as several calls (shards); one call unless given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fan_out: Option<FanOut>,
}

/// Exactly one of `cron`, `at`, `delay_ms`, `every_ms`; as answered, the one the timer has.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// A cron expression: 5, 6 (seconds first) or 7 fields (year last), or `@daily` and such.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The IANA time zone of a cron schedule (UTC unless given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// One-shot: fires once at this time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<DateTime<Utc>>,
    /// One-shot: fires once, this long after the timer's creation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<i64>,
    /// Fires every this many milliseconds from the timer's creation (or `start_at`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_at: Option<DateTime<Utc>>,
    /// What a cron time skipped by a spring-forward change becomes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst_gap: Option<DstGap>,
}

/// Exactly one action kind.
#[derive(Debug, Clone, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ActionSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpActionSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaActionSpec>,
}

#[derive(Debug, Clone, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaActionSpec {
    pub topic: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub value: Value,
}

/// The prefix of the headers the executor sets on every message it publishes.
pub const SERVICE_HEADER_PREFIX: &str = "punctual-";

/// A message to publish, checked. The key defaults to the occurrence's identity.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct KafkaAction {
    pub topic: String,
    pub key: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub value: Value,
}

impl KafkaAction {
    pub fn new(
        topic: &str,
        key: Option<String>,
        headers: BTreeMap<String, String>,
        value: Value,
    ) -> Result<Self, FieldError> {
        if !crate::kafka_topics::is_legal(topic) {
            return Err(FieldError::new("action.kafka.topic", format!("not a legal topic name: {topic:?}")));
        }
        if crate::kafka_topics::is_reserved(topic, &[]) {
            return Err(FieldError::new(
                "action.kafka.topic",
                format!(
                    "{topic:?} is one of the service's own topics (punctual.*, __*), which no timer may publish to"
                ),
            ));
        }
        if let Some(name) = headers.keys().find(|n| n.is_empty()) {
            return Err(FieldError::new(format!("action.kafka.headers.{name}"), "header names must not be empty"));
        }
        // The executor's own headers (the idempotency key, the attempt) come first and
        // must stay the only ones of their names.
        if let Some(name) = headers.keys().find(|n| n.to_ascii_lowercase().starts_with(SERVICE_HEADER_PREFIX)) {
            return Err(FieldError::new(
                format!("action.kafka.headers.{name}"),
                format!("headers named {SERVICE_HEADER_PREFIX}* are the service's own"),
            ));
        }
        Ok(Self { topic: topic.to_owned(), key, headers, value })
    }
}

/// What a timer does when it fires: `{"http": {…}}` or `{"kafka": {…}}`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Http(HttpAction),
    Kafka(KafkaAction),
}

impl ActionSpec {
    pub fn validate(self) -> Result<Action, FieldError> {
        match (self.http, self.kafka) {
            (Some(http), None) => Ok(Action::Http(HttpAction::new(
                http.method.as_deref().unwrap_or("POST"),
                &http.url,
                http.headers,
                http.body,
                http.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS as i64),
            )?)),
            (None, Some(k)) => Ok(Action::Kafka(KafkaAction::new(&k.topic, k.key, k.headers, k.value)?)),
            _ => Err(FieldError::new(
                "action",
                "exactly one action is required: {\"http\": {...}} or {\"kafka\": {...}}",
            )),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpActionSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    pub url: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<i64>,
}

/// Bounds of an HTTP callback's request, far above what a callback needs and far below
/// what a target accepts (servers commonly refuse URLs over 8 KB and heads over 8–16 KB).
pub const MAX_URL_BYTES: usize = 2048;
pub const MAX_HEADERS: usize = 32;
pub const MAX_HEADER_NAME_BYTES: usize = 256;
pub const MAX_HEADER_VALUE_BYTES: usize = 4096;
/// A header value of [`MAX_HEADER_VALUE_BYTES`] sealed (crate::sealed) is at most this long.
pub const MAX_SEALED_HEADER_VALUE_BYTES: usize = 6 * 1024;

/// Request headers a timer may not set: those of the connection and its framing, which
/// the HTTP client sets (and which would send a stored secret to another host: `Host`), and
/// the Standard Webhooks signature headers and the service's own (`Punctual-Shard`), which
/// the executor sets.
const CONNECTION_HEADERS: [&str; 8] =
    ["host", "connection", "keep-alive", "transfer-encoding", "content-length", "te", "trailer", "upgrade"];
const RESERVED_HEADER_PREFIXES: [&str; 3] = ["proxy-", "webhook-", SERVICE_HEADER_PREFIX];

/// Whether a callback header of this name is the connection's or the service's, which no
/// timer may set (any case).
pub fn is_reserved_http_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    CONNECTION_HEADERS.contains(&name.as_str()) || RESERVED_HEADER_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// A callback URL checked: an absolute `http://` or `https://` URL with a host, of at most
/// [`MAX_URL_BYTES`]; the problem names `field`.
pub fn check_url(field: &str, url: &str) -> Result<(), FieldError> {
    if url.len() > MAX_URL_BYTES {
        return Err(FieldError::new(field, format!("at most {MAX_URL_BYTES} bytes, got {}", url.len())));
    }
    let parsed = url::Url::parse(url).map_err(|e| FieldError::new(field, format!("not a valid URL ({e}): {url:?}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
        return Err(FieldError::new(field, format!("must be an http:// or https:// URL with a host: {url:?}")));
    }
    Ok(())
}

/// An HTTP callback, checked.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct HttpAction {
    pub method: String,
    pub url: String,
    pub headers: BTreeMap<String, String>,
    pub body: Option<Value>,
    pub timeout_ms: i32,
}

impl HttpAction {
    pub fn new(
        method: &str,
        url: &str,
        headers: BTreeMap<String, String>,
        body: Option<Value>,
        timeout_ms: i64,
    ) -> Result<Self, FieldError> {
        let method = method.to_ascii_uppercase();
        if !HTTP_METHODS.contains(&method.as_str()) {
            return Err(FieldError::new(
                "action.http.method",
                format!("unsupported method {method:?}; use one of {}", HTTP_METHODS.join(", ")),
            ));
        }
        check_url("action.http.url", url)?;
        if headers.len() > MAX_HEADERS {
            return Err(FieldError::new(
                "action.http.headers",
                format!("at most {MAX_HEADERS} headers, got {}", headers.len()),
            ));
        }
        for (name, value) in &headers {
            if name.len() > MAX_HEADER_NAME_BYTES {
                return Err(FieldError::new(
                    "action.http.headers",
                    format!("a header name is at most {MAX_HEADER_NAME_BYTES} bytes, got {}", name.len()),
                ));
            }
            let name_ok =
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !name_ok {
                return Err(FieldError::new(format!("action.http.headers.{name}"), "not a valid header name"));
            }
            if is_reserved_http_header(name) {
                return Err(FieldError::new(
                    format!("action.http.headers.{name}"),
                    "set by the HTTP connection or by the service (Host, Connection, Keep-Alive, Transfer-Encoding, \
                     Content-Length, TE, Trailer, Upgrade, Proxy-*, webhook-*); a timer may not set it",
                ));
            }
            // A sealed value (a secret stored sealed, sent back as read) is longer than what
            // it seals.
            let max =
                if crate::sealed::is_sealed(value) { MAX_SEALED_HEADER_VALUE_BYTES } else { MAX_HEADER_VALUE_BYTES };
            if value.len() > max {
                return Err(FieldError::new(
                    format!("action.http.headers.{name}"),
                    format!("at most {MAX_HEADER_VALUE_BYTES} bytes, got {}", value.len()),
                ));
            }
            if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
                return Err(FieldError::new(
                    format!("action.http.headers.{name}"),
                    "header value contains control characters",
                ));
            }
        }
        if !(1..=MAX_TIMEOUT_MS).contains(&timeout_ms) {
            return Err(FieldError::new(
                "action.http.timeout_ms",
                format!("must be between 1 and {MAX_TIMEOUT_MS}, got {timeout_ms}"),
            ));
        }
        Ok(Self { method, url: url.to_owned(), headers, body, timeout_ms: timeout_ms as i32 })
    }
}

/// A timer ready to be stored: every field checked.
#[derive(Debug, Clone)]
pub struct NewTimer {
    pub namespace: String,
    pub name: String,
    pub schedule: Schedule,
    pub action: Action,
    pub retry: RetryPolicy,
    pub misfire_policy: MisfirePolicy,
    pub catchup_window_ms: i64,
    pub overlap_policy: OverlapPolicy,
    /// How each occurrence is split into calls.
    pub fan_out: FanOutKind,
}

pub fn check_namespace(ns: &str) -> Result<(), FieldError> {
    let ok = (1..=64).contains(&ns.len())
        && ns.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(FieldError::new("namespace", "must be 1 to 64 characters of a-z, 0-9, '.', '_' or '-'"))
    }
}

fn check_name(name: &str) -> Result<(), FieldError> {
    if name.trim().is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(FieldError::new("name", "must be 1 to 200 characters, not blank, without control characters"));
    }
    Ok(())
}

impl TimerSpec {
    pub fn validate(self) -> Result<NewTimer, FieldError> {
        let namespace = self.namespace.unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
        check_namespace(&namespace)?;
        check_name(&self.name)?;
        let schedule = self.schedule.validate()?;
        let action = self.action.validate()?;
        let retry = self.retry.unwrap_or_default().validate()?;
        let catchup_window_ms = self.catchup_window_ms.unwrap_or(DEFAULT_CATCHUP_WINDOW_MS);
        check_span("catchup_window_ms", catchup_window_ms)?;
        let fan_out = match self.fan_out {
            Some(fan_out) => fan_out.validate(matches!(action, Action::Http(_)))?,
            None => FanOutKind::Shards(1),
        };
        Ok(NewTimer {
            namespace,
            name: self.name,
            schedule,
            action,
            retry,
            misfire_policy: self.misfire_policy.unwrap_or_default(),
            catchup_window_ms,
            overlap_policy: self.overlap_policy.unwrap_or_default(),
            fan_out,
        })
    }
}

impl ScheduleSpec {
    pub fn validate(self) -> Result<Schedule, FieldError> {
        let given = [self.cron.is_some(), self.at.is_some(), self.delay_ms.is_some(), self.every_ms.is_some()];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err(FieldError::new("schedule", "exactly one of cron, at, delay_ms, every_ms is required"));
        }
        if self.timezone.is_some() && self.cron.is_none() {
            return Err(FieldError::new("schedule.timezone", "only a cron schedule takes a time zone"));
        }
        if self.dst_gap.is_some() && self.cron.is_none() {
            return Err(FieldError::new("schedule.dst_gap", "only a cron schedule takes a DST policy"));
        }
        let kind = if let Some(expr) = self.cron {
            let timezone = self.timezone.as_deref().unwrap_or("UTC");
            let cron = CronSchedule::parse(&expr, timezone)?.with_dst_gap(self.dst_gap.unwrap_or_default());
            // An expression that never fires is refused, not stored silent.
            let from = self.start_at.map_or_else(Utc::now, |start| start.max(Utc::now()));
            cron.check_matches_from(from)?;
            ScheduleKind::Cron(Box::new(cron))
        } else if let Some(at) = self.at {
            ScheduleKind::Once { at }
        } else if let Some(delay_ms) = self.delay_ms {
            ScheduleKind::Delay { delay_ms }
        } else {
            ScheduleKind::Interval { every_ms: self.every_ms.unwrap_or_default() }
        };
        Ok(Schedule::new(kind, self.start_at, self.end_at)?)
    }
}

/// The schedule columns of a `timers` row.
#[derive(Debug, Clone, Default)]
pub struct ScheduleColumns {
    pub schedule_kind: String,
    pub run_at: Option<DateTime<Utc>>,
    pub delay_ms: Option<i64>,
    pub interval_ms: Option<i64>,
    pub cron_expr: Option<String>,
    pub timezone: String,
    pub start_at: Option<DateTime<Utc>>,
    pub end_at: Option<DateTime<Utc>>,
    pub dst_gap: String,
}

impl From<&Schedule> for ScheduleColumns {
    fn from(s: &Schedule) -> Self {
        let mut c = ScheduleColumns {
            timezone: "UTC".to_owned(),
            dst_gap: DstGap::default().as_str().to_owned(),
            start_at: s.start_at,
            end_at: s.end_at,
            ..Default::default()
        };
        match &s.kind {
            ScheduleKind::Once { at } => {
                c.schedule_kind = KindName::Once.as_str().into();
                c.run_at = Some(*at);
            }
            ScheduleKind::Delay { delay_ms } => {
                c.schedule_kind = KindName::Delay.as_str().into();
                c.delay_ms = Some(*delay_ms);
            }
            ScheduleKind::Interval { every_ms } => {
                c.schedule_kind = KindName::Interval.as_str().into();
                c.interval_ms = Some(*every_ms);
            }
            ScheduleKind::Cron(cron) => {
                c.schedule_kind = KindName::Cron.as_str().into();
                c.cron_expr = Some(cron.expr().to_owned());
                c.timezone = cron.timezone().name().to_owned();
                c.dst_gap = cron.dst_gap().as_str().to_owned();
            }
        }
        c
    }
}

/// A `timers` row as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TimerRow {
    pub id: Uuid,
    pub namespace: String,
    pub name: String,
    pub schedule_kind: String,
    pub run_at: Option<DateTime<Utc>>,
    pub delay_ms: Option<i64>,
    pub interval_ms: Option<i64>,
    pub cron_expr: Option<String>,
    pub timezone: String,
    pub start_at: Option<DateTime<Utc>>,
    pub end_at: Option<DateTime<Utc>>,
    pub action_kind: String,
    pub http_method: String,
    pub http_url: Option<String>,
    pub http_headers: Value,
    pub http_body: Option<Value>,
    pub http_timeout_ms: i32,
    pub kafka_topic: Option<String>,
    pub kafka_key: Option<String>,
    pub kafka_headers: Value,
    pub kafka_value: Option<Value>,
    pub retry_max_attempts: i32,
    pub retry_initial_ms: i32,
    pub retry_multiplier: f64,
    pub retry_max_ms: i32,
    pub misfire_policy: MisfirePolicy,
    pub catchup_window_ms: i64,
    pub overlap_policy: OverlapPolicy,
    pub dst_gap: DstGap,
    /// Calls each occurrence is split into (1 to 1000).
    pub fan_out_shards: i32,
    /// A broadcast's URLs, one call each instead of `http_url`.
    pub fan_out_urls: Option<Vec<String>>,
    /// A broadcast to every address of `http_url`'s host.
    pub fan_out_dns: bool,
    pub state: TimerState,
    /// Why it was last paused or resumed, as the operator put it.
    pub state_note: Option<String>,
    /// Bumped by every change of the schedule or action (tasks of older versions are not run).
    pub version: i64,
    /// Bumped by every change of the timer a user can make (what a PATCH is conditional on).
    pub revision: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub plan_status: PlanStatus,
    pub next_plan_at: Option<DateTime<Utc>>,
    pub invalid_reason: Option<String>,
    /// Occurrences at or before this had their history deleted by retention, and are
    /// never planned again.
    pub pruned_through: Option<DateTime<Utc>>,
}

impl TimerRow {
    /// Parses the schedule columns; the error names the column at fault.
    pub fn schedule(&self) -> Result<Schedule, FieldError> {
        let kind = match self.schedule_kind.as_str() {
            "once" => ScheduleKind::Once {
                at: self.run_at.ok_or_else(|| FieldError::new("run_at", "run_at is required for a once timer"))?,
            },
            "delay" => ScheduleKind::Delay {
                delay_ms: self
                    .delay_ms
                    .ok_or_else(|| FieldError::new("delay_ms", "delay_ms is required for a delay timer"))?,
            },
            "interval" => ScheduleKind::Interval {
                every_ms: self
                    .interval_ms
                    .ok_or_else(|| FieldError::new("interval_ms", "interval_ms is required for an interval timer"))?,
            },
            "cron" => {
                let expr = self
                    .cron_expr
                    .as_deref()
                    .ok_or_else(|| FieldError::new("cron_expr", "cron_expr is required for a cron timer"))?;
                let dst_gap = self.dst_gap;
                ScheduleKind::Cron(Box::new(
                    CronSchedule::parse(expr, &self.timezone).map(|c| c.with_dst_gap(dst_gap)).map_err(|e| {
                        let column = if e.field() == "schedule.timezone" { "timezone" } else { "cron_expr" };
                        FieldError::new(column, e.to_string())
                    })?,
                ))
            }
            other => return Err(FieldError::new("schedule_kind", format!("unknown schedule kind {other:?}"))),
        };
        Schedule::new(kind, self.start_at, self.end_at).map_err(|e| {
            let column = match e.field() {
                "schedule.every_ms" => "interval_ms",
                "schedule.delay_ms" => "delay_ms",
                "schedule.at" => "run_at",
                "schedule.start_at" => "start_at",
                _ => "end_at",
            };
            FieldError::new(column, e.to_string())
        })
    }

    /// The fan-out columns, checked as the API checks them; the error names the column.
    pub fn fan_out(&self) -> Result<FanOutKind, FieldError> {
        FanOutKind::from_columns(
            self.fan_out_shards,
            self.fan_out_urls.as_deref(),
            self.fan_out_dns,
            self.action_kind != "kafka",
        )
    }

    /// The catch-up window, checked as the API checks it (the schema's CHECK bounds it
    /// too, but a row may predate that check).
    pub fn catchup_window(&self) -> Result<chrono::Duration, FieldError> {
        check_span("catchup_window_ms", self.catchup_window_ms)?;
        Ok(chrono::Duration::milliseconds(self.catchup_window_ms))
    }

    /// Parses the action columns; the error names the column at fault.
    pub fn action(&self) -> Result<Action, FieldError> {
        match self.action_kind.as_str() {
            "kafka" => {
                let topic = self
                    .kafka_topic
                    .as_deref()
                    .ok_or_else(|| FieldError::new("kafka_topic", "kafka_topic is required for a kafka action"))?;
                let headers: BTreeMap<String, String> = serde_json::from_value(self.kafka_headers.clone())
                    .map_err(|_| FieldError::new("kafka_headers", "kafka_headers must be a JSON object of strings"))?;
                let value = self.kafka_value.clone().unwrap_or(Value::Null);
                KafkaAction::new(topic, self.kafka_key.clone(), headers, value)
                    .map(Action::Kafka)
                    .map_err(|e| FieldError::new(e.field.replacen("action.kafka.", "kafka_", 1), e.message))
            }
            _ => self.http_action().map(Action::Http),
        }
    }

    fn http_action(&self) -> Result<HttpAction, FieldError> {
        let url = self
            .http_url
            .as_deref()
            .ok_or_else(|| FieldError::new("http_url", "http_url is required for an http action"))?;
        let headers: BTreeMap<String, String> = serde_json::from_value(self.http_headers.clone())
            .map_err(|_| FieldError::new("http_headers", "http_headers must be a JSON object of strings"))?;
        HttpAction::new(&self.http_method, url, headers, self.http_body.clone(), self.http_timeout_ms as i64).map_err(
            |e| {
                let column = match e.field.as_str() {
                    "action.http.method" => "http_method".to_owned(),
                    "action.http.url" => "http_url".to_owned(),
                    "action.http.timeout_ms" => "http_timeout_ms".to_owned(),
                    f => f.replacen("action.http.", "http_", 1),
                };
                FieldError::new(column, e.message)
            },
        )
    }
}

/// The task identity as sent to targets and used as the Kafka key:
/// `<timer_id>:<scheduled_at in RFC 3339 UTC with milliseconds>`.
/// Built without a format string: this runs for every message and every call, and chrono
/// parsed `%Y-%m-%dT…` each time (3 % of the executor's own CPU samples at 15,000 fires/s,
/// docs/bench/history.md item 15).
pub fn task_identity(timer_id: Uuid, scheduled_at: DateTime<Utc>) -> String {
    let mut identity = String::with_capacity(64);
    identity.push_str(timer_id.hyphenated().encode_lower(&mut Uuid::encode_buffer()));
    identity.push(':');
    identity.push_str(&scheduled_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    identity
}

/// The occurrence time named by a task identity (the inverse of [`task_identity`]'s second
/// half; a shard's identity ends with `/` and its index), e.g. as a callback target reads
/// it from `Idempotency-Key`.
pub fn identity_scheduled_at(identity: &str) -> Option<DateTime<Utc>> {
    let (_, at) = identity.split_once(':')?;
    let at = at.split_once('/').map_or(at, |(at, _shard)| at);
    DateTime::parse_from_rfc3339(at).ok().map(|t| t.with_timezone(&Utc))
}

/// The timer named by a task identity (the inverse of [`task_identity`]'s first half).
pub fn identity_timer_id(identity: &str) -> Option<Uuid> {
    let (timer, _) = identity.split_once(':')?;
    Uuid::parse_str(timer).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_identity_names_its_occurrence_time() {
        let at = DateTime::parse_from_rfc3339("2026-12-24T18:00:00.5Z").unwrap().with_timezone(&Utc);
        assert_eq!(identity_scheduled_at(&task_identity(Uuid::nil(), at)), Some(at));
        assert_eq!(identity_scheduled_at(&format!("{}/15", task_identity(Uuid::nil(), at))), Some(at));
        assert_eq!(identity_scheduled_at("no-time-here"), None);
        assert_eq!(identity_timer_id(&task_identity(Uuid::nil(), at)), Some(Uuid::nil()));
        assert_eq!(identity_timer_id("no-timer-here:2026-12-24T18:00:00.500Z"), None);
    }

    fn spec(v: Value) -> Result<NewTimer, FieldError> {
        serde_json::from_value::<TimerSpec>(v).unwrap().validate()
    }

    fn base() -> Value {
        json!({"namespace":"billing","name":"n","schedule":{"cron":"0 0 2 * * *","timezone":"Europe/Berlin"},
               "action":{"http":{"method":"POST","url":"http://127.0.0.1:8080/hook","headers":{"X-Env":"prod"},"body":{"k":1},"timeout_ms":5000}}})
    }

    #[test]
    fn the_documented_example_is_valid() {
        let t = spec(base()).unwrap();
        let Action::Http(http) = &t.action else { panic!("an http action") };
        assert_eq!(http.method, "POST");
        assert_eq!(http.timeout_ms, 5000);
        assert!(matches!(t.schedule.kind, ScheduleKind::Cron(_)));
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases = [
            ("/schedule", json!({"cron":"* * * * * *","every_ms":1000}), "schedule"),
            ("/schedule", json!({"cron":"nope"}), "schedule.cron"),
            ("/schedule", json!({"cron":"* * * * * *","timezone":"Nowhere/City"}), "schedule.timezone"),
            ("/schedule", json!({"every_ms":5}), "schedule.every_ms"),
            ("/action/http/url", json!("ftp://x/y"), "action.http.url"),
            ("/action/http/url", json!("not a url"), "action.http.url"),
            ("/action/http/method", json!("BREW"), "action.http.method"),
            ("/action/http/timeout_ms", json!(0), "action.http.timeout_ms"),
            ("/action/http/headers", json!({"bad header":"x"}), "action.http.headers.bad header"),
            ("/namespace", json!("Has Spaces"), "namespace"),
            ("/name", json!("  "), "name"),
        ];
        for (pointer, value, field) in cases {
            let mut v = base();
            *v.pointer_mut(pointer).unwrap() = value;
            let err = spec(v).unwrap_err();
            assert_eq!(err.field, field, "{err}");
        }
    }

    #[test]
    fn identity_has_millisecond_rfc3339() {
        let id = Uuid::nil();
        let at = DateTime::parse_from_rfc3339("2026-12-24T18:00:00Z").unwrap().with_timezone(&Utc);
        assert_eq!(task_identity(id, at), "00000000-0000-0000-0000-000000000000:2026-12-24T18:00:00.000Z");
        // Lower-case hex; the time truncated (not rounded) to the millisecond, as the
        // format string `%Y-%m-%dT%H:%M:%S%.3fZ` of earlier versions wrote it.
        let id = Uuid::parse_str("A1B2C3D4-E5F6-4788-99AA-BBCCDDEEFF00").unwrap();
        let at = DateTime::parse_from_rfc3339("2026-03-01T00:00:59.999999+00:00").unwrap().with_timezone(&Utc);
        assert_eq!(task_identity(id, at), "a1b2c3d4-e5f6-4788-99aa-bbccddeeff00:2026-03-01T00:00:59.999Z");
        assert_eq!(task_identity(id, at), format!("{id}:{}", at.format("%Y-%m-%dT%H:%M:%S%.3fZ")));
    }
}
