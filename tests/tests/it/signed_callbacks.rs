//! Signed callbacks on the real stack, verified with the Standard Webhooks project's own
//! Rust library (`standardwebhooks`), not with Punctual's code: a namespace's calls carry a
//! signature per secret, across a rotation; another namespace's calls carry none.

use std::time::Duration;

use punctual_testkit::sink::Call;
use punctual_testkit::{eventually, Sink, Stack};
use serde_json::{json, Value};
use standardwebhooks::Webhook;

async fn create_secret(stack: &Stack, namespace: &str) -> (String, String) {
    let r =
        stack.http.post(stack.admin.url(&format!("/v1/namespaces/{namespace}/signing-secrets"))).send().await.unwrap();
    assert_eq!(r.status(), 201);
    let created: Value = r.json().await.unwrap();
    (created["id"].as_str().unwrap().to_owned(), created["secret"].as_str().unwrap().to_owned())
}

async fn create_timer(stack: &Stack, namespace: &str, url: String) {
    let r = stack
        .http
        .post(stack.admin.url("/v1/timers"))
        .json(&json!({
            "namespace": namespace, "name": "every-second", "schedule": {"every_ms": 1000},
            "action": {"http": {"url": url, "body": {"namespace": namespace}}}
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
}

fn verifies(secret: &str, call: &Call) -> bool {
    Webhook::new(secret).unwrap().verify(&call.body, &call.headers).is_ok()
}

fn signatures(call: &Call) -> usize {
    call.headers.get("webhook-signature").map_or(0, |v| v.to_str().unwrap().split(' ').count())
}

/// Waits for a call to `path` that satisfies `check` (the latest such).
async fn a_call(sink: &Sink, path: &str, what: &str, check: impl Fn(&Call) -> bool) -> Call {
    eventually(Duration::from_secs(30), what, || async { sink.calls_to(path).into_iter().rev().find(|c| check(c)) })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_carry_standard_webhooks_signatures_across_a_rotation() {
    let sink = Sink::start().await;
    let stack = Stack::start(&[]).await;
    create_timer(&stack, "plain", sink.url("/plain")).await;
    create_timer(&stack, "signed", sink.url("/signed")).await;
    let (first_id, first) = create_secret(&stack, "signed").await;

    // The executor reads the secrets every 5 s: soon every call is signed.
    let call = a_call(&sink, "/signed", "a signed call", |c| signatures(c) == 1).await;
    assert!(verifies(&first, &call), "{:?}", call.headers);
    assert_eq!(call.headers["webhook-id"], call.idempotency_key.clone().unwrap().as_str());
    let mut tampered = call.clone();
    tampered.body = b"{\"namespace\":\"other\"}".to_vec().into();
    assert!(!verifies(&first, &tampered), "a changed body fails verification");
    assert!(!verifies(&punctual_shared::webhook_signature::SigningSecret::generate().encoded(), &call));

    // Another namespace's calls are not signed, and say who they are all the same.
    let plain = sink.calls_to("/plain").pop().expect("plain calls");
    assert!(plain.headers.get("webhook-signature").is_none());
    assert!(plain.headers.get("webhook-timestamp").is_some());
    assert_eq!(plain.headers["webhook-id"], plain.idempotency_key.clone().unwrap().as_str());

    // Rotation: with a second secret, calls carry both signatures; each target's secret verifies.
    let (_, second) = create_secret(&stack, "signed").await;
    let call = a_call(&sink, "/signed", "a call with two signatures", |c| signatures(c) == 2).await;
    assert!(verifies(&first, &call) && verifies(&second, &call));

    // The listing shows neither secret.
    let listed = stack
        .http
        .get(stack.admin.url("/v1/namespaces/signed/signing-secrets"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!listed.contains(&first) && !listed.contains(&second), "{listed}");
    assert!(listed.contains(&format!("\"prefix\":\"{}…\"", &first[..10])), "{listed}");

    // The first removed: calls are signed with the second only.
    let r = stack
        .http
        .delete(stack.admin.url(&format!("/v1/namespaces/signed/signing-secrets/{first_id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let deleted_at = chrono::Utc::now();
    let call =
        a_call(&sink, "/signed", "a call signed once again", |c| signatures(c) == 1 && c.received_at > deleted_at)
            .await;
    assert!(verifies(&second, &call) && !verifies(&first, &call));
}
