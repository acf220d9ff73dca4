//! The scanner: plans timer occurrences into task rows, claims due tasks in lookahead
//! windows, holds them in a timing wheel and publishes each to Kafka at its fire time.
//!
//! Long-lived tasks under one cancellation token (a panic in any of them stops the
//! scanner, which exits with an error for its supervisor to restart):
//! * the lease keeper ([`leases::LeaseKeeper`]): renews this scanner's membership every
//!   heartbeat and keeps its fair share of the buckets; the others plan, claim and publish
//!   only for the buckets it holds;
//! * the listener ([`listen`]): wakes the scan loop on `punctual_timers` notifications
//!   (a timer written) and `punctual_tasks` ones (a task made pending);
//! * the scan loop ([`scan_loop`]): plan, then claim, every scan interval, or as soon as a
//!   notification or the lease keeper wakes it; less often while scans find nothing
//!   ([`pace::Pace`]);
//! * the wheel driver ([`publisher::drive_wheel`]): every millisecond, expires due tasks
//!   and publishes them. Publishing writes nothing to Postgres: a task whose message is
//!   lost stays claimed until its lease expires, and is then claimed and sent again;
//! * the topic keeper ([`keep_topic`]): creates the tasks topic again if the broker lost it;
//! * retention ([`retention::Retention`]): while this scanner holds bucket 0, deletes old
//!   finished occurrences.

pub mod cluster_stats;
pub mod config;
pub mod error;
pub mod leases;
pub mod metrics;
pub mod new_pass;
pub mod pace;
pub mod planner;
pub mod publisher;
pub mod retention;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use chrono::Utc;
use punctual_runtime::kafka::ReplaceableProducer;
use punctual_runtime::readiness::Readiness;
use punctual_runtime::supervisor::Supervisor;
use punctual_runtime::{kafka, ops};
use punctual_shared::config::KafkaConfig;
use punctual_shared::db;
use punctual_shared::task::{self, ClaimedTask};
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

pub use config::ScannerConfig;
pub use error::ScannerError;
use leases::{LeaseKeeper, Ownership};
use metrics::Metrics;
use new_pass::NewPassSize;
use pace::{Pace, Wakes};
use planner::Planner;
use publisher::Producers;

pub struct App {
    config: ScannerConfig,
    owner: String,
    pool: PgPool,
    producers: Producers,
    partitions: i32,
    metrics: Metrics,
    listener: TcpListener,
    addr: SocketAddr,
}

impl App {
    /// Connects, waits for the schema, makes sure the tasks topic exists, binds the ops
    /// endpoint.
    pub async fn build(config: ScannerConfig) -> Result<Self, ScannerError> {
        config.check().map_err(ScannerError::Config)?;
        let pool = db::connect_lazy_bounded(&config.database, config.bucket_lease()).map_err(ScannerError::Database)?;
        // Migrated by the admin or `punctual migrate`: this service needs no DDL rights.
        db::wait_for_schema(&pool).await.map_err(ScannerError::Schema)?;
        let partitions = kafka::ensure_tasks_topic(&config.kafka)
            .await
            .map_err(|error| ScannerError::Topic { topic: config.kafka.tasks_topic.clone(), error })?;
        let producers = Producers::new(&config.kafka, std::time::Duration::from_millis(config.publish_lead_ms))
            .map_err(ScannerError::Producer)?;
        let (listener, addr) =
            ops::bind(config.addr).await.map_err(|error| ScannerError::Bind { addr: config.addr, error })?;
        let owner = config.scanner_id.clone().unwrap_or_else(|| format!("{}:{}", ops::host_name(), addr.port()));
        tracing::info!(%owner, %addr, partitions, topic = %config.kafka.tasks_topic, "scanner ready");
        let metrics = Metrics::new();
        punctual_runtime::service_metrics::register(&metrics.registry, "scanner", &pool);
        Ok(Self { config, owner, pool, producers, partitions, metrics, listener, addr })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Runs until `token` is cancelled. On the way out, tasks still held are left claimed:
    /// their leases expire and another scanner (or this one, restarted) claims them again.
    pub async fn run_until_stopped(self, token: CancellationToken) -> Result<(), ScannerError> {
        let tasks = Supervisor::new(token.clone());
        let wakes = Arc::new(Wakes::default());
        let topic_missing = Arc::new(AtomicBool::new(false));
        let (claimed_tx, claimed_rx) = mpsc::channel::<Vec<ClaimedTask>>(64);
        let ownership = Arc::new(Ownership::new(self.owner.clone()));

        tasks.spawn(
            "lease keeper",
            LeaseKeeper {
                pool: self.pool.clone(),
                ownership: ownership.clone(),
                lease: self.config.bucket_lease(),
                heartbeat: self.config.bucket_heartbeat(),
                claim_lease: self.config.lease(),
                misfire_threshold: std::time::Duration::from_millis(self.config.misfire_threshold_ms),
                metrics: self.metrics.clone(),
                claimed_tx: claimed_tx.clone(),
                wakes: wakes.clone(),
            }
            .run(token.clone()),
        );

        if self.config.retention_days > 0 {
            tasks.spawn(
                "retention",
                retention::Retention {
                    pool: self.pool.clone(),
                    ownership: ownership.clone(),
                    keep: std::time::Duration::from_secs(u64::from(self.config.retention_days) * 86_400),
                    every: std::time::Duration::from_millis(self.config.retention_interval_ms.max(1)),
                    metrics: self.metrics.clone(),
                }
                .run(token.clone()),
            );
        }
        tasks.spawn(
            "cluster figures",
            cluster_stats::run(self.pool.clone(), ownership.clone(), self.metrics.cluster.clone(), token.clone()),
        );
        tasks.spawn("listener", listen(self.pool.clone(), wakes.clone(), token.clone()));
        tasks.spawn(
            "scan loop",
            scan_loop(
                Scan {
                    config: self.config.clone(),
                    ownership: ownership.clone(),
                    pool: self.pool.clone(),
                    metrics: self.metrics.clone(),
                    claimed_tx,
                },
                wakes,
                token.clone(),
            ),
        );
        tasks.spawn(
            "topic keeper",
            keep_topic(self.config.kafka.clone(), topic_missing.clone(), self.metrics.published.clone(), token.clone()),
        );
        tasks.spawn(
            "wheel driver",
            publisher::drive_wheel(
                publisher::Publisher {
                    producers: self.producers.clone(),
                    topic_missing,
                    topic: self.config.kafka.tasks_topic.clone(),
                    partitions: self.partitions,
                    ownership: ownership.clone(),
                    lead: chrono::Duration::milliseconds(self.config.publish_lead_ms as i64),
                    metrics: self.metrics.clone(),
                },
                claimed_rx,
                token.clone(),
            ),
        );

        let readiness =
            readiness(&self.pool, &self.producers.on_time, &self.config.kafka.tasks_topic, ownership.clone());
        let served =
            ops::serve(self.listener, ops::router(self.metrics.registry.clone(), readiness), token.clone()).await;
        token.cancel();
        tasks.wait().await.map_err(ScannerError::TaskPanicked)?;
        served.map_err(ScannerError::Ops)
    }
}

/// Ready when Postgres answers at this build's schema, the broker answers with the tasks
/// topic's metadata, and this scanner's membership lease is live.
fn readiness(pool: &PgPool, producer: &ReplaceableProducer, topic: &str, ownership: Arc<Ownership>) -> Readiness {
    let producer = producer.clone();
    Readiness::default()
        .postgres(pool)
        .kafka(topic, move |topic, timeout| {
            let (_, producer) = producer.get();
            producer.client().fetch_metadata(Some(topic), timeout)
        })
        .check("bucket lease", move || {
            let live = ownership.is_member();
            async move {
                if live {
                    Ok(())
                } else {
                    Err("this scanner's membership lease is not live".to_owned())
                }
            }
        })
}

/// The channel of timers written (a trigger on `timers`).
const TIMERS_CHANNEL: &str = "punctual_timers";
/// The channel of tasks made pending (a trigger on `tasks`).
const TASKS_CHANNEL: &str = "punctual_tasks";

/// Wakes the scan loop when a timer needs planning or a task was made pending. A lost
/// connection is re-made by PgListener; meanwhile the scan loop's pace keeps things moving.
async fn listen(pool: PgPool, wakes: Arc<Wakes>, token: CancellationToken) {
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "LISTEN connection failed; retrying");
                tokio::select! {
                    _ = token.cancelled() => return,
                    _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => continue,
                }
            }
        };
        if let Err(e) = listener.listen_all([TIMERS_CHANNEL, TASKS_CHANNEL]).await {
            tracing::warn!(error = %e, "LISTEN failed; retrying");
            continue;
        }
        loop {
            tokio::select! {
                _ = token.cancelled() => return,
                received = listener.recv() => match received {
                    Ok(n) if n.channel() == TASKS_CHANNEL => wakes.pending.notify_one(),
                    Ok(_) => wakes.now.notify_one(),
                    Err(e) => {
                        tracing::warn!(error = %e, "LISTEN connection lost");
                        break;
                    }
                }
            }
        }
    }
}

/// How often the scanner makes sure the tasks topic exists.
const TOPIC_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Keeps the tasks topic in existence: checks every [`TOPIC_CHECK_INTERVAL`] unless the
/// broker acknowledged a message of it meanwhile (`published`: the topic was there), and at
/// once when a send reported it missing. A broker that lost its state (restarted without
/// durable storage) has lost the topic too, and a producer only says so when its messages
/// time out; the tasks that failed meanwhile are claimed again when their leases expire.
/// Its own task, so that a broker that does not answer never holds up planning and claiming.
async fn keep_topic(
    kafka: KafkaConfig,
    topic_missing: Arc<AtomicBool>,
    published: prometheus::IntCounter,
    token: CancellationToken,
) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(200));
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut last_check = std::time::Instant::now();
    let mut acknowledged = published.get();
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tick.tick() => {}
        }
        let missing = topic_missing.swap(false, Ordering::Relaxed);
        if !(missing || last_check.elapsed() >= TOPIC_CHECK_INTERVAL) {
            continue;
        }
        last_check = std::time::Instant::now();
        // Each check is a new admin client and a request to the controller: a cost worth
        // sparing when acknowledgements show the topic is there.
        let seen = std::mem::replace(&mut acknowledged, published.get());
        if !missing && acknowledged > seen {
            continue;
        }
        let created = tokio::select! {
            _ = token.cancelled() => return,
            created = kafka::create_topic_if_missing(&kafka, &kafka.tasks_topic, kafka.tasks_partitions) => created,
        };
        match created {
            Ok(true) => tracing::warn!(topic = %kafka.tasks_topic, "the tasks topic was missing: created it again"),
            Ok(false) => {}
            Err(e) => {
                topic_missing.store(true, Ordering::Relaxed);
                tracing::warn!(error = %e, "the tasks topic is missing and could not be created");
            }
        }
    }
}

/// Counts missed occurrences left unplanned or cancelled by their timers' misfire policies.
pub(crate) fn count_misfired(metrics: &Metrics, misfired: &task::Misfired) {
    if misfired.total() == 0 {
        return;
    }
    for (policy, count) in [("skip", misfired.skip), ("fire_once", misfired.fire_once), ("fire_all", misfired.fire_all)]
    {
        metrics.misfired.with_label_values(&[policy]).inc_by(count);
    }
    tracing::info!(count = misfired.total(), "missed occurrences not run, as their timers' misfire policies say");
}

/// What one scan needs.
struct Scan {
    config: ScannerConfig,
    ownership: Arc<Ownership>,
    pool: PgPool,
    metrics: Metrics,
    /// Claimed tasks go to the wheel driver.
    claimed_tx: mpsc::Sender<Vec<ClaimedTask>>,
}

/// Plans and claims, every scan interval (less often while scans find nothing) or when
/// woken.
async fn scan_loop(scan: Scan, wakes: Arc<Wakes>, token: CancellationToken) {
    let Scan { config, ownership, pool, metrics, claimed_tx } = &scan;
    let planner = Planner {
        horizon: std::time::Duration::from_millis(config.plan_horizon_ms),
        misfire_threshold: std::time::Duration::from_millis(config.misfire_threshold_ms),
    };
    let new_pass = NewPassSize::default();
    let mut pace = Pace::new(config.scan_interval(), config.scan_idle_interval());
    loop {
        // Register for wake-ups before scanning, so a notification that arrives during the
        // scan is not lost.
        let (now, pending) = (wakes.now.notified(), wakes.pending.notified());
        let started = tokio::time::Instant::now();
        let work_before = work_done(metrics);
        let timer = metrics.scan_seconds.start_timer();
        let scanned = scan_once(config, ownership, pool, metrics, &planner, &new_pass, claimed_tx).await;
        timer.observe_duration();
        let found_work = match scanned {
            // More new timers than one pass takes (a bulk import): the next scan comes at
            // once, after this one has kept every other timer's plan and claims going.
            Ok(NewTimers::Left) if !token.is_cancelled() => continue,
            // Claims paused at the most held: they go on as the wheel empties.
            Ok(_) => work_done(metrics) != work_before || metrics.held.get() as usize >= config.max_held,
            Err(e) => {
                metrics.scan_errors.inc();
                tracing::warn!(error = %e, "scan failed; will retry");
                true
            }
        };
        let wait = pace.after(found_work);
        let backed_off = pace.backed_off();
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tokio::time::sleep_until(started + wait) => {}
            _ = now => {}
            _ = pending, if backed_off => {}
        }
    }
}

/// What scans have done so far: timers validated or planned, occurrences misfired, tasks
/// claimed. A scan that changes none of it found nothing to do.
fn work_done(metrics: &Metrics) -> u64 {
    let misfired: u64 = metrics::MISFIRE_POLICIES.iter().map(|p| metrics.misfired.with_label_values(&[p]).get()).sum();
    metrics.planned.get() + metrics.timers_invalid.get() + metrics.claimed.get() + misfired
}

/// Whether a scan left new timers to validate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NewTimers {
    Done,
    Left,
}

/// Which timers a planning pass takes.
#[derive(Debug, Clone, Copy)]
enum PlanPass<'a> {
    /// New timers, as many as fit the pass's budget: validated, and planned if due
    /// within the horizon.
    New(&'a NewPassSize),
    /// Planned timers whose plan runs out within the horizon.
    Due,
}

/// One planning pass under the ownership's write guard, for the buckets held when it
/// started. `Some(full)`: whether it took as many timers as a pass may; `None`: the wheel
/// driver has stopped (shutting down).
async fn plan_pass(
    pass: PlanPass<'_>,
    config: &ScannerConfig,
    ownership: &Ownership,
    pool: &PgPool,
    metrics: &Metrics,
    planner: &Planner,
    claimed_tx: &mpsc::Sender<Vec<ClaimedTask>>,
) -> Result<Option<bool>, sqlx::Error> {
    let (writing, held) = ownership.for_writing().await;
    let now = Utc::now();
    // Occurrences due within the lookahead are written claimed by this scanner, unless it
    // holds as many as it may already (then they wait, pending, for the claimer).
    let claim = (metrics.held.get() < config.max_held as i64).then(|| task::PlanClaim {
        held: &held,
        due_before: now + config.lookahead(),
        lease: config.lease(),
    });
    let (report, full) = match pass {
        PlanPass::New(size) => {
            let (rows, started) = (size.rows(), std::time::Instant::now());
            let report = planner.validate_new_up_to(pool, now, &held, claim.as_ref(), rows).await?;
            let full = report.timers as i64 >= rows;
            size.took(rows, started.elapsed(), full);
            (report, full)
        }
        PlanPass::Due => {
            let report = planner.plan_due(pool, now, &held, claim.as_ref()).await?;
            let full = report.timers >= planner::PASS_SIZE as usize;
            (report, full)
        }
    };
    drop(writing);
    metrics.timers_invalid.inc_by(report.invalid as u64);
    metrics.planned.inc_by(report.tasks_planned);
    count_misfired(metrics, &report.misfired);
    if !report.claimed.is_empty() {
        metrics.claimed.inc_by(report.claimed.len() as u64);
        if claimed_tx.send(report.claimed).await.is_err() {
            return Ok(None);
        }
    }
    Ok(Some(full))
}

/// One scan of the buckets held: plan, cancel misfires, claim. Each pass holds the
/// ownership's write guard (see [`Ownership::for_writing`]) and writes only for the
/// buckets held when it started.
///
/// New timers take one pass a scan, of as many as fit its time budget ([`NewPassSize`]):
/// validating a bulk import pass after pass, or in passes of seconds, would keep every
/// other timer's plan and claims waiting, and their occurrences late or missed.
async fn scan_once(
    config: &ScannerConfig,
    ownership: &Ownership,
    pool: &PgPool,
    metrics: &Metrics,
    planner: &Planner,
    new_pass: &NewPassSize,
    claimed_tx: &mpsc::Sender<Vec<ClaimedTask>>,
) -> Result<NewTimers, sqlx::Error> {
    // One pass of new timers, then the plans of the others, pass by pass until a pass
    // finds fewer timers than it may take.
    let new_timers =
        match plan_pass(PlanPass::New(new_pass), config, ownership, pool, metrics, planner, claimed_tx).await? {
            Some(true) => NewTimers::Left,
            Some(false) => NewTimers::Done,
            None => return Ok(NewTimers::Done), // the wheel driver has stopped: shutting down
        };
    loop {
        match plan_pass(PlanPass::Due, config, ownership, pool, metrics, planner, claimed_tx).await? {
            Some(true) => {}
            Some(false) => break,
            None => return Ok(NewTimers::Done),
        }
    }
    let (writing, held) = ownership.for_writing().await;
    let misfired =
        task::cancel_misfired(pool, &held, std::time::Duration::from_millis(config.misfire_threshold_ms)).await?;
    drop(writing);
    count_misfired(metrics, &misfired);
    loop {
        if metrics.held.get() as usize >= config.max_held {
            break;
        }
        let (writing, held) = ownership.for_writing().await;
        let claimed = task::claim(pool, &held, config.lookahead(), config.lease(), config.claim_batch).await?;
        drop(writing);
        let n = claimed.len();
        metrics.claimed.inc_by(n as u64);
        let reclaimed = claimed.iter().filter(|t| t.reclaimed).count();
        if reclaimed > 0 {
            metrics.reclaimed.inc_by(reclaimed as u64);
            tracing::warn!(count = reclaimed, "claims expired without their tasks starting: publishing them again");
        }
        if n > 0 && claimed_tx.send(claimed).await.is_err() {
            break; // the wheel driver has stopped: shutting down
        }
        if (n as i64) < config.claim_batch {
            break;
        }
    }
    Ok(new_timers)
}
