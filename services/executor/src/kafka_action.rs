//! The Kafka action: publishes the timer's message, with the occurrence's identity as the
//! header `punctual-idempotency-key` (and as the key, unless the timer sets one), to a
//! topic the namespace's policy lists.

use std::time::{Duration, Instant};

use punctual_shared::fan_out::SHARD_HEADER;
use punctual_shared::task::StartedTask;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use serde_json::Value;

use punctual_shared::sealed::{Purpose, SecretKeys};
use punctual_shared::timer::SERVICE_HEADER_PREFIX;

use crate::callback::Attempt;
use crate::namespaces::Namespaces;
use crate::Producer;

pub const IDENTITY_HEADER: &str = "punctual-idempotency-key";

/// Publishes and waits for the broker's acknowledgement (at most the timer's timeout).
/// Never fails: every error is an attempt that failed, and may be retried, but for a topic
/// the namespace may not publish to.
pub async fn publish(producer: &Producer, task: &StartedTask, namespaces: &Namespaces, keys: &SecretKeys) -> Attempt {
    let started = Instant::now();
    let failed = |error: String, retryable: bool| Attempt::failed(error, retryable, started.elapsed());
    let Some(topic) = task.action.kafka_topic.as_deref() else {
        return failed("timer has no kafka_topic".into(), false);
    };
    if let Some(refused) = namespaces.kafka_refusal(&task.action.namespace, topic) {
        return failed(format!("not published: {refused}"), false);
    }
    let identity = task.identity();
    let key = task.action.kafka_key.clone().unwrap_or_else(|| identity.clone());
    let value = serde_json::to_vec(task.action.kafka_value.as_ref().unwrap_or(&Value::Null)).expect("JSON serializes");
    let attempt = task.attempt.to_string();
    let shard = task.shard.is_fanned_out().then(|| task.shard.header_value());
    let mut headers = OwnedHeaders::new()
        .insert(Header { key: IDENTITY_HEADER, value: Some(identity.as_bytes()) })
        .insert(Header { key: "punctual-attempt", value: Some(attempt.as_bytes()) });
    if let Some(shard) = &shard {
        headers = headers.insert(Header { key: SHARD_HEADER, value: Some(shard.as_bytes()) });
    }
    if let Value::Object(map) = &task.action.kafka_headers {
        // The service's own headers stay the only ones of their names (a timer written with
        // SQL is not checked by the API).
        let theirs = map.iter().filter(|(name, _)| !name.to_ascii_lowercase().starts_with(SERVICE_HEADER_PREFIX));
        for (name, value) in theirs {
            let value = match keys.open(value.as_str().unwrap_or_default(), Purpose::Header) {
                Ok(opened) => opened,
                Err(e) => return failed(format!("header {name:?} not sent: {e}"), false),
            };
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
