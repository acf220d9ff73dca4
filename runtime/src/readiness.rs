//! `GET /readyz`: whether a service can do its work now. The checks run all at once, each
//! within [`CHECK_TIMEOUT`], at most once per [`FRESH_FOR`]: requests meanwhile get the
//! last result, and requests during a run wait for it, so that no request rate (the
//! endpoint needs no key) turns into queries on the pool the service works with. The answer
//! is 200 when every check passed and 503 otherwise, with each check's result.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{join_all, BoxFuture};
use futures::FutureExt;
use serde::Serialize;
use sqlx::PgPool;
use tokio::time::Instant;

/// How long one check may take before it counts as failed.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a result is answered again instead of checking anew.
pub const FRESH_FOR: Duration = Duration::from_secs(1);

type CheckFn = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// The checks of one service, and their last result.
#[derive(Clone, Default)]
pub struct Readiness {
    checks: Vec<(&'static str, CheckFn)>,
    last: Arc<tokio::sync::Mutex<Option<(Instant, ReadyReport)>>>,
}

/// The answer of `/readyz`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ReadyReport {
    pub ready: bool,
    pub checks: Vec<CheckReport>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
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
            async move { sqlx::query!("SELECT 1 AS one").fetch_one(&pool).await.map(drop).map_err(|e| e.to_string()) }
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

    /// The last result if it is at most [`FRESH_FOR`] old; else runs every check at once
    /// (one run at a time: the requests that come meanwhile wait for its result).
    pub async fn report(&self) -> ReadyReport {
        let mut last = self.last.lock().await;
        if let Some((at, report)) = last.as_ref() {
            if at.elapsed() < FRESH_FOR {
                return report.clone();
            }
        }
        let report = self.run().await;
        *last = Some((Instant::now(), report.clone()));
        report
    }

    async fn run(&self) -> ReadyReport {
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
    match punctual_shared::db::schema_state(pool).await.map_err(|e| e.to_string())? {
        punctual_shared::db::SchemaState::Current => Ok(()),
        other => Err(other.to_string()),
    }
}
#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// However many requests come at once, the checks run once per [`FRESH_FOR`].
    #[tokio::test(start_paused = true)]
    async fn requests_share_one_run_of_the_checks_per_second() {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let readiness = Readiness::default().check("counted", move || {
            let runs = counted.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok(())
            }
        });
        let reports = join_all((0..1_000).map(|_| readiness.report())).await;
        assert!(reports.iter().all(|r| r.ready));
        assert_eq!(runs.load(Ordering::SeqCst), 1, "one run for a thousand requests at once");
        tokio::time::advance(FRESH_FOR).await;
        readiness.report().await;
        assert_eq!(runs.load(Ordering::SeqCst), 2, "checked anew once the result is a second old");
    }
}
