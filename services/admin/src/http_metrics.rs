//! Counts and times every request by its route template.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::metrics::Metrics;

/// The label of a request that matched no route.
const UNMATCHED: &str = "unmatched";

pub async fn record(State(metrics): State<Metrics>, request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().map_or(UNMATCHED, |p| p.as_str()).to_owned();
    let method = request.method().clone();
    let began = Instant::now();
    let response = next.run(request).await;
    metrics.http_duration.with_label_values(&[route.as_str(), method.as_str()]).observe(began.elapsed().as_secs_f64());
    metrics.http_requests.with_label_values(&[route.as_str(), method.as_str(), response.status().as_str()]).inc();
    response
}
