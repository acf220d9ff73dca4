//! The Kafka action: publishes the timer's message, with the occurrence's identity as the
//! header `punctual-idempotency-key` (and as the key, unless the timer sets one).

use std::time::{Duration, Instant};

use punctual_shared::task::StartedTask;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use serde_json::Value;

use crate::callback::Attempt;
use crate::Producer;

pub const IDENTITY_HEADER: &str = "punctual-idempotency-key";

/// Publishes and waits for the broker's acknowledgement (at most the timer's timeout).
/// Never fails: every error is an attempt that failed, and may be retried.
pub async fn publish(producer: &Producer, task: &StartedTask) -> Attempt {
    let started = Instant::now();
    let failed = |error: String, retryable: bool| Attempt::failed(error, retryable, started.elapsed());
    let Some(topic) = task.action.kafka_topic.as_deref() else {
        return failed("timer has no kafka_topic".into(), false);
    };
    let identity = task.identity();
    let key = task.action.kafka_key.clone().unwrap_or_else(|| identity.clone());
    let value = serde_json::to_vec(task.action.kafka_value.as_ref().unwrap_or(&Value::Null)).expect("JSON serializes");
    let attempt = task.attempt.to_string();
    let mut headers = OwnedHeaders::new()
        .insert(Header { key: IDENTITY_HEADER, value: Some(identity.as_bytes()) })
        .insert(Header { key: "punctual-attempt", value: Some(attempt.as_bytes()) });
    if let Value::Object(map) = &task.action.kafka_headers {
        for (name, value) in map {
            let value = value.as_str().unwrap_or_default();
            headers = headers.insert(Header { key: name, value: Some(value.as_bytes()) });
        }
    }
    let record = FutureRecord::to(topic).key(&key).payload(&value).headers(headers);
    let timeout = Duration::from_millis(task.action.http_timeout_ms.max(1) as u64);
    let (generation, current) = producer.get();
    match current.send(record, timeout).await {
        Ok(_) => Attempt::succeeded(started.elapsed()),
        Err((e, _)) => {
            producer.on_error(generation, &e);
            failed(format!("publishing to {topic} failed: {e}"), true)
        }
    }
}
