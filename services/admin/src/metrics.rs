//! The admin service's metrics, defined in one place.

use prometheus::{HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Registry};
use punctual_runtime::metric_registrar::MetricRegistrar;

#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    pub timers_created: IntCounter,
    /// By route template (never the path itself: ids would make the labels unbounded),
    /// method and status.
    pub http_requests: IntCounterVec,
    pub http_duration: HistogramVec,
    /// Timers by state (and by namespace, when the operator opts in): see [`crate::timer_stats`].
    pub timers: IntGaugeVec,
}

impl Metrics {
    /// `by_namespace`: whether `punctual_timers` carries a `namespace` label (bounded only
    /// when the namespaces are, hence the operator's choice: PUNCTUAL_METRICS_NAMESPACE_LABEL).
    pub fn new(by_namespace: bool) -> Self {
        let registry = Registry::new();
        let define = MetricRegistrar(&registry);
        let timers_created = define.counter("punctual_timers_created_total", "Timers created through the API");
        let http_requests = define.counter_vec(
            "punctual_http_requests_total",
            "API requests answered, by route template, method and status",
            &["route", "method", "status"],
        );
        let http_duration = define.histogram_vec(
            "punctual_http_request_duration_seconds",
            "Time to answer API requests, by route template",
            vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0],
            &["route", "method"],
        );
        let labels: &[&str] = if by_namespace { &["state", "namespace"] } else { &["state"] };
        let timers = define.gauge_vec(
            "punctual_timers",
            "Timers not deleted, by state: active, paused, invalid, finished",
            labels,
        );
        Self { registry, timers_created, http_requests, http_duration, timers }
    }
}
