//! Test support for Punctual: a fresh database per test, unique topic and group names, the
//! services as in-process apps or as separate processes, and an HTTP sink that records
//! every callback it receives.
//!
//! The real Postgres server and Kafka-protocol broker are started once per test run by
//! `make test` (scripts/test.sh), which passes their addresses in
//! `PUNCTUAL_TEST_DATABASE_URL` (a server URL; each test creates its own database in it)
//! and `PUNCTUAL_TEST_KAFKA_BROKERS`.

pub mod black_hole;
pub mod browser;
pub mod extreme_values;
pub mod load;
pub mod path_prefix;
pub mod process;
pub mod prometheus;
pub mod repeats;
pub mod servers;
pub mod sink;
pub mod stack;

use std::time::Duration;

use punctual_shared::config::{DatabaseConfig, KafkaConfig, Secret};
use sqlx::{Connection, PgConnection, PgPool};
use uuid::Uuid;

pub use process::ServiceProcess;
pub use sink::{Behaviour, Call, Sink};
pub use stack::Stack;

fn required_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the tests with `make test`, which starts Postgres and the broker and sets it")
    })
}

/// The Kafka brokers of the test run.
pub fn kafka_brokers() -> String {
    required_env("PUNCTUAL_TEST_KAFKA_BROKERS")
}

/// A name no other test uses (topics, consumer groups, scanner ids).
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{}", &Uuid::new_v4().simple().to_string()[..12])
}

/// The role the scanners and executors of a test stack run as: rows, no DDL
/// (docs/operations.md, "Least privilege").
pub const SERVICE_ROLE: &str = "punctual_service";

/// A database of its own for one test, migrated.
pub struct TestDb {
    pub url: String,
    pub pool: PgPool,
}

impl TestDb {
    /// On the test run's Postgres server.
    pub async fn create() -> TestDb {
        Self::create_on(&required_env("PUNCTUAL_TEST_DATABASE_URL")).await
    }

    /// On the Postgres server at `server` (a URL without database).
    pub async fn create_on(server: &str) -> TestDb {
        let name = format!("t_{}", Uuid::new_v4().simple());
        let mut admin =
            PgConnection::connect(&format!("{server}/postgres")).await.expect("connect to the test Postgres");
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await.expect("create test database");
        admin.close().await.ok();
        let url = format!("{server}/{name}");
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect(&url)
            .await
            .expect("connect to the test database");
        punctual_shared::db::MIGRATOR.run(&pool).await.expect("migrate the test database");
        // The scanners and executors of a test stack run as the service role, as deployed.
        let created = sqlx::query(&format!("CREATE ROLE {SERVICE_ROLE} LOGIN")).execute(&pool).await;
        if let Err(e) = created {
            // Made already, by this test or another on the same server.
            let code = e.as_database_error().and_then(|d| d.code()).map(|c| c.into_owned());
            assert!(matches!(code.as_deref(), Some("42710" | "23505")), "create the service role: {e}");
        }
        punctual_shared::db::grant_service_role(&pool, SERVICE_ROLE).await.expect("grant the service role");
        TestDb { url, pool }
    }

    /// The database's URL for the service role.
    pub fn service_url(&self) -> String {
        let mut url = url::Url::parse(&self.url).expect("a database URL");
        url.set_username(SERVICE_ROLE).expect("a URL with a host");
        url.to_string()
    }

    /// Makes `owner` a scanner holding every bucket not held by another (for an hour), the
    /// first time; returns what it holds, at the epochs it holds them.
    pub async fn hold_buckets(&self, owner: &str) -> punctual_shared::bucket::Held {
        use punctual_shared::bucket;
        let held: Vec<(i16, i64)> =
            sqlx::query_as("SELECT bucket, epoch FROM buckets WHERE owner = $1 ORDER BY bucket")
                .bind(owner)
                .fetch_all(&self.pool)
                .await
                .expect("read buckets");
        if !held.is_empty() {
            return bucket::Held::new(owner, &held);
        }
        bucket::join_and_acquire(&self.pool, owner, Duration::from_secs(3600), bucket::BUCKETS as usize)
            .await
            .expect("hold buckets")
    }

    pub fn config(&self) -> DatabaseConfig {
        DatabaseConfig { database_url: self.url.parse::<Secret>().expect("infallible"), database_max_connections: 8 }
    }
}

/// Kafka settings with a topic no other test uses.
pub fn kafka_config(partitions: i32) -> KafkaConfig {
    KafkaConfig {
        kafka_brokers: kafka_brokers(),
        tasks_topic: unique_name("punctual.tasks"),
        tasks_partitions: partitions,
        topic_replication: 1,
        kafka_options: Default::default(),
    }
}

/// Polls `check` every 100 ms until it returns `Some`, or panics after `timeout` with `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_or(timeout, check).await.unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for: {what}"))
}

/// Polls `check` every 100 ms until it returns `Some`; `None` after `timeout`.
pub async fn eventually_or<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Deletes a topic, as a broker that lost its state would have lost it.
pub async fn delete_topic(brokers: &str, topic: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> =
        rdkafka::ClientConfig::new().set("bootstrap.servers", brokers).create().expect("admin client");
    for result in admin.delete_topics(&[topic], &AdminOptions::new()).await.expect("delete topics") {
        result.unwrap_or_else(|(t, code)| panic!("deleting {t}: {code}"));
    }
}

/// Whether the cluster lists the topic. Asks for every topic's metadata, not this one's,
/// so that the question cannot create it (brokers may create topics a client asks about).
pub async fn topic_exists(brokers: &str, topic: &str) -> bool {
    let (brokers, topic) = (brokers.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        use rdkafka::consumer::Consumer;
        let consumer: rdkafka::consumer::BaseConsumer =
            rdkafka::ClientConfig::new().set("bootstrap.servers", &brokers).create().expect("consumer");
        let metadata = consumer.fetch_metadata(None, Duration::from_secs(5)).expect("metadata");
        metadata.topics().iter().any(|t| t.name() == topic && !t.partitions().is_empty())
    })
    .await
    .expect("metadata task")
}
