//! The web console in a real browser (Debian's headless Chromium through chromedriver):
//! signing in, what a key is and is not offered, actions on a timer, and accessibility
//! (axe-core). Screenshots of the pages go to docs/img/console-*.png, which the README
//! shows.

use std::path::PathBuf;
use std::time::Duration;

use punctual_testkit::browser::Browser;
use punctual_testkit::{eventually, Sink, Stack};
use serde_json::{json, Value};

async fn key(stack: &Stack, name: &str, role: &str, namespaces: &[&str]) -> String {
    let r = stack
        .http
        .post(stack.admin.url("/v1/keys"))
        .json(&json!({"name": name, "role": role, "namespaces": namespaces}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    r.json::<Value>().await.unwrap()["key"].as_str().unwrap().to_owned()
}

fn screenshot_path(page: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/img").join(format!("console-{page}.png"))
}

async fn sign_in(browser: &Browser, console: &str, api_key: &str) {
    browser.client.goto(console).await.unwrap();
    browser.find("#api-key").await.send_keys(api_key).await.unwrap();
    browser.find("form button[type=submit]").await.click().await.unwrap();
    browser.find("#nav:not([hidden])").await;
}

async fn assert_accessible(browser: &Browser, page: &str) {
    let violations = browser.accessibility_violations().await;
    assert!(violations.is_empty(), "{page}: {violations:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_key_sees_its_namespace_pauses_resumes_and_triggers_and_a_read_key_is_offered_no_change() {
    let sink = Sink::start().await;
    let stack = Stack::start(&[]).await;
    let writer = key(&stack, "ops-alice", "write", &["team-a"]).await;
    let reader = key(&stack, "viewer-bob", "read", &["team-a"]).await;
    let ours = stack
        .create_timer(&json!({"namespace": "team-a", "name": "nightly-report", "schedule": {"cron": "0 0 2 * * *",
            "timezone": "Europe/Berlin"}, "action": {"http": {"url": sink.url("/report")}}}))
        .await;
    stack
        .create_timer(&json!({"namespace": "team-a", "name": "heartbeat", "schedule": {"every_ms": 60_000},
            "action": {"http": {"url": sink.url("/heartbeat")}}}))
        .await;
    stack
        .create_timer(&json!({"namespace": "team-b", "name": "not-for-team-a", "schedule": {"every_ms": 60_000},
            "action": {"http": {"url": sink.url("/other")}}}))
        .await;
    let id = ours["id"].as_str().unwrap();
    let console = stack.admin.url("/console/");
    let browser = Browser::start(1280, 1000).await;

    // The sign-in page, then the timers of the key's namespace only.
    browser.client.goto(&console).await.unwrap();
    browser.find("#api-key").await;
    assert_accessible(&browser, "sign-in").await;
    sign_in(&browser, &console, &writer).await;
    let list = browser.find_text("main table", "nightly-report").await;
    assert!(list.contains("heartbeat") && list.contains("cron 0 0 2 * * * (Europe/Berlin)"), "{list}");
    assert!(!list.contains("not-for-team-a"), "another namespace's timer is listed: {list}");
    let page = browser.find_text("main", "Timers").await;
    assert!(!page.contains("null") && !page.contains("undefined"), "{page}");
    assert_eq!(browser.find_text("#who", "ops-alice").await, "ops-alice (write)");
    assert_accessible(&browser, "timers").await;
    browser.screenshot(&screenshot_path("timers")).await;

    // A timer's page: pause, resume, trigger; the triggered run appears and succeeds.
    browser.find(&format!("a[href='#/timers/{id}']")).await.click().await.unwrap();
    browser.find_text("#next-fire-times", "").await;
    browser.find("main button").await;
    browser.click_button("Pause").await;
    browser.find_text("#action-status", "Paused.").await;
    browser.find_text("dl.facts", "paused").await;
    browser.click_button("Resume").await;
    browser.find_text("#action-status", "Resumed.").await;
    browser.find_text("dl.facts", "active").await;
    browser.click_button("Trigger now").await;
    browser.find_text("#action-status", "Triggered").await;
    eventually(Duration::from_secs(30), "the triggered call", || async {
        (!sink.calls_to("/report").is_empty()).then_some(())
    })
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        browser.client.refresh().await.unwrap();
        if browser.find_text("main", "Runs").await.contains("succeeded") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the run never showed as succeeded");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_accessible(&browser, "timer").await;
    browser.screenshot(&screenshot_path("timer")).await;
    let states: Vec<Value> = stack.runs(id).await;
    assert_eq!(states.len(), 1, "one run, the triggered one: {states:?}");

    // Another namespace's timer by its id: not found, as for an unknown id.
    let theirs: Value =
        stack.http.get(stack.admin.url("/v1/timers?namespace=team-b")).send().await.unwrap().json().await.unwrap();
    let their_id = theirs["timers"][0]["id"].as_str().unwrap();
    browser.client.goto(&format!("{console}#/timers/{their_id}")).await.unwrap();
    browser.find_text("main [role=alert]", "no timer with id").await;

    // Sign out forgets the key; a read key is offered no change.
    browser.client.goto(&console).await.unwrap();
    browser.find("#sign-out").await.click().await.unwrap();
    browser.find("#api-key").await;
    let stored = browser.client.execute("return sessionStorage.length", vec![]).await.unwrap();
    assert_eq!(stored, json!(0), "the key is forgotten at sign-out");
    sign_in(&browser, &console, &reader).await;
    browser.find_text("#who", "viewer-bob (read)").await;
    browser.client.goto(&format!("{console}#/timers/{id}")).await.unwrap();
    browser.find_text("main h1", "nightly-report").await;
    browser.find("#definition").await;
    assert_eq!(browser.count("main button").await, 0, "a read key is offered no action");
}
