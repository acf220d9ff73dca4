//! The services' HTTP server (the admin API and every service's operations endpoints):
//! HTTP/1.1 with bounds, so that a slow or hostile client holds nothing for long. A client
//! has [`HEADER_READ_TIMEOUT`] to send its request's head and [`REQUEST_TIMEOUT`] for the
//! whole request, body and answer included (408 after that); heads are at most
//! [`MAX_HEAD_BYTES`] with at most [`MAX_HEADERS`] headers (431 beyond). A stop lets the
//! requests in flight finish, for [`SHUTDOWN_TIMEOUT`] at most. Every error answer is a
//! problem ([`crate::problem`]). Each request carries its client's address
//! (`axum::extract::ConnectInfo<SocketAddr>`). At most [`MAX_CONNECTIONS`] are open at once:
//! beyond, new ones wait in the listen queue until one closes, so no number of clients can
//! take the service's file descriptors.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower_http::timeout::TimeoutLayer;

pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
pub const MAX_HEADERS: usize = 64;
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);
pub const MAX_CONNECTIONS: usize = 4_096;

/// Serves `router` on `listener` until `token` is cancelled.
pub async fn serve(listener: TcpListener, router: Router, token: CancellationToken) -> std::io::Result<()> {
    let router = router
        .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, REQUEST_TIMEOUT))
        .layer(axum::middleware::map_response(crate::problem::as_problem));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS);
    let graceful = GracefulShutdown::new();
    let open = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let slot = tokio::select! {
            _ = token.cancelled() => break,
            slot = open.clone().acquire_owned() => slot.expect("never closed"),
        };
        let (stream, peer) = tokio::select! {
            _ = token.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors, say: the others' requests go on; try again soon.
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let with_peer =
            tower::ServiceExt::map_request(router.clone(), move |mut request: Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                request
            });
        let service = TowerToHyperService::new(with_peer);
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            // A client that goes away or breaks the protocol ends only its own connection.
            let _ = connection.await;
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_TIMEOUT, graceful.shutdown()).await.is_err() {
        tracing::warn!("requests still running {SHUTDOWN_TIMEOUT:?} after the stop were dropped");
    }
    Ok(())
}
