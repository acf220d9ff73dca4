//! punctual-admin: configuration, wiring, run.

use clap::Parser;
use punctual_admin::{AdminConfig, App};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    punctual_shared::telemetry::init();
    let config = AdminConfig::parse();
    let app = App::build(config).await?;
    let token = CancellationToken::new();
    tokio::spawn(punctual_shared::ops::cancel_on_signal(token.clone()));
    app.run_until_stopped(token).await
}
