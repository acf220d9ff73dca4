//! Database access: the pool, the migrations, and the wait for them. The admin (and
//! `punctual migrate`) migrates; the scanners and executors run under a role without DDL
//! rights (docs/operations.md, "Least privilege") and wait until the schema is this
//! build's.

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

/// Where the database's schema stands against this build's migrations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaState {
    Current,
    /// Migrations of this build not applied yet (`applied`: the latest applied, 0 for none).
    Behind {
        applied: i64,
        needed: i64,
    },
    /// Applied by a newer build.
    Ahead {
        applied: i64,
        ours: i64,
    },
}

impl std::fmt::Display for SchemaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SchemaState::Current => f.write_str("the schema is this build's"),
            SchemaState::Behind { applied, needed } => {
                write!(f, "the database is at migration {applied}; this build needs {needed}")
            }
            SchemaState::Ahead { applied, ours } => {
                write!(f, "the database is at migration {applied}, newer than this build's {ours}")
            }
        }
    }
}

/// The latest migration this build has.
pub fn latest_migration() -> i64 {
    MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
}

/// Where the schema stands (a database never migrated is behind).
pub async fn schema_state(pool: &PgPool) -> Result<SchemaState, sqlx::Error> {
    let ours = latest_migration();
    let applied: Option<i64> =
        match sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success").fetch_one(pool).await {
            Ok(applied) => applied,
            // No migration table yet.
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => None,
            Err(e) => return Err(e),
        };
    let applied = applied.unwrap_or(0);
    Ok(match applied {
        v if v == ours => SchemaState::Current,
        v if v < ours => SchemaState::Behind { applied: v, needed: ours },
        v => SchemaState::Ahead { applied: v, ours },
    })
}

/// Waits until the schema is this build's (migrated by the admin or `punctual migrate`),
/// saying so every [`SCHEMA_WAIT_LOG_EVERY`]; an error when it is newer than this build.
pub async fn wait_for_schema(pool: &PgPool) -> Result<(), SchemaState> {
    let mut said_at: Option<tokio::time::Instant> = None;
    loop {
        let state = schema_state(pool).await;
        match &state {
            Ok(SchemaState::Current) => return Ok(()),
            Ok(ahead @ SchemaState::Ahead { .. }) => return Err(*ahead),
            _ if said_at.is_some_and(|at| at.elapsed() < SCHEMA_WAIT_LOG_EVERY) => {}
            Ok(behind) => {
                tracing::warn!(
                    "waiting for the migrations ({behind}): the admin applies them at its start, or `punctual migrate`"
                );
                said_at = Some(tokio::time::Instant::now());
            }
            Err(e) => {
                tracing::warn!(error = %e, "database not reachable yet; waiting for it");
                said_at = Some(tokio::time::Instant::now());
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// How often [`wait_for_schema`] says it still waits.
pub const SCHEMA_WAIT_LOG_EVERY: Duration = Duration::from_secs(10);

/// A role name [`grant_service_role`] accepts: an unquoted Postgres identifier.
pub fn is_role_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'_'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
        && name.len() <= 63
}

/// The statements that give `role` what the scanners and executors need, and no more: to
/// read and write the rows of every table, now and of those later migrations create (as
/// the role running this), without owning any or creating any. `role` must be
/// [`is_role_name`].
pub fn service_role_grants(database: &str, role: &str) -> Vec<String> {
    assert!(is_role_name(role), "a checked role name");
    vec![
        format!("GRANT CONNECT ON DATABASE \"{}\" TO {role}", database.replace('"', "\"\"")),
        format!("GRANT USAGE ON SCHEMA public TO {role}"),
        format!("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}"),
        format!("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}"),
        format!("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role}"),
        format!("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO {role}"),
    ]
}

/// Runs [`service_role_grants`] for `role` (which must exist) on the database of `pool`.
pub async fn grant_service_role(pool: &PgPool, role: &str) -> Result<(), sqlx::Error> {
    let database = sqlx::query_scalar!(r#"SELECT current_database() AS "database!""#).fetch_one(pool).await?;
    let mut tx = pool.begin().await?;
    for statement in service_role_grants(&database, role) {
        sqlx::query(&statement).execute(&mut *tx).await?;
    }
    tx.commit().await
}
