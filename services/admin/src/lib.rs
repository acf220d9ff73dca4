//! The admin service: Punctual's REST API over the `timers` and `tasks` tables.

pub mod api_keys;
pub mod audit;
pub mod auth;
pub mod bulk_actions;
pub mod client_address;
pub mod config;
pub mod console;
pub mod dead_tasks;
pub mod error;
pub mod failed_auth;
pub mod http_metrics;
pub mod live_stats;
pub mod me;
pub mod metrics;
pub mod namespace_runs;
pub mod namespace_stats;
pub mod namespaces;
pub mod openapi;
pub mod operator_actions;
pub mod paused_targets;
pub mod query_check;
pub mod request;
pub mod request_budget;
pub mod run_view;
pub mod secret_headers;
pub mod signing_secrets;
pub mod startup_error;
pub mod state;
pub mod timer_occurrence;
pub mod timer_policy;
pub mod timer_runs;
pub mod timer_stats;
pub mod timer_store;
pub mod timer_view;
pub mod timers;

use std::net::SocketAddr;

use punctual_runtime::ops;
use punctual_runtime::readiness::Readiness;
use punctual_shared::db;
use punctual_shared::sealed_store::{self, Resealed};
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use config::AdminConfig;
pub use startup_error::AdminError;

/// The largest request body accepted (413 beyond).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

pub struct App {
    router: axum::Router,
    pool: PgPool,
    metrics: metrics::Metrics,
    metrics_by_namespace: bool,
    listener: TcpListener,
    addr: SocketAddr,
}

impl App {
    pub async fn build(config: AdminConfig) -> Result<Self, AdminError> {
        let secret_keys = std::sync::Arc::new(config.secrets.keys().map_err(AdminError::SecretKey)?);
        let pool = db::connect_lazy(&config.database).map_err(AdminError::Database)?;
        if config.migrate {
            db::migrate(&pool).await.map_err(AdminError::Migrations)?;
        } else {
            db::wait_for_schema(&pool).await.map_err(AdminError::Schema)?;
        }
        let secret_headers = config.secret_headers.clone();
        let sealed = sealed_store::seal_stored(&pool, &secret_keys, &|name| secret_headers.is_secret(name))
            .await
            .map_err(AdminError::Sealing)?;
        if sealed != Resealed::default() {
            tracing::info!(
                signing_secrets = sealed.signing_secrets,
                timers = sealed.timers,
                key = secret_keys.current_id(),
                "stored secrets sealed with the current key"
            );
        }
        let metrics = metrics::Metrics::new(config.metrics_namespace_label);
        punctual_runtime::service_metrics::register(&metrics.registry, "admin", &pool);
        let readiness = Readiness::default().postgres(&pool);
        let guard = std::sync::Arc::new(config.callback_allow.clone());
        let state = state::AppState {
            pool: pool.clone(),
            metrics: metrics.clone(),
            guard,
            secret_headers: config.secret_headers.clone(),
            min_fire_interval: chrono::Duration::milliseconds(config.min_fire_interval_ms.min(i64::MAX as u64) as i64),
            namespace_max_timers: config.namespace_max_timers.min(i64::MAX as u64) as i64,
            service_topics: [config.tasks_topic.clone(), config.dead_topic.clone()].into(),
            secret_keys: secret_keys.clone(),
        };
        let authenticator =
            auth::Authenticator::start(pool.clone(), &config.auth).await.map_err(AdminError::ApiKeys)?;
        let (api, document) = openapi::routes();
        let api = api.with_state(state).layer(axum::middleware::from_fn_with_state(authenticator, auth::authenticate));
        let router = api
            .merge(openapi::router(document))
            .merge(console::router())
            .merge(ops::router(metrics.registry.clone(), readiness))
            .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
            .layer(axum::middleware::from_fn(query_check::refuse_nul))
            .layer(axum::middleware::from_fn_with_state(metrics.clone(), http_metrics::record));
        let (listener, addr) =
            ops::bind(config.addr).await.map_err(|error| AdminError::Bind { addr: config.addr, error })?;
        tracing::info!(%addr, "admin API ready");
        Ok(Self { router, pool, metrics, metrics_by_namespace: config.metrics_namespace_label, listener, addr })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub async fn run_until_stopped(self, token: CancellationToken) -> Result<(), AdminError> {
        let stats = tokio::spawn(timer_stats::run(self.pool, self.metrics, self.metrics_by_namespace, token.clone()));
        let served = ops::serve(self.listener, self.router, token.clone()).await.map_err(AdminError::Serving);
        token.cancel();
        stats.await.map_err(AdminError::TimerStats)?;
        served
    }
}
