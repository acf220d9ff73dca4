//! Defining a service's metrics: each one created and registered in one call.

use prometheus::core::{Collector, MetricVec, MetricVecBuilder};
use prometheus::{
    Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// Creates metrics registered in its registry. Metrics are defined at start from
/// constants, so an invalid or repeated definition is a bug the first start shows: it
/// panics rather than returning an error no caller could handle.
pub struct MetricRegistrar<'a>(pub &'a Registry);

impl MetricRegistrar<'_> {
    fn register<M: Collector + Clone + 'static>(&self, metric: prometheus::Result<M>) -> M {
        let metric = metric.expect("valid metric");
        self.0.register(Box::new(metric.clone())).expect("unique metric");
        metric
    }

    pub fn counter(&self, name: &str, help: &str) -> IntCounter {
        self.register(IntCounter::new(name, help))
    }

    pub fn gauge(&self, name: &str, help: &str) -> IntGauge {
        self.register(IntGauge::new(name, help))
    }

    pub fn float_gauge(&self, name: &str, help: &str) -> Gauge {
        self.register(Gauge::new(name, help))
    }

    pub fn histogram(&self, name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
        self.register(Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets)))
    }

    pub fn counter_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.register(IntCounterVec::new(Opts::new(name, help), labels))
    }

    pub fn gauge_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.register(IntGaugeVec::new(Opts::new(name, help), labels))
    }

    pub fn histogram_vec(&self, name: &str, help: &str, buckets: Vec<f64>, labels: &[&str]) -> HistogramVec {
        self.register(HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels))
    }
}

/// Makes each of `values` of a one-label metric present (at 0) from the start, so that a
/// rate over it is defined before the first event.
pub fn with_values<B: MetricVecBuilder>(metric: MetricVec<B>, values: &[&str]) -> MetricVec<B> {
    for value in values {
        metric.with_label_values(&[value]);
    }
    metric
}
