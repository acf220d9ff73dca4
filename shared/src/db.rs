//! Database access: the pool and the migrations.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use crate::config::DatabaseConfig;

/// The schema, embedded: every service can bring a database up to date.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// Planner settings of Punctual's own sessions (they change nothing for other clients of
/// the database). Its statements read a batch of rows by key from tables whose hot part is
/// cached: at the default `random_page_cost` (4, a spinning disk) Postgres preferred a
/// full scan of a 400,000-row `tasks` table to 1,000 key lookups, for every batch; and a
/// JIT compilation, which a mis-estimated statement can trigger, costs more than such a
/// statement runs.
const SESSION_SETTINGS: [(&str, &str); 2] = [("random_page_cost", "1.1"), ("jit", "off")];

/// Opens a pool. Connections are made lazily and re-made after a failure, so a service
/// started before Postgres, or outliving a Postgres restart, recovers by itself.
pub fn connect_lazy(cfg: &DatabaseConfig) -> Result<PgPool, sqlx::Error> {
    let options: PgConnectOptions = cfg.database_url.expose().parse()?;
    Ok(pool_options(cfg).connect_lazy_with(options.application_name("punctual").options(SESSION_SETTINGS)))
}

/// As [`connect_lazy`], for a service whose transactions hold locks others wait for (a
/// scanner's hold its membership): Postgres ends a session left idle within a transaction
/// for longer than `idle_in_transaction`, so that a process frozen mid-transaction
/// releases its locks instead of holding them until it thaws.
pub fn connect_lazy_bounded(cfg: &DatabaseConfig, idle_in_transaction: Duration) -> Result<PgPool, sqlx::Error> {
    let options: PgConnectOptions = cfg.database_url.expose().parse()?;
    let idle = idle_in_transaction.as_millis().max(1).to_string();
    let options = options
        .application_name("punctual")
        .options(SESSION_SETTINGS)
        .options([("idle_in_transaction_session_timeout", idle.as_str())]);
    Ok(pool_options(cfg).connect_lazy_with(options))
}

fn pool_options(cfg: &DatabaseConfig) -> PgPoolOptions {
    PgPoolOptions::new().max_connections(cfg.database_max_connections).acquire_timeout(Duration::from_secs(5))
}

/// Runs the migrations, retrying while the database is not reachable yet.
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    let mut attempts = 0;
    loop {
        match MIGRATOR.run(pool).await {
            Err(sqlx::migrate::MigrateError::Execute(e)) if attempts < 30 && is_connection_error(&e) => {
                attempts += 1;
                tracing::warn!(error = %e, "database not reachable yet; retrying migrations");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            other => return other,
        }
    }
}

/// Whether an error means the database could not be reached (worth retrying), as opposed
/// to a statement that failed.
pub fn is_connection_error(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Tls(_))
}
