//! Why the executor could not start, or stopped: each a line for its log, naming what it
//! was doing. The causes are in the message, not chained, so that the exit is one line.

use std::net::SocketAddr;

use punctual_runtime::kafka::TopicError;
use punctual_runtime::supervisor::Panicked;
use punctual_shared::db::SchemaState;
use punctual_shared::sealed::InvalidSecretKey;
use rdkafka::error::KafkaError;

use crate::signing_keys::RefreshError;

#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("connecting to Postgres: {0}")]
    Database(sqlx::Error),
    #[error("{0}")]
    Schema(SchemaState),
    #[error("preparing topic {topic}: {error}")]
    Topic { topic: String, error: TopicError },
    #[error("binding {addr}: {error}")]
    Bind { addr: SocketAddr, error: std::io::Error },
    #[error("creating the producer: {0}")]
    Producer(KafkaError),
    #[error("creating the Kafka consumer: {0}")]
    Consumer(KafkaError),
    #[error("subscribing: {0}")]
    Subscribe(KafkaError),
    #[error("{0}")]
    SecretKey(InvalidSecretKey),
    #[error("{0}")]
    SigningSecrets(RefreshError),
    #[error("reading the namespaces' limits: {0}")]
    Namespaces(sqlx::Error),
    #[error("reading the paused targets: {0}")]
    PausedTargets(sqlx::Error),
    #[error("creating the HTTP client: {0}")]
    HttpClient(native_tls::Error),
    /// Fenced as a static member, say (librdkafka issue #3437): a new process consumes again.
    #[error("the Kafka consumer failed for good; exiting to restart: {0}")]
    ConsumerFailed(KafkaError),
    /// Never joins, however long it tries: a setting to fix.
    #[error(
        "the broker refuses PUNCTUAL_KAFKA_SESSION_TIMEOUT_MS={timeout_ms}: it must lie within the broker's \
         group.min.session.timeout.ms and group.max.session.timeout.ms ({error})"
    )]
    SessionTimeout { timeout_ms: u64, error: KafkaError },
    #[error("{0}")]
    TaskPanicked(Panicked),
    #[error("ops server panicked: {0}")]
    OpsPanicked(tokio::task::JoinError),
    #[error("serving ops endpoints: {0}")]
    Ops(std::io::Error),
}
