//! Why the scanner could not start, or stopped: each a line for its log, naming what it
//! was doing. The causes are in the message, not chained, so that the exit is one line.

use std::net::SocketAddr;

use punctual_runtime::kafka::TopicError;
use punctual_runtime::supervisor::Panicked;
use punctual_shared::db::SchemaState;
use rdkafka::error::KafkaError;

#[derive(Debug, thiserror::Error)]
pub enum ScannerError {
    /// Settings that contradict each other.
    #[error("{0}")]
    Config(String),
    #[error("connecting to Postgres: {0}")]
    Database(sqlx::Error),
    #[error("{0}")]
    Schema(SchemaState),
    #[error("preparing topic {topic}: {error}")]
    Topic { topic: String, error: TopicError },
    #[error("creating the producer: {0}")]
    Producer(KafkaError),
    #[error("binding {addr}: {error}")]
    Bind { addr: SocketAddr, error: std::io::Error },
    #[error("{0}")]
    TaskPanicked(Panicked),
    #[error("serving ops endpoints: {0}")]
    Ops(std::io::Error),
}
