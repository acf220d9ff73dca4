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

mod broadcast;
pub mod callback;
pub mod commits;
pub mod config;
mod consumer;
mod dead_letters;
pub mod error;
pub mod failing_targets;
pub mod group_watch;
pub mod guarded_resolver;
pub mod host_addresses;
pub mod in_flight;
pub mod kafka_action;
pub mod metrics;
pub mod namespaces;
pub mod offsets;
pub mod rebalance;
pub mod signing_keys;
pub mod turns;
mod write_back;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use punctual_runtime::readiness::Readiness;
use punctual_runtime::supervisor::Supervisor;
use punctual_runtime::{kafka, ops};
use punctual_shared::db;
use punctual_shared::task::{self};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use commits::CommitClock;
pub use config::ExecutorConfig;
use consumer::consume;
use dead_letters::DeadLetters;
pub use error::ExecutorError;
use failing_targets::{FailingTargets, PauseRule};
use in_flight::InFlight;
use metrics::Metrics;
use namespaces::Namespaces;
use offsets::OffsetTracker;
use rebalance::ExecutorContext;
use signing_keys::SigningKeys;
use write_back::{write_back, Finished, WriteBack};

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
    kafka::Producer::create(&kafka::client_config(
        kafka,
        &[
            ("enable.idempotence", "true"),
            ("acks", "all"),
            // Bounds a delivery (librdkafka's default is 5 minutes): a Kafka action or dead
            // letter not acknowledged by then fails, and is retried by a new producer if this
            // one is stuck.
            ("message.timeout.ms", "30000"),
        ],
    ))
}

type TaskConsumer = StreamConsumer<ExecutorContext>;

impl App {
    pub async fn build(config: ExecutorConfig) -> Result<Self, ExecutorError> {
        let pool = db::connect_lazy(&config.database).map_err(ExecutorError::Database)?;
        // Migrated by the admin or `punctual migrate`: this service needs no DDL rights.
        db::wait_for_schema(&pool).await.map_err(ExecutorError::Schema)?;
        kafka::ensure_tasks_topic(&config.kafka)
            .await
            .map_err(|error| ExecutorError::Topic { topic: config.kafka.tasks_topic.clone(), error })?;
        kafka::ensure_topic(&config.kafka, &config.dead_topic, 1)
            .await
            .map_err(|error| ExecutorError::Topic { topic: config.dead_topic.clone(), error })?;
        let (listener, addr) =
            ops::bind(config.addr).await.map_err(|error| ExecutorError::Bind { addr: config.addr, error })?;
        // Stable across restarts with the same settings, and unique on a host (no two
        // processes bind one port): the group's static membership id.
        let owner = config.executor_id.clone().unwrap_or_else(|| format!("{}:{}", ops::host_name(), addr.port()));
        let kafka_config = config.kafka.clone();
        let producer = Producer::new(move || create_producer(&kafka_config)).map_err(ExecutorError::Producer)?;
        let in_flight = Arc::new(InFlight::default());
        let metrics = Metrics::new();
        punctual_runtime::service_metrics::register(&metrics.registry, "executor", &pool);
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
                // How long the broker may hold a fetch when there is nothing new: a fetch
                // is answered as soon as a message arrives, so the wait costs no lag, and
                // an idle executor's empty fetches were the broker's largest idle cost
                // (docs/BENCHMARKS.md, "Idle").
                ("fetch.wait.max.ms", "500"),
                // Keep fetching while fewer than this many messages wait in the client's
                // queue (bounded by `queued.max.messages.kbytes`, 64 MB by default). At the
                // default (100,000) the client stopped fetching every partition whenever its
                // one queue held that many, and the broker's answers then refilled it with
                // the first partitions' backlog before the last one's: under a backlog one
                // partition ran 20 s behind the others, so the lag's p99 was twice the backlog
                // and late starts cost a write each (docs/bench/history.md, item 13).
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
        .map_err(ExecutorError::Consumer)?;
        consumer.subscribe(&[&config.kafka.tasks_topic]).map_err(ExecutorError::Subscribe)?;
        let keys = config.secrets.keys().map_err(ExecutorError::SecretKey)?;
        let signing = Arc::new(SigningKeys::new(keys));
        // Keys that do not open the stored secrets stop the executor here, in one line:
        // it would otherwise call unsigned.
        signing.refresh(&pool).await.map_err(ExecutorError::SigningSecrets)?;
        let namespaces = Arc::new(Namespaces::new(vec![config.kafka.tasks_topic.clone(), config.dead_topic.clone()]));
        namespaces.refresh(&pool).await.map_err(ExecutorError::Namespaces)?;
        let failing = Arc::new(FailingTargets::new(
            PauseRule {
                after: Duration::from_millis(config.pause_failing_target_after_ms),
                min_failures: config.pause_failing_target_min_failures,
            },
            pool.clone(),
        ));
        failing.refresh().await.map_err(ExecutorError::PausedTargets)?;
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
            .map_err(ExecutorError::HttpClient)?
            .with_host_addresses(config.host_addresses.clone())
            .map_err(ExecutorError::HttpClient)?
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

    pub async fn run_until_stopped(mut self, token: CancellationToken) -> Result<(), ExecutorError> {
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
        ops.await.map_err(ExecutorError::OpsPanicked)?.map_err(ExecutorError::Ops)?;
        written.map_err(ExecutorError::TaskPanicked)?;
        consumed
    }
}
