//! `GET /readyz`: whether a service can do its work now. Each check runs on every request,
//! all at once, each within [`CHECK_TIMEOUT`]; the answer is 200 when every check passed
//! and 503 otherwise, with each check's result.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{join_all, BoxFuture};
use futures::FutureExt;
use serde::Serialize;
use sqlx::PgPool;

use crate::db::MIGRATOR;

/// How long one check may take before it counts as failed.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

type CheckFn = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// The checks of one service.
#[derive(Clone, Default)]
pub struct Readiness {
    checks: Vec<(&'static str, CheckFn)>,
}

/// The answer of `/readyz`.
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct ReadyReport {
    pub ready: bool,
    pub checks: Vec<CheckReport>,
}

#[derive(Debug, Serialize, serde::Deserialize)]
pub struct CheckReport {
    pub name: String,
    pub ok: bool,
    /// Why the check failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Readiness {
    /// Adds a check named `name`.
    pub fn check<F, Fut>(mut self, name: &'static str, check: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.checks.push((name, Arc::new(move || check().boxed())));
        self
    }

    /// Adds the checks every service has: Postgres answers, and its schema is the one this
    /// build migrates to.
    pub fn postgres(self, pool: &PgPool) -> Self {
        let answers = pool.clone();
        let migrated = pool.clone();
        self.check("postgres", move || {
            let pool = answers.clone();
            async move { sqlx::query("SELECT 1").execute(&pool).await.map(drop).map_err(|e| e.to_string()) }
        })
        .check("migrations", move || {
            let pool = migrated.clone();
            async move { migrations_current(&pool).await }
        })
    }

    /// Adds the check that the broker answers with `topic`'s metadata, fetched (blocking, so
    /// on a blocking thread) by `fetch_metadata` with the topic and [`CHECK_TIMEOUT`].
    pub fn kafka<F>(self, topic: &str, fetch_metadata: F) -> Self
    where
        F: Fn(&str, Duration) -> rdkafka::error::KafkaResult<rdkafka::metadata::Metadata>
            + Clone
            + Send
            + Sync
            + 'static,
    {
        let topic = topic.to_owned();
        self.check("kafka", move || {
            let fetch_metadata = fetch_metadata.clone();
            let topic = topic.clone();
            async move {
                tokio::task::spawn_blocking(move || fetch_metadata(&topic, CHECK_TIMEOUT))
                    .await
                    .map_err(|e| e.to_string())?
                    .map(drop)
                    .map_err(|e| e.to_string())
            }
        })
    }

    /// Runs every check at once.
    pub async fn report(&self) -> ReadyReport {
        let checks = join_all(self.checks.iter().map(|(name, check)| async move {
            let result = match tokio::time::timeout(CHECK_TIMEOUT, check()).await {
                Ok(result) => result,
                Err(_) => Err(format!("no answer within {} ms", CHECK_TIMEOUT.as_millis())),
            };
            CheckReport { name: (*name).to_owned(), ok: result.is_ok(), error: result.err() }
        }))
        .await;
        ReadyReport { ready: checks.iter().all(|c| c.ok), checks }
    }
}

/// Whether the database's latest applied migration is this build's latest.
async fn migrations_current(pool: &PgPool) -> Result<(), String> {
    let ours = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    let applied: Option<i64> = sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
        .fetch_one(pool)
        .await
        .map_err(|e| e.to_string())?;
    match applied.unwrap_or(0) {
        v if v == ours => Ok(()),
        v if v < ours => Err(format!("the database is at migration {v}; this build needs {ours}")),
        v => Err(format!("the database is at migration {v}, newer than this build's {ours}")),
    }
}
