//! The scanner's metrics, defined in one place.

use prometheus::{Gauge, Histogram, IntCounter, IntCounterVec, IntGauge, Registry};
use punctual_runtime::metric_registrar::{with_values, MetricRegistrar};

/// The labels of `punctual_tasks_misfired_total`: the misfire policies.
pub const MISFIRE_POLICIES: [&str; 3] = ["skip", "fire_once", "fire_all"];

#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    pub planned: IntCounter,
    pub timers_invalid: IntCounter,
    pub claimed: IntCounter,
    pub published: IntCounter,
    pub publish_errors: IntCounter,
    pub fenced: IntCounter,
    pub scan_errors: IntCounter,
    /// By misfire policy: skip, fire_once, fire_all.
    pub misfired: IntCounterVec,
    pub reclaimed: IntCounter,
    pub held: IntGauge,
    pub buckets_held: IntGauge,
    pub bucket_takeovers: IntCounter,
    pub buckets_released: IntCounter,
    pub lease_errors: IntCounter,
    pub pruned: IntCounter,
    pub publish_lag: Histogram,
    pub scan_seconds: Histogram,
    /// The cluster's figures, from the scanner holding bucket 0 (the others report 0):
    /// see [`crate::cluster_stats`].
    pub cluster: ClusterGauges,
}

#[derive(Clone)]
pub struct ClusterGauges {
    pub due_backlog: IntGauge,
    pub due_oldest_seconds: Gauge,
    pub planner_lead_seconds: Gauge,
    pub buckets_unowned: IntGauge,
    pub scanners_live: IntGauge,
    /// When the figures were last read (Unix seconds); 0 on a scanner not reading them.
    pub read_at: Gauge,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let define = MetricRegistrar(&registry);
        let counter = |name: &str, help: &str| define.counter(name, help);
        let planned = counter("punctual_tasks_planned_total", "Occurrences planned into task rows");
        let timers_invalid = counter("punctual_timers_invalid_total", "Timer rows marked invalid by the planner");
        let claimed = counter("punctual_tasks_claimed_total", "Tasks claimed for publishing");
        let published = counter("punctual_tasks_published_total", "Tasks published to the tasks topic");
        let publish_errors =
            counter("punctual_publish_errors_total", "Tasks whose publish failed (left to be re-claimed)");
        let fenced = counter(
            "punctual_tasks_fenced_total",
            "Held tasks dropped unpublished: their claim expired, or their bucket is no longer held at their epoch",
        );
        let bucket_takeovers = counter(
            "punctual_bucket_takeovers_total",
            "Buckets acquired from another scanner (one that died, froze or handed them over)",
        );
        let buckets_released =
            counter("punctual_buckets_released_total", "Buckets handed over to other scanners (fair share, stop)");
        let pruned =
            counter("punctual_tasks_pruned_total", "Finished occurrences deleted by retention (with their attempts)");
        let lease_errors = counter("punctual_bucket_lease_errors_total", "Heartbeats whose lease work failed");
        let scan_errors = counter("punctual_scan_errors_total", "Planning or claiming passes that failed");
        let reclaimed = counter(
            "punctual_tasks_reclaimed_total",
            "Tasks claimed again after their lease expired without them starting (scanner died or froze, message lost)",
        );
        let misfired = with_values(
            define.counter_vec(
                "punctual_tasks_misfired_total",
                "Late occurrences cancelled by their timers' misfire policies",
                &["policy"],
            ),
            &MISFIRE_POLICIES,
        );
        let cluster = ClusterGauges {
            due_backlog: define.gauge(
                "punctual_tasks_due_backlog",
                "Occurrences due over a second ago and not yet claimed for publishing (from the scanner holding bucket 0)",
            ),
            due_oldest_seconds: define.float_gauge(
                "punctual_tasks_due_oldest_seconds",
                "How long the oldest occurrence counted in punctual_tasks_due_backlog has been due",
            ),
            planner_lead_seconds: define.float_gauge(
                "punctual_planner_lead_seconds",
                "How far ahead the plans of active timers reach: the earliest time one must be planned again, \
                 minus now (negative: the planner is behind)",
            ),
            buckets_unowned: define.gauge("punctual_buckets_unowned", "Buckets whose owner is not a live scanner"),
            scanners_live: define.gauge("punctual_scanners_live", "Scanners whose membership lease is live"),
            read_at: define.float_gauge(
                "punctual_cluster_figures_read_timestamp_seconds",
                "When this scanner last read the cluster's figures (Unix time; 0 unless it holds bucket 0)",
            ),
        };
        let held = define.gauge("punctual_wheel_held_tasks", "Claimed tasks held in the timing wheel");
        let buckets_held = define.gauge("punctual_buckets_held", "Buckets this scanner holds (of 1,024)");
        let publish_lag = define.histogram(
            "punctual_publish_lag_seconds",
            "Publish time minus the time to publish (the due time less the publish lead)",
            punctual_runtime::ops::lag_buckets(),
        );
        let scan_seconds = define.histogram(
            "punctual_scan_duration_seconds",
            "Duration of one scanner pass: plan, sweeps, claim",
            punctual_runtime::ops::lag_buckets(),
        );
        Self {
            registry,
            planned,
            timers_invalid,
            claimed,
            published,
            publish_errors,
            fenced,
            scan_errors,
            misfired,
            reclaimed,
            held,
            buckets_held,
            bucket_takeovers,
            buckets_released,
            lease_errors,
            pruned,
            publish_lag,
            scan_seconds,
            cluster,
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
