//! The admin service: Punctual's REST API over the `timers` and `tasks` tables.

pub mod api;
pub mod config;
pub mod error;
pub mod metrics;

use std::net::SocketAddr;

use anyhow::Context;
use punctual_shared::{db, ops};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use config::AdminConfig;

pub struct App {
    router: axum::Router,
    listener: TcpListener,
    addr: SocketAddr,
}

impl App {
    pub async fn build(config: AdminConfig) -> anyhow::Result<Self> {
        let pool = db::connect_lazy(&config.database)?;
        db::migrate(&pool).await.context("running migrations")?;
        let metrics = metrics::Metrics::new();
        let router = api::router(api::AppState { pool, metrics: metrics.clone() }).merge(ops::router(metrics.registry));
        let (listener, addr) = ops::bind(config.addr).await.with_context(|| format!("binding {}", config.addr))?;
        tracing::info!(%addr, "admin API ready");
        Ok(Self { router, listener, addr })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub async fn run_until_stopped(self, token: CancellationToken) -> anyhow::Result<()> {
        ops::serve(self.listener, self.router, token).await.context("serving the API")
    }
}
