//! What the scenarios measure: lag distributions, process memory, Postgres row writes.

use chrono::{DateTime, Utc};
use hdrhistogram::Histogram;
use serde::Serialize;
use sqlx::PgPool;

use crate::sink::Delivery;

/// Fire lag (first receive − occurrence time), in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct LagStats {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl LagStats {
    pub fn of(deliveries: &[Delivery]) -> LagStats {
        // 1 µs to 1 h, 3 significant digits.
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds");
        for d in deliveries {
            h.saturating_record(d.lag_us().max(1) as u64);
        }
        if h.is_empty() {
            return LagStats::default();
        }
        let ms = |us: u64| us as f64 / 1_000.0;
        LagStats {
            p50_ms: ms(h.value_at_quantile(0.50)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
        }
    }
}

/// Calls beyond each occurrence's first: what was repeated.
pub fn repeats(deliveries: &[Delivery]) -> u64 {
    deliveries.iter().map(|d| u64::from(d.calls.saturating_sub(1))).sum()
}

/// Occurrences delivered a second, from `from` to the last one's first call, over at least
/// `at_least_s` seconds: a load drained late is spread over the time it took.
pub fn achieved_per_s(deliveries: &[Delivery], from: DateTime<Utc>, at_least_s: u32) -> f64 {
    let last_us = deliveries.iter().map(|d| d.first_received_us).max().unwrap_or(from.timestamp_micros());
    let span_s = ((last_us - from.timestamp_micros()) as f64 / 1e6).max(f64::from(at_least_s));
    deliveries.len() as f64 / span_s
}

/// The largest lag among the occurrences scheduled in each `slice_s` seconds from `from_us`
/// (µs since the epoch), in ms: shows whether a tail is the start of a run, a steady
/// backlog, or stalls.
pub fn max_lag_by_slice(deliveries: &[Delivery], from_us: i64, slice_s: u32) -> Vec<f64> {
    let slice_us = i64::from(slice_s) * 1_000_000;
    let mut slices: Vec<f64> = Vec::new();
    for d in deliveries {
        let Ok(i) = usize::try_from((d.scheduled_us - from_us).div_euclid(slice_us)) else { continue };
        if slices.len() <= i {
            slices.resize(i + 1, 0.0);
        }
        slices[i] = slices[i].max(d.lag_us() as f64 / 1_000.0);
    }
    slices
}

/// The largest lag of each partition's occurrences, in ms: shows whether a backlog is
/// shared by all partitions or some are served later than others.
pub fn max_lag_by_partition(deliveries: &[Delivery], partitions: i16) -> Vec<f64> {
    let partitions = partitions.max(1);
    let mut max = vec![0.0f64; partitions as usize];
    for d in deliveries.iter().filter(|d| d.bucket >= 0) {
        let p = (d.bucket % partitions) as usize;
        max[p] = max[p].max(d.lag_us() as f64 / 1_000.0);
    }
    max
}

/// Resident memory of a process, from /proc: (current, peak) in bytes.
pub fn rss(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// The fields of `/proc/<pid>/stat` after the command name (which may hold spaces):
/// the line's third field (state) comes first.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    stat_fields_at(std::path::Path::new(&format!("/proc/{pid}/stat")))
}

/// The same, of a `stat` file given by its path (a thread's, under `/proc/<pid>/task`).
fn stat_fields_at(path: &std::path::Path) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(path).ok()?;
    Some(stat.get(stat.rfind(')')? + 2..)?.split_whitespace().map(str::to_owned).collect())
}

/// CPU time (user + system) a process and its exited children have used so far, in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let fields = stat_fields(pid)?;
    let field = |i: usize| fields.get(i)?.parse::<u64>().ok();
    // utime, stime (the line's fields 14, 15), and the same for its children that have
    // exited and been waited for (16, 17): a Postgres server's backends and autovacuum
    // workers come and go.
    let ticks = field(11)? + field(12)? + field(13)? + field(14)?;
    // Clock ticks per second: 100 on Linux for every architecture this runs on.
    Some(ticks as f64 / 100.0)
}

/// CPU time (user + system) used so far by this process's threads named `name`, in seconds.
pub fn thread_cpu_seconds(name: &str) -> f64 {
    let Ok(threads) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let ticks: u64 = threads
        .filter_map(|t| {
            let path = t.ok()?.path();
            let comm = std::fs::read_to_string(path.join("comm")).ok()?;
            if comm.trim_end() != name {
                return None;
            }
            let fields = stat_fields_at(&path.join("stat"))?;
            // utime, stime: a thread has no children of its own.
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .sum();
    ticks as f64 / 100.0
}

/// The processes whose parent is `parent` (a Postgres server's backends).
pub fn children(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| stat_fields(*pid).and_then(|f| f.get(1)?.parse::<u32>().ok()) == Some(parent))
        .collect()
}

/// Rows inserted, updated and deleted so far in Punctual's tables (from the statistics
/// collector, which lags by up to its flush interval: read after the load has settled).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct RowWrites {
    pub inserted: i64,
    pub updated: i64,
    pub deleted: i64,
    /// Of the updates, those that were HOT (no index entries written).
    pub hot_updated: i64,
}

impl RowWrites {
    pub async fn read(pool: &PgPool) -> Result<RowWrites, sqlx::Error> {
        // The counters are flushed by each backend at most once a second, and at once on
        // pg_stat_force_next_flush() for this one; the others are waited for by the caller.
        let (inserted, updated, deleted, hot_updated): (i64, i64, i64, i64) = sqlx::query_as(
            "SELECT COALESCE(sum(n_tup_ins), 0)::bigint, COALESCE(sum(n_tup_upd), 0)::bigint,
                    COALESCE(sum(n_tup_del), 0)::bigint, COALESCE(sum(n_tup_hot_upd), 0)::bigint
               FROM pg_stat_user_tables WHERE relname IN ('timers', 'tasks', 'task_attempts')",
        )
        .fetch_one(pool)
        .await?;
        Ok(RowWrites { inserted, updated, deleted, hot_updated })
    }

    pub fn since(self, before: RowWrites) -> RowWrites {
        RowWrites {
            inserted: self.inserted - before.inserted,
            updated: self.updated - before.updated,
            deleted: self.deleted - before.deleted,
            hot_updated: self.hot_updated - before.hot_updated,
        }
    }

    pub fn total(&self) -> i64 {
        self.inserted + self.updated + self.deleted
    }
}

/// One statement's share of Postgres' time, from pg_stat_statements.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct StatementTime {
    pub calls: i64,
    pub total_ms: f64,
    pub mean_ms: f64,
    pub rows: i64,
    /// The statement's first words.
    pub query: String,
}

/// Starts counting statement times afresh in this database, where pg_stat_statements is
/// loaded (the harness's own server loads it; a server given may not: then nothing).
pub async fn reset_statements(pool: &PgPool) -> bool {
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").execute(pool).await.is_ok()
        && sqlx::query("SELECT pg_stat_statements_reset()").execute(pool).await.is_ok()
}

/// The statements of this database that took most time since the reset.
pub async fn top_statements(pool: &PgPool, n: i64) -> Vec<StatementTime> {
    sqlx::query_as(
        "SELECT calls, total_exec_time AS total_ms, mean_exec_time AS mean_ms, rows,
                regexp_replace(left(query, 90), '\\s+', ' ', 'g') AS query
           FROM pg_stat_statements
          WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
          ORDER BY total_exec_time DESC LIMIT $1",
    )
    .bind(n)
    .fetch_all(pool)
    .await
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(lag_us: i64) -> Delivery {
        Delivery { scheduled_us: 1_000_000, first_received_us: 1_000_000 + lag_us, calls: 1, bucket: 0 }
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        let deliveries: Vec<Delivery> = (1..=1000).map(|i| delivery(i * 1_000)).collect();
        let s = LagStats::of(&deliveries);
        assert!((s.p50_ms - 500.0).abs() < 1.0, "{s:?}");
        assert!((s.p99_ms - 990.0).abs() < 1.0, "{s:?}");
        assert!((s.max_ms - 1000.0).abs() < 1.0, "{s:?}");
    }

    #[test]
    fn repeats_and_the_rate_achieved_over_the_time_it_took() {
        let mut deliveries: Vec<Delivery> = (1..=10).map(|i| delivery(i * 1_000_000)).collect();
        deliveries[3].calls = 3;
        assert_eq!(repeats(&deliveries), 2);
        let from = DateTime::from_timestamp_micros(1_000_000).unwrap();
        // The last first call 10 s after `from`: 10 in 10 s, unless the load lasted longer.
        assert_eq!(achieved_per_s(&deliveries, from, 5), 1.0);
        assert_eq!(achieved_per_s(&deliveries, from, 20), 0.5);
        assert_eq!(achieved_per_s(&[], from, 20), 0.0);
    }

    #[test]
    fn own_cpu_time_grows_with_work() {
        // Works until its CPU time has grown by 0.2 s: on a machine busy with other tests
        // that takes longer than 0.2 s of wall time; a reading that never grows fails.
        let before = cpu_seconds(std::process::id()).expect("/proc/self/stat");
        let mut x = 0u64;
        let started = std::time::Instant::now();
        let mut after = before;
        while after - before < 0.2 && started.elapsed() < std::time::Duration::from_secs(60) {
            for _ in 0..1_000_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            after = cpu_seconds(std::process::id()).unwrap();
        }
        std::hint::black_box(x);
        assert!(after - before >= 0.2, "{before} → {after} after {:?}", started.elapsed());
    }

    #[test]
    fn own_memory_is_readable() {
        let (now, peak) = rss(std::process::id()).expect("/proc/self/status");
        assert!(now > 0 && peak >= now);
    }

    #[test]
    fn the_largest_lag_of_each_slice_of_the_schedule() {
        let d = |scheduled_s: i64, lag_ms: i64| Delivery {
            scheduled_us: scheduled_s * 1_000_000,
            first_received_us: scheduled_s * 1_000_000 + lag_ms * 1_000,
            calls: 1,
            bucket: 0,
        };
        let deliveries = [d(0, 5), d(4, 30), d(5, 7), d(12, 900), d(-1, 1)];
        assert_eq!(max_lag_by_slice(&deliveries, 0, 5), vec![30.0, 7.0, 900.0]);
    }

    #[test]
    fn the_largest_lag_of_each_partition() {
        let d = |bucket: i16, lag_ms: i64| Delivery {
            scheduled_us: 0,
            first_received_us: lag_ms * 1_000,
            calls: 1,
            bucket,
        };
        let deliveries = [d(0, 5), d(4, 30), d(1, 7), d(5, 2), d(-1, 999)];
        assert_eq!(max_lag_by_partition(&deliveries, 4), vec![30.0, 7.0, 0.0, 0.0]);
    }
}
