//! Admin settings: environment variables with documented defaults (see docs/configuration.md).

use std::net::SocketAddr;

use punctual_shared::config::{DatabaseConfig, SecretKeyConfig};
use punctual_shared::target_guard::TargetGuard;

use crate::auth::AuthConfig;
use crate::secret_headers::SecretHeaders;

#[derive(Debug, Clone, clap::Parser)]
#[command(name = "punctual-admin", about = "Punctual's REST API: timers, pause/resume, run history")]
pub struct AdminConfig {
    #[command(flatten)]
    pub database: DatabaseConfig,
    /// Address of the REST API (and of its health and metrics endpoints).
    #[arg(long, env = "PUNCTUAL_ADMIN_ADDR", default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// Whether `punctual_timers` is labelled by namespace too: one series per namespace and
    /// state, so only where the namespaces are few.
    #[arg(long, env = "PUNCTUAL_METRICS_NAMESPACE_LABEL", default_value_t = false, action = clap::ArgAction::Set)]
    pub metrics_namespace_label: bool,
    /// Hosts and networks callbacks may reach besides public addresses (as the
    /// executor's): a timer whose URL is a literal address outside them is refused.
    #[arg(long, env = "PUNCTUAL_CALLBACK_ALLOW", default_value = "")]
    pub callback_allow: TargetGuard,
    /// Callback header names whose values no answer shows, comma-separated, besides
    /// Authorization, Proxy-Authorization, Cookie, X-Api-Key and X-Auth-Token.
    #[arg(long, env = "PUNCTUAL_SECRET_HEADERS", default_value = "")]
    pub secret_headers: SecretHeaders,
    /// The shortest time between two fires of one timer that the API accepts: an interval
    /// below it, or a cron expression firing twice within it, is refused (422).
    #[arg(long, env = "PUNCTUAL_MIN_FIRE_INTERVAL_MS", default_value_t = 1_000)]
    pub min_fire_interval_ms: u64,
    /// The most timers (not deleted) a namespace may hold through the API (409 beyond); 0
    /// for no limit.
    #[arg(long, env = "PUNCTUAL_NAMESPACE_MAX_TIMERS", default_value_t = 100_000)]
    pub namespace_max_timers: u64,
    /// The tasks topic, as the scanners and executors are told it: no timer may publish to
    /// it (nor to any topic under `punctual.` or `__`).
    #[arg(long, env = "PUNCTUAL_TASKS_TOPIC", default_value = "punctual.tasks")]
    pub tasks_topic: String,
    /// The dead-letter topic, as the executors are told it: no timer may publish to it.
    #[arg(long, env = "PUNCTUAL_DEAD_TOPIC", default_value = "punctual.dead")]
    pub dead_topic: String,
    /// Whether the admin applies the schema's migrations at its start (the scanners and
    /// executors wait for them); false: it waits too, for `punctual migrate`.
    #[arg(long, env = "PUNCTUAL_MIGRATE", default_value_t = true, action = clap::ArgAction::Set)]
    pub migrate: bool,
    #[command(flatten)]
    pub secrets: SecretKeyConfig,
    #[command(flatten)]
    pub auth: AuthConfig,
}
