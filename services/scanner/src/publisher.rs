//! Publishing held tasks at their fire time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::stream::{FuturesUnordered, StreamExt};
use punctual_runtime::kafka::{self, Generation, ReplaceableProducer};
use punctual_runtime::otlp;
use punctual_runtime::producer::DeliveryFuture;
use punctual_shared::config::KafkaConfig;
use punctual_shared::task::{ClaimedTask, TaskMessage};
use rdkafka::error::KafkaError;
use rdkafka::producer::FutureRecord;
use rdkafka::types::RDKafkaErrorCode;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::leases::Ownership;
use crate::metrics::Metrics;
use punctual_wheel::TimingWheel;

/// An idempotent producer: a retried send never duplicates a message in the log.
pub fn producer(cfg: &KafkaConfig) -> Result<kafka::Producer, rdkafka::error::KafkaError> {
    kafka::Producer::create(&kafka::client_config(
        cfg,
        &[
            ("enable.idempotence", "true"),
            ("acks", "all"),
            // Batches 50 ms of due tasks per partition and request, a time the publish lead
            // hides. Per request, the producer's broker thread spins through the last
            // millisecond before each batch is due (it rounds the wait down), and the broker
            // and the consumers pay per request. With 5 ms the scanner used 34 µs a fire and
            // the broker 25 at 10,000/s; with 50 ms, 12 and 5 at 12,000/s (docs/bench/history.md,
            // item 11).
            ("linger.ms", "50"),
            ("queue.buffering.max.messages", "2000000"),
            // Long enough to ride out a broker restart. Tied to the lease (4 s in the fault
            // tests) instead, the producer timed out and was replaced during a 2 s restart of
            // a durable broker, and in one run of four the broker then reset the connections
            // of every client until the test gave up.
            ("message.timeout.ms", "30000"),
        ],
    ))
}

pub struct Publisher {
    /// Replaced when it cannot go on (e.g. the broker forgot its id after losing its state).
    pub producer: ReplaceableProducer,
    /// Set when the broker says the topic does not exist (it lost it): the topic keeper
    /// creates it again.
    pub topic_missing: Arc<AtomicBool>,
    pub topic: String,
    pub partitions: i32,
    /// The buckets held: a task is published only while its bucket is held at its epoch.
    pub ownership: Arc<Ownership>,
    /// How long before its due time a task is published (`PUNCTUAL_PUBLISH_LEAD_MS`).
    pub lead: chrono::Duration,
    pub metrics: Metrics,
}

impl Publisher {
    /// When a task is to be published: its lead before it is due.
    fn publish_at(&self, t: &ClaimedTask) -> chrono::DateTime<Utc> {
        t.due_at - self.lead
    }

    /// Where the failures of sends by the producer of `generation` are noted.
    fn failure_note(&self, generation: Generation) -> FailureNote {
        FailureNote { topic_missing: self.topic_missing.clone(), producer: self.producer.clone(), generation }
    }

    /// Sends the tasks, adding their deliveries to `pending`; returns the generation of the
    /// producer that sent them, to report their failures with. A task whose claim has expired
    /// is dropped, not sent, and so is a task whose bucket this scanner no longer holds at
    /// the task's epoch: another scanner may own it now (a scanner frozen past its lease
    /// must not publish what it no longer holds; should it, the executor refuses the
    /// message's epoch).
    fn send(&self, tasks: Vec<ClaimedTask>, pending: &mut Vec<Pending>) -> Generation {
        let now = Utc::now();
        let (generation, producer) = self.producer.get();
        for t in tasks {
            if t.lease_until <= now || !self.ownership.holds(t.bucket, t.epoch) {
                self.metrics.fenced.inc();
                tracing::debug!(
                    task_id = t.id,
                    bucket = t.bucket,
                    "claim expired or bucket lost before publishing; dropped"
                );
                continue;
            }
            let message = TaskMessage::from(&t);
            let key = message.key();
            let payload = serde_json::to_vec(&message).expect("a task message serializes");
            let partition = i32::from(t.bucket) % self.partitions;
            let record = FutureRecord::to(&self.topic).partition(partition).key(&key).payload(&payload);
            match producer.send_result(record) {
                Ok(delivery) => {
                    let lag = (now - self.publish_at(&t)).num_microseconds().unwrap_or(0) as f64 / 1e6;
                    self.metrics.publish_lag.observe(lag.max(0.0));
                    // From the hand-off to the broker's acknowledgement, in the occurrence's
                    // trace (a debug span: free unless enabled or exported).
                    let span = tracing::debug_span!(
                        "publish",
                        task_id = t.id,
                        timer_id = %t.timer_id,
                        scheduled_at = %t.scheduled_at,
                        attempt = t.attempt,
                        bucket = t.bucket,
                        partition,
                    );
                    otlp::set_occurrence_parent(&span, t.timer_id, t.scheduled_at);
                    pending.push(Pending { task_id: t.id, delivery, span });
                }
                Err((e, _)) => {
                    // Left claimed: when the lease expires the task is claimed and sent again.
                    self.failure_note(generation).note(&e);
                    self.metrics.publish_errors.inc();
                    tracing::warn!(
                        task_id = t.id, timer_id = %t.timer_id, scheduled_at = %t.scheduled_at, attempt = t.attempt,
                        error = %e, "publish failed; the task will be re-claimed"
                    );
                }
            }
        }
        generation
    }
}

/// The longest the wheel driver sleeps.
const IDLE_WAKE: Duration = Duration::from_secs(1);

/// Holds claimed tasks in the timing wheel and publishes each when its time comes: the
/// publisher's lead before it is due.
pub async fn drive_wheel(
    publisher: Publisher,
    mut claimed_rx: mpsc::Receiver<Vec<ClaimedTask>>,
    token: CancellationToken,
) {
    let now_ms = || Utc::now().timestamp_millis().max(0) as u64;
    let mut wheel: TimingWheel<ClaimedTask> = TimingWheel::new(now_ms());
    let deliveries = TaskTracker::new();
    let mut due = Vec::new();
    loop {
        // Asleep until the wheel's next deadline (or cascade), not woken every millisecond:
        // an idle scanner holding a few occurrences seconds ahead costs nothing meanwhile.
        // At most a second at a time, in case the wall clock was stepped.
        let wake = wheel.next_wake().map_or(IDLE_WAKE, |at| Duration::from_millis(at.saturating_sub(now_ms())));
        tokio::select! {
            biased;
            _ = token.cancelled() => break,
            batch = claimed_rx.recv() => {
                let Some(batch) = batch else { break };
                for t in batch {
                    let deadline = publisher.publish_at(&t).timestamp_millis().max(0) as u64;
                    if let Err(t) = wheel.insert(deadline, t) {
                        due.push(t);
                    }
                }
            }
            _ = tokio::time::sleep(wake.min(IDLE_WAKE)) => {
                wheel.advance(now_ms(), &mut due);
            }
        }
        publisher.metrics.held.set(wheel.len() as i64);
        if !due.is_empty() {
            let mut pending = Vec::with_capacity(due.len());
            let generation = publisher.send(std::mem::take(&mut due), &mut pending);
            let metrics = publisher.metrics.clone();
            deliveries.spawn(await_deliveries(pending, metrics, publisher.failure_note(generation)));
        }
    }
    deliveries.close();
    deliveries.wait().await;
}

/// Where a failed send is noted, with the generation of the producer that sent it.
struct FailureNote {
    topic_missing: Arc<AtomicBool>,
    producer: ReplaceableProducer,
    generation: Generation,
}

impl FailureNote {
    fn note(&self, e: &KafkaError) {
        let code = e.rdkafka_error_code();
        if matches!(code, Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic)) {
            self.topic_missing.store(true, Ordering::Relaxed)
        } else {
            self.producer.on_error(self.generation, e);
        }
    }
}

/// A message handed to the producer, until the broker acknowledges it.
struct Pending {
    task_id: i64,
    delivery: DeliveryFuture,
    span: tracing::Span,
}

async fn await_deliveries(pending: Vec<Pending>, metrics: Metrics, failures: FailureNote) {
    let mut futures: FuturesUnordered<_> =
        pending.into_iter().map(|p| async move { (p.task_id, p.delivery.instrument(p.span).await) }).collect();
    while let Some((id, result)) = futures.next().await {
        match result {
            Ok(Ok(_)) => metrics.published.inc(),
            Ok(Err((e, _))) => {
                failures.note(&e);
                metrics.publish_errors.inc();
                tracing::warn!(task_id = id, error = %e, "delivery failed; the task will be re-claimed");
            }
            Err(_) => {
                metrics.publish_errors.inc();
                tracing::warn!(task_id = id, "delivery cancelled; the task will be re-claimed");
            }
        }
    }
}
