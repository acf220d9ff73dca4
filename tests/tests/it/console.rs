//! The web console in a real browser (Debian's headless Chromium through chromedriver):
//! signing in, what a key is and is not offered, actions on a timer, and accessibility
//! (axe-core). Screenshots of the pages go to docs/img/console-*.png, which the README
//! shows.

use std::path::PathBuf;
use std::time::Duration;

use punctual_testkit::browser::{Browser, Key};
use punctual_testkit::path_prefix::PathPrefix;
use punctual_testkit::{eventually, eventually_or, Behaviour, Sink, Stack};
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
    assert!(list.contains("heartbeat") && list.contains("at 02:00 every day, Europe/Berlin"), "{list}");
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
    // Paused with a note, shown beside the state; resumed without one, which clears it.
    browser.fill("#state-note", "held while the report is audited").await;
    browser.click_button("Pause").await;
    browser.find_text("#action-status", "Paused.").await;
    browser.find_text("dl.facts", "held while the report is audited").await;
    assert!(browser.find_text("dl.facts", "paused").await.contains("Note"));
    browser.click_button("Resume").await;
    browser.find_text("#action-status", "Resumed.").await;
    let facts = browser.find_text("dl.facts", "active").await;
    assert!(!facts.contains("held while"), "the note is cleared by a resume without one: {facts}");
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

    // The live page: the namespace's last minute, the triggered run among it, read again
    // without a reload; another namespace's figures never shown.
    browser.find("a[href='#/live']").await.click().await.unwrap();
    browser.find("#live-updated").await;
    // The last 15 minutes: the run may be more than a minute old on a busy machine.
    browser.client.goto(&format!("{console}#/live?window=900")).await.unwrap();
    browser.find("#window option[value='900'][selected]").await;
    let row = browser.find_text("#live tr[data-namespace='team-a']", "team-a").await;
    assert!(!row.contains('—'), "a lag for its started run: {row}");
    let page = browser.find_text("main", "Live").await;
    assert!(!page.contains("null") && !page.contains("undefined"), "{page}");
    assert_eq!(browser.count("#live tr[data-namespace='team-b']").await, 0);
    let first = browser.find_text("#live-updated", "Updated").await;
    browser.client.execute("document.getElementById('live').dataset.page = 'same'", vec![]).await.unwrap();
    eventually(Duration::from_secs(15), "the live figures read again", || async {
        let now = browser.find_text("#live-updated", "Updated").await;
        (now != first).then_some(())
    })
    .await;
    let same = browser.client.execute("return document.getElementById('live').dataset.page", vec![]).await.unwrap();
    assert_eq!(same, json!("same"), "read again in the same page, not by a reload");
    assert_accessible(&browser, "live").await;
    browser.screenshot(&screenshot_path("live")).await;

    // Another namespace's timer by its id: not found, as for an unknown id.
    let theirs: Value =
        stack.http.get(stack.admin.url("/v1/timers?namespace=team-b")).send().await.unwrap().json().await.unwrap();
    let their_id = theirs["timers"][0]["id"].as_str().unwrap();
    browser.client.goto(&format!("{console}#/timers/{their_id}")).await.unwrap();
    browser.find_text("main [role=alert]", "no timer with id").await;

    // Sign out forgets the key; a read key is offered no change.
    browser.client.goto(&console).await.unwrap();
    // The page loads anew: its navigation shows once the key is read back.
    browser.find("#nav:not([hidden]) #sign-out").await.click().await.unwrap();
    browser.find("#api-key").await;
    let stored = browser.client.execute("return sessionStorage.length", vec![]).await.unwrap();
    assert_eq!(stored, json!(0), "the key is forgotten at sign-out");
    sign_in(&browser, &console, &reader).await;
    browser.find_text("#who", "viewer-bob (read)").await;
    browser.client.goto(&format!("{console}#/timers/{id}")).await.unwrap();
    browser.find_text("main h1", "nightly-report").await;
    browser.find("#definition").await;
    assert_eq!(browser.count("main button").await, 0, "a read key is offered no action");
    browser.close().await;
}

/// Behind a reverse proxy that serves the admin service under `/ops/punctual`, as an
/// ingress may: the console's files, its API calls and its links all work there; on a
/// phone's screen, with the keyboard alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_works_behind_a_path_prefix() {
    let sink = Sink::start().await;
    let stack = Stack::start(&[]).await;
    let writer = key(&stack, "ops-erin", "write", &["team-a"]).await;
    let timer = stack
        .create_timer(&json!({"namespace": "team-a", "name": "behind-a-proxy", "schedule": {"every_ms": 3_600_000},
            "action": {"http": {"url": sink.url("/proxied")}}}))
        .await;
    let id = timer["id"].as_str().unwrap();
    let proxy = PathPrefix::start("/ops/punctual", &stack.admin.url("")).await;
    // A phone's width, and the keyboard only: the key typed and sent with Enter, the
    // timer's link reached with Tab and followed with Enter.
    let browser = Browser::start(390, 844).await;
    // Without its last slash: the service's redirect must stay under the prefix.
    browser.client.goto(&proxy.url("/console")).await.unwrap();
    browser.find("#api-key").await.send_keys(&format!("{writer}{}", Key::Enter)).await.unwrap();
    browser.find("#nav:not([hidden])").await;
    browser.find_text("main table", "behind-a-proxy").await;
    let href = format!("#/timers/{id}");
    let focused = eventually_or(Duration::from_secs(10), || async {
        browser.client.active_element().await.unwrap().send_keys(&Key::Tab.to_string()).await.unwrap();
        let now = browser.client.active_element().await.unwrap();
        (now.attr("href").await.unwrap().as_deref() == Some(href.as_str())).then_some(now)
    })
    .await
    .expect("the timer's link is reached with Tab");
    focused.send_keys(&Key::Enter.to_string()).await.unwrap();
    browser.find_text("main h1", "behind-a-proxy").await;
    assert_accessible(&browser, "a timer, on a phone").await;
    browser.screenshot(&screenshot_path("phone")).await;
    browser.click_button("Trigger now").await;
    browser.find_text("#action-status", "Triggered").await;
    eventually(Duration::from_secs(30), "the call triggered through the proxy", || async {
        (!sink.calls_to("/proxied").is_empty()).then_some(())
    })
    .await;
    let address = browser.client.current_url().await.unwrap();
    assert!(address.path().starts_with("/ops/punctual/console/"), "still under the prefix: {address}");
    browser.close().await;
}

/// `YYYY-MM-DDTHH:MM:SS` in UTC, as a `datetime-local` input holds it in the tests' browser.
fn local(at: chrono::DateTime<chrono::Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_is_created_through_the_form_with_its_preview_and_field_errors_backfilled_edited_and_deleted() {
    let sink = Sink::start().await;
    let stack = Stack::start(&[]).await;
    let writer = key(&stack, "ops-carol", "write", &["team-a", "team-c"]).await;
    let console = stack.admin.url("/console/");
    let browser = Browser::start(1280, 1000).await;
    sign_in(&browser, &console, &writer).await;

    // The form: the preview follows the schedule as it is typed; a wrong one is named
    // beside its field, and so is a wrong URL when the form is sent.
    browser.find("#new-timer").await.click().await.unwrap();
    browser.fill("#f-name", "every-ten-minutes").await;
    // Only the chosen kind of schedule's fields are shown.
    browser.gone("#f-every").await;
    browser.gone("#f-at").await;
    browser.fill("#f-cron", "0 */10 * * * *").await;
    browser.find("#preview li:nth-child(10)").await;
    browser.fill("#f-cron", "0 */10 * * * * * *").await;
    let error = browser.find("#error-f-cron:not([hidden])").await.text().await.unwrap();
    assert!(error.contains("cron"), "the cron field's error is shown: {error}");
    assert_eq!(browser.count("#preview li").await, 0, "no preview of a wrong schedule");
    browser.fill("#f-cron", "0 */10 * * * *").await;
    browser.gone("#error-f-cron").await;
    browser.find("#preview li:nth-child(10)").await;
    assert_accessible(&browser, "new timer").await;
    browser.screenshot(&screenshot_path("new-timer")).await;
    browser.click_button("Create").await;
    let url_error = browser.find("#error-f-url:not([hidden])").await.text().await.unwrap();
    assert!(!url_error.is_empty(), "the empty URL is named beside its field");
    browser.fill("#f-url", &sink.url("/ten")).await;
    browser.click_button("Create").await;
    browser.find_text("main h1", "every-ten-minutes").await;
    assert!(browser.find_text("dl.facts", "every 10 minutes").await.contains("team-a"));
    let listed: Value =
        stack.http.get(stack.admin.url("/v1/timers?namespace=team-a")).send().await.unwrap().json().await.unwrap();
    let id = listed["timers"][0]["id"].as_str().unwrap().to_owned();

    // Backfill the past hour: counted first, then confirmed.
    let now = chrono::Utc::now();
    browser.set_value("#backfill-from", &local(now - chrono::Duration::minutes(60))).await;
    browser.set_value("#backfill-to", &local(now - chrono::Duration::minutes(1))).await;
    browser.click_button("Count occurrences").await;
    let counted = browser.find_text("#backfill-outcome", "will be added").await;
    let numbers: Vec<usize> = counted.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse().ok()).collect();
    assert!(numbers.len() == 2 && numbers[0] == numbers[1] && (5..=6).contains(&numbers[0]), "{counted}");
    // Runs of before the timer was made: the backfilled ones (its next occurrence may be
    // planned already).
    let created: chrono::DateTime<chrono::Utc> = listed["timers"][0]["created_at"].as_str().unwrap().parse().unwrap();
    let backfilled = |runs: Vec<Value>| {
        runs.iter()
            .filter(|r| r["scheduled_at"].as_str().unwrap().parse::<chrono::DateTime<chrono::Utc>>().unwrap() < created)
            .count()
    };
    assert_eq!(backfilled(stack.runs(&id).await), 0, "counting adds nothing");
    browser.click_button("Confirm backfill").await;
    browser.find_text("#backfill-outcome", &format!("Backfilled: {} occurrences added.", numbers[0])).await;
    assert_eq!(backfilled(stack.runs(&id).await), numbers[0]);

    // An edit conditional on the revision read: a change made meanwhile is shown, not
    // overwritten.
    browser.find("#edit").await.click().await.unwrap();
    browser.find_text("main h1", "Edit every-ten-minutes").await;
    let timer: Value =
        stack.http.get(stack.admin.url(&format!("/v1/timers/{id}"))).send().await.unwrap().json().await.unwrap();
    let r = stack
        .http
        .patch(stack.admin.url(&format!("/v1/timers/{id}")))
        .json(&json!({"revision": timer["revision"], "name": "renamed-meanwhile"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    browser.fill("#f-name", "every-ten-minutes-v2").await;
    // The preview shown first: it moves the button down as it appears.
    browser.find("#preview li:nth-child(10)").await;
    browser.click_button("Save").await;
    browser.find_text("#form-status", "changed since you opened it").await;
    let now_named: Value =
        stack.http.get(stack.admin.url(&format!("/v1/timers/{id}"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(now_named["name"], "renamed-meanwhile");

    // Delete, confirmed.
    browser.client.goto(&format!("{console}#/timers/{id}")).await.unwrap();
    browser.find_text("main h1", "renamed-meanwhile").await;
    browser.click_button("Delete").await;
    browser.click_button("Yes, delete it").await;
    browser.find_text("main h1", "Timers").await;
    let r = stack.http.get(stack.admin.url(&format!("/v1/timers/{id}"))).send().await.unwrap();
    assert_eq!(r.status(), 404);
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_matching_a_filter_are_paused_in_bulk_and_a_dead_letter_is_replayed() {
    let sink = Sink::start().await;
    let stack = Stack::start(&[]).await;
    let writer = key(&stack, "ops-dave", "write", &["team-a"]).await;
    let mut batch = Vec::new();
    for name in ["batch-1", "batch-2", "batch-3", "other-1"] {
        let timer = stack
            .create_timer(&json!({"namespace": "team-a", "name": name, "schedule": {"every_ms": 3_600_000},
                "action": {"http": {"url": sink.url("/batch")}}}))
            .await;
        batch.push(timer["id"].as_str().unwrap().to_owned());
    }
    // An occurrence that fails for good (404 is not retried): a dead letter.
    sink.behave("/gone-once", Behaviour::fail_first(1, 404));
    let doomed = stack
        .create_timer(&json!({"namespace": "team-a", "name": "doomed", "schedule": {"at": chrono::Utc::now()},
            "action": {"http": {"url": sink.url("/gone-once")}}}))
        .await;
    let doomed = doomed["id"].as_str().unwrap().to_owned();
    eventually(Duration::from_secs(30), "the dead letter", || async {
        stack.runs(&doomed).await.iter().any(|r| r["status"] == "dead").then_some(())
    })
    .await;
    let console = stack.admin.url("/console/");
    let browser = Browser::start(1280, 1000).await;
    sign_in(&browser, &console, &writer).await;

    // Everything a filter matches, paused after a confirmation; then one selected, resumed.
    browser.client.goto(&format!("{console}#/timers?namespace=team-a&name_prefix=batch-")).await.unwrap();
    // The filtered page, not the one signing in showed first.
    browser.find("#name-prefix[value='batch-']").await;
    let list = browser.find_text("main table", "batch-3").await;
    assert!(!list.contains("other-1"), "{list}");
    browser.click_button("Pause all matching").await;
    browser.click_button("Yes: pause every timer of team-a whose name begins with “batch-”").await;
    browser.find_text("#bulk-status", "3 paused.").await;
    let state = |i: usize| {
        let (stack, id) = (&stack, batch[i].clone());
        async move {
            let timer: Value = stack
                .http
                .get(stack.admin.url(&format!("/v1/timers/{id}")))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            timer["state"].as_str().unwrap().to_owned()
        }
    };
    assert_eq!(
        [state(0).await, state(1).await, state(2).await, state(3).await],
        ["paused", "paused", "paused", "active"]
    );
    browser.find(&format!("input[value='{}']", batch[0])).await.click().await.unwrap();
    browser.click_button("Resume selected").await;
    browser.find_text("#bulk-status", "1 resumed.").await;
    assert_eq!([state(0).await, state(1).await], ["active", "paused"]);
    assert_accessible(&browser, "timers, filtered").await;

    // The dead letter, replayed: called again, it succeeds.
    browser.find("a[href='#/dead']").await.click().await.unwrap();
    browser.find_text("#dead", &doomed[..8]).await;
    assert_accessible(&browser, "dead letters").await;
    browser.screenshot(&screenshot_path("dead-letters")).await;
    browser.click_button("Replay").await;
    browser.find_text("#replay-status", "1 replayed.").await;
    eventually(Duration::from_secs(30), "the replayed occurrence succeeded", || async {
        stack.runs(&doomed).await.iter().any(|r| r["status"] == "succeeded").then_some(())
    })
    .await;
    assert_eq!(sink.calls_to("/gone-once").len(), 2, "called once more, by the replay");

    // The namespace's runs, by status: the replayed one succeeded, with its failed attempt.
    browser.find("a[href='#/runs']").await.click().await.unwrap();
    let runs = browser.find_text("#runs", &doomed[..8]).await;
    assert!(runs.contains("succeeded") && runs.contains("1 failed"), "{runs}");
    assert_accessible(&browser, "runs").await;
    browser.screenshot(&screenshot_path("runs")).await;
    browser.client.goto(&format!("{console}#/runs?namespace=team-a&status=dead")).await.unwrap();
    browser.find_text("main", "No runs here.").await;

    // The audit log: each of those changes, under the key's name.
    browser.find("a[href='#/audit']").await.click().await.unwrap();
    let log = browser.find_text("#audit", "tasks replayed").await;
    for change in ["timers paused", "timers resumed", "timer created"] {
        assert!(log.contains(change), "{change}: {log}");
    }
    assert!(log.contains("ops-dave"), "{log}");
    assert_accessible(&browser, "audit log").await;
    browser.screenshot(&screenshot_path("audit-log")).await;
    browser.close().await;
}
