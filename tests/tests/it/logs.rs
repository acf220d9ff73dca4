//! The services' logs: one JSON object a line with `PUNCTUAL_LOG_FORMAT=json`, and no
//! secret in any line (callback headers, Kafka credentials, signing secrets, API keys),
//! even at the debug level.

use std::time::Duration;

use punctual_testkit::{Sink, Stack};
use serde_json::{json, Value};

const HEADER_SECRET: &str = "hdr-s3cr3t-5f1c";
const KAFKA_SECRET: &str = "kafka-s3cr3t-9a2e";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_at_debug_level_carry_no_secret() {
    let sink = Sink::start().await;
    let stack = Stack::start(&[
        ("PUNCTUAL_LOG_FORMAT", "json".to_owned()),
        ("RUST_LOG", "debug".to_owned()),
        // A credential librdkafka accepts and does not use on a plaintext connection.
        ("PUNCTUAL_KAFKA_OPTIONS", format!("sasl.username=punctual;sasl.password={KAFKA_SECRET}")),
    ])
    .await;
    // A namespace whose calls are signed: its secret is in no line either.
    let r = stack.http.post(stack.admin.url("/v1/namespaces/default/signing-secrets")).send().await.unwrap();
    assert_eq!(r.status(), 201);
    let signing_secret = r.json::<Value>().await.unwrap()["secret"].as_str().unwrap().to_owned();
    // A key made through the API and used: neither it nor the bootstrap key is logged.
    let r = stack
        .http
        .post(stack.admin.url("/v1/keys"))
        .json(&json!({"name": "reader", "role": "read", "namespaces": ["default"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let api_key = r.json::<Value>().await.unwrap()["key"].as_str().unwrap().to_owned();
    let r = reqwest::Client::new().get(stack.admin.url("/v1/timers")).bearer_auth(&api_key).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let timer = stack
        .create_timer(&json!({"name": "authorized", "schedule": {"every_ms": 1000},
            "action": {"http": {"url": sink.url("/hook"), "headers": {"Authorization": format!("Bearer {HEADER_SECRET}")}}}}))
        .await;
    punctual_testkit::eventually(Duration::from_secs(30), "three calls", || async {
        (sink.calls_to("/hook").len() >= 3).then_some(())
    })
    .await;
    punctual_testkit::eventually(Duration::from_secs(30), "a signed call", || async {
        sink.calls_to("/hook").iter().any(|c| c.headers.contains_key("webhook-signature")).then_some(())
    })
    .await;
    let call = &sink.calls_to("/hook")[0];
    assert_eq!(call.headers["authorization"], format!("Bearer {HEADER_SECRET}").as_str(), "the header is sent");
    // A run of the timer as the API shows it, and a dead-letter listing, are logged too.
    let runs = stack.runs(timer["id"].as_str().unwrap()).await;
    assert!(!runs.is_empty());

    for service in [&stack.admin, &stack.scanner, &stack.executor] {
        let log = std::fs::read_to_string(&service.log).expect("service log");
        let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(lines.len() > 10, "{}: {} lines", service.name, lines.len());
        for line in &lines {
            let event: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{}: not JSON ({e}): {line}", service.name));
            assert!(event["level"].is_string() && event["timestamp"].is_string(), "{}: {line}", service.name);
        }
        // A key's first characters are shown in listings and may be logged; the rest never.
        let key_rest = |key: &str| key["pct_".len() + punctual_shared::api_key::SHOWN_CHARS..].to_owned();
        for secret in [
            HEADER_SECRET,
            KAFKA_SECRET,
            &signing_secret["whsec_".len()..],
            &key_rest(&api_key),
            &key_rest(&stack.api_key),
        ] {
            let leaks: Vec<&&str> = lines.iter().filter(|l| l.contains(secret)).collect();
            assert!(leaks.is_empty(), "{} logged a secret:\n{leaks:?}", service.name);
        }
        println!("{}: {} JSON lines, no secret", service.name, lines.len());
    }
}
