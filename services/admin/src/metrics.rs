//! The admin service's metrics, defined in one place.

use prometheus::{IntCounter, Registry};

#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    pub timers_created: IntCounter,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let timers_created =
            IntCounter::new("punctual_timers_created_total", "Timers created through the API").expect("valid metric");
        registry.register(Box::new(timers_created.clone())).expect("unique metric");
        Self { registry, timers_created }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
