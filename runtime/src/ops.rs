//! The operations endpoints every service serves: `GET /healthz` (alive), `GET /readyz`
//! (able to work: see [`Readiness`]) and `GET /metrics`.

use std::net::SocketAddr;

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::readiness::Readiness;

pub fn router(registry: Registry, readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(move || ready(readiness.clone())))
        .route("/metrics", get(move || metrics(registry.clone())))
}

async fn ready(readiness: Readiness) -> impl IntoResponse {
    let report = readiness.report().await;
    let status = if report.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(report))
}

async fn metrics(registry: Registry) -> impl IntoResponse {
    let mut body = Vec::new();
    match TextEncoder::new().encode(&registry.gather(), &mut body) {
        Ok(()) => (StatusCode::OK, [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Binds `addr` (port 0 picks a free port: see the returned address).
pub async fn bind(addr: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

/// Serves `router` until `token` is cancelled, then finishes the requests in flight
/// (bounded: see [`crate::http_server`]).
pub async fn serve(listener: TcpListener, router: Router, token: CancellationToken) -> std::io::Result<()> {
    crate::http_server::serve(listener, router, token).await
}

/// A histogram of fire lag in seconds, with buckets from 1 ms to 60 s.
pub fn lag_buckets() -> Vec<f64> {
    vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]
}

/// Cancels `token` on SIGINT or SIGTERM. For binaries only: libraries take a token.
pub async fn cancel_on_signal(token: CancellationToken) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
    token.cancel();
}

/// The host's name, for a service's default identity (`<host name>:<ops port>`: stable
/// across restarts, and unique on a host since no two processes bind one port).
pub fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}
