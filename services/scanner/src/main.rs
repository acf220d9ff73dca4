//! punctual-scanner: configuration, wiring, run.

use clap::Parser;
use punctual_scanner::{App, ScannerConfig};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    punctual_shared::telemetry::init();
    let config = ScannerConfig::parse();
    let app = App::build(config).await?;
    let token = CancellationToken::new();
    tokio::spawn(punctual_shared::ops::cancel_on_signal(token.clone()));
    app.run_until_stopped(token).await
}
