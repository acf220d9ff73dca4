//! What a fire's parts cost alone on this machine: each at a paced rate, with nothing else
//! running, measured as the CPU of the processes doing it. The parts are those every fire
//! needs whatever the services do around them: an HTTP call to the sink by hyper's client
//! as the executor makes it (on a work-stealing runtime, and on a runtime of one thread),
//! a task message through the broker (the scanner's producer, a consumer like the
//! executor's), and a fire's statements in Postgres: today's (the planner's insert of a
//! claimed row, the executor's start read and its outcome's update), the insert alone, the
//! insert and the update, today's statements with an outcome that Postgres can write in
//! place (HOT), and those of a layout that writes the occurrence once. Each part
//! runs as the services run it, not cheaper: a measure of where a fire's CPU goes, not a
//! bound no design could pass.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::{FutureExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use punctual_shared::config::KafkaConfig;
use punctual_shared::task::{self, ActionCache, Next, Outcome, StartRequest, TaskMessage};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::FutureRecord;
use serde::Serialize;
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::baselines::Scratch;
use crate::env::{settle_stats, Env};
use crate::measure::{cpu_seconds, thread_cpu_seconds, RowWrites};
use crate::sink::LagSink;

/// Calls at once to the sink: a target's first limit in the executor.
const CALLS_AT_ONCE: usize = 16;
/// Fires a statement of the Postgres part: the write-back's batch at 10,000/s.
const ROWS_A_STATEMENT: usize = 67;
/// Batches a statement of the planner inserts at 20,000/s (a pass of 2,000 timers); fewer at
/// lower rates, so that a short run at a low rate finishes some.
const MOST_BATCHES_PLANNED: usize = 30;
/// Timers the Postgres part's occurrences belong to.
const TIMERS: usize = 1_000;

#[derive(Debug, Clone, Serialize)]
pub struct Part {
    pub name: &'static str,
    /// Fires (calls, messages, rows) done per second while measured.
    pub per_s: f64,
    /// µs of CPU a fire, by process.
    pub cpu_us: Vec<(&'static str, f64)>,
}

impl Part {
    pub fn total_us(&self) -> f64 {
        self.cpu_us.iter().map(|(_, us)| us).sum()
    }

    /// One line: the part, its rate, and its CPU by process.
    pub fn line(&self) -> String {
        let parts: Vec<String> = self.cpu_us.iter().map(|(who, us)| format!("{who} {us:.1}")).collect();
        format!("{} at {:.0}/s: {} = {:.1} µs of CPU a fire", self.name, self.per_s, parts.join(" + "), self.total_us())
    }

    fn print(&self) {
        println!("floor: {}", self.line());
    }
}

/// The parts one after the other, each for `warmup` seconds and then `duration` measured.
pub async fn run(env: &Env, rate: u32, warmup: u32, duration: u32) -> anyhow::Result<Vec<Part>> {
    let pace =
        Pace { rate, warmup: Duration::from_secs(warmup.into()), duration: Duration::from_secs(duration.into()) };
    let multi_thread = http(&pace, "an HTTP call (hyper's client → the bench's sink)").await?;
    // The same client on a runtime of one thread, as the sink serves: its connections'
    // tasks and the calls' never wake another thread.
    let one_thread = tokio::task::spawn_blocking(move || -> anyhow::Result<Part> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(http(&pace, "an HTTP call, the client on a current-thread runtime"))
    })
    .await??;
    let mut parts = vec![multi_thread, one_thread, kafka(env, &pace).await?];
    parts.extend(postgres(env, &pace).await?);
    for part in &parts {
        part.print();
    }
    Ok(parts)
}

#[derive(Debug, Clone, Copy)]
struct Pace {
    rate: u32,
    warmup: Duration,
    duration: Duration,
}

/// CPU seconds of the two things a part measures (processes, or a process and a thread).
type Sample = (f64, f64);

/// `rate` fires a second in ticks of `batch` fires (of a millisecond's fires at least),
/// sampling the CPU when the warm-up ends and when the measured time ends.
struct Ticker<S> {
    pace: Pace,
    ticks: tokio::time::Interval,
    per_tick: usize,
    started: tokio::time::Instant,
    fired: u64,
    sample: S,
    /// The fires made and the sample taken when the warm-up ended.
    measured_from: Option<(u64, Sample)>,
    /// The fires measured and the sample taken when the measured time ended.
    ended: Option<(u64, Sample)>,
}

impl<S: FnMut() -> Sample> Ticker<S> {
    fn new(pace: Pace, batch: usize, sample: S) -> Ticker<S> {
        let period = Duration::from_secs_f64(batch as f64 / f64::from(pace.rate)).max(Duration::from_millis(1));
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let per_tick = (f64::from(pace.rate) * period.as_secs_f64()).round().max(1.0) as usize;
        Ticker {
            pace,
            ticks,
            per_tick,
            started: tokio::time::Instant::now(),
            fired: 0,
            sample,
            measured_from: None,
            ended: None,
        }
    }

    /// The next fires to make, numbered from the first of them, or `None` once the
    /// measured time has ended.
    async fn next(&mut self) -> Option<(u64, usize)> {
        if self.ended.is_some() {
            return None;
        }
        self.ticks.tick().await;
        let elapsed = self.started.elapsed();
        if elapsed >= self.pace.warmup + self.pace.duration {
            let from = self.measured_from.map_or(0, |(fired, _)| fired);
            self.ended = Some((self.fired - from, (self.sample)()));
            return None;
        }
        if self.measured_from.is_none() && elapsed >= self.pace.warmup {
            self.measured_from = Some((self.fired, (self.sample)()));
        }
        let first = self.fired;
        self.fired += self.per_tick as u64;
        Some((first, self.per_tick))
    }

    /// What the measured time cost, once [`Ticker::next`] has returned `None`.
    fn measured(&self) -> anyhow::Result<Measured> {
        let (Some((_, first)), Some((fires, last))) = (self.measured_from, self.ended) else {
            anyhow::bail!("the measured time has not ended");
        };
        Ok(Measured { fires, duration: self.pace.duration, used: (last.0 - first.0, last.1 - first.1) })
    }
}

/// The fires made in a part's measured time and the CPU its two samples' subjects used.
struct Measured {
    fires: u64,
    duration: Duration,
    /// CPU seconds each used over the measured time.
    used: Sample,
}

impl Measured {
    /// The part named `name`, with the CPU seconds of each process (or thread) named.
    fn part(&self, name: &'static str, cpu_seconds: [(&'static str, f64); 2]) -> Part {
        Part {
            name,
            per_s: self.fires as f64 / self.duration.as_secs_f64(),
            cpu_us: cpu_seconds
                .into_iter()
                .map(|(who, seconds)| (who, seconds * 1e6 / self.fires.max(1) as f64))
                .collect(),
        }
    }
}

/// hyper's client as the executor builds it (without TLS, which a plain `http` URL does
/// not use), calling the bench's sink with the executor's headers, 16 calls at once.
async fn http(pace: &Pace, name: &'static str) -> anyhow::Result<Part> {
    let sink = LagSink::start().await?;
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(CALLS_AT_ONCE)
        .build(connector);
    let url: hyper::Uri = sink.url().parse()?;
    let timer = Uuid::new_v4();
    let base = Utc::now();
    let slots = Arc::new(Semaphore::new(CALLS_AT_ONCE));
    let failures = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let own = std::process::id();
    let mut ticker = Ticker::new(*pace, 1, || (cpu_seconds(own).unwrap_or(0.0), thread_cpu_seconds("lag-sink")));
    while let Some((first, count)) = ticker.next().await {
        for i in first..first + count as u64 {
            let slot = slots.clone().acquire_owned().await?;
            let request = call(&url, timer, base + chrono::Duration::microseconds(i as i64))?;
            let (client, failures) = (client.clone(), failures.clone());
            tokio::spawn(async move {
                let answered = match client.request(request).await {
                    Ok(response) => response.into_body().collect().await.is_ok(),
                    Err(_) => false,
                };
                if !answered {
                    failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                drop(slot);
            });
        }
    }
    let failed = failures.load(std::sync::atomic::Ordering::Relaxed);
    anyhow::ensure!(failed == 0, "{failed} calls to the sink failed");
    let measured = ticker.measured()?;
    let (all, sink) = measured.used;
    Ok(measured.part(name, [("client", all - sink), ("sink", sink)]))
}

/// A callback as the executor makes it to a timer without a body or a signing secret.
fn call(url: &hyper::Uri, timer: Uuid, at: DateTime<Utc>) -> anyhow::Result<hyper::Request<Full<Bytes>>> {
    let identity = format!("{timer}:{}", at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
    Ok(hyper::Request::post(url.clone())
        .header(hyper::header::USER_AGENT, "punctual/floor")
        .header("idempotency-key", &identity)
        .header("x-punctual-attempt", 1)
        .header("webhook-id", &identity)
        .header("webhook-timestamp", Utc::now().timestamp())
        .body(Full::new(Bytes::new()))?)
}

/// The scanner's producer for tasks sent on time and a consumer like the executor's, on a
/// topic of its own with the tasks topic's four partitions: the bench's process (both
/// clients) and the broker.
async fn kafka(env: &Env, pace: &Pace) -> anyhow::Result<Part> {
    const PARTITIONS: i32 = 4;
    let topic = format!("punctual.floor.{}", &Uuid::new_v4().simple().to_string()[..12]);
    let cfg = KafkaConfig {
        kafka_brokers: env.brokers.clone(),
        tasks_topic: topic.clone(),
        tasks_partitions: PARTITIONS,
        topic_replication: 1,
        kafka_options: Default::default(),
    };
    punctual_runtime::kafka::ensure_topic(&cfg, &topic, PARTITIONS).await?;
    let lead = Duration::from_millis(punctual_scanner::config::DEFAULT_PUBLISH_LEAD_MS);
    let producer = punctual_scanner::publisher::producer(&cfg, punctual_scanner::publisher::on_time_linger(lead))?;
    let consumer: StreamConsumer = punctual_runtime::kafka::client_config(
        &cfg,
        &[
            ("group.id", &format!("floor-{}", Uuid::new_v4().simple())),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("auto.offset.reset", "earliest"),
            ("fetch.wait.max.ms", "500"),
            ("queued.min.messages", "1000000"),
        ],
    )
    .create()?;
    consumer.subscribe(&[&topic])?;
    let consumed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counting = consumed.clone();
    let consuming = tokio::spawn(async move {
        let mut stream = consumer.stream();
        while let Some(message) = stream.next().await {
            if let Ok(message) = message {
                let decoded = rdkafka::Message::payload(&message).map(serde_json::from_slice::<TaskMessage>);
                if matches!(decoded, Some(Ok(_))) {
                    counting.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
    });
    let mut message = TaskMessage {
        task_id: 123_456_789,
        timer_id: Uuid::new_v4(),
        scheduled_at: Utc::now(),
        attempt: 1,
        due_at: Some(Utc::now()),
        bucket: 0,
        epoch: 1_000,
        shard: None,
    };
    let own = std::process::id();
    let broker = env.broker_pid();
    let mut deliveries = futures::stream::FuturesUnordered::new();
    let mut ticker =
        Ticker::new(*pace, 1, || (cpu_seconds(own).unwrap_or(0.0), broker.and_then(cpu_seconds).unwrap_or(0.0)));
    while let Some((first, count)) = ticker.next().await {
        for i in first..first + count as u64 {
            message.task_id = i as i64;
            message.bucket = (i % 1024) as i16;
            let payload = serde_json::to_vec(&message)?;
            let key = message.key();
            let record =
                FutureRecord::to(&topic).partition(i32::from(message.bucket) % PARTITIONS).key(&key).payload(&payload);
            match producer.send_result(record) {
                Ok(delivery) => deliveries.push(delivery),
                Err((e, _)) => anyhow::bail!("producing: {e}"),
            }
        }
        // The acknowledgements come, as the scanner reads them, while it sends more.
        while let Some(Some(_)) = deliveries.next().now_or_never() {}
    }
    while deliveries.next().await.is_some() {}
    consuming.abort();
    let measured = ticker.measured()?;
    let (clients, broker) = measured.used;
    Ok(measured.part(
        "a task message (the scanner's producer → the broker → a consumer)",
        [("clients", clients), ("broker", broker)],
    ))
}

/// A fire's statements in a database of its own with Punctual's schema, in batches of
/// [`ROWS_A_STATEMENT`]: Postgres (the server and its backends) and the client.
async fn postgres(env: &Env, pace: &Pace) -> anyhow::Result<Vec<Part>> {
    let mut parts = Vec::new();
    for layout in Layout::ALL {
        let scratch = Scratch::create(&env.database_server).await?;
        let pool = scratch.pool.clone();
        if layout == Layout::HotOutcome {
            sqlx::raw_sql(HOT_OUTCOME_SCHEMA).execute(&pool).await?;
        }
        let timers: Vec<Uuid> = sqlx::query_scalar(
            "INSERT INTO timers (name, schedule_kind, interval_ms, http_url)
             SELECT 'floor ' || i, 'interval', 1000, 'http://127.0.0.1:9/fire' FROM generate_series(1, $1) AS i
             RETURNING id",
        )
        .bind(TIMERS as i32)
        .fetch_all(&pool)
        .await?;
        let actions = Arc::new(ActionCache::default());
        let mut running: Option<tokio::task::JoinHandle<anyhow::Result<()>>> = None;
        let base = Utc::now();
        let own = std::process::id();
        // Today's occurrences are planned in large passes, and started and finished in the
        // write-back's batches a second after.
        let behind = (pace.rate as usize / ROWS_A_STATEMENT).max(1);
        let planned_a_statement =
            (pace.rate as usize).div_ceil(10 * ROWS_A_STATEMENT).clamp(1, MOST_BATCHES_PLANNED) * ROWS_A_STATEMENT;
        let mut planned = Vec::new();
        let mut inserted: std::collections::VecDeque<Vec<i64>> = Default::default();
        let mut ticker = Ticker::new(*pace, ROWS_A_STATEMENT, || (env.postgres_cpu(), cpu_seconds(own).unwrap_or(0.0)));
        while let Some((first, count)) = ticker.next().await {
            let occurrences: Vec<(Uuid, DateTime<Utc>)> = (first..first + count as u64)
                .map(|i| (timers[i as usize % TIMERS], base + chrono::Duration::seconds((i / TIMERS as u64) as i64)))
                .collect();
            match layout {
                Layout::Today | Layout::HotOutcome | Layout::Inserted | Layout::InsertedAndFinished => {
                    planned.extend(occurrences);
                    if planned.len() >= planned_a_statement {
                        let ids = insert_claimed(&pool, &std::mem::take(&mut planned)).await?;
                        inserted.extend(ids.chunks(ROWS_A_STATEMENT).map(<[i64]>::to_vec));
                    }
                    if inserted.len() > behind {
                        let ids = inserted.pop_front().expect("more than one batch");
                        if layout.finishes() {
                            // On a connection of its own, beside the inserts, as the
                            // executor's statements run beside the scanner's.
                            if let Some(previous) = running.take() {
                                previous.await??;
                            }
                            let (pool, actions) = (pool.clone(), actions.clone());
                            let read = matches!(layout, Layout::Today | Layout::HotOutcome);
                            running = Some(tokio::spawn(async move {
                                start_and_finish(&pool, &ids, read.then_some(&*actions)).await
                            }));
                        }
                    }
                }
                Layout::OneWrite => {
                    read_unwritten(&pool, &occurrences).await?;
                    insert_finished(&pool, &occurrences).await?;
                }
            }
        }
        if let Some(last) = running.take() {
            last.await??;
        }
        if layout.finishes() {
            settle_stats(&pool).await;
            let writes = RowWrites::read(&pool).await?;
            println!("floor: {}: {} of {} updates HOT", layout.name(), writes.hot_updated, writes.updated);
        }
        scratch.drop().await?;
        let measured = ticker.measured()?;
        let (postgres, client) = measured.used;
        parts.push(measured.part(layout.name(), [("postgres", postgres), ("client", client)]));
    }
    Ok(parts)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// The planner's insert of a claimed row, the executor's start read, its outcome's update.
    Today,
    /// Today's insert alone.
    Inserted,
    /// Today's insert and update, without the read between them.
    InsertedAndFinished,
    /// A read of the timer and of the occurrence's absence (what a start would read with
    /// no row before the run), then the occurrence's one insert, finished.
    OneWrite,
    /// Today's statements on a table whose indexes read no column a success changes
    /// ([`HOT_OUTCOME_SCHEMA`]).
    HotOutcome,
}

/// Today's table changed so that a success can be a HOT update (the new version on the
/// same page, no index written): half of each page left free for the outcomes, and no
/// index reading `status` (the partial indexes' predicates read columns generated from it,
/// whose values a success from `claimed` leaves as they were). The claim index moves to
/// `claimed_at`, a column of the same type on the same rows, because the outcome clears
/// `lease_until`: the inserts write as many index entries as today's, and the statements
/// are the services' own. Such a claim index keeps a row after its success, so a layout
/// like this one needs a bound of its own for its scans of expired claims.
const HOT_OUTCOME_SCHEMA: &str = "
    ALTER TABLE tasks SET (fillfactor = 50);
    ALTER TABLE tasks
        ADD COLUMN is_pending boolean GENERATED ALWAYS AS (status = 'pending') STORED,
        ADD COLUMN is_running boolean GENERATED ALWAYS AS (status = 'running') STORED,
        ADD COLUMN dead_at timestamptz GENERATED ALWAYS AS (CASE WHEN status = 'dead' THEN finished_at END) STORED;
    DROP INDEX tasks_pending_due, tasks_running_timer, tasks_dead, tasks_claim_lease;
    CREATE INDEX tasks_pending_due ON tasks (due_at) WHERE is_pending;
    CREATE INDEX tasks_running_timer ON tasks (timer_id) WHERE is_running;
    CREATE INDEX tasks_dead ON tasks (dead_at) WHERE dead_at IS NOT NULL;
    CREATE INDEX tasks_claimed ON tasks (claimed_at) WHERE claimed_at IS NOT NULL;
";

impl Layout {
    const ALL: [Layout; 5] =
        [Layout::Today, Layout::Inserted, Layout::InsertedAndFinished, Layout::OneWrite, Layout::HotOutcome];

    /// Whether the layout updates the rows it inserted.
    fn finishes(self) -> bool {
        matches!(self, Layout::Today | Layout::InsertedAndFinished | Layout::HotOutcome)
    }

    fn name(self) -> &'static str {
        match self {
            Layout::Today => "a fire's rows today (insert claimed, start read, outcome update)",
            Layout::Inserted => "today's insert alone",
            Layout::InsertedAndFinished => "today's insert and update, no read",
            Layout::OneWrite => "a fire's row written once (read, insert finished)",
            Layout::HotOutcome => "today's rows with a HOT outcome (no index reads status, fillfactor 50)",
        }
    }
}

/// The planner's insert of occurrences claimed at once (its columns, not its lease checks).
async fn insert_claimed(pool: &sqlx::PgPool, occurrences: &[(Uuid, DateTime<Utc>)]) -> anyhow::Result<Vec<i64>> {
    let (timers, times): (Vec<Uuid>, Vec<DateTime<Utc>>) = occurrences.iter().copied().unzip();
    Ok(sqlx::query_scalar(
        "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, status, claim_owner,
                            lease_until, claimed_at, claim_epoch)
         SELECT timer_id, at, now(), 1, 0, 'claimed', 'floor', now() + interval '60 seconds', now(), 1
           FROM UNNEST($1::uuid[], $2::timestamptz[]) AS o(timer_id, at)
         RETURNING id",
    )
    .bind(&timers)
    .bind(&times)
    .fetch_all(pool)
    .await?)
}

/// The executor's start read (when given its cache) and its outcome's write, with its own
/// functions.
async fn start_and_finish(pool: &sqlx::PgPool, ids: &[i64], read: Option<&ActionCache>) -> anyhow::Result<()> {
    let outcome = |task_id: i64, started_at: DateTime<Utc>| Outcome {
        task_id,
        attempt: 1,
        started_at,
        next: Next::Succeeded,
        http_status: Some(200),
        response_excerpt: None,
        error: None,
        duration_ms: 1,
    };
    let outcomes: Vec<Outcome> = match read {
        Some(actions) => {
            let requests: Vec<StartRequest> =
                ids.iter().map(|&task_id| StartRequest { task_id, attempt: 1, epoch: 1 }).collect();
            let started = task::start(pool, "floor", &requests, actions).await?;
            anyhow::ensure!(started.tasks.len() == ids.len(), "{} of {} tasks started", started.tasks.len(), ids.len());
            started.tasks.iter().map(|t| outcome(t.id, t.started_at)).collect()
        }
        None => ids.iter().map(|&id| outcome(id, Utc::now())).collect(),
    };
    let finished = task::finish(pool, &outcomes).await?;
    anyhow::ensure!(finished == ids.len() as u64, "{finished} of {} tasks finished", ids.len());
    Ok(())
}

/// What a start would read if an occurrence had no row before it ran: its timer's state
/// and action, and that no row of the occurrence exists (it did not run before).
async fn read_unwritten(pool: &sqlx::PgPool, occurrences: &[(Uuid, DateTime<Utc>)]) -> anyhow::Result<()> {
    let (timers, times): (Vec<Uuid>, Vec<DateTime<Utc>>) = occurrences.iter().copied().unzip();
    let rows: Vec<sqlx::postgres::PgRow> = sqlx::query(
        "SELECT m.timer_id, m.at, tm.version, tm.state, tm.overlap_policy, tm.namespace, tm.action_kind,
                tm.http_method, tm.http_url, tm.http_headers, tm.http_body, tm.http_timeout_ms,
                tm.retry_max_attempts, tm.retry_initial_ms, tm.retry_multiplier, tm.retry_max_ms
           FROM UNNEST($1::uuid[], $2::timestamptz[]) AS m(timer_id, at)
           JOIN timers tm ON tm.id = m.timer_id
          WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.timer_id = m.timer_id AND t.scheduled_at = m.at AND t.shard = 0)",
    )
    .bind(&timers)
    .bind(&times)
    .fetch_all(pool)
    .await?;
    anyhow::ensure!(rows.len() == occurrences.len(), "{} of {} occurrences unwritten", rows.len(), occurrences.len());
    Ok(())
}

/// The occurrence's only write in a layout that keeps no row before it runs.
async fn insert_finished(pool: &sqlx::PgPool, occurrences: &[(Uuid, DateTime<Utc>)]) -> anyhow::Result<()> {
    let (timers, times): (Vec<Uuid>, Vec<DateTime<Utc>>) = occurrences.iter().copied().unzip();
    sqlx::query(
        "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, status, claim_epoch,
                            started_at, finished_at, http_status, duration_ms)
         SELECT timer_id, at, now(), 1, 0, 'succeeded', 1, now(), now(), 200, 1
           FROM UNNEST($1::uuid[], $2::timestamptz[]) AS o(timer_id, at)",
    )
    .bind(&timers)
    .bind(&times)
    .execute(pool)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A part is measured over its whole measured time, at its rate, in whole batches.
    #[tokio::test(start_paused = true)]
    async fn the_ticker_fires_the_rate_in_batches_and_counts_only_the_measured_fires() {
        let pace = Pace { rate: 2_000, warmup: Duration::from_secs(1), duration: Duration::from_secs(3) };
        // The sample counts the fires made, so that each sample shows when it was taken.
        let made = std::cell::Cell::new(0u64);
        let mut ticker = Ticker::new(pace, 67, || (made.get() as f64, 0.0));
        let (mut before, mut batches) = (None, Vec::new());
        while let Some((first, count)) = ticker.next().await {
            assert_eq!(first, made.get(), "fires are numbered in order");
            batches.push(count);
            made.set(made.get() + count as u64);
            if before.is_none() && ticker.measured_from.is_some() {
                before = Some(first);
            }
        }
        assert!(ticker.next().await.is_none(), "the measured time ends once");
        let before = before.expect("the warm-up ended");
        let measured = ticker.measured().expect("measured");
        let during = made.get() - before;
        assert_eq!(measured.fires, during);
        assert_eq!(measured.used.0, during as f64, "sampled when the warm-up ended and when the measured time did");
        assert!(batches.iter().all(|&b| b == 67), "batches of 67: {batches:?}");
        // 2,000 a second for 3 s, to within a batch.
        assert!((5_933..=6_067).contains(&during), "{during} fires in 3 s");
        assert!((1_933..=2_067).contains(&before), "{before} fires in the 1 s warm-up");
    }
}
