//! An HTTP server that records every request it receives: the callback target of the
//! tests and of `make up`'s demo timer.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::Router;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

/// One received request.
#[derive(Debug, Clone)]
pub struct Call {
    pub received_at: DateTime<Utc>,
    pub method: String,
    pub path: String,
    pub idempotency_key: Option<String>,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Call {
    /// The occurrence time, read from the Idempotency-Key (`<timer_id>:<RFC 3339>`).
    pub fn scheduled_at(&self) -> Option<DateTime<Utc>> {
        let key = self.idempotency_key.as_deref()?;
        let (_, at) = key.split_once(':')?;
        DateTime::parse_from_rfc3339(at).ok().map(|t| t.with_timezone(&Utc))
    }
}

#[derive(Clone, Default)]
struct Shared {
    calls: Arc<Mutex<Vec<Call>>>,
}

/// A running sink; stops when dropped.
pub struct Sink {
    pub addr: SocketAddr,
    shared: Shared,
    token: CancellationToken,
}

impl Sink {
    pub async fn start() -> Sink {
        Self::start_on("127.0.0.1:0".parse().expect("address")).await
    }

    pub async fn start_on(addr: SocketAddr) -> Sink {
        let shared = Shared::default();
        let router = Router::new().fallback(record).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(addr).await.expect("bind sink");
        let addr = listener.local_addr().expect("sink address");
        let token = CancellationToken::new();
        let stop = token.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).with_graceful_shutdown(stop.cancelled_owned()).await;
        });
        Sink { addr, shared, token }
    }

    /// A URL on this sink.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.shared.calls.lock().expect("sink lock").clone()
    }

    /// Calls received on `path`.
    pub fn calls_to(&self, path: &str) -> Vec<Call> {
        self.calls().into_iter().filter(|c| c.path == path).collect()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

async fn record(State(shared): State<Shared>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> StatusCode {
    let call = Call {
        received_at: Utc::now(),
        method: method.to_string(),
        path: uri.path().to_owned(),
        idempotency_key: headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned),
        headers,
        body,
    };
    tracing::info!(path = %call.path, key = ?call.idempotency_key, "sink received a call");
    shared.calls.lock().expect("sink lock").push(call);
    StatusCode::OK
}
