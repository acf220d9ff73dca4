//! Executor settings: environment variables with documented defaults (see docs/configuration.md).

use std::net::SocketAddr;

use punctual_shared::config::{DatabaseConfig, KafkaConfig, SecretKeyConfig};
use punctual_shared::target_guard::TargetGuard;

use crate::host_addresses::HostAddresses;

#[derive(Debug, Clone, clap::Parser)]
#[command(name = "punctual-executor", about = "Consumes due tasks and runs their actions, idempotently")]
pub struct ExecutorConfig {
    #[command(flatten)]
    pub database: DatabaseConfig,
    #[command(flatten)]
    pub kafka: KafkaConfig,
    #[command(flatten)]
    pub secrets: SecretKeyConfig,
    /// Address of the health and metrics endpoints.
    #[arg(long, env = "PUNCTUAL_EXECUTOR_ADDR", default_value = "127.0.0.1:8082")]
    pub addr: SocketAddr,
    /// Kafka consumer group of the executors.
    #[arg(long, env = "PUNCTUAL_EXECUTOR_GROUP", default_value = "punctual-executors")]
    pub group: String,
    /// Topic that receives tasks that failed their last attempt.
    #[arg(long, env = "PUNCTUAL_DEAD_TOPIC", default_value = "punctual.dead")]
    pub dead_topic: String,
    /// Name this executor runs tasks under, and its static membership of the group (default:
    /// `<host name>:<port of PUNCTUAL_EXECUTOR_ADDR>`, the same across restarts); must differ
    /// between executors.
    #[arg(long, env = "PUNCTUAL_EXECUTOR_ID")]
    pub executor_id: Option<String>,
    /// Kafka consumer session timeout: how long before the group gives a dead (or stopped:
    /// a static member does not leave the group) executor's partitions to the others.
    /// Heartbeats go every 500 ms (every third of a session shorter than 1.5 s). Below the broker's `group.min.session.timeout.ms`
    /// (6 s by default; the broker `make up` starts allows 1 s) the broker refuses it.
    #[arg(long, env = "PUNCTUAL_KAFKA_SESSION_TIMEOUT_MS", default_value_t = 3_000)]
    pub kafka_session_timeout_ms: u64,
    /// Most tasks in this executor at once (a slow callback holds one slot, not a
    /// partition): those received ahead of their due time and held until then (about
    /// rate × `PUNCTUAL_PUBLISH_LEAD_MS`: 4,000 at 20,000 fires/s with the default 200 ms),
    /// those calling, and those whose outcome waits for the write-back. A slot is held for
    /// the lead, the call and the write-back together, so at most this ÷ that long fires
    /// a second: with 5,000, 25,000 fires/s offered waited for slots (mean start lag 50 ms,
    /// lag p99 321 ms), with 20,000 they did not (1.0 ms, 81 ms; docs/bench/history.md, item 18).
    #[arg(long, env = "PUNCTUAL_MAX_IN_FLIGHT", default_value_t = 20_000)]
    pub max_in_flight: usize,
    /// Most HTTP calls at once to one target (scheme, host and port), and so most
    /// connections to it (kept alive up to 60 s idle, about 60 KB of memory each); further
    /// calls to it wait their turn (still counted in flight). A target's throughput per
    /// executor is at most its current limit ÷ its response time.
    #[arg(long, env = "PUNCTUAL_MAX_CALLS_PER_TARGET", default_value_t = 512)]
    pub max_calls_per_target: usize,
    /// HTTP calls at once to one target always allowed. A target's limit starts here and
    /// grows towards `PUNCTUAL_MAX_CALLS_PER_TARGET` while calls wait (or were held back)
    /// and either the target answers at its own pace (the calls' mean time within twice the
    /// shortest) or the limit is below what the calls aimed at it need at that pace (calls a
    /// second × the shortest call). It falls back towards this for each call that times
    /// out, cannot connect or is answered with a 5xx or 429, and when the answers take more
    /// than four times the shortest while the limit is above that need.
    #[arg(long, env = "PUNCTUAL_MIN_CALLS_PER_TARGET", default_value_t = 16)]
    pub min_calls_per_target: usize,
    /// Longest a call waits for its turn at its target (see `PUNCTUAL_MAX_CALLS_PER_TARGET`)
    /// while holding one of this executor's slots. A call whose turn is not expected that
    /// soon, from the calls waiting and the target's pace, or that waited that long in
    /// vain, is not made: its occurrence is deferred to the turn expected for it, as the
    /// same attempt (`punctual_deferred_total{reason="target_limit"}`), and the slot goes
    /// to other work.
    #[arg(long, env = "PUNCTUAL_TURN_WAIT_MS", default_value_t = 5_000)]
    pub turn_wait_ms: u64,
    /// A target (scheme, host and port) whose calls from one namespace have all failed for
    /// this long is paused for that namespace: its occurrences aimed there end cancelled
    /// without a call until the namespace resumes it (`POST
    /// /v1/namespaces/{ns}/paused-targets/resume`). 0: never.
    #[arg(long, env = "PUNCTUAL_PAUSE_FAILING_TARGET_AFTER_MS", default_value_t = 3_600_000)]
    pub pause_failing_target_after_ms: u64,
    /// And only after at least this many failed calls meanwhile.
    #[arg(long, env = "PUNCTUAL_PAUSE_FAILING_TARGET_MIN_FAILURES", default_value_t = 50)]
    pub pause_failing_target_min_failures: u64,
    /// Bounds a graceful stop (SIGTERM, SIGINT): no new task is taken, and running callbacks
    /// and the writes of their outcomes may take this long. What is still running or
    /// unwritten then is abandoned (its message is delivered again, and the call repeated
    /// with the same Idempotency-Key) and the process exits.
    #[arg(long, env = "PUNCTUAL_DRAIN_TIMEOUT_MS", default_value_t = 10_000)]
    pub drain_timeout_ms: u64,
    /// Hosts and networks callbacks may reach besides public addresses, comma-separated
    /// (e.g. `localhost,10.1.0.0/16,hooks.internal`). Empty: public addresses only.
    #[arg(long, env = "PUNCTUAL_CALLBACK_ALLOW", default_value = "")]
    pub callback_allow: TargetGuard,
    /// Addresses given to host names instead of the system resolver's, as `/etc/hosts`
    /// gives them, for callbacks only: `name=address,address` with `;` between names (e.g.
    /// `instances.internal=10.0.0.5,10.0.0.6`). The guard still checks each address, and a
    /// DNS broadcast calls each. Empty: none.
    #[arg(long, env = "PUNCTUAL_HOST_ADDRESSES", default_value = "")]
    pub host_addresses: HostAddresses,
}
