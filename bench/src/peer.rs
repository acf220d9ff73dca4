//! The peer run beside Punctual: graphile-worker (Node.js; the version pinned by
//! bench/peer/graphile-worker/package-lock.json, installed here with `npm ci`) on the same
//! Postgres server, offered the same load: one-shot jobs due at the same times as a
//! sustained load's occurrences, each making the same call to the same sink. Its jobs are
//! added a few seconds ahead of their time, as Punctual plans its occurrences ahead.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::baselines::Scratch;
use crate::env::{settle_stats, Env};
use crate::measure::{achieved_per_s, cpu_seconds, repeats, LagStats};
use crate::scenarios::whole_second_after;
use crate::sink::LagSink;

/// The peer's folder in the repository.
const PEER_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/peer/graphile-worker");
/// The version the lockfile pins, as reported.
pub const PEER: &str = "graphile-worker 0.16.6";
/// Jobs are added this far ahead of their run time.
const ADD_AHEAD: Duration = Duration::from_secs(5);
/// After the last job was due, how long the harness waits for the rest: an overloaded
/// peer's backlog is reported as not delivered rather than waited out.
const DRAIN: chrono::Duration = chrono::Duration::seconds(60);
/// ... or until nothing more arrived for this long.
const STALL: chrono::Duration = chrono::Duration::seconds(15);

/// How the peer's worker is set up (the same for every rate).
#[derive(Debug, Clone, Copy, Serialize, clap::Args)]
pub struct PeerSettings {
    /// Jobs the peer runs at once.
    #[arg(long = "peer-concurrency", default_value_t = 20)]
    pub concurrency: u32,
    /// The peer's Postgres connections.
    #[arg(long = "peer-pool", default_value_t = 20)]
    pub pool: u32,
    /// How often an idle worker of the peer looks for jobs that became due, ms.
    #[arg(long = "peer-poll-ms", default_value_t = 100)]
    pub poll_ms: u32,
}

/// What the peer did at one offered rate.
#[derive(Debug, Clone, Serialize)]
pub struct PeerResult {
    pub peer: &'static str,
    pub settings: PeerSettings,
    pub rate: u32,
    pub warmup_s: u32,
    pub duration_s: u32,
    pub expected: u64,
    pub delivered: u64,
    /// Not delivered by [`DRAIN`] after the last was due.
    pub undelivered: u64,
    pub duplicated: u64,
    /// Delivered jobs per second, from the end of the warm-up to the last delivery.
    pub achieved_per_s: f64,
    pub lag: LagStats,
    /// CPU a delivered job, µs: the worker (Node.js), Postgres, both.
    pub worker_us: f64,
    pub postgres_us: f64,
    pub total_us: f64,
    /// Rows inserted, updated or deleted in the peer's tables a delivered job.
    pub row_writes_per_fire: f64,
}

impl PeerResult {
    /// As for Punctual: everything delivered, none later than 1 s.
    pub fn is_sustained(&self) -> bool {
        self.undelivered == 0 && self.lag.max_ms <= 1_000.0
    }
}

/// The peer at each rate in turn, up to the first it does not sustain: past its ceiling
/// each higher rate only grows a backlog, and takes [`DRAIN`] to say so.
pub async fn peer_rates(
    env: &Env,
    rates: &[u32],
    warmup_s: u32,
    duration_s: u32,
    settings: PeerSettings,
) -> anyhow::Result<Vec<PeerResult>> {
    let mut results = Vec::new();
    for &rate in rates {
        let result = graphile(env, rate, warmup_s, duration_s, settings).await?;
        let sustained = result.is_sustained();
        results.push(result);
        if !sustained {
            break;
        }
    }
    Ok(results)
}

/// `rate` jobs a second for `warmup_s` and then `duration_s` seconds, each due at the time
/// a sustained load of Punctual's would fire, in a database of its own.
pub async fn graphile(
    env: &Env,
    rate: u32,
    warmup_s: u32,
    duration_s: u32,
    settings: PeerSettings,
) -> anyhow::Result<PeerResult> {
    let dir = install().await?;
    let sink = LagSink::start().await?;
    let db = Scratch::empty(&env.database_server).await?;
    let mut worker = start_worker(&dir, &format!("{}/{}", env.database_server, db.name), settings).await?;
    let worker_pid = worker.id().context("the peer's worker has no process id")?;

    let first = whole_second_after(ADD_AHEAD + Duration::from_secs(3));
    let t0 = first + chrono::Duration::seconds(i64::from(warmup_s));
    let end = t0 + chrono::Duration::seconds(i64::from(duration_s));
    let seconds = warmup_s + duration_s;
    let writes_before = writes(&db.pool).await?;
    let adding = tokio::spawn(add_jobs(db.pool.clone(), sink.url(), first, rate, seconds));

    if let Ok(wait) = (t0 - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
    let cpu = || (cpu_seconds(worker_pid).unwrap_or(0.0), env.postgres_cpu());
    let cpu_before = cpu();
    let expected_with_warmup = u64::from(rate) * u64::from(seconds);
    let mut progress = (0usize, Utc::now());
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = Utc::now();
        let distinct = sink.distinct();
        if distinct > progress.0 {
            progress = (distinct, now);
        }
        if distinct as u64 >= expected_with_warmup
            || (now > end && (now - progress.1 > STALL || now > end + DRAIN))
            || worker.try_wait()?.is_some()
        {
            break;
        }
    }
    let cpu_after = cpu();
    adding.await.context("adding jobs")??;
    let _ = worker.kill().await;
    let delivered_with_warmup = sink.distinct() as u64;
    let deliveries = sink.deliveries_between(t0, end);
    let expected = u64::from(rate) * u64::from(duration_s);
    let delivered = deliveries.len() as u64;
    settle_stats(&db.pool).await;
    let row_writes = writes(&db.pool).await? - writes_before;
    db.drop().await?;
    let per = |after: f64, before: f64| (after - before) * 1e6 / delivered.max(1) as f64;
    let (worker_us, postgres_us) = (per(cpu_after.0, cpu_before.0), per(cpu_after.1, cpu_before.1));
    let result = PeerResult {
        peer: PEER,
        settings,
        rate,
        warmup_s,
        duration_s,
        expected,
        delivered,
        undelivered: expected.saturating_sub(delivered),
        duplicated: repeats(&deliveries),
        achieved_per_s: achieved_per_s(&deliveries, t0, duration_s),
        lag: LagStats::of(&deliveries),
        worker_us,
        postgres_us,
        total_us: worker_us + postgres_us,
        row_writes_per_fire: row_writes as f64 / delivered_with_warmup.max(1) as f64,
    };
    println!(
        "{PEER} {rate}/s × {duration_s} s after {warmup_s} s of warm-up: delivered {}/{} ({} not within {} s, duplicated {}), {:.0} jobs/s, lag p50 {:.1} ms p99 {:.1} ms max {:.1} ms; CPU a job: worker {:.0} µs, Postgres {:.0} µs; {:.2} row writes a job",
        result.delivered,
        result.expected,
        result.undelivered,
        DRAIN.num_seconds(),
        result.duplicated,
        result.achieved_per_s,
        result.lag.p50_ms,
        result.lag.p99_ms,
        result.lag.max_ms,
        result.worker_us,
        result.postgres_us,
        result.row_writes_per_fire
    );
    Ok(result)
}

/// Installs the pinned peer (`npm ci`) unless its lockfile's version is there already.
async fn install() -> anyhow::Result<PathBuf> {
    let dir = PathBuf::from(PEER_DIR);
    let installed = dir.join("node_modules/graphile-worker/package.json");
    let wanted = PEER.rsplit(' ').next().unwrap_or_default();
    let version = std::fs::read_to_string(&installed)
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .and_then(|v| v["version"].as_str().map(str::to_owned));
    if version.as_deref() != Some(wanted) {
        println!("installing {PEER} (npm ci in {})", dir.display());
        let status = Command::new("npm")
            .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .status()
            .await
            .context("running npm (Node.js and npm are needed for the peer)")?;
        anyhow::ensure!(status.success(), "npm ci in {} failed: {status}", dir.display());
    }
    Ok(dir)
}

/// Starts the worker and waits until it has made its schema and is polling.
async fn start_worker(dir: &Path, database_url: &str, settings: PeerSettings) -> anyhow::Result<Child> {
    let mut child = Command::new("node")
        .arg("worker.js")
        .current_dir(dir)
        .env("DATABASE_URL", database_url)
        .env("PEER_CONCURRENCY", settings.concurrency.to_string())
        .env("PEER_POOL", settings.pool.to_string())
        .env("PEER_POLL_MS", settings.poll_ms.to_string())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting the peer's worker (node)")?;
    let stdout = child.stdout.take().context("the worker's output")?;
    let mut lines = BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await? {
            if line.trim() == "ready" {
                return Ok(true);
            }
        }
        Ok::<_, std::io::Error>(false)
    })
    .await;
    anyhow::ensure!(matches!(ready, Ok(Ok(true))), "the peer's worker did not start: {ready:?}");
    // Its later output (nothing, unless it warns) is drained so that it never blocks.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(child)
}

/// Each second's jobs, added [`ADD_AHEAD`] before that second: job `i` is due at
/// `first + i / rate` seconds, and names itself to the sink as Punctual's occurrences do,
/// `<id>:<due time>`.
async fn add_jobs(
    pool: sqlx::PgPool,
    url: String,
    first: chrono::DateTime<Utc>,
    rate: u32,
    seconds: u32,
) -> anyhow::Result<()> {
    let run = uuid::Uuid::new_v4().to_string();
    for second in 0..seconds {
        let at = first + chrono::Duration::seconds(i64::from(second)) - chrono::Duration::from_std(ADD_AHEAD)?;
        if let Ok(wait) = (at - Utc::now()).to_std() {
            tokio::time::sleep(wait).await;
        }
        let (from, to) = (second * rate, (second + 1) * rate);
        sqlx::query(
            "SELECT graphile_worker.add_jobs(ARRAY(
                 SELECT ROW('fire', json_build_object('url', $1::text, 'key', $2::text || ':' || (to_json(t) #>> '{}')),
                            NULL, t, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
                   FROM (SELECT $3::timestamptz + (i::bigint * 1000000 / $4) * interval '1 microsecond' AS t
                           FROM generate_series($5::int, $6::int - 1) AS i) AS due))",
        )
        .bind(&url)
        .bind(&run)
        .bind(first)
        .bind(rate as i32)
        .bind(from as i32)
        .bind(to as i32)
        .execute(&pool)
        .await
        .context("adding the peer's jobs")?;
    }
    Ok(())
}

/// Rows written so far in the peer's tables.
async fn writes(pool: &sqlx::PgPool) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT COALESCE(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint
           FROM pg_stat_user_tables WHERE schemaname = 'graphile_worker'",
    )
    .fetch_one(pool)
    .await?)
}
