//! Publishing held tasks at their fire time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::stream::{FuturesUnordered, StreamExt};
use punctual_shared::config::KafkaConfig;
use punctual_shared::kafka;
use punctual_shared::task::{ClaimedTask, TaskMessage};
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::metrics::Metrics;
use punctual_wheel::TimingWheel;

/// An idempotent producer: a retried send never duplicates a message in the log.
///
/// `message_timeout` is the claim lease: a message not delivered by then is worth nothing,
/// since its task is claimed and published again once the lease expires.
pub fn producer(cfg: &KafkaConfig, message_timeout: Duration) -> Result<FutureProducer, rdkafka::error::KafkaError> {
    kafka::client_config(cfg)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        // Batches a few milliseconds of due tasks per request: with 1 ms, librdkafka's
        // threads woke so often that polling was half the scanner's CPU at 10,000/s.
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "2000000")
        .set("message.timeout.ms", message_timeout.as_millis().to_string())
        .create()
}

pub struct Publisher {
    pub producer: FutureProducer,
    /// To make a new producer when the current one has failed fatally.
    pub kafka: KafkaConfig,
    pub message_timeout: Duration,
    /// Counts the producers made, starting at 1.
    pub generation: u64,
    /// The generation of the last producer that failed, 0 for none. On a fatal error (e.g.
    /// the broker forgot the idempotent producer's id after losing its state) an idempotent
    /// producer cannot go on, so the wheel driver replaces it; a failure reported by an
    /// older producer, already replaced, is no reason to replace the current one.
    pub failed_generation: Arc<AtomicU64>,
    /// Set when the broker says the topic does not exist (it lost it): the scan loop
    /// creates it again.
    pub topic_missing: Arc<AtomicBool>,
    pub topic: String,
    pub partitions: i32,
    pub metrics: Metrics,
}

impl Publisher {
    /// Sends the tasks; returns the deliveries to await. A task whose claim has expired
    /// is dropped, not sent: another scanner may own it now (a scanner frozen past its
    /// lease must not publish what it no longer holds).
    fn send(&self, tasks: Vec<ClaimedTask>, pending: &mut Vec<(i64, DeliveryFuture)>) {
        let now = Utc::now();
        for t in tasks {
            if t.lease_until <= now {
                self.metrics.fenced.inc();
                tracing::warn!(task_id = t.id, "claim expired before publishing; dropped");
                continue;
            }
            let message = TaskMessage::from(&t);
            let key = message.key();
            let payload = serde_json::to_vec(&message).expect("a task message serializes");
            let partition = i32::from(t.bucket) % self.partitions;
            let record = FutureRecord::to(&self.topic).partition(partition).key(&key).payload(&payload);
            match self.producer.send_result(record) {
                Ok(delivery) => {
                    let lag = (now - t.due_at).num_microseconds().unwrap_or(0) as f64 / 1e6;
                    self.metrics.publish_lag.observe(lag.max(0.0));
                    pending.push((t.id, delivery));
                }
                Err((e, _)) => {
                    // Left claimed: when the lease expires the task is claimed and sent again.
                    note_failure(&e, &self.topic_missing, (&self.failed_generation, self.generation));
                    self.metrics.publish_errors.inc();
                    tracing::warn!(task_id = t.id, error = %e, "publish failed; the task will be re-claimed");
                }
            }
        }
    }
}

/// Holds claimed tasks in the timing wheel and publishes each when its time comes.
pub async fn drive_wheel(
    mut publisher: Publisher,
    mut claimed_rx: mpsc::Receiver<Vec<ClaimedTask>>,
    token: CancellationToken,
) {
    let now_ms = || Utc::now().timestamp_millis().max(0) as u64;
    let mut wheel: TimingWheel<ClaimedTask> = TimingWheel::new(now_ms());
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let deliveries = TaskTracker::new();
    let mut due = Vec::new();
    loop {
        tokio::select! {
            biased;
            _ = token.cancelled() => break,
            batch = claimed_rx.recv() => {
                let Some(batch) = batch else { break };
                for t in batch {
                    let deadline = t.due_at.timestamp_millis().max(0) as u64;
                    if let Err(t) = wheel.insert(deadline, t) {
                        due.push(t);
                    }
                }
            }
            _ = tick.tick() => {
                wheel.advance(now_ms(), &mut due);
            }
        }
        publisher.metrics.held.set(wheel.len() as i64);
        if !due.is_empty() {
            let mut pending = Vec::with_capacity(due.len());
            publisher.send(std::mem::take(&mut due), &mut pending);
            let metrics = publisher.metrics.clone();
            let flags = (publisher.topic_missing.clone(), (publisher.failed_generation.clone(), publisher.generation));
            deliveries.spawn(await_deliveries(pending, metrics, flags));
        }
        if publisher.failed_generation.load(Ordering::Relaxed) == publisher.generation {
            match producer(&publisher.kafka, publisher.message_timeout) {
                Ok(p) => {
                    tracing::warn!(
                        "the producer failed: replaced it; failed tasks are re-claimed when their leases expire"
                    );
                    publisher.producer = p;
                    publisher.generation += 1;
                }
                // Tried again on the next turn.
                Err(e) => tracing::warn!(error = %e, "the producer failed and could not be replaced yet"),
            }
        }
    }
    deliveries.close();
    deliveries.wait().await;
}

/// Which producer a delivery came from, and where its failure is noted.
type FailureNote = (Arc<AtomicU64>, u64);

fn note_failure(e: &KafkaError, topic_missing: &AtomicBool, (failed_generation, generation): (&AtomicU64, u64)) {
    if matches!(
        e.rdkafka_error_code(),
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic)
    ) {
        topic_missing.store(true, Ordering::Relaxed)
    } else if kafka::producer_must_be_replaced(e) {
        failed_generation.fetch_max(generation, Ordering::Relaxed);
    }
}

async fn await_deliveries(
    pending: Vec<(i64, DeliveryFuture)>,
    metrics: Metrics,
    (topic_missing, (failed_generation, generation)): (Arc<AtomicBool>, FailureNote),
) {
    let mut futures: FuturesUnordered<_> = pending.into_iter().map(|(id, f)| async move { (id, f.await) }).collect();
    while let Some((id, result)) = futures.next().await {
        match result {
            Ok(Ok(_)) => metrics.published.inc(),
            Ok(Err((e, _))) => {
                note_failure(&e, &topic_missing, (&failed_generation, generation));
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
