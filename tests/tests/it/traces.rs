//! Trace export over OTLP: with `PUNCTUAL_OTLP_ENDPOINT` set, the scanner exports a span per
//! publication and the executor one per run into the occurrence's trace, and each
//! callback's `traceparent` names the run's span,
//! so a target's spans join the trace. The collector is a local HTTP server that keeps
//! what it receives (OTLP/HTTP with JSON bodies).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::post;
use axum::Json;
use punctual_testkit::{eventually, Behaviour, Sink, Stack};
use serde_json::{json, Value};

/// What the collector received: each span with its service's name.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Collector {
    async fn start() -> (Collector, SocketAddr) {
        let collector = Collector::default();
        let kept = collector.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            post(move |Json(export): Json<Value>| {
                let kept = kept.clone();
                async move {
                    for resource in export["resourceSpans"].as_array().into_iter().flatten() {
                        let service = resource["resource"]["attributes"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .find(|a| a["key"] == "service.name")
                            .and_then(|a| a["value"]["stringValue"].as_str())
                            .unwrap_or_default()
                            .to_owned();
                        for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                            for span in scope["spans"].as_array().into_iter().flatten() {
                                kept.spans.lock().unwrap().push((service.clone(), span.clone()));
                            }
                        }
                    }
                    Json(json!({}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (collector, addr)
    }

    fn spans_in(&self, trace_id: &str, name: &str) -> Vec<(String, Value)> {
        let spans = self.spans.lock().unwrap();
        spans.iter().filter(|(_, s)| s["name"] == name && s["traceId"] == trace_id).cloned().collect()
    }
}

fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"].as_array()?.iter().find(|a| a["key"] == key).map(|a| &a["value"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_run_is_a_span_of_its_occurrences_trace_and_its_callback_names_it() {
    let (collector, addr) = Collector::start().await;
    let sink = Sink::start().await;
    // The first attempt fails: two runs of one occurrence, two spans in one trace.
    sink.behave("/traced", Behaviour::fail_first(1, 503));
    let stack = Stack::start(&[("PUNCTUAL_OTLP_ENDPOINT", format!("http://{addr}"))]).await;
    let timer = stack
        .create_timer(&json!({"name": "traced", "schedule": {"delay_ms": 1000},
            "retry": {"max_attempts": 2, "initial_ms": 500},
            "action": {"http": {"url": sink.url("/traced")}}}))
        .await;
    let calls = eventually(Duration::from_secs(30), "two attempts", || async {
        let calls = sink.calls_to("/traced");
        (calls.len() == 2).then_some(calls)
    })
    .await;
    let traceparents: Vec<Vec<String>> = calls
        .iter()
        .map(|c| c.headers["traceparent"].to_str().unwrap().split('-').map(str::to_owned).collect())
        .collect();
    let trace_id = traceparents[0][1].clone();
    assert_eq!(traceparents[1][1], trace_id, "one trace per occurrence");

    // The batch exporter sends every 5 s.
    let runs = eventually(Duration::from_secs(30), "both runs' spans", || async {
        let runs = collector.spans_in(&trace_id, "run");
        (runs.len() == 2).then_some(runs)
    })
    .await;
    // The scanner's publishing of each attempt is in the trace too, under the same parent.
    let publishes = eventually(Duration::from_secs(30), "both attempts' publish spans", || async {
        let publishes = collector.spans_in(&trace_id, "publish");
        let attempts: Vec<String> =
            publishes.iter().filter_map(|(_, s)| attribute(s, "attempt").map(|v| v["intValue"].to_string())).collect();
        (attempts.contains(&"\"1\"".to_owned()) && attempts.contains(&"\"2\"".to_owned())).then_some(publishes)
    })
    .await;
    for (service, span) in &publishes {
        assert_eq!(service, "punctual-scanner");
        assert_eq!(span["parentSpanId"], trace_id[16..], "{span}");
    }
    for (attempt, parts) in traceparents.iter().enumerate() {
        let (service, span) = runs
            .iter()
            .find(|(_, s)| s["spanId"] == parts[2].as_str())
            .unwrap_or_else(|| panic!("attempt {}: no exported span {} among {runs:?}", attempt + 1, parts[2]));
        assert_eq!(service, "punctual-executor");
        assert_eq!(attribute(span, "timer_id").and_then(|v| v["stringValue"].as_str()), timer["id"].as_str());
        // Both runs hang under the occurrence's span, derived from the trace id.
        assert_eq!(span["parentSpanId"], trace_id[16..], "{span}");
    }
    assert_ne!(traceparents[0][2], traceparents[1][2], "a span per attempt");
}

#[test]
fn a_malformed_endpoint_stops_the_service_with_one_clear_line() {
    let output = std::process::Command::new(punctual_testkit::process::bin_dir().join("punctual-executor"))
        .env("PUNCTUAL_OTLP_ENDPOINT", "collector:4318")
        // As a service runs: without the backtrace a test run may ask for.
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .expect("run the executor");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("PUNCTUAL_OTLP_ENDPOINT=\"collector:4318\" is not an http:// or https:// URL"), "{stderr}");
    assert!(stderr.lines().count() <= 2, "{stderr}");
}
