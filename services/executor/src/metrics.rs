//! The executor's metrics, defined in one place.

use prometheus::core::Collector;
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// Why a task message did not run (`punctual_tasks_skipped_total{reason}`).
pub const SKIP_REASONS: [&str; 5] = ["duplicate", "in_flight", "cancelled", "overlap_skipped", "overlap_deferred"];

#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    /// By outcome: succeeded, retry (failed, another attempt scheduled), dead.
    pub executed: IntCounterVec,
    /// Messages whose task was not started, by reason (see [`SKIP_REASONS`]).
    pub skipped: IntCounterVec,
    pub fire_lag: Histogram,
    /// By outcome: success (a 2xx answer, or a Kafka action acknowledged) or failure.
    pub callback_duration: HistogramVec,
    pub in_flight: IntGauge,
    pub callbacks_waiting: IntGauge,
    pub db_errors: IntCounter,
    /// Partitions of the tasks topic that no member of the group holds.
    pub partitions_unassigned: IntGauge,
    /// Messages behind on each partition held: the partition's end offset minus the
    /// committed one (librdkafka's statistics, every few seconds).
    pub consumer_lag: IntGaugeVec,
    /// Offset commits, by result: ok, error.
    pub offset_commits: IntCounterVec,
    /// From a commit's request to its answer.
    pub offset_commit_duration: Histogram,
    pub writeback_batch_size: Histogram,
    pub writeback_duration: Histogram,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let register = |m: Box<dyn Collector>| registry.register(m).expect("unique metric");
        let executed =
            IntCounterVec::new(Opts::new("punctual_tasks_executed_total", "Tasks run, by outcome"), &["outcome"])
                .expect("valid metric");
        for outcome in ["succeeded", "retry", "dead"] {
            executed.with_label_values(&[outcome]);
        }
        let skipped = IntCounterVec::new(
            Opts::new(
                "punctual_tasks_skipped_total",
                "Task messages not run, by reason: delivered before, in flight here, cancelled (timer paused, \
                 deleted or changed), or by the overlap policy",
            ),
            &["reason"],
        )
        .expect("valid metric");
        for reason in SKIP_REASONS {
            skipped.with_label_values(&[reason]);
        }
        let fire_lag = Histogram::with_opts(
            HistogramOpts::new(
                "punctual_fire_lag_seconds",
                "Time a first attempt's action began minus its scheduled time",
            )
            .buckets(punctual_shared::ops::lag_buckets()),
        )
        .expect("valid metric");
        let callback_duration = HistogramVec::new(
            HistogramOpts::new(
                "punctual_callback_duration_seconds",
                "Duration of actions (HTTP callbacks, Kafka messages), by outcome",
            )
            .buckets(punctual_shared::ops::lag_buckets()),
            &["outcome"],
        )
        .expect("valid metric");
        for outcome in ["success", "failure"] {
            callback_duration.with_label_values(&[outcome]);
        }
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
        let consumer_lag = IntGaugeVec::new(
            Opts::new(
                "punctual_consumer_lag",
                "Messages of the tasks topic not yet committed, on each partition this executor holds",
            ),
            &["partition"],
        )
        .expect("valid metric");
        let offset_commits =
            IntCounterVec::new(Opts::new("punctual_offset_commits_total", "Offset commits, by result"), &["result"])
                .expect("valid metric");
        for result in ["ok", "error"] {
            offset_commits.with_label_values(&[result]);
        }
        let offset_commit_duration = Histogram::with_opts(
            HistogramOpts::new(
                "punctual_offset_commit_duration_seconds",
                "Time from an offset commit's request to the group coordinator's answer",
            )
            .buckets(vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]),
        )
        .expect("valid metric");
        let writeback_batch_size = Histogram::with_opts(
            HistogramOpts::new("punctual_writeback_batch_size", "Outcomes written by one statement")
                .buckets(vec![1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0]),
        )
        .expect("valid metric");
        let writeback_duration = Histogram::with_opts(
            HistogramOpts::new(
                "punctual_writeback_duration_seconds",
                "Time to write one batch of outcomes (dead letters first), retries included",
            )
            .buckets(punctual_shared::ops::lag_buckets()),
        )
        .expect("valid metric");
        register(Box::new(executed.clone()));
        register(Box::new(skipped.clone()));
        register(Box::new(fire_lag.clone()));
        register(Box::new(callback_duration.clone()));
        register(Box::new(in_flight.clone()));
        register(Box::new(callbacks_waiting.clone()));
        register(Box::new(db_errors.clone()));
        register(Box::new(partitions_unassigned.clone()));
        register(Box::new(consumer_lag.clone()));
        register(Box::new(offset_commits.clone()));
        register(Box::new(offset_commit_duration.clone()));
        register(Box::new(writeback_batch_size.clone()));
        register(Box::new(writeback_duration.clone()));
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
            consumer_lag,
            offset_commits,
            offset_commit_duration,
            writeback_batch_size,
            writeback_duration,
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
