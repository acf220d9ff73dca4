//! `neighbors`: one namespace at a steady rate while other namespaces misbehave, one phase
//! after another (nothing; a bulk import; timers aimed at a target that never answers; at
//! a target answering 429 with Retry-After; a replay of dead tasks). For each phase, what
//! the steady namespace got: its delivered rate, its lag and what it lost.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::Router;
use chrono::{DateTime, Utc};
use punctual_testkit::black_hole::BlackHole;
use punctual_testkit::Stack;
use serde::Serialize;
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::env::Env;
use crate::measure::{repeats, LagStats};
use crate::sink::LagSink;

/// How big each neighbour is.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Neighbours {
    /// The steady namespace's fires per second.
    pub rate: u32,
    /// Seconds of each phase but the import's, which lasts until its timers have fired.
    pub phase_s: u32,
    /// One-shot timers inserted with one statement, due `import_due_s` later.
    pub import_rows: u32,
    /// From when to when after their insert the imported timers fall due, in seconds.
    pub import_due_s: (u32, u32),
    /// Timers firing every second at a target that accepts connections and never answers
    /// (their timeout 30 s).
    pub black_hole_timers: u32,
    /// Timers firing every second at a target answering `429` with `Retry-After: 5`.
    pub busy_timers: u32,
    /// Dead tasks replayed with one request.
    pub replayed: u32,
}

impl Neighbours {
    pub fn full(rate: u32) -> Self {
        Neighbours {
            rate,
            phase_s: 30,
            import_rows: 200_000,
            import_due_s: (30, 45),
            black_hole_timers: 1_000,
            busy_timers: 1_000,
            replayed: 10_000,
        }
    }

    pub fn smoke() -> Self {
        Neighbours {
            rate: 100,
            phase_s: 5,
            import_rows: 2_000,
            import_due_s: (3, 5),
            black_hole_timers: 20,
            busy_timers: 20,
            replayed: 200,
        }
    }
}

/// What the steady namespace got during one phase.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub name: &'static str,
    pub seconds: u32,
    pub expected: u64,
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub delivered_per_s: f64,
    pub lag: LagStats,
}

#[derive(Debug, Clone, Serialize)]
pub struct NeighborsResult {
    pub neighbours: Neighbours,
    pub phases: Vec<Phase>,
}

impl NeighborsResult {
    pub fn lost(&self) -> u64 {
        self.phases.iter().map(|p| p.lost).sum()
    }

    pub fn markdown(&self) -> String {
        let n = &self.neighbours;
        let mut md = format!(
            "Neighbours: the steady namespace at {} fires/s; import {} rows, black hole {} timers/s, \
             429 target {} timers/s, replay {} dead tasks.\n\n\
             | phase | seconds | steady delivered/s | lag p50 | lag p99 | lag max | lost | duplicated |\n\
             |---|---|---|---|---|---|---|---|\n",
            n.rate, n.import_rows, n.black_hole_timers, n.busy_timers, n.replayed
        );
        for p in &self.phases {
            md.push_str(&format!(
                "| {} | {} | {:.0} | {:.0} ms | {:.0} ms | {:.0} ms | {} | {} |\n",
                p.name, p.seconds, p.delivered_per_s, p.lag.p50_ms, p.lag.p99_ms, p.lag.max_ms, p.lost, p.duplicated
            ));
        }
        md
    }
}

/// The phases in order, each with its start offset and length from the first fire.
struct Timeline {
    first: DateTime<Utc>,
    phases: Vec<(&'static str, DateTime<Utc>, DateTime<Utc>)>,
}

impl Timeline {
    fn new(first: DateTime<Utc>, n: &Neighbours) -> Self {
        let secs = |s: u32| chrono::Duration::seconds(i64::from(s));
        // The import's phase spans its insert and its rows' fires.
        let import_s = n.import_due_s.1 + 5;
        let lengths = [("quiet", n.phase_s), ("import", import_s), ("black hole", n.phase_s), ("429", n.phase_s)]
            .into_iter()
            .chain([("replay", n.phase_s)]);
        let mut at = first;
        let phases = lengths
            .map(|(name, s)| {
                let from = at;
                at = from + secs(s);
                (name, from, at)
            })
            .collect();
        Timeline { first, phases }
    }

    fn span(&self, name: &str) -> (DateTime<Utc>, DateTime<Utc>) {
        let (_, from, to) = self.phases.iter().find(|(n, _, _)| *n == name).expect("a phase of the timeline");
        (*from, *to)
    }

    fn end(&self) -> DateTime<Utc> {
        self.phases.last().map_or(self.first, |p| p.2)
    }
}

pub async fn neighbors(env: &Env, n: Neighbours) -> anyhow::Result<NeighborsResult> {
    let (steady_sink, other_sink) = (LagSink::start().await?, LagSink::start().await?);
    let (hole, busy) = (BlackHole::start().await, BusyTarget::start().await?);
    let stack = env.stack(&[]).await;
    let pool = &stack.db.pool;
    let first = crate::scenarios::whole_second_after(Duration::from_secs(10 + u64::from(n.rate / 1_000)));
    let timeline = Timeline::new(first, &n);
    steady(pool, n.rate, first, timeline.end(), &steady_sink.url()).await?;
    let dead = dead_tasks(pool, n.replayed, &other_sink.url()).await?;
    let (hole_from, hole_to) = timeline.span("black hole");
    every_second(pool, "hole", n.black_hole_timers, (hole_from, hole_to), &hole.url("/"), 30_000).await?;
    let (busy_from, busy_to) = timeline.span("429");
    every_second(pool, "busy", n.busy_timers, (busy_from, busy_to), &busy.url(), 10_000).await?;

    let (import_at, _) = timeline.span("import");
    sleep_until(import_at).await;
    let started = std::time::Instant::now();
    import(pool, n.import_rows, import_at, n.import_due_s, &other_sink.url()).await?;
    println!("neighbors: imported {} rows in {:.1} s", n.import_rows, started.elapsed().as_secs_f64());
    let (replay_at, _) = timeline.span("replay");
    sleep_until(replay_at).await;
    replay(&stack, &dead).await?;

    // Until everything arrived, or nothing more for a while after the last was due.
    let expected_total = u64::from(n.rate) * (timeline.end() - first).num_seconds() as u64;
    let mut progress = (0usize, Utc::now());
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (now, distinct) = (Utc::now(), steady_sink.distinct());
        if distinct > progress.0 {
            progress = (distinct, now);
        }
        if distinct as u64 >= expected_total
            || (now > timeline.end() && now - progress.1 > chrono::Duration::seconds(20))
        {
            break;
        }
    }
    let phases = timeline
        .phases
        .iter()
        .map(|(name, from, to)| {
            let seconds = (*to - *from).num_seconds() as u32;
            let deliveries = steady_sink.deliveries_between(*from, *to);
            let expected = u64::from(n.rate) * u64::from(seconds);
            let delivered = deliveries.len() as u64;
            Phase {
                name,
                seconds,
                expected,
                delivered,
                lost: expected.saturating_sub(delivered),
                duplicated: repeats(&deliveries),
                delivered_per_s: delivered as f64 / f64::from(seconds.max(1)),
                lag: LagStats::of(&deliveries),
            }
        })
        .collect();
    env.forget_topics(stack).await;
    let result = NeighborsResult { neighbours: n, phases };
    println!("{}", result.markdown());
    Ok(result)
}

async fn sleep_until(at: DateTime<Utc>) {
    if let Ok(wait) = (at - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
}

/// The steady namespace: `rate` timers firing every second from `first` to `end`, their
/// starts spread evenly over the first second.
async fn steady(pool: &PgPool, rate: u32, first: DateTime<Utc>, end: DateTime<Utc>, url: &str) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO timers (namespace, name, schedule_kind, interval_ms, start_at, end_at, http_url)
         SELECT 'steady', 'steady-' || i, 'interval', 1000,
                $1 + (i::bigint * 1000000 / $2) * interval '1 microsecond', $3, $4
           FROM generate_series(0, $2 - 1) AS i",
    )
    .bind(first)
    .bind(rate as i32)
    .bind(end)
    .bind(url)
    .execute(pool)
    .await?;
    Ok(())
}

/// `count` timers of `namespace` firing every second within `span` at `url`.
async fn every_second(
    pool: &PgPool,
    namespace: &str,
    count: u32,
    (start, end): (DateTime<Utc>, DateTime<Utc>),
    url: &str,
    timeout_ms: i32,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO timers (namespace, name, schedule_kind, interval_ms, start_at, end_at, http_url, http_timeout_ms)
         SELECT $1, $1 || '-' || i, 'interval', 1000, $3 + (i::bigint * 1000000 / $2) * interval '1 microsecond',
                $4, $5, $6
           FROM generate_series(0, $2 - 1) AS i",
    )
    .bind(namespace)
    .bind(count as i32)
    .bind(start)
    .bind(end)
    .bind(url)
    .bind(timeout_ms)
    .execute(pool)
    .await?;
    Ok(())
}

/// `rows` one-shot timers of namespace `import`, due `due_s` after `at`, in one statement.
async fn import(pool: &PgPool, rows: u32, at: DateTime<Utc>, due_s: (u32, u32), url: &str) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO timers (namespace, name, schedule_kind, run_at, http_url)
         SELECT 'import', 'import-' || i, 'once',
                $1 + $4 * interval '1 second' + (i::bigint * $5 * 1000000 / $2) * interval '1 microsecond', $3
           FROM generate_series(0, $2 - 1) AS i",
    )
    .bind(at)
    .bind(rows as i32)
    .bind(url)
    .bind(due_s.0 as i32)
    .bind(i64::from(due_s.1.saturating_sub(due_s.0)))
    .execute(pool)
    .await?;
    Ok(())
}

/// `count` dead tasks of a timer of namespace `replay`, as a target's outage leaves them.
async fn dead_tasks(pool: &PgPool, count: u32, url: &str) -> anyhow::Result<Vec<i64>> {
    let timer: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO timers (namespace, name, schedule_kind, interval_ms, start_at, end_at, http_url)
         VALUES ('replay', 'outage', 'interval', 1000, now() - interval '1 day', now() - interval '1 hour', $1)
         RETURNING id",
    )
    .bind(url)
    .fetch_one(pool)
    .await?;
    let ids = sqlx::query_scalar(
        "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, status, attempt, finished_at)
         SELECT t.id, date_trunc('second', now()) - interval '2 hours' + i * interval '1 second', now(), t.version,
                punctual_bucket(t.id), 'dead', 3, now()
           FROM timers t, generate_series(1, $2) AS i WHERE t.id = $1
         RETURNING id",
    )
    .bind(timer)
    .bind(count as i32)
    .fetch_all(pool)
    .await?;
    Ok(ids)
}

async fn replay(stack: &Stack, ids: &[i64]) -> anyhow::Result<()> {
    for chunk in ids.chunks(10_000) {
        let answer = stack.http.post(stack.admin.url("/v1/tasks/replay")).json(&json!({ "ids": chunk })).send().await?;
        anyhow::ensure!(answer.status().is_success(), "replay: {}", answer.status());
    }
    Ok(())
}

/// A target that answers every call `429` with `Retry-After: 5`, counting the calls.
struct BusyTarget {
    addr: SocketAddr,
    calls: Arc<AtomicU64>,
    token: CancellationToken,
}

impl BusyTarget {
    async fn start() -> anyhow::Result<BusyTarget> {
        let calls = Arc::new(AtomicU64::new(0));
        let counted = calls.clone();
        let router = Router::new().fallback(move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::Relaxed);
                let mut headers = HeaderMap::new();
                headers.insert("retry-after", HeaderValue::from_static("5"));
                (StatusCode::TOO_MANY_REQUESTS, headers)
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let token = CancellationToken::new();
        let stop = token.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).with_graceful_shutdown(stop.cancelled_owned()).await;
        });
        Ok(BusyTarget { addr, calls, token })
    }

    fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

impl Drop for BusyTarget {
    fn drop(&mut self) {
        println!("neighbors: the 429 target was called {} times", self.calls.load(Ordering::Relaxed));
        self.token.cancel();
    }
}
