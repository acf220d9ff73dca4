//! Optional trace export over OTLP/HTTP (JSON) when `PUNCTUAL_OTLP_ENDPOINT` is set: the
//! services' spans (target `punctual…`, at debug level and above, whatever `RUST_LOG`
//! says) go to a collector such as the OpenTelemetry Collector, Jaeger or Tempo.
//!
//! An occurrence is one trace, whose id is derived from its identity
//! ([`punctual_shared::trace_context`]): the scanner's `publish` span and the executor's `run` spans
//! are given that trace and a parent span derived from it too, the occurrence's (not
//! exported: the trace shows it as its missing root), and a callback's `traceparent` names
//! the run's span, so the target's own spans join the same trace.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider};
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::FilterFn;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;
use uuid::Uuid;

/// The collector's base URL (e.g. `http://127.0.0.1:4318`); spans go to `<it>/v1/traces`.
pub const ENDPOINT_VAR: &str = "PUNCTUAL_OTLP_ENDPOINT";
/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the stop waits for the last spans to go.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("{ENDPOINT_VAR}={0:?} is not an http:// or https:// URL")]
    Endpoint(String),
    #[error("creating the OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// The exporter's provider: flush it with [`shutdown`] before the process exits.
pub type Provider = SdkTracerProvider;

/// The layer that exports spans, and its provider; `None` without an endpoint.
pub fn layer<S>(service: &'static str) -> Result<Option<(impl Layer<S>, Provider)>, OtlpError>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    let Some(endpoint) = std::env::var(ENDPOINT_VAR).ok().filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    let parsed = url::Url::parse(endpoint.trim()).map_err(|_| OtlpError::Endpoint(endpoint.clone()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(OtlpError::Endpoint(endpoint));
    }
    let exporter = SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpJson)
        .with_endpoint(format!("{}/v1/traces", endpoint.trim().trim_end_matches('/')))
        .with_timeout(EXPORT_TIMEOUT)
        .with_http_client(BlockingClient::new(EXPORT_TIMEOUT))
        .build()?;
    // The batch processor exports from a thread of its own, so its client may block.
    let provider = SdkTracerProvider::builder()
        .with_resource(Resource::builder().with_service_name(service).build())
        .with_batch_exporter(exporter)
        .build();
    let tracer = provider.tracer(service);
    // Spans only: events stay in the logs, and the HTTP client's own spans never feed
    // back into the export.
    let ours = FilterFn::new(|m| m.is_span() && m.target().starts_with("punctual"));
    let layer = tracing_opentelemetry::layer().with_tracer(tracer).with_filter(ours);
    Ok(Some((layer, provider)))
}

/// Sends the last spans (at most [`FLUSH_TIMEOUT`]) and stops the exporter.
pub async fn shutdown(provider: Provider) {
    let flushed = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT)).await;
    if let Ok(Err(e)) = flushed {
        tracing::warn!(error = %e, "exporting the last spans failed");
    }
}

/// Puts `span` in the trace of the occurrence `(timer_id, scheduled_at)`, under the
/// occurrence's span. Call it before the span is first entered. Does nothing when spans
/// are not exported.
pub fn set_occurrence_parent(span: &tracing::Span, timer_id: Uuid, scheduled_at: DateTime<Utc>) {
    if span.is_disabled() {
        return;
    }
    let trace_id = punctual_shared::trace_context::trace_id(timer_id, scheduled_at);
    let parent = SpanContext::new(
        TraceId::from(trace_id),
        SpanId::from(occurrence_span_id(trace_id)),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
}

/// The occurrence's span id: the trace id's low half, never zero (an invalid span id).
pub fn occurrence_span_id(trace_id: u128) -> u64 {
    (trace_id as u64).max(1)
}

/// Whether spans are exported (set once, when the exporter is installed).
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Records that the exporter is installed.
pub(crate) fn exporting() {
    EXPORTING.store(true, Ordering::Relaxed);
}

/// The exported id of the current span, when spans are exported.
pub fn current_span_id() -> Option<u64> {
    if !EXPORTING.load(Ordering::Relaxed) {
        return None;
    }
    let context = tracing::Span::current().context();
    let span = context.span();
    let span_context = span.span_context();
    span_context.is_valid().then(|| u64::from_be_bytes(span_context.span_id().to_bytes()))
}

/// The exporter's HTTP client: the workspace's reqwest, blocking, on the batch processor's
/// thread (opentelemetry-otlp's own blocking client feature would add a second reqwest).
#[derive(Debug)]
struct BlockingClient(reqwest::blocking::Client);

impl BlockingClient {
    fn new(timeout: Duration) -> Self {
        // A blocking client may be neither built nor dropped on a runtime thread.
        let client = std::thread::spawn(move || reqwest::blocking::Client::builder().timeout(timeout).build())
            .join()
            .expect("building the OTLP client does not panic")
            .expect("a client with a timeout builds");
        Self(client)
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for BlockingClient {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<opentelemetry_http::Response<opentelemetry_http::Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let response =
            self.0.request(parts.method, parts.uri.to_string()).headers(parts.headers).body(body.to_vec()).send()?;
        let mut answer = opentelemetry_http::Response::builder().status(response.status());
        for (name, value) in response.headers() {
            answer = answer.header(name, value);
        }
        Ok(answer.body(response.bytes()?)?)
    }
}
