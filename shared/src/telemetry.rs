//! Logging: `tracing` to stderr, filtered by `RUST_LOG` (default `info`), as text or, with
//! `PUNCTUAL_LOG_FORMAT=json`, one JSON object a line (with the fields of the current span).

use tracing_subscriber::EnvFilter;

/// The setting that chooses the log format.
pub const LOG_FORMAT_VAR: &str = "PUNCTUAL_LOG_FORMAT";

#[derive(Debug, thiserror::Error)]
#[error("PUNCTUAL_LOG_FORMAT={0:?} is not a log format: use text (the default) or json")]
pub struct UnknownLogFormat(String);

pub fn init() -> Result<(), UnknownLogFormat> {
    let json = match std::env::var(LOG_FORMAT_VAR).unwrap_or_default().to_ascii_lowercase().as_str() {
        "" | "text" => false,
        "json" => true,
        other => return Err(UnknownLogFormat(other.to_owned())),
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // A second init (tests that start several services in one process) is harmless.
    let _ = if json {
        builder.json().flatten_event(true).with_current_span(true).with_span_list(false).try_init()
    } else {
        builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).try_init()
    };
    Ok(())
}
