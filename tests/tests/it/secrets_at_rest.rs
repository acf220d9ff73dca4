//! Secrets at rest on the real stack: signing secrets and secret header values are stored
//! sealed (a SQL reader sees none), calls verify with the Standard Webhooks library before,
//! during and after a rotation of `PUNCTUAL_SECRET_KEY`, and an executor whose key does not
//! open them stops at once, in one line, rather than call unsigned.

use std::time::Duration;

use punctual_shared::sealed::SecretKeys;
use punctual_testkit::process::ServiceProcess;
use punctual_testkit::sink::Call;
use punctual_testkit::stack::dump_logs;
use punctual_testkit::{eventually, unique_name, Sink, Stack};
use serde_json::{json, Value};
use standardwebhooks::Webhook;

const TOKEN: &str = "Bearer tok-s3cr3t";

async fn create_secret(stack: &Stack, namespace: &str) -> String {
    let r =
        stack.http.post(stack.admin.url(&format!("/v1/namespaces/{namespace}/signing-secrets"))).send().await.unwrap();
    assert_eq!(r.status(), 201);
    r.json::<Value>().await.unwrap()["secret"].as_str().unwrap().to_owned()
}

fn setting(stack: &Stack, name: &str) -> String {
    stack.env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone()).unwrap()
}

/// The latest call after `since` that verifies with `secret` and carries the token.
async fn a_verified_call(sink: &Sink, secret: &str, since: chrono::DateTime<chrono::Utc>, what: &str) -> Call {
    let webhook = Webhook::new(secret).unwrap();
    eventually(Duration::from_secs(40), what, || async {
        sink.calls_to("/signed").into_iter().rev().find(|c| {
            c.received_at > since
                && webhook.verify(&c.body, &c.headers).is_ok()
                && c.headers.get("authorization").is_some_and(|v| v == TOKEN)
        })
    })
    .await
}

async fn stored(stack: &Stack) -> (String, String, i64, i64) {
    let secret: String =
        sqlx::query_scalar("SELECT secret FROM signing_secrets").fetch_one(&stack.db.pool).await.unwrap();
    let (headers, version, revision): (Value, i64, i64) =
        sqlx::query_as("SELECT http_headers, version, revision FROM timers").fetch_one(&stack.db.pool).await.unwrap();
    (secret, headers["Authorization"].as_str().unwrap().to_owned(), version, revision)
}

/// Restarts the admin and the executor with `key`, as an operator rolls out a new setting.
async fn roll_out(stack: &mut Stack, key: &str) {
    for p in [&mut stack.admin, &mut stack.executor] {
        assert!(p.stop(Duration::from_secs(20)), "{} stopped", p.name);
        p.set_env("PUNCTUAL_SECRET_KEY", key);
        p.restart();
        p.wait_healthy(Duration::from_secs(60)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_stored_sealed_and_calls_verify_across_a_key_rotation() {
    let sink = Sink::start().await;
    let mut stack = Stack::start(&[]).await;
    let k1 = setting(&stack, "PUNCTUAL_SECRET_KEY");
    let secret = create_secret(&stack, "signed").await;
    let r = stack
        .http
        .post(stack.admin.url("/v1/timers"))
        .json(&json!({"namespace": "signed", "name": "every-second", "schedule": {"every_ms": 1000},
                      "action": {"http": {"url": sink.url("/signed"), "headers": {"Authorization": TOKEN}}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);

    let (sealed_secret, sealed_token, version, revision) = stored(&stack).await;
    for sealed in [&sealed_secret, &sealed_token] {
        assert!(sealed.starts_with("sealed:v1:k1:"), "{sealed}");
    }
    let dump = format!("{sealed_secret} {sealed_token}");
    assert!(!dump.contains(&secret[6..]) && !dump.contains("tok-s3cr3t"), "no plaintext stored: {dump}");
    a_verified_call(&sink, &secret, chrono::Utc::now(), "a verified call before the rotation").await;

    // A new key first, the old one still listed: the admin seals everything with the new
    // one at its start, and the executor opens both.
    let k2 = SecretKeys::generate_entry("k2");
    roll_out(&mut stack, &format!("{k2},{k1}")).await;
    let (sealed_secret, sealed_token, ..) = stored(&stack).await;
    assert!(sealed_secret.starts_with("sealed:v1:k2:") && sealed_token.starts_with("sealed:v1:k2:"));
    a_verified_call(&sink, &secret, chrono::Utc::now(), "a verified call during the rotation").await;

    // The old key dropped.
    roll_out(&mut stack, &k2).await;
    let rolled = chrono::Utc::now();
    a_verified_call(&sink, &secret, rolled, "a verified call after the rotation").await;
    let (.., version_after, revision_after) = stored(&stack).await;
    assert_eq!((version_after, revision_after), (version, revision), "sealing again changed no timer");
    let failed: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status IN ('dead', 'cancelled')")
        .fetch_one(&stack.db.pool)
        .await
        .unwrap();
    assert_eq!(failed, 0, "no occurrence failed or was cancelled\n{}", dump_logs(&stack));
}

/// An executor given a key that does not open the stored secrets (another key under the
/// same id), or none, exits at its start with one line that says so: it would otherwise
/// call unsigned, or send ciphertext.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_whose_key_does_not_open_the_secrets_stops_in_one_line() {
    let stack = Stack::start(&[]).await;
    create_secret(&stack, "signed").await;
    for (key, says) in [
        (Some(SecretKeys::generate_entry("k1")), "does not open with it"),
        (None, "which PUNCTUAL_SECRET_KEY does not list"),
    ] {
        let env: Vec<(&str, String)> = stack
            .env
            .iter()
            .filter(|(k, _)| *k != "PUNCTUAL_SECRET_KEY")
            .cloned()
            .chain(key.map(|k| ("PUNCTUAL_SECRET_KEY", k)))
            .collect();
        let mut executor =
            ServiceProcess::start("punctual-executor", &unique_name("executor"), "PUNCTUAL_EXECUTOR_ADDR", &env);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = executor.exited() {
                break status;
            }
            assert!(std::time::Instant::now() < deadline, "the executor did not exit");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let log = std::fs::read_to_string(&executor.log).unwrap();
        assert!(!status.success(), "{log}");
        assert!(!log.contains("panicked"), "{log}");
        let errors: Vec<&str> = log.lines().filter(|l| l.starts_with("Error:")).collect();
        assert_eq!(errors.len(), 1, "{log}");
        assert!(errors[0].contains("PUNCTUAL_SECRET_KEY") && errors[0].contains(says), "{log}");
    }
}
