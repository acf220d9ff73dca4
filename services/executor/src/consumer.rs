//! The consume loop: messages read in batches, their tasks started and run, offsets stored as
//! they complete.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use futures::{FutureExt, StreamExt};
use punctual_runtime::kafka;
use punctual_shared::task::{self, DeadLetter, Next, StartRequest, TaskMessage};
use rdkafka::consumer::Consumer;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::Message;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::error::ExecutorError;
use crate::in_flight::InFlight;
use crate::offsets::OffsetTracker;
use crate::write_back::Finished;
use crate::{broadcast, callback, kafka_action};
use crate::{App, TaskConsumer};

/// Most messages started by one statement.
pub(crate) const START_BATCH: usize = 1_000;

/// A message's place in its partition.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Position {
    pub(crate) partition: i32,
    pub(crate) offset: i64,
}

pub(crate) async fn consume(
    app: &App,
    offsets: &Mutex<OffsetTracker>,
    in_flight: &InFlight,
    finished_tx: &mpsc::UnboundedSender<Finished>,
    runs: &TaskTracker,
    abandon: &CancellationToken,
    token: &CancellationToken,
) -> Result<(), ExecutorError> {
    let slots = Arc::new(Semaphore::new(app.config.max_in_flight));
    let mut stream = app.consumer.stream();
    loop {
        // A slot first, so that a full executor stops reading instead of buffering.
        let first_slot = tokio::select! {
            _ = token.cancelled() => return Ok(()),
            slot = slots.clone().acquire_owned() => slot.expect("semaphore never closed"),
        };
        let first = tokio::select! {
            _ = token.cancelled() => return Ok(()),
            m = stream.next() => m,
        };
        let Some(first) = first else { return Ok(()) };
        // Then whatever else is already fetched, up to a batch, without waiting.
        let mut batch = vec![(first, first_slot)];
        while batch.len() < START_BATCH {
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                break;
            };
            match stream.next().now_or_never() {
                Some(Some(m)) => batch.push((m, slot)),
                _ => break,
            }
        }
        let mut messages = Vec::with_capacity(batch.len());
        for (received, slot) in batch {
            let message = match received {
                Ok(m) => m,
                // A fatal error ends the consumer for good (e.g. fenced as a static member,
                // librdkafka issue #3437): exit, for the supervisor to start a new one, rather
                // than stay up consuming nothing. The tasks not started are delivered again.
                Err(e @ rdkafka::error::KafkaError::MessageConsumptionFatal(_)) => {
                    return Err(ExecutorError::ConsumerFailed(e));
                }
                // Never joins, however long it tries: a setting to fix, said once.
                Err(e) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::InvalidSessionTimeout) => {
                    return Err(ExecutorError::SessionTimeout {
                        timeout_ms: app.config.kafka_session_timeout_ms,
                        error: e,
                    });
                }
                Err(e) => {
                    kafka::count_error(&e);
                    tracing::warn!(error = %e, "Kafka consumer error");
                    continue;
                }
            };
            let position = Position { partition: message.partition(), offset: message.offset() };
            offsets
                .lock()
                .expect("offsets lock poisoned: a tracker left half-changed could commit past unfinished messages")
                .received(position.partition, position.offset);
            match message.payload().map(serde_json::from_slice::<TaskMessage>) {
                Some(Ok(task)) if in_flight.contains(task.task_id) => {
                    app.metrics.skipped.with_label_values(&["in_flight"]).inc();
                    store(app, offsets, position);
                }
                Some(Ok(task)) => messages.push((task, position, slot)),
                _ => {
                    // Not ours to run; never blocks the partition.
                    tracing::error!(
                        partition = position.partition,
                        offset = position.offset,
                        "undecodable task message skipped"
                    );
                    store(app, offsets, position);
                }
            }
        }
        if messages.is_empty() {
            continue;
        }
        let ids: Vec<StartRequest> = messages.iter().map(|(t, _, _)| StartRequest::from(t)).collect();
        let started = loop {
            match task::start(&app.pool, &app.run_owner, &ids, &app.actions).await {
                Ok(started) => break started,
                Err(e) => {
                    // Nothing is stored for these messages: retry, or after a restart they
                    // are delivered again.
                    app.metrics.db_errors.inc();
                    tracing::warn!(error = %e, "starting tasks failed; retrying");
                    tokio::select! {
                        _ = token.cancelled() => return Ok(()),
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                }
            }
        };
        let not_started = started.not_started;
        for (reason, count) in [
            ("duplicate", not_started.duplicate),
            ("cancelled", not_started.cancelled),
            ("overlap_skipped", not_started.overlap_skipped),
            ("overlap_deferred", not_started.overlap_deferred),
        ] {
            if count > 0 {
                app.metrics.skipped.with_label_values(&[reason]).inc_by(count);
            }
        }
        let mut started: HashMap<i64, task::StartedTask> = started.tasks.into_iter().map(|s| (s.id, s)).collect();
        for (message, position, slot) in messages {
            let Some(started_task) = started.remove(&message.task_id) else {
                store(app, offsets, position);
                continue;
            };
            app.metrics.in_flight.inc();
            in_flight.insert(started_task.id, position.partition);
            let (started_task_id, timer_id, scheduled_at, attempt) =
                (started_task.id, started_task.timer_id, started_task.scheduled_at, started_task.attempt);
            let caller = app.caller.clone();
            let metrics = app.metrics.clone();
            let finished_tx = finished_tx.clone();
            let producer = app.producer.clone();
            let abandon = abandon.clone();
            let in_flight_gauge = app.metrics.in_flight.clone();
            let namespaces = app.namespaces.clone();
            let signing = app.signing.clone();
            let pool = app.pool.clone();
            let run = async move {
                let mut started_task = started_task;
                // Published ahead of its due time (the scanner's lead): run it then, not before.
                // The time is the row's: the message's is not trusted.
                if let Ok(wait) = (started_task.due_at - Utc::now()).to_std() {
                    tokio::time::sleep(wait).await;
                    started_task.started_at = Utc::now();
                }
                // Within the namespace's fires a second, or deferred to a later time.
                let namespace = namespaces.state(&started_task.action.namespace);
                let attempt = match namespace.rate.admit() {
                    Ok(()) => {
                        if started_task.attempt == 1 {
                            let lag =
                                (Utc::now() - started_task.scheduled_at).num_microseconds().unwrap_or(0) as f64 / 1e6;
                            metrics.fire_lag.observe(lag.max(0.0));
                        }
                        match started_task.action.action_kind.as_str() {
                            "kafka" => {
                                kafka_action::publish(&producer, &started_task, &namespaces, signing.keys()).await
                            }
                            _ => match broadcast::split_if_broadcast(&pool, &caller, &mut started_task).await {
                                Ok(()) => callback::call(&caller, &started_task).await,
                                Err(failed) => failed,
                            },
                        }
                    }
                    Err(wait) => callback::Attempt::rate_held_back(namespace.limits.max_fires_per_second, wait),
                };
                if attempt.was_made() {
                    let outcome_label = if attempt.error.is_none() { "success" } else { "failure" };
                    metrics
                        .callback_duration
                        .with_label_values(&[outcome_label])
                        .observe(attempt.duration.as_secs_f64());
                }
                let jitter = rand::random::<f64>() * 2.0 - 1.0;
                let outcome = attempt.into_outcome(&started_task, jitter);
                let dead_letter = (outcome.next == Next::Dead).then(|| DeadLetter {
                    task_id: started_task.id,
                    timer_id: started_task.timer_id,
                    scheduled_at: started_task.scheduled_at,
                    idempotency_key: started_task.identity(),
                    attempts: started_task.attempt,
                    http_status: outcome.http_status,
                    last_error: outcome.error.clone(),
                });
                tracing::debug!(next = ?outcome.next, http_status = outcome.http_status, error = outcome.error.as_deref(), "ran");
                metrics.in_flight.dec();
                let _ = finished_tx.send(Finished { outcome, dead_letter, position, _permit: slot });
            };
            // Every event of the run carries the occurrence (a debug span: free unless
            // RUST_LOG enables it, e.g. punctual_executor=debug, or spans are exported).
            let span = tracing::debug_span!(
                "run",
                task_id = started_task_id,
                timer_id = %timer_id,
                scheduled_at = %scheduled_at,
                attempt,
            );
            punctual_runtime::otlp::set_occurrence_parent(&span, timer_id, scheduled_at);
            runs.spawn(
                async move {
                    tokio::select! {
                        _ = run => {}
                        _ = abandon.cancelled() => in_flight_gauge.dec(),
                    }
                }
                .instrument(span),
            );
        }
    }
}

pub(crate) fn store(app: &App, offsets: &Mutex<OffsetTracker>, position: Position) {
    store_offset(&app.consumer, &app.config.kafka.tasks_topic, offsets, position);
}

pub(crate) fn store_offset(consumer: &TaskConsumer, topic: &str, offsets: &Mutex<OffsetTracker>, position: Position) {
    let done_through = offsets
        .lock()
        .expect("offsets lock poisoned: a tracker left half-changed could commit past unfinished messages")
        .completed(position.partition, position.offset);
    if let Some(offset) = done_through {
        store_done_through(consumer, topic, position.partition, offset);
    }
}

/// Stores the offset up to which `partition`'s messages are done.
pub(crate) fn store_done_through(consumer: &TaskConsumer, topic: &str, partition: i32, offset: i64) {
    // librdkafka stores offset + 1: the next message to read.
    if let Err(e) = consumer.store_offset(topic, partition, offset) {
        // The partition was revoked meanwhile: its new owner reads it from the last commit.
        tracing::debug!(error = %e, partition, "offset not stored");
    }
}
