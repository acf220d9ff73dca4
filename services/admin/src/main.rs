//! punctual-admin: configuration, wiring, run.

use clap::Parser;
use punctual_admin::{AdminConfig, App};
use tokio_util::sync::CancellationToken;

/// mimalloc rather than glibc's allocator: the hot paths allocate per message and per
/// call from many threads, and glibc's malloc and free were a fifth of the executor's CPU
/// under load (docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let telemetry = punctual_runtime::telemetry::init("punctual-admin")?;
    let config = AdminConfig::parse();
    let app = App::build(config).await?;
    let token = CancellationToken::new();
    tokio::spawn(punctual_runtime::ops::cancel_on_signal(token.clone()));
    let stopped = app.run_until_stopped(token).await;
    telemetry.shutdown().await;
    Ok(stopped?)
}
