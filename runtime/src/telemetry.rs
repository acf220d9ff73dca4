//! Logging and tracing: `tracing` to stderr, filtered by `RUST_LOG` (default `info`), as
//! text or, with `PUNCTUAL_LOG_FORMAT=json`, one JSON object a line (with the fields of the
//! current span); and, with `PUNCTUAL_OTLP_ENDPOINT`, spans exported over OTLP
//! ([`crate::otlp`]).

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
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
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let (installed, provider) = match otlp::layer(service)? {
        // A global filter: what is not logged is never built.
        None => (tracing_subscriber::registry().with(filter).with(log_layer(json)).try_init().is_ok(), None),
        // The log's own filter, so that the exporter's spans are built whatever RUST_LOG says.
        Some((export, provider)) => {
            let installed = tracing_subscriber::registry()
                .with(log_layer(json).with_filter(filter))
                .with(export)
                .try_init()
                .is_ok();
            if installed {
                otlp::exporting();
                tracing::info!(endpoint = %std::env::var(otlp::ENDPOINT_VAR).unwrap_or_default(), "exporting spans over OTLP");
            }
            (installed, Some(provider))
        }
    };
    Ok(Telemetry { provider: provider.filter(|_| installed) })
}

/// The log's lines on stderr, as text or JSON.
fn log_layer<S>(json: bool) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    if json {
        log.json().flatten_event(true).with_current_span(true).with_span_list(false).boxed()
    } else {
        log.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).boxed()
    }
}
