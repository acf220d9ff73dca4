//! The executor's metrics, defined in one place.

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    /// By outcome: succeeded, retry (failed, another attempt scheduled), dead.
    pub executed: IntCounterVec,
    /// Messages whose task was not started: already running or finished (redelivery),
    /// or cancelled because its timer was paused, deleted or changed.
    pub skipped: IntCounter,
    pub fire_lag: Histogram,
    pub callback_duration: Histogram,
    pub in_flight: IntGauge,
    pub callbacks_waiting: IntGauge,
    pub db_errors: IntCounter,
    /// Partitions of the tasks topic that no member of the group holds.
    pub partitions_unassigned: IntGauge,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let executed =
            IntCounterVec::new(Opts::new("punctual_tasks_executed_total", "Tasks run, by outcome"), &["outcome"])
                .expect("valid metric");
        let skipped = IntCounter::new(
            "punctual_tasks_skipped_total",
            "Task messages not run: duplicate delivery or timer no longer active",
        )
        .expect("valid metric");
        let fire_lag = Histogram::with_opts(
            HistogramOpts::new(
                "punctual_fire_lag_seconds",
                "Time a first attempt's action began minus its scheduled time",
            )
            .buckets(punctual_shared::ops::lag_buckets()),
        )
        .expect("valid metric");
        let callback_duration = Histogram::with_opts(
            HistogramOpts::new("punctual_callback_duration_seconds", "Duration of HTTP callbacks")
                .buckets(punctual_shared::ops::lag_buckets()),
        )
        .expect("valid metric");
        let in_flight = IntGauge::new("punctual_tasks_in_flight", "Tasks being run").expect("valid metric");
        let callbacks_waiting = IntGauge::new(
            "punctual_callbacks_waiting",
            "Callbacks waiting for a turn at a target whose limit of calls at once is reached",
        )
        .expect("valid metric");
        let db_errors = IntCounter::new("punctual_executor_db_errors_total", "Failed status reads or writes (retried)")
            .expect("valid metric");
        let partitions_unassigned = IntGauge::new(
            "punctual_partitions_unassigned",
            "Partitions of the tasks topic that no executor of the group holds, at the last check",
        )
        .expect("valid metric");
        for m in [
            Box::new(executed.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(skipped.clone()),
            Box::new(fire_lag.clone()),
            Box::new(callback_duration.clone()),
            Box::new(in_flight.clone()),
            Box::new(callbacks_waiting.clone()),
            Box::new(db_errors.clone()),
            Box::new(partitions_unassigned.clone()),
        ] {
            registry.register(m).expect("unique metric");
        }
        Self {
            registry,
            executed,
            skipped,
            fire_lag,
            callback_duration,
            in_flight,
            callbacks_waiting,
            db_errors,
            partitions_unassigned,
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
