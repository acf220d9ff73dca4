//! Punctual's Kafka producer: librdkafka's, each send's delivery report handed to a
//! future, the reports served by a thread of the producer's own.
//!
//! rdkafka's `FutureProducer` serves them in polls of 100 ms, and each poll spins through
//! its last millisecond (its wait is rounded down to whole milliseconds): 1 % of a core
//! for every idle producer (docs/BENCHMARKS.md, "Idle"). This one polls a second at a
//! time. A report is served when it comes all the same; only the spin is rarer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::channel::oneshot;
use rdkafka::client::{Client, ClientContext};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{DeliveryResult, Message, OwnedMessage, ToBytes};
use rdkafka::producer::{BaseProducer, BaseRecord, FutureRecord, Producer as _, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Timestamp};

use crate::kafka::count_error;

/// How long one poll of the reporting thread waits for a report: also the longest a
/// dropped producer's thread lives on.
const POLL: Duration = Duration::from_secs(1);

/// Where a message went: its partition and offset.
pub type Delivered = (i32, i64);

/// A send's outcome: where the message went, or why it did not, with the message.
pub type Delivery = Result<Delivered, (KafkaError, OwnedMessage)>;

/// The context of Punctual's producers: counts client-wide errors, logs them as
/// librdkafka's default does, and hands each delivery report to its send's future.
#[derive(Clone, Copy, Default)]
pub struct ProducerReports;

impl ClientContext for ProducerReports {
    fn error(&self, error: KafkaError, reason: &str) {
        count_error(&error);
        tracing::error!("librdkafka: {error}: {reason}");
    }
}

impl ProducerContext for ProducerReports {
    type DeliveryOpaque = Box<oneshot::Sender<Delivery>>;

    fn delivery(&self, result: &DeliveryResult<'_>, report: Self::DeliveryOpaque) {
        let outcome = match result {
            Ok(message) => Ok((message.partition(), message.offset())),
            Err((e, message)) => Err((e.clone(), message.detach())),
        };
        // Nobody waits for a report whose future was dropped.
        let _ = report.send(outcome);
    }
}

/// A producer; clones share it. Its thread polls while any clone lives, and then drops
/// the librdkafka producer itself (purging what it still holds): a dropped producer never
/// blocks its caller for that.
#[derive(Clone)]
pub struct Producer {
    base: Arc<BaseProducer<ProducerReports>>,
}

/// A send's delivery report, to await.
pub struct DeliveryFuture(oneshot::Receiver<Delivery>);

impl Future for DeliveryFuture {
    /// `Err` if the producer went away without reporting (it always reports, purges
    /// included, before it is dropped).
    type Output = Result<Delivery, oneshot::Canceled>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl Producer {
    /// A producer of `config`, and its reporting thread.
    pub fn create(config: &ClientConfig) -> KafkaResult<Producer> {
        let base: Arc<BaseProducer<ProducerReports>> = Arc::new(config.create_with_context(ProducerReports)?);
        let polled = base.clone();
        std::thread::Builder::new()
            .name("kafka-reports".into())
            .spawn(move || {
                // No weak references are made, so once the clones are gone none comes back.
                while Arc::strong_count(&polled) > 1 {
                    polled.poll(POLL);
                }
            })
            .map_err(|e| KafkaError::ClientCreation(format!("the producer's reporting thread: {e}")))?;
        Ok(Producer { base })
    }

    /// The underlying client (metadata, for instance).
    pub fn client(&self) -> &Client<ProducerReports> {
        self.base.client()
    }

    /// Queues `record` for sending, without waiting: its report comes by the future. A
    /// full queue is an error at once. (The record comes back with an error, as rdkafka's
    /// `FutureProducer` gives it, for the caller to send again.)
    #[allow(clippy::result_large_err)]
    pub fn send_result<'a, K, P>(
        &self,
        record: FutureRecord<'a, K, P>,
    ) -> Result<DeliveryFuture, (KafkaError, FutureRecord<'a, K, P>)>
    where
        K: ToBytes + ?Sized,
        P: ToBytes + ?Sized,
    {
        let (report, reported) = oneshot::channel();
        match self.base.send(base_record(record, Box::new(report))) {
            Ok(()) => Ok(DeliveryFuture(reported)),
            Err((e, record)) => Err((e, future_record(record))),
        }
    }

    /// Sends `record` and waits for its report; a full queue is tried again every 100 ms
    /// for up to `queue_timeout`.
    #[allow(clippy::result_large_err)]
    pub async fn send<K, P>(&self, record: FutureRecord<'_, K, P>, queue_timeout: Duration) -> Delivery
    where
        K: ToBytes + ?Sized,
        P: ToBytes + ?Sized,
    {
        let started = Instant::now();
        let mut record = record;
        loop {
            match self.send_result(record) {
                Ok(delivery) => {
                    let unreported = |_| {
                        Err((
                            KafkaError::Canceled,
                            OwnedMessage::new(None, None, String::new(), Timestamp::NotAvailable, -1, -1, None),
                        ))
                    };
                    return delivery.await.unwrap_or_else(unreported);
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), again))
                    if started.elapsed() < queue_timeout =>
                {
                    record = again;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err((e, record)) => return Err((e, owned(&record))),
            }
        }
    }
}

fn base_record<'a, K, P>(
    record: FutureRecord<'a, K, P>,
    report: Box<oneshot::Sender<Delivery>>,
) -> BaseRecord<'a, K, P, Box<oneshot::Sender<Delivery>>>
where
    K: ToBytes + ?Sized,
    P: ToBytes + ?Sized,
{
    let FutureRecord { topic, partition, payload, key, timestamp, headers } = record;
    BaseRecord { topic, partition, payload, key, timestamp, headers, delivery_opaque: report }
}

fn future_record<'a, K, P>(record: BaseRecord<'a, K, P, Box<oneshot::Sender<Delivery>>>) -> FutureRecord<'a, K, P>
where
    K: ToBytes + ?Sized,
    P: ToBytes + ?Sized,
{
    let BaseRecord { topic, partition, payload, key, timestamp, headers, .. } = record;
    FutureRecord { topic, partition, payload, key, timestamp, headers }
}

/// A record that was not sent, as the message it would have been.
fn owned<K, P>(record: &FutureRecord<'_, K, P>) -> OwnedMessage
where
    K: ToBytes + ?Sized,
    P: ToBytes + ?Sized,
{
    OwnedMessage::new(
        record.payload.map(|p| p.to_bytes().to_vec()),
        record.key.map(|k| k.to_bytes().to_vec()),
        record.topic.to_owned(),
        record.timestamp.map_or(Timestamp::NotAvailable, Timestamp::CreateTime),
        record.partition.unwrap_or(-1),
        -1,
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_send_that_cannot_be_delivered_reports_its_failure_and_a_dropped_producer_ends_its_thread() {
        // Nothing listens at port 1: the message times out, and says so.
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", "127.0.0.1:1").set("message.timeout.ms", "300");
        let producer = Producer::create(&config).unwrap();
        let delivery = producer.send_result(FutureRecord::to("unused").key("k").payload("v")).ok().unwrap();
        let outcome = tokio::time::timeout(Duration::from_secs(10), delivery).await.expect("reported").unwrap();
        let (e, message) = outcome.expect_err("undeliverable");
        assert_eq!(e.rdkafka_error_code(), Some(RDKafkaErrorCode::MessageTimedOut));
        assert_eq!(message.key(), Some(&b"k"[..]));
        let base = Arc::downgrade(&producer.base);
        drop(producer);
        // The thread notices within a poll, and drops the librdkafka producer.
        let gone = async {
            while base.upgrade().is_some() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), gone).await.expect("the reporting thread ended");
    }
}
