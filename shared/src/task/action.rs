//! What a started task does: its timer's action and retry columns, and the cache of actions by
//! version.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use uuid::Uuid;

use crate::retry::RetryPolicy;
use crate::unpoisoned;

/// What a timer does when it fires: columns that change only with the timer's version.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Action {
    /// The timer's namespace, which never changes: whose signing secrets sign the call.
    pub namespace: String,
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
    /// A broadcast's URLs, a shard each, called instead of `http_url`.
    pub fan_out_urls: Option<Vec<String>>,
    /// A broadcast to every address of `http_url`'s host: the executor splits the
    /// occurrence when it is due, a shard an address.
    pub fan_out_dns: bool,
}

impl Action {
    /// The URL a shard of this action calls: its own of a broadcast's list, else `http_url`.
    pub fn url_for(&self, shard: i16) -> Option<&str> {
        match &self.fan_out_urls {
            Some(urls) => urls.get(shard as usize).map(String::as_str),
            None => self.http_url.as_deref(),
        }
    }
}

/// A timer's retry policy, as read with a task's start.
#[derive(sqlx::FromRow)]
pub(super) struct RetryColumns {
    retry_max_attempts: i32,
    retry_initial_ms: i32,
    retry_multiplier: f64,
    retry_max_ms: i32,
}

impl From<RetryColumns> for RetryPolicy {
    fn from(r: RetryColumns) -> Self {
        RetryPolicy {
            max_attempts: r.retry_max_attempts,
            initial_ms: r.retry_initial_ms,
            multiplier: r.retry_multiplier,
            max_ms: r.retry_max_ms,
        }
    }
}

/// The actions an executor has read, by timer, each at the version it was read at. A
/// timer's action changes only with its version, so [`start`] decodes the action of a
/// version once instead of with every task: decoding fourteen columns (two of them JSON)
/// a task was a measured part of the executor's CPU (docs/bench/history.md, item 17). The
/// retry policy is not part of it: it may change without a new version, so it is read
/// with each start.
#[derive(Debug, Default)]
pub struct ActionCache {
    by_timer: Mutex<HashMap<Uuid, (i64, Arc<Action>)>>,
}

/// At most this many timers' actions are kept; the cache starts over when full.
const MAX_CACHED_ACTIONS: usize = 100_000;

impl ActionCache {
    pub(super) fn get(&self, timer_id: Uuid, version: i64) -> Option<Arc<Action>> {
        let by_timer = unpoisoned::lock(&self.by_timer);
        by_timer.get(&timer_id).filter(|(v, _)| *v == version).map(|(_, action)| action.clone())
    }

    pub(super) fn put(&self, timer_id: Uuid, version: i64, action: Arc<Action>) {
        let mut by_timer = unpoisoned::lock(&self.by_timer);
        if by_timer.len() >= MAX_CACHED_ACTIONS && !by_timer.contains_key(&timer_id) {
            by_timer.clear();
        }
        by_timer.insert(timer_id, (version, action));
    }

    pub fn len(&self) -> usize {
        unpoisoned::lock(&self.by_timer).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The columns of a started task's timer (`tm`): its action ([`Action`]).
pub(super) const ACTION_COLUMNS: &str =
    "tm.namespace, tm.action_kind, tm.http_method, tm.http_url, tm.http_headers, tm.http_body, tm.http_timeout_ms,
    tm.kafka_topic, tm.kafka_key, tm.kafka_headers, tm.kafka_value, tm.fan_out_urls, tm.fan_out_dns";

/// The columns of a started task's timer (`tm`): its retry policy.
pub(super) const RETRY_COLUMNS: &str =
    "tm.retry_max_attempts, tm.retry_initial_ms, tm.retry_multiplier, tm.retry_max_ms";
