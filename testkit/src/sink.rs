//! An HTTP server that records every request it receives: the callback target of the
//! tests and of `make up`'s demo timer.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    /// The shard's index and total, from the `Punctual-Shard` header (`3/16`).
    pub fn shard(&self) -> Option<(u16, u16)> {
        let (index, total) = self.headers.get("punctual-shard")?.to_str().ok()?.split_once('/')?;
        Some((index.parse().ok()?, total.parse().ok()?))
    }

    /// The occurrence time, read from the Idempotency-Key (`<timer_id>:<RFC 3339>`).
    pub fn scheduled_at(&self) -> Option<DateTime<Utc>> {
        punctual_shared::timer::identity_scheduled_at(self.idempotency_key.as_deref()?)
    }
}

/// How the sink answers calls to one path: the statuses in `script` in turn (then 200),
/// each after `delay`, with `retry_after` as a `Retry-After` header on non-2xx answers.
#[derive(Debug, Clone, Default)]
pub struct Behaviour {
    pub script: Vec<u16>,
    pub delay: Duration,
    pub retry_after: Option<String>,
}

impl Behaviour {
    /// Fails the first `n` calls with `status`, then succeeds.
    pub fn fail_first(n: usize, status: u16) -> Self {
        Behaviour { script: vec![status; n], ..Default::default() }
    }

    /// Answers every call after `delay`.
    pub fn slow(delay: Duration) -> Self {
        Behaviour { delay, ..Default::default() }
    }
}

#[derive(Clone, Default)]
struct Shared {
    calls: Arc<Mutex<Vec<Call>>>,
    behaviours: Arc<Mutex<HashMap<String, Behaviour>>>,
}

/// A running sink; stops when dropped.
pub struct Sink {
    pub addr: SocketAddr,
    shared: Shared,
    token: CancellationToken,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl Sink {
    pub async fn start() -> Sink {
        Self::start_on("127.0.0.1:0".parse().expect("address")).await
    }

    pub async fn start_on(addr: SocketAddr) -> Sink {
        Self::try_start_on(addr).await.expect("bind sink")
    }

    /// A sink at each of `ips`, in that order, all on one port (the instances behind one
    /// DNS name). A port free on the first address may be another process's on another:
    /// then another port.
    pub async fn start_on_each(ips: &[std::net::IpAddr]) -> Vec<Sink> {
        let (first_ip, others) = ips.split_first().expect("at least one address");
        'ports: for _ in 0..20 {
            let mut sinks = vec![Self::start_on(SocketAddr::new(*first_ip, 0)).await];
            for ip in others {
                match Self::try_start_on(SocketAddr::new(*ip, sinks[0].addr.port())).await {
                    Ok(sink) => sinks.push(sink),
                    Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue 'ports,
                    Err(e) => panic!("bind sink on {ip}: {e}"),
                }
            }
            return sinks;
        }
        panic!("no port free on all of {ips:?} in 20 tries");
    }

    async fn try_start_on(addr: SocketAddr) -> std::io::Result<Sink> {
        let shared = Shared::default();
        let router = Router::new().fallback(record).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let token = CancellationToken::new();
        let stop = token.clone();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).with_graceful_shutdown(stop.cancelled_owned()).await;
        });
        Ok(Sink { addr, shared, token, server: Some(server) })
    }

    /// Stops the sink and returns every call it received. Waits until the server has
    /// stopped: a graceful shutdown still answers the requests that arrive on open
    /// connections meanwhile, so calls taken before it ends could miss some.
    pub async fn stop(mut self) -> Vec<Call> {
        self.token.cancel();
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
        self.calls()
    }

    /// A URL on this sink.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Sets how calls to `path` are answered from now on.
    pub fn behave(&self, path: &str, behaviour: Behaviour) {
        self.shared.behaviours.lock().expect("sink lock").insert(path.to_owned(), behaviour);
    }

    /// Sets how the calls of shard `index` of fanned-out occurrences (their `Punctual-Shard`
    /// header) to `path` are answered from now on, instead of as the path's.
    pub fn behave_for_shard(&self, path: &str, index: u16, behaviour: Behaviour) {
        self.shared.behaviours.lock().expect("sink lock").insert(format!("{path}#{index}"), behaviour);
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

async fn record(
    State(shared): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let call = Call {
        received_at: Utc::now(),
        method: method.to_string(),
        path: uri.path().to_owned(),
        idempotency_key: headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned),
        headers,
        body,
    };
    tracing::info!(path = %call.path, key = ?call.idempotency_key, "sink received a call");
    let path = call.path.clone();
    let shard_path = call.shard().map(|(index, _)| format!("{path}#{index}"));
    shared.calls.lock().expect("sink lock").push(call);
    let (status, delay, retry_after) = {
        let mut behaviours = shared.behaviours.lock().expect("sink lock");
        let key = shard_path.filter(|p| behaviours.contains_key(p)).unwrap_or(path);
        match behaviours.get_mut(&key) {
            Some(b) => {
                let status = if b.script.is_empty() { 200 } else { b.script.remove(0) };
                (status, b.delay, b.retry_after.clone())
            }
            None => (200, Duration::ZERO, None),
        }
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = axum::response::IntoResponse::into_response(status);
    if let (false, Some(value)) = (status.is_success(), retry_after) {
        if let Ok(v) = value.parse() {
            response.headers_mut().insert("retry-after", v);
        }
    }
    response
}
