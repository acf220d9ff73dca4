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

/// The two producers of a scanner: one for tasks sent at their publish time, whose lead
/// hides a long linger, and one for tasks sent later than that (a timer triggered now, a
/// replay, a backlog), which must not wait for a batch.
#[derive(Clone)]
pub struct Producers {
    pub on_time: ReplaceableProducer,
    pub late: ReplaceableProducer,
}

impl Producers {
    pub fn new(cfg: &KafkaConfig, lead: Duration) -> Result<Producers, KafkaError> {
        let (on_time_cfg, late_cfg) = (cfg.clone(), cfg.clone());
        let on_time_linger = on_time_linger(lead);
        Ok(Producers {
            on_time: ReplaceableProducer::new(move || producer(&on_time_cfg, on_time_linger))?,
            late: ReplaceableProducer::new(move || producer(&late_cfg, LATE_LINGER))?,
        })
    }
}

/// The most a task sent at its publish time waits for its batch. Per request, the
/// producer's broker thread spins through the last millisecond before each batch is due (it
/// rounds the wait down), and the broker and the consumers pay per request: the longer the
/// linger, the fewer requests at a given rate (docs/BENCHMARKS.md, "Levers for a cheaper
/// fire"). Half the lead, so that the rest of the way still fits in it.
const MAX_ON_TIME_LINGER: Duration = Duration::from_millis(100);
/// Batches a burst of late tasks without delaying one alone by more than this.
const LATE_LINGER: Duration = Duration::from_millis(5);

pub fn on_time_linger(lead: Duration) -> Duration {
    MAX_ON_TIME_LINGER.min(lead / 2)
}

/// An idempotent producer: a retried send never duplicates a message in the log.
pub fn producer(cfg: &KafkaConfig, linger: Duration) -> Result<kafka::Producer, KafkaError> {
    kafka::Producer::create(&kafka::client_config(
        cfg,
        &[
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("linger.ms", &linger.as_millis().to_string()),
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
    /// Each replaced when it cannot go on (e.g. the broker forgot its id after losing its
    /// state).
    pub producers: Producers,
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

    /// Sends the tasks due for publishing, each by the producer its time left calls for, and
    /// awaits their deliveries on `deliveries`.
    fn publish(&self, due: Vec<ClaimedTask>, deliveries: &TaskTracker) {
        let now = Utc::now();
        let (on_time, late): (Vec<_>, Vec<_>) =
            due.into_iter().partition(|t| sent_on_time(self.publish_at(t), self.lead, now));
        for (tasks, producer) in [(on_time, &self.producers.on_time), (late, &self.producers.late)] {
            if tasks.is_empty() {
                continue;
            }
            let mut pending = Vec::with_capacity(tasks.len());
            let generation = self.send(producer, tasks, now, &mut pending);
            deliveries.spawn(await_deliveries(pending, self.metrics.clone(), self.failure_note(producer, generation)));
        }
    }

    /// Where the failures of sends by `producer` at `generation` are noted.
    fn failure_note(&self, producer: &ReplaceableProducer, generation: Generation) -> FailureNote {
        FailureNote { topic_missing: self.topic_missing.clone(), producer: producer.clone(), generation }
    }

    /// Sends the tasks by `by`, adding their deliveries to `pending`; returns the generation
    /// of the producer that sent them, to report their failures with. A task whose claim has
    /// expired by `now` is dropped, not sent, and so is a task whose bucket this scanner no longer holds at
    /// the task's epoch: another scanner may own it now (a scanner frozen past its lease
    /// must not publish what it no longer holds; should it, the executor refuses the
    /// message's epoch).
    fn send(
        &self,
        by: &ReplaceableProducer,
        tasks: Vec<ClaimedTask>,
        now: chrono::DateTime<Utc>,
        pending: &mut Vec<Pending>,
    ) -> Generation {
        let (generation, producer) = by.get();
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
                    self.failure_note(by, generation).note(&e);
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

/// Whether a task whose publish time is `publish_at`, sent `now`, is on time: within a
/// quarter of the lead after that time (the wheel hands tasks over a millisecond or so after
/// it, more when it is busy), the lingering producer's batch, at most half the lead, still
/// leaves a quarter of it for the broker, the fetch and the start.
fn sent_on_time(publish_at: chrono::DateTime<Utc>, lead: chrono::Duration, now: chrono::DateTime<Utc>) -> bool {
    now <= publish_at + lead / 4
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
            publisher.publish(std::mem::take(&mut due), &deliveries);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_handed_over_at_its_publish_time_lingers_and_a_late_one_does_not() {
        let (publish_at, lead) = (Utc::now(), chrono::Duration::milliseconds(200));
        let ms = chrono::Duration::milliseconds;
        assert!(sent_on_time(publish_at, lead, publish_at));
        assert!(sent_on_time(publish_at, lead, publish_at + ms(2)));
        assert!(sent_on_time(publish_at, lead, publish_at + ms(50)));
        // Claimed after its publish time (a timer triggered now, a replay, a backlog).
        assert!(!sent_on_time(publish_at, lead, publish_at + ms(51)));
        assert!(!sent_on_time(publish_at, lead, publish_at + ms(190)));
        assert!(!sent_on_time(publish_at, lead, publish_at + chrono::Duration::seconds(30)));
    }

    #[test]
    fn the_on_time_linger_is_half_the_lead_and_at_most_100_ms() {
        assert_eq!(on_time_linger(Duration::from_millis(200)), Duration::from_millis(100));
        assert_eq!(on_time_linger(Duration::from_secs(10)), Duration::from_millis(100));
        assert_eq!(on_time_linger(Duration::from_millis(50)), Duration::from_millis(25));
        assert!(LATE_LINGER < on_time_linger(Duration::from_millis(20)));
    }
}
