//! Kafka plumbing shared by the scanner and the executor.

use std::sync::{Arc, LazyLock, Mutex, RwLock};
use std::time::Duration;

use prometheus::{IntCounterVec, Opts};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

use punctual_shared::config::KafkaConfig;
use punctual_shared::unpoisoned;

/// A client's configuration: Punctual's common settings, then the client's own `settings`,
/// then the operator's librdkafka properties (`PUNCTUAL_KAFKA_OPTIONS`), last so that they
/// win over Punctual's. Every client is made from it, so none can miss the operator's
/// properties (credentials, TLS).
pub fn client_config(cfg: &KafkaConfig, settings: &[(&str, &str)]) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.kafka_brokers);
    // Notice a topic re-created (after a broker lost it) within seconds, not minutes.
    c.set("topic.metadata.refresh.interval.ms", "10000");
    // Due work is small messages that must not wait: without this, Nagle's algorithm holds
    // a small request back until the previous one is acknowledged.
    c.set("socket.nagle.disable", "true");
    for (key, value) in settings {
        c.set(*key, *value);
    }
    for (key, value) in &cfg.kafka_options.0 {
        c.set(key, value);
    }
    c
}

/// Errors of this process's Kafka clients, by librdkafka's error code: client-wide errors
/// (a broker unreachable, all brokers down) and failed sends and receives.
pub static CLIENT_ERRORS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    IntCounterVec::new(
        Opts::new("punctual_kafka_client_errors_total", "Errors of this process's Kafka clients, by kind"),
        &["kind"],
    )
    .expect("valid metric")
});

/// Counts `e` in [`CLIENT_ERRORS`] under its error code's name (a bounded set).
pub fn count_error(e: &KafkaError) {
    let kind = e.rdkafka_error_code().map_or_else(|| "Other".to_owned(), |code| format!("{code:?}"));
    CLIENT_ERRORS.with_label_values(&[kind.as_str()]).inc();
}

pub use crate::producer::Producer;

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

/// Which producer sent a message: the failures of one already replaced replace nothing.
pub type Generation = u64;

/// An idempotent producer that is replaced when it cannot go on (see
/// [`producer_must_be_replaced`]). Clones share it.
#[derive(Clone)]
pub struct ReplaceableProducer {
    current: Arc<RwLock<(Generation, Producer)>>,
    /// Held while a replacement is made, so that the failures of one producer arriving
    /// together make one new producer, not one each.
    replacing: Arc<Mutex<()>>,
    create: Arc<dyn Fn() -> KafkaResult<Producer> + Send + Sync>,
}

impl ReplaceableProducer {
    /// A producer made by `create`, which also makes its replacements.
    pub fn new(create: impl Fn() -> KafkaResult<Producer> + Send + Sync + 'static) -> KafkaResult<Self> {
        let first = create()?;
        Ok(Self {
            current: Arc::new(RwLock::new((1, first))),
            replacing: Arc::new(Mutex::new(())),
            create: Arc::new(create),
        })
    }

    /// The current producer, with its generation to report its failures with.
    pub fn get(&self) -> (Generation, Producer) {
        unpoisoned::read(&self.current).clone()
    }

    /// Replaces the producer of `generation` if `e` says it cannot go on and it has not
    /// been replaced already. Called from within the tokio runtime.
    pub fn on_error(&self, generation: Generation, e: &KafkaError) {
        count_error(e);
        if !producer_must_be_replaced(e) {
            return;
        }
        let Ok(_replacing) = self.replacing.try_lock() else {
            return;
        };
        if self.get().0 != generation {
            return;
        }
        match (self.create)() {
            Ok(replacement) => {
                let old = std::mem::replace(&mut *unpoisoned::write(&self.current), (generation + 1, replacement));
                tracing::warn!(error = %e, "the producer failed: replaced it");
                // Senders may still hold clones of it; the last one dropped stops it.
                drop(old);
            }
            // Tried again on the next failure.
            Err(e) => tracing::warn!(error = %e, "the producer failed and could not be replaced yet"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error("could not create topic {topic}: {code}")]
    Create { topic: String, code: RDKafkaErrorCode },
    #[error("topic {0} has no partitions")]
    NoPartitions(String),
    #[error(
        "topic {topic} has {found} partitions, fewer than the {configured} of PUNCTUAL_TASKS_PARTITIONS: add \
         partitions (kafka-topics.sh --bootstrap-server HOST:PORT --alter --topic {topic} --partitions \
         {configured}) or set PUNCTUAL_TASKS_PARTITIONS={found}"
    )]
    TooFewPartitions { topic: String, found: i32, configured: i32 },
}

/// Creates the topic if it does not exist; returns its partition count.
pub async fn ensure_topic(cfg: &KafkaConfig, topic: &str, partitions: i32) -> Result<i32, TopicError> {
    create_topic_if_missing(cfg, topic, partitions).await?;
    partition_count(cfg, topic).await
}

/// Creates the tasks topic if it does not exist; returns its partition count, which maps
/// buckets to partitions. An existing topic with fewer partitions than configured is an
/// error that says what to do, not a map other than the one configured.
pub async fn ensure_tasks_topic(cfg: &KafkaConfig) -> Result<i32, TopicError> {
    let found = ensure_topic(cfg, &cfg.tasks_topic, cfg.tasks_partitions).await?;
    if found < cfg.tasks_partitions {
        return Err(TopicError::TooFewPartitions {
            topic: cfg.tasks_topic.clone(),
            found,
            configured: cfg.tasks_partitions,
        });
    }
    if found > cfg.tasks_partitions {
        tracing::warn!(topic = %cfg.tasks_topic, found, configured = cfg.tasks_partitions,
            "the tasks topic has more partitions than configured: all of them are used");
    }
    Ok(found)
}

/// Creates the topic unless it exists; true if it was created. Cheap enough to call
/// periodically: one client and one request to the cluster. A new client each time, on
/// purpose: one kept for the life of the caller would hold the metadata of the topic it
/// is about to create again, which librdkafka mishandles (docs/semantics.md).
pub async fn create_topic_if_missing(cfg: &KafkaConfig, topic: &str, partitions: i32) -> Result<bool, TopicError> {
    let admin: AdminClient<DefaultClientContext> = client_config(cfg, &[]).create()?;
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
        let consumer: BaseConsumer = client_config(&cfg, &[]).create()?;
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

    #[tokio::test]
    async fn a_producer_is_replaced_once_for_its_own_failures_only() {
        // Creating a producer needs no broker: it connects when it first sends.
        let cfg = KafkaConfig {
            kafka_brokers: "127.0.0.1:1".into(),
            tasks_topic: "unused".into(),
            tasks_partitions: 1,
            topic_replication: 1,
            kafka_options: Default::default(),
        };
        let made = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = made.clone();
        let producer = ReplaceableProducer::new(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Producer::create(&client_config(&cfg, &[]))
        })
        .unwrap();
        let failed = |code| KafkaError::MessageProduction(code);
        producer.on_error(1, &failed(RDKafkaErrorCode::MessageSizeTooLarge));
        assert_eq!(producer.get().0, 1, "not the producer's fault");
        producer.on_error(1, &failed(RDKafkaErrorCode::ProducerFenced));
        assert_eq!(producer.get().0, 2);
        // More failures of the first producer, already replaced, replace nothing.
        producer.on_error(1, &failed(RDKafkaErrorCode::MessageTimedOut));
        assert_eq!(producer.get().0, 2);
        assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn the_operators_options_come_last_and_win() {
        let cfg = KafkaConfig {
            kafka_brokers: "127.0.0.1:1".into(),
            tasks_topic: "unused".into(),
            tasks_partitions: 1,
            topic_replication: 1,
            kafka_options: "linger.ms=20;security.protocol=SSL".parse().unwrap(),
        };
        let c = client_config(&cfg, &[("linger.ms", "5"), ("acks", "all")]);
        assert_eq!(c.get("linger.ms"), Some("20"));
        assert_eq!(c.get("security.protocol"), Some("SSL"));
        assert_eq!(c.get("acks"), Some("all"));
        assert_eq!(c.get("bootstrap.servers"), Some("127.0.0.1:1"));
    }

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
