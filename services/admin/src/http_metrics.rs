//! Counts and times every request by its route template and method. Both labels come
//! from fixed sets (the routes, the methods the API serves, `other`): a request anyone can
//! send without a key must not add series to `/metrics`.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::metrics::Metrics;

/// The label of a request that matched no route.
const UNMATCHED: &str = "unmatched";

/// The methods the API serves; any other is labelled [`OTHER_METHOD`].
const METHODS: [&str; 7] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];
const OTHER_METHOD: &str = "other";

fn method_label(method: &axum::http::Method) -> &'static str {
    METHODS.iter().find(|m| **m == method.as_str()).copied().unwrap_or(OTHER_METHOD)
}

pub async fn record(State(metrics): State<Metrics>, request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().map_or(UNMATCHED, |p| p.as_str()).to_owned();
    let method = method_label(request.method());
    let began = Instant::now();
    let response = next.run(request).await;
    metrics.http_duration.with_label_values(&[route.as_str(), method]).observe(began.elapsed().as_secs_f64());
    metrics.http_requests.with_label_values(&[route.as_str(), method, response.status().as_str()]).inc();
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_up_methods_share_one_label() {
        for (method, label) in [("GET", "GET"), ("PATCH", "PATCH"), ("FOO", "other"), ("get", "other")] {
            assert_eq!(method_label(&axum::http::Method::from_bytes(method.as_bytes()).unwrap()), label);
        }
    }
}
