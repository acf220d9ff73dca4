//! The metrics every service exposes beside its own: what it is (`punctual_build_info`),
//! its process (start time, CPU, memory), its Postgres pool, and its Kafka clients' errors.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGauge, IntGaugeVec, Opts, Registry};
use sqlx::PgPool;

/// The commit the build came from (see `build.rs`).
pub const COMMIT: &str = env!("PUNCTUAL_COMMIT");

/// Registers the common metrics of `service` ("scanner", "executor", "admin") in `registry`.
pub fn register(registry: &Registry, service: &str, pool: &PgPool) {
    let build_info = IntGaugeVec::new(
        Opts::new("punctual_build_info", "The running build: always 1, labelled with service, version and commit"),
        &["service", "version", "commit"],
    )
    .expect("valid metric");
    build_info.with_label_values(&[service, env!("CARGO_PKG_VERSION"), COMMIT]).set(1);
    registry.register(Box::new(build_info)).expect("unique metric");
    registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self())).expect("unique metric");
    registry.register(Box::new(PoolCollector::new(pool.clone()))).expect("unique metric");
    registry.register(Box::new(crate::kafka::CLIENT_ERRORS.clone())).expect("unique metric");
}

/// The pool's connections, read when scraped. sqlx does not count the callers waiting for
/// a connection; a pool that runs out shows as `in_use` at the maximum.
struct PoolCollector {
    pool: PgPool,
    connections: IntGaugeVec,
    max: IntGauge,
}

impl PoolCollector {
    fn new(pool: PgPool) -> Self {
        let connections = IntGaugeVec::new(
            Opts::new("punctual_db_pool_connections", "Postgres connections of this process's pool, by state"),
            &["state"],
        )
        .expect("valid metric");
        let max = IntGauge::new("punctual_db_pool_max_connections", "Most Postgres connections the pool may open")
            .expect("valid metric");
        Self { pool, connections, max }
    }
}

impl Collector for PoolCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.connections.desc().into_iter().chain(self.max.desc()).collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let size = i64::from(self.pool.size());
        let idle = self.pool.num_idle() as i64;
        self.connections.with_label_values(&["in_use"]).set((size - idle).max(0));
        self.connections.with_label_values(&["idle"]).set(idle);
        self.max.set(i64::from(self.pool.options().get_max_connections()));
        self.connections.collect().into_iter().chain(self.max.collect()).collect()
    }
}
