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
pub fn producer(cfg: &KafkaConfig) -> Result<FutureProducer, rdkafka::error::KafkaError> {
    kafka::client_config(cfg)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        // Batches a few milliseconds of due tasks per request: with 1 ms, librdkafka's
        // threads woke so often that polling was half the scanner's CPU at 10,000/s.
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "2000000")
        // Long enough to ride out a broker restart. Tied to the lease (4 s in the fault
        // tests) instead, the producer timed out and was replaced during a 2 s restart of
        // a durable broker, and in one run of four the broker then reset the connections
        // of every client until the test gave up.
        .set("message.timeout.ms", "30000")
        .create()
}

pub struct Publisher {
    pub producer: FutureProducer,
    /// To make a new producer when the current one cannot go on.
    pub kafka: KafkaConfig,
    /// Counts the producers made, starting at 1.
    pub generation: u64,
    /// The generation of the last producer that failed, 0 for none. After some errors an
    /// idempotent producer cannot go on ([`kafka::producer_must_be_replaced`]: e.g. the
    /// broker forgot its id after losing its state), so the wheel driver replaces it; a
    /// failure reported by an older producer, already replaced, is no reason to replace
    /// the current one.
    pub failed_generation: Arc<AtomicU64>,
    /// Set when the broker says the topic does not exist (it lost it): the scan loop
    /// creates it again.
    pub topic_missing: Arc<AtomicBool>,
    pub topic: String,
    pub partitions: i32,
    pub metrics: Metrics,
}

impl Publisher {
    /// Where the failures of sends by the current producer are noted.
    fn failure_note(&self) -> FailureNote {
        FailureNote {
            topic_missing: self.topic_missing.clone(),
            failed_generation: self.failed_generation.clone(),
            generation: self.generation,
        }
    }

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
                    self.failure_note().note(&e);
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
    let mut replace_again_at = tokio::time::Instant::now();
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
            deliveries.spawn(await_deliveries(pending, metrics, publisher.failure_note()));
        }
        if publisher.failed_generation.load(Ordering::Relaxed) == publisher.generation
            && tokio::time::Instant::now() >= replace_again_at
        {
            match producer(&publisher.kafka) {
                Ok(p) => {
                    tracing::warn!(
                        "the producer failed: replaced it; failed tasks are re-claimed when their leases expire"
                    );
                    let old = std::mem::replace(&mut publisher.producer, p);
                    publisher.generation += 1;
                    // Dropping a producer purges, flushes and joins its threads: up to
                    // some hundreds of milliseconds, not on the thread that publishes.
                    tokio::task::spawn_blocking(move || drop(old));
                }
                Err(e) => {
                    replace_again_at = tokio::time::Instant::now() + Duration::from_secs(1);
                    tracing::warn!(error = %e, "the producer failed and could not be replaced yet");
                }
            }
        }
    }
    deliveries.close();
    deliveries.wait().await;
}

/// Where a failed send is noted, with the generation of the producer that sent it.
struct FailureNote {
    topic_missing: Arc<AtomicBool>,
    failed_generation: Arc<AtomicU64>,
    generation: u64,
}

impl FailureNote {
    fn note(&self, e: &KafkaError) {
        let code = e.rdkafka_error_code();
        if matches!(code, Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic)) {
            self.topic_missing.store(true, Ordering::Relaxed)
        } else if kafka::producer_must_be_replaced(e) {
            self.failed_generation.fetch_max(self.generation, Ordering::Relaxed);
        }
    }
}

async fn await_deliveries(pending: Vec<(i64, DeliveryFuture)>, metrics: Metrics, failures: FailureNote) {
    let mut futures: FuturesUnordered<_> = pending.into_iter().map(|(id, f)| async move { (id, f.await) }).collect();
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
