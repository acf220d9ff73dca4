//! Settings shared by the services. Every setting is an environment variable with the
//! `PUNCTUAL_` prefix (and a command-line flag of the same name); `--help` lists them with
//! their defaults, and docs/configuration.md repeats them.

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
    /// Further librdkafka properties for every Kafka client, `key=value` pairs separated by
    /// `;` (e.g. `security.protocol=SASL_SSL;sasl.mechanism=PLAIN`). Applied last, so they
    /// also override Punctual's own settings. Their values are never logged.
    #[arg(long, env = "PUNCTUAL_KAFKA_OPTIONS", default_value = "")]
    pub kafka_options: KafkaOptions,
}

/// librdkafka properties given by the operator. `Debug` shows the keys only: values may be
/// credentials (`sasl.password`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KafkaOptions(pub Vec<(String, String)>);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("Kafka option {0:?} is not of the form key=value")]
pub struct KafkaOptionError(String);

impl FromStr for KafkaOptions {
    type Err = KafkaOptionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.split(';')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(|entry| match entry.split_once('=') {
                Some((key, value)) if !key.trim().is_empty() => Ok((key.trim().to_owned(), value.trim().to_owned())),
                _ => Err(KafkaOptionError(entry.to_owned())),
            })
            .collect::<Result<_, _>>()
            .map(KafkaOptions)
    }
}

impl fmt::Debug for KafkaOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.0.iter().map(|(k, _)| (k, "***"))).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_options_are_key_value_pairs_and_hide_their_values() {
        let options: KafkaOptions = " security.protocol=SASL_SSL; sasl.password = a=b ;".parse().unwrap();
        assert_eq!(
            options.0,
            vec![("security.protocol".into(), "SASL_SSL".into()), ("sasl.password".into(), "a=b".into())]
        );
        assert_eq!(format!("{options:?}"), r#"{"security.protocol": "***", "sasl.password": "***"}"#);
        assert_eq!("".parse::<KafkaOptions>().unwrap(), KafkaOptions::default());
        assert_eq!("linger.ms".parse::<KafkaOptions>(), Err(KafkaOptionError("linger.ms".into())));
        assert_eq!("=5".parse::<KafkaOptions>(), Err(KafkaOptionError("=5".into())));
    }
}

/// The keys that seal secrets at rest (shared/src/sealed.rs).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SecretKeyConfig {
    /// Keys that seal signing secrets and secret header values in the database:
    /// `<id>:<base64 of 32 bytes>`, comma-separated; the first seals, every one opens
    /// (`punctual secrets key` makes one). Without, they are stored as given.
    // A string, parsed at start: clap's error for a malformed value would print the value.
    #[arg(long = "secret-key", env = "PUNCTUAL_SECRET_KEY", hide_env_values = true)]
    pub secret_key: Option<String>,
}

impl SecretKeyConfig {
    pub fn keys(&self) -> Result<crate::sealed::SecretKeys, crate::sealed::InvalidSecretKey> {
        self.secret_key.as_deref().unwrap_or_default().parse()
    }
}
