//! Kafka plumbing shared by the scanner and the executor.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

use crate::config::KafkaConfig;

pub fn client_config(cfg: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.kafka_brokers);
    // Notice a topic re-created (after a broker lost it) within seconds, not minutes.
    c.set("topic.metadata.refresh.interval.ms", "10000");
    // Due work is small messages that must not wait: without this, Nagle's algorithm holds
    // a small request back until the previous one is acknowledged.
    c.set("socket.nagle.disable", "true");
    c
}

/// Whether a failed send means the idempotent producer itself cannot go on, so that a new
/// one must take its place. Besides librdkafka's own fatal errors: a broker that lost its
/// state (restarted without durable storage) answers the old producer id with a fencing
/// or sequence error forever, and a producer whose messages time out may be stuck on such
/// a broker (both seen with a memory-storage broker). A new producer costs one connection.
pub fn producer_must_be_replaced(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::Fatal
                | RDKafkaErrorCode::MessageTimedOut
                | RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
                | RDKafkaErrorCode::UnknownProducerId
                | RDKafkaErrorCode::OutOfOrderSequenceNumber
                | RDKafkaErrorCode::InvalidProducerIdMapping
        )
    )
}

#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error("could not create topic {topic}: {code}")]
    Create { topic: String, code: RDKafkaErrorCode },
    #[error("topic {0} has no partitions")]
    NoPartitions(String),
}

/// Creates the topic if it does not exist; returns its partition count.
pub async fn ensure_topic(cfg: &KafkaConfig, topic: &str, partitions: i32) -> Result<i32, TopicError> {
    create_topic_if_missing(cfg, topic, partitions).await?;
    partition_count(cfg, topic).await
}

/// Creates the topic unless it exists; true if it was created. Cheap enough to call
/// periodically: one client and one request to the cluster. A new client each time, on
/// purpose: one kept for the life of the caller would hold the metadata of the topic it
/// is about to create again, which librdkafka mishandles (docs/semantics.md).
pub async fn create_topic_if_missing(cfg: &KafkaConfig, topic: &str, partitions: i32) -> Result<bool, TopicError> {
    let admin: AdminClient<DefaultClientContext> = client_config(cfg).create()?;
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(cfg.topic_replication));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let mut created = false;
    for result in admin.create_topics([&new_topic], &options).await? {
        match result {
            Ok(_) => created = true,
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => return Err(TopicError::Create { topic, code }),
        }
    }
    Ok(created)
}

/// Reads the topic's partition count from the cluster's metadata.
pub async fn partition_count(cfg: &KafkaConfig, topic: &str) -> Result<i32, TopicError> {
    let cfg = cfg.clone();
    let topic = topic.to_owned();
    // Metadata requests block: keep them off the async workers.
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = client_config(&cfg).create()?;
        for _ in 0..50 {
            let metadata = consumer.fetch_metadata(Some(&topic), Duration::from_secs(5))?;
            let count = metadata.topics().iter().find(|t| t.name() == topic).map_or(0, |t| t.partitions().len());
            if count > 0 {
                return Ok(count as i32);
            }
            // A topic just created may take a moment to show its partitions.
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(TopicError::NoPartitions(topic))
    })
    .await
    .expect("metadata task panicked")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_errors_of_the_producer_itself_replace_it() {
        let failed = |code| KafkaError::MessageProduction(code);
        for code in [RDKafkaErrorCode::ProducerFenced, RDKafkaErrorCode::MessageTimedOut, RDKafkaErrorCode::Fatal] {
            assert!(producer_must_be_replaced(&failed(code)), "{code:?}");
        }
        // A message too large, or a topic gone, says nothing about the producer.
        for code in [RDKafkaErrorCode::MessageSizeTooLarge, RDKafkaErrorCode::UnknownTopicOrPartition] {
            assert!(!producer_must_be_replaced(&failed(code)), "{code:?}");
        }
    }
}
