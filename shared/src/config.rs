//! Settings shared by the services. Every setting is an environment variable with the
//! `PUNCTUAL_` prefix (and a command-line flag of the same name); `--help` lists them with
//! their defaults, and README's configuration table repeats them.

use std::fmt;
use std::str::FromStr;

/// A value that must not be printed: `Debug` and `Display` show `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_owned()))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct DatabaseConfig {
    /// Postgres connection URL.
    #[arg(
        long = "database-url",
        env = "PUNCTUAL_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/punctual",
        hide_default_value = true
    )]
    pub database_url: Secret,
    /// Connections in the pool.
    #[arg(long, env = "PUNCTUAL_DATABASE_MAX_CONNECTIONS", default_value_t = 8)]
    pub database_max_connections: u32,
}

#[derive(Debug, Clone, clap::Args)]
pub struct KafkaConfig {
    /// Kafka bootstrap servers, comma-separated.
    #[arg(long, env = "PUNCTUAL_KAFKA_BROKERS", default_value = "127.0.0.1:9092")]
    pub kafka_brokers: String,
    /// Topic that carries due tasks from the scanner to the executors.
    #[arg(long, env = "PUNCTUAL_TASKS_TOPIC", default_value = "punctual.tasks")]
    pub tasks_topic: String,
    /// Partitions of the tasks topic when Punctual creates it (the upper bound on useful executors).
    #[arg(long, env = "PUNCTUAL_TASKS_PARTITIONS", default_value_t = 8)]
    pub tasks_partitions: i32,
    /// Replication factor of the tasks topic when Punctual creates it.
    #[arg(long, env = "PUNCTUAL_TOPIC_REPLICATION", default_value_t = 1)]
    pub topic_replication: i32,
}
