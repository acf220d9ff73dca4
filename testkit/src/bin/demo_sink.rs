//! punctual-demo-sink: a local HTTP endpoint for `make up`'s demo timer. It answers 200 to
//! every request and logs each call with its Idempotency-Key.

use std::net::SocketAddr;

use clap::Parser;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Parser)]
#[command(about = "Records the callbacks it receives (demo target)")]
struct Config {
    /// Address to listen on.
    #[arg(long, env = "PUNCTUAL_DEMO_SINK_ADDR", default_value = "127.0.0.1:8090")]
    addr: SocketAddr,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let telemetry = punctual_runtime::telemetry::init("punctual-demo-sink")?;
    let config = Config::parse();
    let sink = punctual_testkit::Sink::start_on(config.addr).await;
    tracing::info!(addr = %sink.addr, "demo sink listening");
    let token = CancellationToken::new();
    punctual_runtime::ops::cancel_on_signal(token.clone()).await;
    telemetry.shutdown().await;
    Ok(())
}
