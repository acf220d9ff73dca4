//! The machine's stack for a benchmark run: a Postgres server and a broker (started here,
//! in temporary folders, unless given), and the three services as separate processes
//! built with the harness's own profile.

use std::sync::Arc;
use std::time::Duration;

use punctual_testkit::servers::{Broker, PgServer};
use punctual_testkit::{ServiceProcess, Stack};
use serde::Serialize;
use sqlx::PgPool;

use crate::measure::{children, cpu_seconds, rss};

/// Production-like Postgres settings for the server the harness starts: durable (fsync
/// and synchronous commit on), with memory and WAL sized for millions of rows.
/// pg_stat_statements is loaded so that each load reports where Postgres spent its time.
pub const PG_OPTIONS: &str = "-c shared_buffers=1GB -c max_wal_size=8GB -c checkpoint_timeout=30min \
     -c track_io_timing=on -c shared_preload_libraries=pg_stat_statements";

pub struct Env {
    pub database_server: String,
    pub brokers: String,
    pg: Option<PgServer>,
    broker: Option<Arc<Broker>>,
    /// The broker outlives this scenario: its topics are deleted after it.
    broker_shared: bool,
}

impl Env {
    /// Uses the servers given, or starts its own.
    pub fn start(database_server: Option<String>, brokers: Option<String>) -> Env {
        let broker = brokers.is_none().then(|| Arc::new(Broker::start(false)));
        Env::with_broker(database_server, broker, brokers, false)
    }

    /// A Postgres server (given, or started here) and no broker: for the peer.
    pub fn postgres_only(database_server: Option<String>) -> Env {
        Env::with_broker(database_server, None, Some(String::new()), false)
    }

    /// A Postgres server (given, or started here) beside `broker`, which outlives the
    /// scenario: a JVM compiles its hot code during its first minutes under load, and a
    /// broker started for each scenario would spend them doing that.
    pub fn sharing(database_server: Option<String>, broker: &Arc<Broker>) -> Env {
        Env::with_broker(database_server, Some(broker.clone()), None, true)
    }

    fn with_broker(
        database_server: Option<String>,
        broker: Option<Arc<Broker>>,
        brokers: Option<String>,
        broker_shared: bool,
    ) -> Env {
        let pg = database_server.is_none().then(|| PgServer::start_with_options(PG_OPTIONS));
        Env {
            database_server: database_server.unwrap_or_else(|| pg.as_ref().expect("started").url()),
            brokers: brokers.unwrap_or_else(|| broker.as_ref().expect("started or given").brokers()),
            pg,
            broker,
            broker_shared,
        }
    }

    /// Deletes a finished scenario's topics from a broker that outlives it, so that the
    /// next scenario's broker holds nothing of this one's.
    pub async fn forget_topics(&self, stack: Stack) {
        if !self.broker_shared {
            return;
        }
        use rdkafka::admin::{AdminClient, AdminOptions};
        use rdkafka::client::DefaultClientContext;
        let topics = [stack.topic.clone(), stack.dead_topic.clone()];
        drop(stack);
        let admin: Result<AdminClient<DefaultClientContext>, _> =
            rdkafka::ClientConfig::new().set("bootstrap.servers", &self.brokers).create();
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let deleted = match admin {
            Ok(admin) => admin.delete_topics(&names, &AdminOptions::new()).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        // What is left costs the next scenario little: said, not fatal.
        match deleted {
            Ok(results) => {
                for (topic, code) in results.into_iter().filter_map(Result::err) {
                    eprintln!("deleting topic {topic}: {code}");
                }
            }
            Err(e) => eprintln!("deleting topics {names:?}: {e}"),
        }
    }

    /// The three services against a database of their own, with `extra` settings.
    pub async fn stack(&self, extra: &[(&'static str, String)]) -> Stack {
        let mut env: Vec<(&'static str, String)> = vec![
            // Warnings only by default: at these rates an info line per event would be the load.
            ("RUST_LOG", std::env::var("PUNCTUAL_BENCH_SERVICE_LOG").unwrap_or_else(|_| "warn".into())),
        ];
        env.extend(extra.iter().cloned());
        Stack::start_on(&self.database_server, &self.brokers, &env).await
    }
}

/// CPU seconds used so far by each part of the stack.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuSample {
    pub scanner: f64,
    pub executor: f64,
    pub broker: f64,
    pub postgres: f64,
    /// This process: the lag sink (and the harness, idle while it waits).
    pub sink: f64,
}

/// CPU time per delivered fire, by part, in µs: where a fire's cost goes.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CpuPerFire {
    pub scanner_us: f64,
    pub executor_us: f64,
    pub broker_us: f64,
    pub postgres_us: f64,
    pub sink_us: f64,
    pub total_us: f64,
}

impl CpuSample {
    pub fn per_fire(self, before: CpuSample, fires: u64) -> CpuPerFire {
        let per = |a: f64, b: f64| (a - b) * 1e6 / fires.max(1) as f64;
        let c = CpuPerFire {
            scanner_us: per(self.scanner, before.scanner),
            executor_us: per(self.executor, before.executor),
            broker_us: per(self.broker, before.broker),
            postgres_us: per(self.postgres, before.postgres),
            sink_us: per(self.sink, before.sink),
            total_us: 0.0,
        };
        CpuPerFire { total_us: c.scanner_us + c.executor_us + c.broker_us + c.postgres_us + c.sink_us, ..c }
    }
}

impl Env {
    /// CPU used so far by the stack's processes, every scanner and executor included (the
    /// broker and Postgres only when the harness started them: it knows their process ids).
    pub fn cpu(&self, stack: &Stack) -> CpuSample {
        let of = |pid: Option<u32>| pid.and_then(cpu_seconds).unwrap_or(0.0);
        let postgres = self.postgres_cpu();
        let more =
            |binary: &str| stack.more.iter().filter(|p| p.name.starts_with(binary)).map(|p| of(p.pid())).sum::<f64>();
        CpuSample {
            scanner: of(stack.scanner.pid()) + more("punctual-scanner"),
            executor: of(stack.executor.pid()) + more("punctual-executor"),
            broker: of(self.broker_pid()),
            postgres,
            sink: of(Some(std::process::id())),
        }
    }

    /// CPU seconds used so far by the Postgres server and its backends (0 when the server
    /// was given: its process ids are not known here).
    pub fn postgres_cpu(&self) -> f64 {
        let of = |pid: u32| cpu_seconds(pid).unwrap_or(0.0);
        self.postmaster_pid().map_or(0.0, |pm| of(pm) + children(pm).into_iter().map(of).sum::<f64>())
    }

    pub fn broker_pid(&self) -> Option<u32> {
        let broker = self.broker.as_ref()?;
        std::fs::read_to_string(broker.dir.join("broker.pid")).ok()?.trim().parse().ok()
    }

    fn postmaster_pid(&self) -> Option<u32> {
        let pg = self.pg.as_ref()?;
        let data = std::fs::read_to_string(pg.dir.join("pgdata.path")).ok()?;
        let pid_file = std::fs::read_to_string(std::path::Path::new(data.trim()).join("postmaster.pid")).ok()?;
        pid_file.lines().next()?.trim().parse().ok()
    }
}

/// Resident memory of the three services, sampled during a scenario.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Memory {
    pub scanner_peak_mb: f64,
    pub executor_peak_mb: f64,
    pub admin_peak_mb: f64,
    /// The executor's resident memory early in the load and at its end: flat means no growth.
    pub executor_early_mb: f64,
    pub executor_late_mb: f64,
}

const MB: f64 = 1024.0 * 1024.0;

fn peak_mb(p: &ServiceProcess) -> f64 {
    p.pid().and_then(rss).map_or(0.0, |(_, peak)| peak as f64 / MB)
}

pub fn current_mb(p: &ServiceProcess) -> f64 {
    p.pid().and_then(rss).map_or(0.0, |(now, _)| now as f64 / MB)
}

impl Memory {
    pub fn peaks(stack: &Stack) -> Memory {
        Memory {
            scanner_peak_mb: peak_mb(&stack.scanner),
            executor_peak_mb: peak_mb(&stack.executor),
            admin_peak_mb: peak_mb(&stack.admin),
            ..Default::default()
        }
    }
}

/// Waits until Postgres' statistics include every backend's latest writes (each backend
/// flushes its counters at most once a second).
pub async fn settle_stats(pool: &PgPool) {
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let _ = sqlx::query("SELECT pg_stat_force_next_flush()").execute(pool).await;
}
