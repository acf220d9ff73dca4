//! Logging and tracing: `tracing` to stderr, filtered by `RUST_LOG` (default `info`), as
//! text or, with `PUNCTUAL_LOG_FORMAT=json`, one JSON object a line (with the fields of the
//! current span); and, with `PUNCTUAL_OTLP_ENDPOINT`, spans exported over OTLP
//! ([`crate::otlp`]).

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::otlp::{self, OtlpError};

/// The setting that chooses the log format.
pub const LOG_FORMAT_VAR: &str = "PUNCTUAL_LOG_FORMAT";

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("PUNCTUAL_LOG_FORMAT={0:?} is not a log format: use text (the default) or json")]
    UnknownLogFormat(String),
    #[error(transparent)]
    Otlp(#[from] OtlpError),
}

/// What must be done before the process exits: send the last spans.
#[must_use = "call shutdown before exiting, or the last spans are lost"]
pub struct Telemetry {
    provider: Option<otlp::Provider>,
}

impl Telemetry {
    pub async fn shutdown(self) {
        if let Some(provider) = self.provider {
            otlp::shutdown(provider).await;
        }
    }
}

/// Installs the logger (and the span exporter, when configured) for `service`, e.g.
/// `punctual-executor`. A second call (tests that start several services in one process)
/// installs nothing.
pub fn init(service: &'static str) -> Result<Telemetry, TelemetryError> {
    let json = match std::env::var(LOG_FORMAT_VAR).unwrap_or_default().to_ascii_lowercase().as_str() {
        "" | "text" => false,
        "json" => true,
        other => return Err(TelemetryError::UnknownLogFormat(other.to_owned())),
    };
    // A filter of the log's own: the exporter's spans are enabled whatever RUST_LOG says.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let log = if json {
        log.json().flatten_event(true).with_current_span(true).with_span_list(false).boxed()
    } else {
        log.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).boxed()
    };
    let (export, provider) = match otlp::layer(service)? {
        Some((layer, provider)) => (Some(layer), Some(provider)),
        None => (None, None),
    };
    let installed = tracing_subscriber::registry().with(log.with_filter(filter)).with(export).try_init().is_ok();
    if installed && provider.is_some() {
        tracing::info!(endpoint = %std::env::var(otlp::ENDPOINT_VAR).unwrap_or_default(), "exporting spans over OTLP");
    }
    Ok(Telemetry { provider: provider.filter(|_| installed) })
}
