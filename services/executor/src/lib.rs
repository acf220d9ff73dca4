//! The executor: a Kafka consumer group member that runs due tasks.
//!
//! For each batch of messages it reads: one statement checks which tasks are still
//! claimed at the message's attempt (most then run without a write; the others are marked
//! running, see [`task::start`]) and cancels those whose timer was paused, deleted or
//! changed; a redelivered message finds its task finished and is skipped, and so is a
//! message for a task this executor has in flight (its bucket's new owner published it
//! again) or from a superseded epoch (see [`task::start`]). Each started
//! task's callback runs concurrently (at most `max_in_flight` at once); outcomes are
//! written back in batches, and only then are their offsets stored for commit, as far as
//! the completed prefix of each partition reaches.

pub mod callback;
pub mod commits;
pub mod config;
pub mod failing_targets;
pub mod group_watch;
pub mod guarded_resolver;
pub mod in_flight;
pub mod kafka_action;
pub mod metrics;
pub mod namespaces;
pub mod offsets;
pub mod rebalance;
pub mod signing_keys;
pub mod turns;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use futures::{FutureExt, StreamExt};
use punctual_shared::readiness::Readiness;
use punctual_shared::supervisor::Supervisor;
use punctual_shared::task::{self, DeadLetter, DeferReason, Next, Outcome, StartRequest, TaskMessage};
use punctual_shared::{db, kafka, ops};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::producer::FutureRecord;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::Message;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use commits::CommitClock;
pub use config::ExecutorConfig;
use failing_targets::{FailingTargets, PauseRule};
use in_flight::InFlight;
use metrics::Metrics;
use namespaces::Namespaces;
use offsets::OffsetTracker;
use rebalance::ExecutorContext;
use signing_keys::SigningKeys;

/// Most messages started by one statement.
const START_BATCH: usize = 1_000;

pub struct App {
    config: ExecutorConfig,
    owner: String,
    /// What this process marks the tasks it runs with: its owner and a uuid of its own. A
    /// restarted executor keeps its owner (the static group membership) but must not take
    /// its predecessor's runs for its own: they ended with that process and run again.
    run_owner: String,
    /// Idempotent: dead letters and Kafka actions.
    producer: Producer,
    pool: PgPool,
    consumer: Arc<TaskConsumer>,
    caller: Arc<callback::Caller>,
    /// The actions of the timers whose tasks started here, by version.
    actions: task::ActionCache,
    /// Tasks started here whose outcome is not written yet.
    in_flight: Arc<InFlight>,
    commits: Arc<CommitClock>,
    /// Each namespace's secrets, which sign its callbacks.
    signing: Arc<SigningKeys>,
    /// Each namespace's limits.
    namespaces: Arc<Namespaces>,
    /// Targets paused for a namespace.
    failing: Arc<FailingTargets>,
    /// Shared by every run: one reference count per fire, not one per metric.
    metrics: Arc<Metrics>,
    listener: Option<TcpListener>,
    addr: SocketAddr,
}

/// The executor's idempotent producer, for dead letters and Kafka actions.
pub type Producer = kafka::ReplaceableProducer;

fn create_producer(kafka: &punctual_shared::config::KafkaConfig) -> rdkafka::error::KafkaResult<kafka::Producer> {
    kafka::client_config(
        kafka,
        &[
            ("enable.idempotence", "true"),
            ("acks", "all"),
            // Bounds a delivery (librdkafka's default is 5 minutes): a Kafka action or dead
            // letter not acknowledged by then fails, and is retried by a new producer if this
            // one is stuck.
            ("message.timeout.ms", "30000"),
        ],
    )
    .create_with_context(kafka::CountingContext)
}

type TaskConsumer = StreamConsumer<ExecutorContext>;

/// A message's place in its partition.
#[derive(Debug, Clone, Copy)]
struct Position {
    partition: i32,
    offset: i64,
}

/// A finished run on its way to the status write-back.
struct Finished {
    outcome: Outcome,
    dead_letter: Option<DeadLetter>,
    position: Position,
    _permit: OwnedSemaphorePermit,
}

impl App {
    pub async fn build(config: ExecutorConfig) -> anyhow::Result<Self> {
        let pool = db::connect_lazy(&config.database)?;
        // Migrated by the admin or `punctual migrate`: this service needs no DDL rights.
        db::wait_for_schema(&pool).await.map_err(|state| anyhow::anyhow!("{state}"))?;
        kafka::ensure_tasks_topic(&config.kafka)
            .await
            .with_context(|| format!("preparing topic {}", config.kafka.tasks_topic))?;
        kafka::ensure_topic(&config.kafka, &config.dead_topic, 1)
            .await
            .with_context(|| format!("preparing topic {}", config.dead_topic))?;
        let (listener, addr) = ops::bind(config.addr).await.with_context(|| format!("binding {}", config.addr))?;
        // Stable across restarts with the same settings, and unique on a host (no two
        // processes bind one port): the group's static membership id.
        let owner = config.executor_id.clone().unwrap_or_else(|| format!("{}:{}", ops::host_name(), addr.port()));
        let kafka_config = config.kafka.clone();
        let producer = Producer::new(move || create_producer(&kafka_config)).context("creating the producer")?;
        let in_flight = Arc::new(InFlight::default());
        let metrics = Metrics::new();
        punctual_shared::service_metrics::register(&metrics.registry, "executor", &pool);
        let commits =
            Arc::new(CommitClock::new(metrics.offset_commit_duration.clone(), metrics.offset_commits.clone()));
        let consumer: TaskConsumer = kafka::client_config(
            &config.kafka,
            &[
                ("group.id", &config.group),
                // Static membership: a restarted executor takes its predecessor's partitions
                // at once, without a rebalance, instead of after the session timeout.
                ("group.instance.id", &owner),
                ("client.id", &owner),
                // Incremental rebalances: when a member joins or leaves, only the partitions
                // that change owner move; the others' in-flight calls go on undisturbed
                // (with the eager default every partition was revoked and their calls in
                // flight ran again on their new owners).
                ("partition.assignment.strategy", "cooperative-sticky"),
                // Committed every second by `commits::commit_periodically`, which times them.
                ("enable.auto.commit", "false"),
                // Offsets are stored by us, only for work whose outcome is written.
                ("enable.auto.offset.store", "false"),
                ("auto.offset.reset", "earliest"),
                ("session.timeout.ms", &config.kafka_session_timeout_ms.to_string()),
                // Members learn of a rebalance at their next heartbeat: every 500 ms (or a third
                // of a shorter session) keeps a dead member's partitions' move within 5 s of
                // its death with the default 3 s session, for two small requests a second.
                ("heartbeat.interval.ms", &(config.kafka_session_timeout_ms / 3).clamp(100, 500).to_string()),
                // How long the broker may hold a fetch when there is nothing new. The scanner
                // sends a partition's tasks every 50 ms (its linger), ahead of their due time
                // (the publish lead), so a longer wait costs no lag, and fewer empty fetches
                // cost the broker less (docs/BENCHMARKS.md, item 11).
                ("fetch.wait.max.ms", "50"),
                // Keep fetching while fewer than this many messages wait in the client's
                // queue (bounded by `queued.max.messages.kbytes`, 64 MB by default). At the
                // default (100,000) the client stopped fetching every partition whenever its
                // one queue held that many, and the broker's answers then refilled it with
                // the first partitions' backlog before the last one's: under a backlog one
                // partition ran 20 s behind the others, so the lag's p99 was twice the backlog
                // and late starts cost a write each (docs/BENCHMARKS.md, item 13).
                ("queued.min.messages", "1000000"),
                // For punctual_consumer_lag.
                ("statistics.interval.ms", "5000"),
            ],
        )
        .create_with_context(ExecutorContext {
            in_flight: in_flight.clone(),
            revoke_wait: Duration::from_millis(config.drain_timeout_ms),
            topic: config.kafka.tasks_topic.clone(),
            consumer_lag: metrics.consumer_lag.clone(),
            commits: commits.clone(),
        })
        .context("creating the Kafka consumer")?;
        consumer.subscribe(&[&config.kafka.tasks_topic]).context("subscribing")?;
        let keys = config.secrets.keys().map_err(|e| anyhow::anyhow!("{e}"))?;
        let signing = Arc::new(SigningKeys::new(keys));
        // Keys that do not open the stored secrets stop the executor here, in one line:
        // it would otherwise call unsigned.
        signing.refresh(&pool).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        let namespaces = Arc::new(Namespaces::new(vec![config.kafka.tasks_topic.clone(), config.dead_topic.clone()]));
        namespaces.refresh(&pool).await.context("reading the namespaces' limits")?;
        let failing = Arc::new(FailingTargets::new(
            PauseRule {
                after: Duration::from_millis(config.pause_failing_target_after_ms),
                min_failures: config.pause_failing_target_min_failures,
            },
            pool.clone(),
        ));
        failing.refresh().await.context("reading the paused targets")?;
        let caller = Arc::new(
            callback::Caller::new(
                callback::CallLimits {
                    min: config.min_calls_per_target,
                    max: config.max_calls_per_target,
                    turn_wait: Duration::from_millis(config.turn_wait_ms),
                },
                metrics.callbacks_waiting.clone(),
                config.callback_allow.clone(),
            )
            .context("creating the HTTP client")?
            .with_signing(signing.clone())
            .with_namespaces(namespaces.clone())
            .with_failing_targets(failing.clone()),
        );
        tracing::info!(%owner, %addr, group = %config.group, topic = %config.kafka.tasks_topic, "executor ready");
        let run_owner = format!("{owner}/{}", uuid::Uuid::new_v4());
        Ok(Self {
            config,
            owner,
            run_owner,
            producer,
            pool,
            consumer: Arc::new(consumer),
            caller,
            actions: task::ActionCache::default(),
            in_flight,
            commits,
            signing,
            namespaces,
            failing,
            metrics: Arc::new(metrics),
            listener: Some(listener),
            addr,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// This executor's name: its static group membership id and its Kafka client id.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Ready when Postgres answers at this build's schema and the broker answers with the
    /// tasks topic's metadata.
    fn readiness(&self) -> Readiness {
        let consumer = self.consumer.clone();
        Readiness::default()
            .postgres(&self.pool)
            .kafka(&self.config.kafka.tasks_topic, move |topic, timeout| consumer.fetch_metadata(Some(topic), timeout))
    }

    pub async fn run_until_stopped(mut self, token: CancellationToken) -> anyhow::Result<()> {
        let listener = self.listener.take().expect("run once");
        let offsets = Arc::new(Mutex::new(OffsetTracker::new()));
        let in_flight = self.in_flight.clone();
        let (finished_tx, finished_rx) = mpsc::unbounded_channel::<Finished>();
        // Cancelled when the stop's time is up: callbacks still running are dropped, and
        // outcomes not yet written are given up (their messages are delivered again).
        let abandon = CancellationToken::new();
        let ops_token = CancellationToken::new();
        let router = ops::router(self.metrics.registry.clone(), self.readiness());
        let ops = tokio::spawn(ops::serve(listener, router, ops_token.clone()));
        // A panic in the write-back stops the executor (it exits with an error) rather than
        // leaving it taking messages whose outcomes are never written.
        let tasks = Supervisor::new(token.clone());
        tasks.spawn(
            "write-back",
            write_back(
                WriteBack {
                    pool: self.pool.clone(),
                    dead_letters: DeadLetters {
                        producer: self.producer.clone(),
                        topic: self.config.dead_topic.clone(),
                    },
                    consumer: self.consumer.clone(),
                    topic: self.config.kafka.tasks_topic.clone(),
                    offsets: offsets.clone(),
                    in_flight: in_flight.clone(),
                    metrics: self.metrics.clone(),
                },
                finished_rx,
                abandon.clone(),
            ),
        );
        let watch_token = token.child_token();
        tasks.spawn(
            "group watch",
            group_watch::watch(
                self.consumer.clone(),
                self.config.group.clone(),
                self.config.kafka.tasks_topic.clone(),
                self.owner.clone(),
                self.metrics.partitions_unassigned.clone(),
                watch_token.clone(),
            ),
        );
        tasks.spawn(
            "offset commits",
            commits::commit_periodically(self.consumer.clone(), self.commits.clone(), watch_token.clone()),
        );
        tasks.spawn(
            "signing secrets",
            self.signing.clone().refresh_periodically(self.pool.clone(), watch_token.clone()),
        );
        tasks.spawn(
            "namespace limits",
            self.namespaces.clone().refresh_periodically(self.pool.clone(), watch_token.clone()),
        );
        tasks.spawn("paused targets", self.failing.clone().refresh_periodically(watch_token.clone()));
        let runs = TaskTracker::new();
        let consumed = consume(&self, &offsets, &in_flight, &finished_tx, &runs, &abandon, &token).await;
        // The stop: no new message is taken; running callbacks finish and their outcomes
        // are written, all within the drain timeout. What is still running or unwritten
        // then is abandoned, to run again on the partition's next owner (same
        // Idempotency-Key), and the process exits.
        let drained_by = tokio::time::Instant::now() + Duration::from_millis(self.config.drain_timeout_ms);
        watch_token.cancel();
        drop(finished_tx);
        runs.close();
        let drained = async {
            runs.wait().await;
            tasks.wait().await
        };
        tokio::pin!(drained);
        let written = tokio::select! {
            written = &mut drained => written,
            () = tokio::time::sleep_until(drained_by) => {
                tracing::warn!(
                    "drain timeout: abandoning running callbacks and unwritten outcomes; they run again later"
                );
                abandon.cancel();
                drained.await
            }
        };
        // What is left was abandoned: the revocation at the consumer's close waits for none.
        in_flight.clear();
        if let Err(e) = self.consumer.commit_consumer_state(CommitMode::Sync) {
            tracing::debug!(error = %e, "final commit");
        }
        ops_token.cancel();
        ops.await.context("ops server panicked")?.context("serving ops endpoints")?;
        written?;
        consumed
    }
}

async fn consume(
    app: &App,
    offsets: &Mutex<OffsetTracker>,
    in_flight: &InFlight,
    finished_tx: &mpsc::UnboundedSender<Finished>,
    runs: &TaskTracker,
    abandon: &CancellationToken,
    token: &CancellationToken,
) -> anyhow::Result<()> {
    let slots = Arc::new(Semaphore::new(app.config.max_in_flight));
    let mut stream = app.consumer.stream();
    loop {
        // A slot first, so that a full executor stops reading instead of buffering.
        let first_slot = tokio::select! {
            _ = token.cancelled() => return Ok(()),
            slot = slots.clone().acquire_owned() => slot.expect("semaphore never closed"),
        };
        let first = tokio::select! {
            _ = token.cancelled() => return Ok(()),
            m = stream.next() => m,
        };
        let Some(first) = first else { return Ok(()) };
        // Then whatever else is already fetched, up to a batch, without waiting.
        let mut batch = vec![(first, first_slot)];
        while batch.len() < START_BATCH {
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                break;
            };
            match stream.next().now_or_never() {
                Some(Some(m)) => batch.push((m, slot)),
                _ => break,
            }
        }
        let mut messages = Vec::with_capacity(batch.len());
        for (received, slot) in batch {
            let message = match received {
                Ok(m) => m,
                // A fatal error ends the consumer for good (e.g. fenced as a static member,
                // librdkafka issue #3437): exit, for the supervisor to start a new one, rather
                // than stay up consuming nothing. The tasks not started are delivered again.
                Err(e @ rdkafka::error::KafkaError::MessageConsumptionFatal(_)) => {
                    return Err(anyhow::Error::new(e).context("the Kafka consumer failed for good; exiting to restart"));
                }
                // Never joins, however long it tries: a setting to fix, said once.
                Err(e) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::InvalidSessionTimeout) => {
                    anyhow::bail!(
                        "the broker refuses PUNCTUAL_KAFKA_SESSION_TIMEOUT_MS={}: it must lie within the broker's \
                         group.min.session.timeout.ms and group.max.session.timeout.ms ({e})",
                        app.config.kafka_session_timeout_ms
                    );
                }
                Err(e) => {
                    kafka::count_error(&e);
                    tracing::warn!(error = %e, "Kafka consumer error");
                    continue;
                }
            };
            let position = Position { partition: message.partition(), offset: message.offset() };
            offsets.lock().expect("offsets lock").received(position.partition, position.offset);
            match message.payload().map(serde_json::from_slice::<TaskMessage>) {
                Some(Ok(task)) if in_flight.contains(task.task_id) => {
                    app.metrics.skipped.with_label_values(&["in_flight"]).inc();
                    store(app, offsets, position);
                }
                Some(Ok(task)) => messages.push((task, position, slot)),
                _ => {
                    // Not ours to run; never blocks the partition.
                    tracing::error!(
                        partition = position.partition,
                        offset = position.offset,
                        "undecodable task message skipped"
                    );
                    store(app, offsets, position);
                }
            }
        }
        if messages.is_empty() {
            continue;
        }
        let ids: Vec<StartRequest> = messages.iter().map(|(t, _, _)| StartRequest::from(t)).collect();
        let started = loop {
            match task::start(&app.pool, &app.run_owner, &ids, &app.actions).await {
                Ok(started) => break started,
                Err(e) => {
                    // Nothing is stored for these messages: retry, or after a restart they
                    // are delivered again.
                    app.metrics.db_errors.inc();
                    tracing::warn!(error = %e, "starting tasks failed; retrying");
                    tokio::select! {
                        _ = token.cancelled() => return Ok(()),
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                }
            }
        };
        let not_started = started.not_started;
        for (reason, count) in [
            ("duplicate", not_started.duplicate),
            ("cancelled", not_started.cancelled),
            ("overlap_skipped", not_started.overlap_skipped),
            ("overlap_deferred", not_started.overlap_deferred),
        ] {
            if count > 0 {
                app.metrics.skipped.with_label_values(&[reason]).inc_by(count);
            }
        }
        let mut started: HashMap<i64, task::StartedTask> = started.tasks.into_iter().map(|s| (s.id, s)).collect();
        for (message, position, slot) in messages {
            let Some(started_task) = started.remove(&message.task_id) else {
                store(app, offsets, position);
                continue;
            };
            app.metrics.in_flight.inc();
            in_flight.insert(started_task.id, position.partition);
            let (started_task_id, timer_id, scheduled_at, attempt) =
                (started_task.id, started_task.timer_id, started_task.scheduled_at, started_task.attempt);
            let caller = app.caller.clone();
            let metrics = app.metrics.clone();
            let finished_tx = finished_tx.clone();
            let producer = app.producer.clone();
            let abandon = abandon.clone();
            let in_flight_gauge = app.metrics.in_flight.clone();
            let namespaces = app.namespaces.clone();
            let signing = app.signing.clone();
            let run = async move {
                let mut started_task = started_task;
                // Published ahead of its due time (the scanner's lead): run it then, not before.
                // The time is the row's: the message's is not trusted.
                if let Ok(wait) = (started_task.due_at - Utc::now()).to_std() {
                    tokio::time::sleep(wait).await;
                    started_task.started_at = Utc::now();
                }
                // Within the namespace's fires a second, or deferred to a later time.
                let namespace = namespaces.state(&started_task.action.namespace);
                let attempt = match namespace.rate.admit() {
                    Ok(()) => {
                        if started_task.attempt == 1 {
                            let lag =
                                (Utc::now() - started_task.scheduled_at).num_microseconds().unwrap_or(0) as f64 / 1e6;
                            metrics.fire_lag.observe(lag.max(0.0));
                        }
                        match started_task.action.action_kind.as_str() {
                            "kafka" => {
                                kafka_action::publish(&producer, &started_task, &namespaces, signing.keys()).await
                            }
                            _ => callback::call(&caller, &started_task).await,
                        }
                    }
                    Err(wait) => callback::Attempt::rate_held_back(namespace.limits.max_fires_per_second, wait),
                };
                if attempt.was_made() {
                    let outcome_label = if attempt.error.is_none() { "success" } else { "failure" };
                    metrics
                        .callback_duration
                        .with_label_values(&[outcome_label])
                        .observe(attempt.duration.as_secs_f64());
                }
                let jitter = rand::random::<f64>() * 2.0 - 1.0;
                let outcome = attempt.into_outcome(&started_task, jitter);
                let dead_letter = (outcome.next == Next::Dead).then(|| DeadLetter {
                    task_id: started_task.id,
                    timer_id: started_task.timer_id,
                    scheduled_at: started_task.scheduled_at,
                    idempotency_key: started_task.identity(),
                    attempts: started_task.attempt,
                    http_status: outcome.http_status,
                    last_error: outcome.error.clone(),
                });
                tracing::debug!(next = ?outcome.next, http_status = outcome.http_status, error = outcome.error.as_deref(), "ran");
                metrics.in_flight.dec();
                let _ = finished_tx.send(Finished { outcome, dead_letter, position, _permit: slot });
            };
            // Every event of the run carries the occurrence (a debug span: free unless
            // RUST_LOG enables it, e.g. punctual_executor=debug, or spans are exported).
            let span = tracing::debug_span!(
                "run",
                task_id = started_task_id,
                timer_id = %timer_id,
                scheduled_at = %scheduled_at,
                attempt,
            );
            punctual_shared::otlp::set_occurrence_parent(&span, timer_id, scheduled_at);
            runs.spawn(
                async move {
                    tokio::select! {
                        _ = run => {}
                        _ = abandon.cancelled() => in_flight_gauge.dec(),
                    }
                }
                .instrument(span),
            );
        }
    }
}

fn store(app: &App, offsets: &Mutex<OffsetTracker>, position: Position) {
    store_offset(&app.consumer, &app.config.kafka.tasks_topic, offsets, position);
}

fn store_offset(consumer: &TaskConsumer, topic: &str, offsets: &Mutex<OffsetTracker>, position: Position) {
    let done_through = offsets.lock().expect("offsets lock").completed(position.partition, position.offset);
    if let Some(offset) = done_through {
        store_done_through(consumer, topic, position.partition, offset);
    }
}

/// Stores the offset up to which `partition`'s messages are done.
fn store_done_through(consumer: &TaskConsumer, topic: &str, partition: i32, offset: i64) {
    // librdkafka stores offset + 1: the next message to read.
    if let Err(e) = consumer.store_offset(topic, partition, offset) {
        // The partition was revoked meanwhile: its new owner reads it from the last commit.
        tracing::debug!(error = %e, partition, "offset not stored");
    }
}

struct DeadLetters {
    producer: Producer,
    topic: String,
}

impl DeadLetters {
    /// Publishes all at once and waits for the broker's acknowledgements. Done before the
    /// tasks are written dead, so a crash in between repeats the attempt rather than
    /// losing the dead letter. Awaiting each letter's acknowledgement before sending the
    /// next held the write-back a round trip per letter: a namespace dead-lettering 1,000
    /// occurrences a second stalled every namespace's outcomes behind its own.
    async fn publish(&self, letters: &[&DeadLetter]) -> Result<(), rdkafka::error::KafkaError> {
        let payloads: Vec<Vec<u8>> =
            letters.iter().map(|l| serde_json::to_vec(l).expect("a dead letter serializes")).collect();
        let (generation, producer) = self.producer.get();
        let sends = letters.iter().zip(&payloads).map(|(letter, payload)| {
            let record = FutureRecord::to(&self.topic).key(&letter.idempotency_key).payload(payload);
            producer.send(record, Duration::from_secs(30))
        });
        for sent in futures::future::join_all(sends).await {
            if let Err((e, _)) = sent {
                self.producer.on_error(generation, &e);
                return Err(e);
            }
        }
        Ok(())
    }
}

/// Most outcomes written by one statement.
const OUTCOME_BATCH: usize = 1_000;
/// How long the write-back waits for more outcomes before writing what it has, when it has
/// fewer than [`OUTCOME_GATHER_ENOUGH`].
const OUTCOME_GATHER: Duration = Duration::from_millis(10);
const OUTCOME_GATHER_ENOUGH: usize = 64;

/// What the write-back needs.
struct WriteBack {
    pool: PgPool,
    dead_letters: DeadLetters,
    consumer: Arc<TaskConsumer>,
    topic: String,
    offsets: Arc<Mutex<OffsetTracker>>,
    in_flight: Arc<InFlight>,
    metrics: Arc<Metrics>,
}

/// Writes outcomes in batches (dead letters first), then stores the offsets of their
/// messages; gives up what is unwritten when `abandon` is cancelled.
async fn write_back(
    write_back: WriteBack,
    mut finished_rx: mpsc::UnboundedReceiver<Finished>,
    abandon: CancellationToken,
) {
    let WriteBack { pool, dead_letters, consumer, topic, offsets, in_flight, metrics } = write_back;
    let mut batch = Vec::with_capacity(OUTCOME_BATCH);
    while finished_rx.recv_many(&mut batch, OUTCOME_BATCH).await > 0 {
        // Calls run at their due times, so at low rates their outcomes come one by one:
        // gathering a few milliseconds' worth makes one statement and one commit of many
        // (measured at 1,000 fires/s: 26,444 statements for 30,000 outcomes without it).
        // Under load the outcomes that came during the last write are a batch already, and
        // waiting for more only holds their slots longer (gathering up to 1,000 every time,
        // three runs of three at 12,000 offered fell to 6,460-7,831 fires/s; with this
        // limit, one run of five did).
        let gathered_by = tokio::time::Instant::now() + OUTCOME_GATHER;
        while batch.len() < OUTCOME_GATHER_ENOUGH {
            let room = OUTCOME_BATCH - batch.len();
            match tokio::time::timeout_at(gathered_by, finished_rx.recv_many(&mut batch, room)).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let outcomes: Vec<Outcome> = batch.iter().map(|f| f.outcome.clone()).collect();
        let letters: Vec<&DeadLetter> = batch.iter().filter_map(|f| f.dead_letter.as_ref()).collect();
        // Keep trying until the stop's time is up: the offsets wait for the write, so a
        // crash or an abandoned write means a redelivery, never a lost outcome.
        metrics.writeback_batch_size.observe(outcomes.len() as f64);
        let writing = metrics.writeback_duration.start_timer();
        let written = abandon.run_until_cancelled(async {
            let mut delay = Duration::from_millis(100);
            while let Err(e) = dead_letters.publish(&letters).await {
                tracing::warn!(error = %e, "publishing dead letters failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            while let Err(e) = task::finish(&pool, &outcomes).await {
                metrics.db_errors.inc();
                tracing::warn!(error = %e, count = outcomes.len(), "writing outcomes failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        });
        let written = written.await;
        writing.observe_duration();
        if written.is_none() {
            tracing::warn!(count = outcomes.len(), "outcomes abandoned unwritten at the stop; their tasks run again");
            return;
        }
        // One offset stored per partition and batch, the furthest: each store builds a
        // partition list and hands it to librdkafka, and only the last one counts.
        let mut done_through: Vec<(i32, i64)> = Vec::new();
        let (mut succeeded, mut retried, mut dead, mut paused) = (0, 0, 0, 0);
        let mut deferred = [0; DeferReason::ALL.len()];
        {
            let mut offsets = offsets.lock().expect("offsets lock");
            for f in batch.drain(..) {
                match f.outcome.next {
                    Next::Succeeded => succeeded += 1,
                    Next::Retry { .. } => retried += 1,
                    Next::Dead => dead += 1,
                    Next::Cancelled => paused += 1,
                    Next::Defer { reason, .. } => deferred[reason as usize] += 1,
                }
                if let Some(offset) = offsets.completed(f.position.partition, f.position.offset) {
                    match done_through.iter_mut().find(|(p, _)| *p == f.position.partition) {
                        Some(stored) => stored.1 = stored.1.max(offset),
                        None => done_through.push((f.position.partition, offset)),
                    }
                }
            }
        }
        for (partition, offset) in done_through {
            store_done_through(&consumer, &topic, partition, offset);
        }
        in_flight.remove_all(outcomes.iter().map(|o| o.task_id));
        for (label, count) in [("succeeded", succeeded), ("retry", retried), ("dead", dead)] {
            if count > 0 {
                metrics.executed.with_label_values(&[label]).inc_by(count);
            }
        }
        if paused > 0 {
            metrics.skipped.with_label_values(&["target_paused"]).inc_by(paused);
        }
        for (reason, count) in DeferReason::ALL.into_iter().zip(deferred) {
            if count > 0 {
                metrics.deferred.with_label_values(&[reason.as_str()]).inc_by(count);
            }
        }
    }
}
