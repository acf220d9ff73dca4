//! Why the admin could not start, or stopped: each a line for its log, naming what it was
//! doing. The causes are in the message, not chained, so that the exit is one line.

use std::net::SocketAddr;

use punctual_shared::db::SchemaState;
use punctual_shared::sealed::InvalidSecretKey;
use punctual_shared::sealed_store::SealError;

use crate::auth::AuthSetupError;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{0}")]
    SecretKey(InvalidSecretKey),
    #[error("connecting to Postgres: {0}")]
    Database(sqlx::Error),
    #[error("running migrations: {0}")]
    Migrations(sqlx::migrate::MigrateError),
    #[error("{0}")]
    Schema(SchemaState),
    #[error("sealing the stored secrets with PUNCTUAL_SECRET_KEY: {0}")]
    Sealing(SealError),
    #[error("API keys: {0}")]
    ApiKeys(AuthSetupError),
    #[error("binding {addr}: {error}")]
    Bind { addr: SocketAddr, error: std::io::Error },
    #[error("serving the API: {0}")]
    Serving(std::io::Error),
    #[error("counting timers: {0}")]
    TimerStats(tokio::task::JoinError),
}
