//! The end-to-end scenarios: sustained rate, burst, stored scale. Each runs the real stack
//! (services as separate processes) against the lag sink and reports what the sink saw.

use std::time::Duration;

use chrono::{DateTime, DurationRound, Utc};
use punctual_shared::task;
use punctual_testkit::stack::{metric_value, TASKS_PARTITIONS};
use punctual_testkit::Stack;
use serde::Serialize;
use serde_json::json;

use crate::env::{current_mb, settle_stats, CpuPerFire, Env, Memory};
use crate::measure::{
    achieved_per_s, max_lag_by_partition, max_lag_by_slice, repeats, reset_statements, top_statements, LagStats,
    RowWrites, StatementTime,
};
use crate::sink::LagSink;

/// Interval timers created through the API; the rest of a load comes through SQL.
const API_TIMERS: u32 = 20;
/// A load ends when nothing more arrived for this long (seconds) after its last occurrence
/// was due; what has not arrived by then counts as lost. Longer than a claim's lease
/// (`PUNCTUAL_LEASE_MS`, 30 s past the due time): an occurrence whose message was lost (a
/// producer replaced under load purges its queue) is claimed and published again then,
/// late, not lost.
const STALL_S: i64 = 45;
/// The longest a load may drain after its last occurrence was due while some of its
/// occurrences are still booked to run.
const MAX_DRAIN_S: i64 = 600;

/// Tasks still to run: pending (a later turn, a retry) or claimed or running. A failed read
/// is said, and counts as none.
async fn waiting_tasks(pool: &sqlx::PgPool) -> i64 {
    match task::stats::unfinished(pool).await {
        Ok(n) => n,
        Err(e) => {
            println!("  reading the tasks still to run failed: {e}");
            0
        }
    }
}

/// The tasks that did not succeed, by status and error: what a loss left behind.
async fn task_states(pool: &sqlx::PgPool) -> String {
    let rows: Result<Vec<(String, String, i64)>, _> = sqlx::query_as(
        "SELECT status::text, left(coalesce(error, ''), 80), count(*) FROM tasks
          WHERE status <> 'succeeded' GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 10",
    )
    .fetch_all(pool)
    .await;
    match rows {
        Ok(rows) => {
            rows.iter().map(|(status, error, n)| format!("{n} × {status} {error}")).collect::<Vec<_>>().join("; ")
        }
        Err(e) => format!("could not be read: {e}"),
    }
}

/// What a steady load delivered.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadResult {
    pub rate: u32,
    /// Seconds of the same load before the measured `duration_s`.
    pub warmup_s: u32,
    /// Scanner and executor processes sharing the work.
    pub scanners: usize,
    pub executors: usize,
    pub duration_s: u32,
    pub expected: u64,
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    /// Delivered occurrences per second, from the end of the warm-up to the last delivery.
    pub achieved_per_s: f64,
    pub lag: LagStats,
    /// The largest lag of the occurrences scheduled in each 5 s of the run, in ms.
    pub max_lag_by_5s_ms: Vec<f64>,
    /// The largest lag of each partition's occurrences, in ms.
    pub max_lag_by_partition_ms: Vec<f64>,
    pub memory: Memory,
    /// Rows inserted, updated or deleted in timers, tasks and task_attempts, per delivered
    /// fire, over the whole load (warm-up included).
    pub row_writes_per_fire: f64,
    pub writes: RowWrites,
    /// Mean time of one scanner pass (plan, sweeps, claim).
    pub mean_scan_ms: f64,
    /// Where the lag comes from: mean publish lag at the scanner (publish − the time to
    /// publish, due less the publish lead) and mean start lag at the executor (the time
    /// the call began − scheduled; the sink's lag adds the call's way to the sink).
    pub mean_publish_lag_ms: f64,
    pub mean_start_lag_ms: f64,
    /// Where Postgres spent its time during the load.
    pub top_statements: Vec<StatementTime>,
    /// CPU time per fire, by process, from the end of the warm-up to the last delivery.
    pub cpu_per_fire: CpuPerFire,
    /// The claim baseline measured on the same Postgres server just before the load and
    /// just after it, rows/s: the host's speed drifts by half within minutes, so a ratio
    /// needs a baseline taken beside its rate.
    pub claim_beside_per_s: Option<[f64; 2]>,
    /// Rows each of those baselines claimed.
    pub claim_beside_rows: i64,
}

impl LoadResult {
    /// Delivered completely, none later than 1 s.
    pub fn is_sustained(&self) -> bool {
        self.lost == 0 && self.lag.max_ms <= 1_000.0
    }

    /// The rate achieved as a share of the higher of the claim baselines beside it, so
    /// that a host slower at one of them does not flatter the ratio.
    pub fn claim_ratio(&self) -> Option<f64> {
        let [before, after] = self.claim_beside_per_s?;
        Some(self.achieved_per_s / before.max(after))
    }
}

/// The mean of a Prometheus histogram, in milliseconds.
fn mean_ms(metrics: &str, name: &str) -> f64 {
    let count = metric_value(metrics, &format!("{name}_count")).unwrap_or(0.0);
    let sum = metric_value(metrics, &format!("{name}_sum")).unwrap_or(0.0);
    if count > 0.0 {
        sum / count * 1_000.0
    } else {
        0.0
    }
}

pub(crate) fn whole_second_after(lead: Duration) -> DateTime<Utc> {
    (Utc::now() + chrono::Duration::from_std(lead).expect("small"))
        .duration_trunc(chrono::Duration::seconds(1))
        .expect("truncates")
}

/// `rate` interval timers' worth of fires per second for `warmup_s` and then `duration_s`
/// seconds: timers firing every second, their start times spread evenly over the first
/// second after `lead`, so the load is smooth rather than one spike per second. The first
/// [`API_TIMERS`] are created through the admin API, the rest with one SQL statement.
///
/// Lag, loss and CPU are measured over the `duration_s` after the warm-up: the services,
/// Postgres and the broker's JVM all start with the load, and a broker compiling its hot
/// code in its first seconds is not the steady state a sustained rate describes.
pub async fn steady_load(
    env: &Env,
    stack: &Stack,
    sink: &LagSink,
    rate: u32,
    warmup_s: u32,
    duration_s: u32,
) -> anyhow::Result<LoadResult> {
    let writes_before = RowWrites::read(&stack.db.pool).await?;
    reset_statements(&stack.db.pool).await;
    // Far enough ahead that the timers are validated and planned before the first fire.
    let lead = Duration::from_secs(8 + u64::from(rate / 2_000));
    let first = whole_second_after(lead);
    let t0 = first + chrono::Duration::seconds(i64::from(warmup_s));
    let end = t0 + chrono::Duration::seconds(i64::from(duration_s));
    let start_of = |i: u32| first + chrono::Duration::microseconds(i64::from(i) * 1_000_000 / i64::from(rate));
    let api = rate.min(API_TIMERS);
    for i in 0..api {
        stack
            .create_timer(&json!({
                "name": format!("bench-api-{i}"),
                "schedule": {"every_ms": 1000, "start_at": start_of(i), "end_at": end},
                "action": {"http": {"url": sink.url()}}
            }))
            .await;
    }
    sqlx::query(
        "INSERT INTO timers (name, schedule_kind, interval_ms, start_at, end_at, http_url)
         SELECT 'bench-sql-' || i, 'interval', 1000, $1 + (i::bigint * 1000000 / $2) * interval '1 microsecond', $3, $4
           FROM generate_series($5::int, $2 - 1) AS i",
    )
    .bind(first)
    .bind(rate as i32)
    .bind(end)
    .bind(sink.url())
    .bind(api as i32)
    .execute(&stack.db.pool)
    .await?;

    let expected = u64::from(rate) * u64::from(duration_s);
    let expected_with_warmup = u64::from(rate) * u64::from(warmup_s + duration_s);
    // Every occurrence is due by `end`; allow a generous drain after it.
    let mut executor_early_mb = 0.0;
    if let Ok(wait) = (t0 - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
    let cpu_before = env.cpu(stack);
    // Until everything arrived, or nothing more for a while after the last occurrence was
    // due: a rate above what the system sustains drains late, and late is not lost.
    let mut progress = (0usize, Utc::now());
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = Utc::now();
        if executor_early_mb == 0.0 && now > t0 + chrono::Duration::seconds(2) {
            executor_early_mb = current_mb(&stack.executor);
        }
        let distinct = sink.distinct();
        if distinct > progress.0 {
            progress = (distinct, now);
        }
        if distinct as u64 >= expected_with_warmup {
            break;
        }
        // Stalled, unless occurrences are still booked to run (held back for a later turn
        // of their target): those arrive late, and late is not lost.
        if now > end && now - progress.1 > chrono::Duration::seconds(STALL_S) {
            let booked = waiting_tasks(&stack.db.pool).await;
            if booked == 0 || now > end + chrono::Duration::seconds(MAX_DRAIN_S) {
                if distinct < expected_with_warmup as usize {
                    println!("  undelivered, where the load's tasks stand: {}", task_states(&stack.db.pool).await);
                }
                break;
            }
        }
    }
    let cpu_after = env.cpu(stack);
    let delivered_with_warmup = sink.distinct() as u64;
    // Late duplicates (redeliveries) would arrive shortly after: give them a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let executor_late_mb = current_mb(&stack.executor);
    let deliveries = sink.deliveries_between(t0, end);
    let delivered = deliveries.len() as u64;
    settle_stats(&stack.db.pool).await;
    let writes = RowWrites::read(&stack.db.pool).await?.since(writes_before);
    let scanner_metrics = stack.metrics(&stack.scanner).await;
    let executor_metrics = stack.metrics(&stack.executor).await;
    let mut memory = Memory::peaks(stack);
    memory.executor_early_mb = executor_early_mb;
    memory.executor_late_mb = executor_late_mb;
    Ok(LoadResult {
        rate,
        warmup_s,
        scanners: 1 + stack.more.iter().filter(|p| p.name.starts_with("punctual-scanner")).count(),
        executors: 1 + stack.more.iter().filter(|p| p.name.starts_with("punctual-executor")).count(),
        duration_s,
        expected,
        delivered,
        lost: expected.saturating_sub(delivered),
        duplicated: repeats(&deliveries),
        achieved_per_s: achieved_per_s(&deliveries, t0, duration_s),
        lag: LagStats::of(&deliveries),
        max_lag_by_5s_ms: max_lag_by_slice(&deliveries, t0.timestamp_micros(), 5),
        max_lag_by_partition_ms: max_lag_by_partition(&deliveries, TASKS_PARTITIONS as i16),
        memory,
        row_writes_per_fire: writes.total() as f64 / delivered_with_warmup.max(1) as f64,
        writes,
        mean_scan_ms: mean_ms(&scanner_metrics, "punctual_scan_duration_seconds"),
        mean_publish_lag_ms: mean_ms(&scanner_metrics, "punctual_publish_lag_seconds"),
        mean_start_lag_ms: mean_ms(&executor_metrics, "punctual_fire_lag_seconds"),
        top_statements: top_statements(&stack.db.pool, 8).await,
        cpu_per_fire: cpu_after.per_fire(cpu_before, delivered),
        claim_beside_per_s: None,
        claim_beside_rows: 0,
    })
}

/// Sustained: each rate on a fresh stack and database.
pub async fn sustained(
    env: &Env,
    rate: u32,
    warmup_s: u32,
    duration_s: u32,
    scanners: usize,
    executors: usize,
) -> anyhow::Result<LoadResult> {
    let sink = LagSink::start().await?;
    let mut stack = env.stack(&[]).await;
    for _ in 1..scanners {
        stack.add("punctual-scanner", "PUNCTUAL_SCANNER_ADDR").await;
    }
    for _ in 1..executors {
        stack.add("punctual-executor", "PUNCTUAL_EXECUTOR_ADDR").await;
    }
    let result = steady_load(env, &stack, &sink, rate, warmup_s, duration_s).await?;
    env.forget_topics(stack).await;
    println!(
        "sustained {rate}/s × {duration_s} s after {warmup_s} s of warm-up, {scanners} scanner(s), {executors} executor(s): delivered {}/{} (lost {}, duplicated {}), {:.0} fires/s, lag p50 {:.1} ms p99 {:.1} ms p99.9 {:.1} ms max {:.1} ms (mean publish lag {:.1} ms, start lag {:.1} ms), {:.2} row writes/fire",
        result.delivered,
        result.expected,
        result.lost,
        result.duplicated,
        result.achieved_per_s,
        result.lag.p50_ms,
        result.lag.p99_ms,
        result.lag.p999_ms,
        result.lag.max_ms,
        result.mean_publish_lag_ms,
        result.mean_start_lag_ms,
        result.row_writes_per_fire
    );
    print_lag_profile(&result.max_lag_by_5s_ms, &result.max_lag_by_partition_ms);
    let c = &result.cpu_per_fire;
    println!(
        "  CPU per fire: scanner {:.0} µs, executor {:.0} µs, broker {:.0} µs, postgres {:.0} µs, sink {:.0} µs: {:.0} µs",
        c.scanner_us, c.executor_us, c.broker_us, c.postgres_us, c.sink_us, c.total_us
    );
    let m = &result.memory;
    println!(
        "  memory: scanner peak {:.0} MB, executor {:.0} MB early → {:.0} MB late (peak {:.0} MB)",
        m.scanner_peak_mb, m.executor_early_mb, m.executor_late_mb, m.executor_peak_mb
    );
    for s in &result.top_statements {
        println!(
            "  {:>9.0} ms {:>7} calls {:>8.2} ms/call {:>8} rows  {}",
            s.total_ms, s.calls, s.mean_ms, s.rows, s.query
        );
    }
    Ok(result)
}

/// What a burst of one-shot timers did.
#[derive(Debug, Clone, Serialize)]
pub struct BurstResult {
    pub timers: u64,
    pub window_s: u32,
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    /// From the first occurrence time to the last delivery.
    pub drain_s: f64,
    pub lag: LagStats,
    /// The largest lag of the occurrences scheduled in each 5 s of the run, in ms.
    pub max_lag_by_5s_ms: Vec<f64>,
    /// The largest lag of each partition's occurrences, in ms.
    pub max_lag_by_partition_ms: Vec<f64>,
    pub memory: Memory,
    /// Most tasks the scanner held at once, and its resident memory then, less its
    /// memory before the burst, per held task.
    pub peak_held: u64,
    pub scanner_bytes_per_held_task: f64,
}

/// Burst: `timers` one-shot timers inserted with SQL, due at random times within one
/// window of `window_s` seconds starting `lead_s` seconds later. The scanner is set to
/// plan and hold the whole window ahead, so the burst is also the measure of its memory
/// per held task.
pub async fn burst(env: &Env, timers: u64, window_s: u32, lead_s: u32) -> anyhow::Result<BurstResult> {
    let sink = LagSink::start().await?;
    let ahead_ms = u64::from(lead_s + window_s) * 1_000;
    let stack = env
        .stack(&[
            ("PUNCTUAL_PLAN_HORIZON_MS", ahead_ms.to_string()),
            ("PUNCTUAL_LOOKAHEAD_MS", ahead_ms.to_string()),
            ("PUNCTUAL_LEASE_MS", (ahead_ms + 60_000).to_string()),
        ])
        .await;
    let scanner_before = current_mb(&stack.scanner);
    let t0 = whole_second_after(Duration::from_secs(u64::from(lead_s)));
    let end = t0 + chrono::Duration::seconds(i64::from(window_s));
    let chunk = 100_000u64;
    let mut inserted = 0u64;
    while inserted < timers {
        let n = chunk.min(timers - inserted);
        sqlx::query(
            "INSERT INTO timers (name, schedule_kind, run_at, http_url)
             SELECT 'burst-' || i, 'once', $1 + random() * $2 * interval '1 second', $3
               FROM generate_series($4::bigint, $5::bigint) AS i",
        )
        .bind(t0)
        .bind(f64::from(window_s) - 0.001)
        .bind(sink.url())
        .bind(inserted as i64)
        .bind((inserted + n - 1) as i64)
        .execute(&stack.db.pool)
        .await?;
        inserted += n;
    }
    let inserted_at = Utc::now();
    if inserted_at > t0 {
        println!("burst: inserting took until {:.1} s past the window's start", (inserted_at - t0).as_seconds_f64());
    }
    let (mut peak_held, mut rss_at_peak) = (0u64, 0.0f64);
    let mut progress = (0usize, Utc::now());
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let held =
            metric_value(&stack.metrics(&stack.scanner).await, "punctual_wheel_held_tasks").unwrap_or(0.0) as u64;
        if held > peak_held {
            peak_held = held;
            rss_at_peak = current_mb(&stack.scanner);
        }
        let (distinct, now) = (sink.distinct(), Utc::now());
        if distinct > progress.0 {
            progress = (distinct, now);
        }
        if distinct as u64 >= timers || (now > end && now - progress.1 > chrono::Duration::seconds(STALL_S)) {
            break;
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let deliveries = sink.deliveries_between(t0, end);
    let delivered = deliveries.len() as u64;
    let last_us = deliveries.iter().map(|d| d.first_received_us).max().unwrap_or(t0.timestamp_micros());
    let result = BurstResult {
        timers,
        window_s,
        delivered,
        lost: timers.saturating_sub(delivered),
        duplicated: repeats(&deliveries),
        drain_s: (last_us - t0.timestamp_micros()) as f64 / 1e6,
        lag: LagStats::of(&deliveries),
        max_lag_by_5s_ms: max_lag_by_slice(&deliveries, t0.timestamp_micros(), 5),
        max_lag_by_partition_ms: max_lag_by_partition(&deliveries, TASKS_PARTITIONS as i16),
        memory: Memory::peaks(&stack),
        peak_held,
        scanner_bytes_per_held_task: if peak_held > 0 {
            (rss_at_peak - scanner_before).max(0.0) * 1024.0 * 1024.0 / peak_held as f64
        } else {
            0.0
        },
    };
    println!(
        "burst {timers} in {window_s} s: delivered {delivered} (lost {}, duplicated {}), drained {:.1} s after the first was due, lag p50 {:.0} ms p99 {:.0} ms max {:.0} ms; scanner held up to {peak_held}, {:.0} bytes each; peaks: scanner {:.0} MB, executor {:.0} MB",
        result.lost,
        result.duplicated,
        result.drain_s,
        result.lag.p50_ms,
        result.lag.p99_ms,
        result.lag.max_ms,
        result.scanner_bytes_per_held_task,
        result.memory.scanner_peak_mb,
        result.memory.executor_peak_mb
    );
    print_lag_profile(&result.max_lag_by_5s_ms, &result.max_lag_by_partition_ms);
    Ok(result)
}

/// The largest lags per 5 s of schedule and per partition, e.g. "12 ms, 8 ms, 1.5 s".
fn print_lag_profile(by_5s_ms: &[f64], by_partition_ms: &[f64]) {
    let list = |ms: &[f64]| {
        let one = |v: &f64| if *v < 1_000.0 { format!("{v:.0} ms") } else { format!("{:.1} s", v / 1_000.0) };
        ms.iter().map(one).collect::<Vec<_>>().join(", ")
    };
    println!("  max lag by 5 s of schedule: {}", list(by_5s_ms));
    println!("  max lag by partition: {}", list(by_partition_ms));
}

/// Stored scale: the same small load on an empty table and beside `stored` future tasks.
#[derive(Debug, Clone, Serialize)]
pub struct StoredResult {
    pub stored: u64,
    pub empty: LoadResult,
    pub full: LoadResult,
}

pub async fn stored(env: &Env, stored: u64, rate: u32, duration_s: u32) -> anyhow::Result<StoredResult> {
    let empty = {
        let sink = LagSink::start().await?;
        let stack = env.stack(&[]).await;
        steady_load(env, &stack, &sink, rate, 0, duration_s).await?
    };
    let sink = LagSink::start().await?;
    let stack = env.stack(&[]).await;
    // Future work that must not cost anything until it is due: one-shot timers a year
    // out, each with 1,000 planned occurrences (the shape of a long plan, rows-wise).
    let per_timer = 1_000u64;
    let timers = stored.div_ceil(per_timer);
    sqlx::query(
        "INSERT INTO timers (name, schedule_kind, run_at, http_url, plan_status)
         SELECT 'stored-' || i, 'once', now() + interval '365 days', $1, 'done'
           FROM generate_series(1, $2::bigint) AS i",
    )
    .bind(sink.url())
    .bind(timers as i64)
    .execute(&stack.db.pool)
    .await?;
    let ids: Vec<uuid::Uuid> =
        sqlx::query_scalar("SELECT id FROM timers WHERE name LIKE 'stored-%'").fetch_all(&stack.db.pool).await?;
    let started = std::time::Instant::now();
    for chunk in ids.chunks(1_000) {
        sqlx::query(
            "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket)
             SELECT t, s, s, 1, (random() * 1023)::smallint
               FROM UNNEST($1::uuid[]) AS t,
                    generate_series(now() + interval '365 days', now() + interval '365 days' + ($2 - 1) * interval '1 minute',
                                    interval '1 minute') AS s",
        )
        .bind(chunk)
        .bind(per_timer as i64)
        .execute(&stack.db.pool)
        .await?;
    }
    sqlx::query("VACUUM ANALYZE tasks").execute(&stack.db.pool).await?;
    println!("stored: {} future tasks written in {:.0} s", timers * per_timer, started.elapsed().as_secs_f64());
    let full = steady_load(env, &stack, &sink, rate, 0, duration_s).await?;
    println!(
        "stored scale, {rate}/s: empty table: scan {:.2} ms, lag p50 {:.1} ms p99 {:.1} ms; beside {} stored tasks: scan {:.2} ms, lag p50 {:.1} ms p99 {:.1} ms",
        empty.mean_scan_ms,
        empty.lag.p50_ms,
        empty.lag.p99_ms,
        timers * per_timer,
        full.mean_scan_ms,
        full.lag.p50_ms,
        full.lag.p99_ms
    );
    Ok(StoredResult { stored: timers * per_timer, empty, full })
}
