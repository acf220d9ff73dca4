//! A reverse proxy that serves a service under a path prefix (`/punctual/...` to `/...`), as
//! an ingress often does: what the service answers must work there too (the console's
//! links, redirects and API calls among it). Requests and answers pass unchanged but for
//! the path.

use std::net::SocketAddr;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
struct Target {
    prefix: String,
    upstream: String,
    http: reqwest::Client,
}

/// The proxy: stops when dropped.
pub struct PathPrefix {
    addr: SocketAddr,
    prefix: String,
    _stop: tokio_util::sync::DropGuard,
}

impl PathPrefix {
    /// Serves `upstream` (`http://host:port`) under `prefix` (`/punctual`).
    pub async fn start(prefix: &str, upstream: &str) -> PathPrefix {
        let target = Target {
            prefix: prefix.trim_end_matches('/').to_owned(),
            upstream: upstream.trim_end_matches('/').to_owned(),
            http: reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("proxy client"),
        };
        let router = Router::new().fallback(forward).with_state(target);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let token = CancellationToken::new();
        let stop = token.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).with_graceful_shutdown(stop.cancelled_owned()).await;
        });
        PathPrefix { addr, prefix: prefix.trim_end_matches('/').to_owned(), _stop: token.drop_guard() }
    }

    /// A URL under the prefix: `url("/console/")` is `http://…/punctual/console/`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}{}", self.addr, self.prefix, path)
    }
}

async fn forward(State(target): State<Target>, request: Request) -> Response {
    let path_and_query = request.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/").to_owned();
    // Outside the prefix there is nothing, as behind a real ingress.
    let Some(rest) = path_and_query.strip_prefix(&target.prefix).filter(|r| r.is_empty() || r.starts_with(['/', '?']))
    else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let rest = if rest.is_empty() || rest.starts_with('?') { format!("/{rest}") } else { rest.to_owned() };
    let (parts, body) = request.into_parts();
    let body: Bytes = match axum::body::to_bytes(body, 16 * 1024 * 1024).await {
        Ok(body) => body,
        Err(_) => return StatusCode::PAYLOAD_TOO_LARGE.into_response(),
    };
    let mut headers = parts.headers.clone();
    headers.remove(axum::http::header::HOST);
    let sent = target
        .http
        .request(parts.method, format!("{}{rest}", target.upstream))
        .headers(headers)
        .body(body)
        .send()
        .await;
    let answer = match sent {
        Ok(answer) => answer,
        Err(error) => return (StatusCode::BAD_GATEWAY, error.to_string()).into_response(),
    };
    let status = answer.status();
    // Redirects pass as they are, as behind an ingress that does not rewrite them
    // (ingress-nginx's default): one to an absolute path would leave the prefix.
    let mut headers: HeaderMap = answer.headers().clone();
    let body = answer.bytes().await.unwrap_or_default();
    headers.remove(axum::http::header::TRANSFER_ENCODING);
    headers.remove(axum::http::header::CONTENT_LENGTH);
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}
