//! The executor's metrics, defined in one place.

use prometheus::{Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};
use punctual_runtime::metric_registrar::{with_values, MetricRegistrar};

/// Why a task message did not run (`punctual_tasks_skipped_total{reason}`).
pub const SKIP_REASONS: [&str; 6] =
    ["duplicate", "in_flight", "cancelled", "overlap_skipped", "overlap_deferred", "target_paused"];

#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    /// By outcome: succeeded, retry (failed, another attempt scheduled), dead.
    pub executed: IntCounterVec,
    /// Messages whose task was not started, by reason (see [`SKIP_REASONS`]).
    pub skipped: IntCounterVec,
    /// Occurrences put off without counting an attempt, by reason (see
    /// [`punctual_shared::task::DeferReason`]).
    pub deferred: IntCounterVec,
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
        let define = MetricRegistrar(&registry);
        let lag_buckets = punctual_runtime::ops::lag_buckets;
        let executed = with_values(
            define.counter_vec("punctual_tasks_executed_total", "Tasks run, by outcome", &["outcome"]),
            &["succeeded", "retry", "dead"],
        );
        let skipped = with_values(
            define.counter_vec(
                "punctual_tasks_skipped_total",
                "Task messages not run, by reason: delivered before, in flight here, cancelled (timer paused, \
                 deleted or changed), by the overlap policy, or its target paused for its namespace",
                &["reason"],
            ),
            &SKIP_REASONS,
        );
        let deferred = with_values(
            define.counter_vec(
                "punctual_deferred_total",
                "Occurrences put off to a later time without counting an attempt, by reason: the target asked \
                 for it (retry_after: 429 or 503 with Retry-After), or it or the namespace had no turn soon \
                 (target_limit, namespace_limit)",
                &["reason"],
            ),
            &punctual_shared::task::DeferReason::ALL.map(punctual_shared::task::DeferReason::as_str),
        );
        let fire_lag = define.histogram(
            "punctual_fire_lag_seconds",
            "Time a first attempt's action began minus its scheduled time",
            lag_buckets(),
        );
        let callback_duration = with_values(
            define.histogram_vec(
                "punctual_callback_duration_seconds",
                "Duration of actions (HTTP callbacks, Kafka messages), by outcome",
                lag_buckets(),
                &["outcome"],
            ),
            &["success", "failure"],
        );
        let in_flight = define.gauge("punctual_tasks_in_flight", "Tasks being run");
        let callbacks_waiting = define.gauge(
            "punctual_callbacks_waiting",
            "Callbacks waiting for a turn at a target whose limit of calls at once is reached",
        );
        let db_errors = define.counter("punctual_executor_db_errors_total", "Failed status reads or writes (retried)");
        let partitions_unassigned = define.gauge(
            "punctual_partitions_unassigned",
            "Partitions of the tasks topic that no executor of the group holds, at the last check",
        );
        let consumer_lag = define.gauge_vec(
            "punctual_consumer_lag",
            "Messages of the tasks topic not yet committed, on each partition this executor holds",
            &["partition"],
        );
        let offset_commits = with_values(
            define.counter_vec("punctual_offset_commits_total", "Offset commits, by result", &["result"]),
            &["ok", "error"],
        );
        let offset_commit_duration = define.histogram(
            "punctual_offset_commit_duration_seconds",
            "Time from an offset commit's request to the group coordinator's answer",
            vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0],
        );
        let writeback_batch_size = define.histogram(
            "punctual_writeback_batch_size",
            "Outcomes written by one statement",
            vec![1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0],
        );
        let writeback_duration = define.histogram(
            "punctual_writeback_duration_seconds",
            "Time to write one batch of outcomes (dead letters first), retries included",
            lag_buckets(),
        );
        Self {
            registry,
            executed,
            skipped,
            deferred,
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
