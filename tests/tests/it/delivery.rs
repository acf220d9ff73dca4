//! Retries, backoff and dead letters on the real stack, against a sink that fails on
//! purpose.

use std::time::Duration;

use chrono::Utc;
use punctual_testkit::stack::{create_topic, dump_logs, metric_value, read_topic};
use punctual_testkit::unique_name;
use punctual_testkit::{eventually, Behaviour, Sink, Stack};
use serde_json::{json, Value};

async fn one_shot(stack: &Stack, sink: &Sink, path: &str, retry: Value) -> String {
    let at = Utc::now() + chrono::Duration::milliseconds(1_500);
    let timer = stack
        .create_timer(
            &json!({"name": path, "schedule": {"at": at}, "retry": retry, "action": {"http": {"url": sink.url(path)}}}),
        )
        .await;
    timer["id"].as_str().unwrap().to_owned()
}

fn attempt_header(c: &punctual_testkit::Call) -> String {
    c.headers["x-punctual-attempt"].to_str().unwrap().to_owned()
}

/// The scanner's longest wait between scans that find nothing, as long as the other
/// settings let it be (half the plan horizon: 5 s), beyond these tests' bounds (the
/// default is 2 s).
fn idle_scans_far_apart() -> (&'static str, String) {
    ("PUNCTUAL_SCAN_IDLE_INTERVAL_MS", "60000".to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_back_off_then_succeed_with_the_same_key() {
    let sink = Sink::start().await;
    // A scanner that found nothing for a while waits up to 5 s between scans: the
    // retries come on time only because a task made pending wakes it.
    let stack = Stack::start(&[idle_scans_far_apart()]).await;
    sink.behave("/flaky", Behaviour::fail_first(2, 503));
    let id = one_shot(&stack, &sink, "/flaky", json!({"max_attempts": 4, "initial_ms": 600, "multiplier": 2.0})).await;

    eventually(Duration::from_secs(20), "three calls", || async { (sink.calls().len() >= 3).then_some(()) }).await;
    assert!(stack.wait_settled(None).await, "the occurrence finished\n{}", dump_logs(&stack));
    let calls = sink.calls_to("/flaky");
    assert_eq!(calls.len(), 3, "two failures, then success, then nothing\n{}", dump_logs(&stack));
    assert!(calls.iter().all(|c| c.idempotency_key == calls[0].idempotency_key), "one identity for every attempt");
    assert_eq!(calls.iter().map(attempt_header).collect::<Vec<_>>(), vec!["1", "2", "3"]);
    // Waits of 600 ms then 1200 ms, each ±20 % jitter, plus up to a scan interval.
    let gap1 = calls[1].received_at - calls[0].received_at;
    let gap2 = calls[2].received_at - calls[1].received_at;
    println!("gaps: {} ms, {} ms", gap1.num_milliseconds(), gap2.num_milliseconds());
    assert!((480..=1_100).contains(&gap1.num_milliseconds()), "first wait {gap1}");
    assert!((960..=1_800).contains(&gap2.num_milliseconds()), "second wait {gap2}");

    let runs = stack.runs(&id).await;
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0]["status"].as_str(), runs[0]["attempt"].as_i64()), (Some("succeeded"), Some(3)));
    let failed = runs[0]["failed_attempts"].as_array().unwrap();
    assert_eq!(failed.len(), 2, "{runs:?}");
    assert!(failed.iter().all(|a| a["http_status"] == 503));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_failure_is_dead_lettered_and_can_be_replayed() {
    let sink = Sink::start().await;
    let stack = Stack::start(&[]).await;
    sink.behave("/down", Behaviour::fail_first(10, 500));
    sink.behave("/gone", Behaviour::fail_first(10, 404));
    let down = one_shot(&stack, &sink, "/down", json!({"max_attempts": 2, "initial_ms": 300})).await;
    let gone = one_shot(&stack, &sink, "/gone", json!({"max_attempts": 5, "initial_ms": 300})).await;

    let letters = read_topic(&stack.dead_topic, 2, Duration::from_secs(30)).await;
    assert_eq!(letters.len(), 2, "two dead letters\n{}", dump_logs(&stack));
    assert_eq!(sink.calls_to("/down").len(), 2, "max_attempts = 2");
    assert_eq!(sink.calls_to("/gone").len(), 1, "a 404 is not retried");
    for record in &letters {
        let letter: Value = serde_json::from_slice(&record.payload).unwrap();
        assert_eq!(letter["idempotency_key"], record.key.as_str());
        let (attempts, status) = if letter["timer_id"] == down.as_str() { (2, 500) } else { (1, 404) };
        assert_eq!(letter["attempts"], attempts, "{letter}");
        assert_eq!(letter["http_status"], status);
        assert!(letter["last_error"].as_str().unwrap().contains(&status.to_string()));
    }
    let dead: Value =
        stack.http.get(stack.admin.url("/v1/tasks?status=dead")).send().await.unwrap().json().await.unwrap();
    let dead = dead["tasks"].as_array().unwrap().clone();
    assert_eq!(dead.len(), 2);

    // The target is back: replaying runs the dead task once more, as a further attempt.
    sink.behave("/down", Behaviour::default());
    let task_id = dead.iter().find(|t| t["timer_id"] == down.as_str()).unwrap()["id"].as_i64().unwrap();
    let r = stack.http.post(stack.admin.url(&format!("/v1/tasks/{task_id}/replay"))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    eventually(Duration::from_secs(15), "the replayed task succeeds", || async {
        let runs = stack.runs(&down).await;
        (runs[0]["status"] == "succeeded").then_some(())
    })
    .await;
    let calls = sink.calls_to("/down");
    assert_eq!(calls.len(), 3);
    assert_eq!(attempt_header(&calls[2]), "3");
    // Replaying what is not dead is a conflict; an unknown task is not found.
    let again = stack.http.post(stack.admin.url(&format!("/v1/tasks/{task_id}/replay"))).send().await.unwrap();
    assert_eq!(again.status(), 409);
    let unknown = stack.http.post(stack.admin.url("/v1/tasks/999999999/replay")).send().await.unwrap();
    assert_eq!(unknown.status(), 404);
    assert_eq!(stack.runs(&gone).await[0]["status"], "dead");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured() {
    let sink = Sink::start().await;
    let stack = Stack::start(&[]).await;
    sink.behave("/busy", Behaviour { script: vec![429], retry_after: Some("2".into()), ..Default::default() });
    one_shot(&stack, &sink, "/busy", json!({"max_attempts": 3, "initial_ms": 100})).await;
    eventually(Duration::from_secs(20), "two calls", || async { (sink.calls().len() >= 2).then_some(()) }).await;
    let calls = sink.calls();
    let gap = calls[1].received_at - calls[0].received_at;
    assert!(gap >= chrono::Duration::milliseconds(1_950), "Retry-After: 2 honoured, waited {gap}");
    assert!(gap <= chrono::Duration::milliseconds(3_000), "but not much longer: {gap}");
}

/// A target that answers `429` with `Retry-After: 3` is called again 3 s later at the
/// earliest, as the same attempt: the occurrence is deferred, not failed, so even a timer
/// allowed a single attempt gets its call through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_target_defers_the_occurrence_without_counting_an_attempt() {
    let sink = Sink::start().await;
    let stack = Stack::start(&[]).await;
    sink.behave("/busy", Behaviour { script: vec![429], retry_after: Some("3".into()), ..Default::default() });
    let id = one_shot(&stack, &sink, "/busy", json!({"max_attempts": 1})).await;
    // While it waits, the run says why.
    let waiting = eventually(Duration::from_secs(20), "the run deferred", || async {
        let runs = stack.runs(&id).await;
        (runs.first()?["deferred_reason"] == "retry_after").then(|| runs[0].clone())
    })
    .await;
    // Waiting again (claimed already when its new due time is within the scanner's lookahead).
    assert!(matches!(waiting["status"].as_str(), Some("pending" | "claimed")), "{waiting}");
    assert_eq!(waiting["attempt"], 1, "{waiting}");
    let calls = eventually(Duration::from_secs(30), "a second call", || async {
        let calls = sink.calls_to("/busy");
        (calls.len() >= 2).then_some(calls)
    })
    .await;
    let gap = calls[1].received_at - calls[0].received_at;
    assert!(gap >= chrono::Duration::milliseconds(2_950), "Retry-After: 3 honoured, waited {gap}");
    assert_eq!((attempt_header(&calls[0]), attempt_header(&calls[1])), ("1".into(), "1".into()), "one attempt");
    assert!(stack.wait_settled(None).await, "the occurrence finished\n{}", dump_logs(&stack));
    let runs = stack.runs(&id).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!((runs[0]["status"].as_str(), runs[0]["attempt"].as_i64()), (Some("succeeded"), Some(1)), "{runs:?}");
    assert_eq!(runs[0]["deferred_reason"], Value::Null, "cleared by the outcome");
    let failed: i64 = sqlx::query_scalar("SELECT count(*) FROM task_attempts").fetch_one(&stack.db.pool).await.unwrap();
    assert_eq!(failed, 0, "no failed attempt on record");
    let metrics = stack.metrics(&stack.executor).await;
    assert_eq!(
        metric_value(&metrics, "punctual_deferred_total{reason=\"retry_after\"}"),
        Some(1.0),
        "counted deferred"
    );
    assert_eq!(metric_value(&metrics, "punctual_tasks_executed_total{outcome=\"retry\"}"), Some(0.0), "not as a retry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_action_publishes_once_with_the_identity_header() {
    let stack = Stack::start(&[]).await;
    let topic = unique_name("target");
    create_topic(&topic, 2).await;
    let listed = stack
        .http
        .patch(stack.admin.url("/v1/namespaces/default"))
        .json(&json!({"kafka_topics": [topic]}))
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200, "the namespace may publish to the topic");
    // The executor reads the policy within 5 s.
    let at = Utc::now() + chrono::Duration::seconds(6);
    let timer = stack
        .create_timer(&json!({"name": "to-kafka", "schedule": {"at": at},
            "action": {"kafka": {"topic": topic, "headers": {"x-env": "prod"}, "value": {"k": 1}}}}))
        .await;
    assert_eq!(timer["action"]["kafka"]["topic"], topic.as_str());
    let records = read_topic(&topic, 2, Duration::from_secs(15)).await;
    assert_eq!(records.len(), 1, "one message\n{}", dump_logs(&stack));
    let identity = punctual_shared::timer::task_identity(
        timer["id"].as_str().unwrap().parse().unwrap(),
        punctual_shared::schedule::to_millis(at),
    );
    let record = &records[0];
    assert_eq!(record.key, identity, "keyed by the occurrence");
    assert!(record.headers.contains(&("punctual-idempotency-key".to_owned(), identity.clone())));
    assert!(record.headers.contains(&("x-env".to_owned(), "prod".to_owned())));
    assert_eq!(serde_json::from_slice::<Value>(&record.payload).unwrap(), json!({"k": 1}));
    let runs = stack.runs(timer["id"].as_str().unwrap()).await;
    assert_eq!(runs[0]["status"], "succeeded");
    // A bad topic name is refused with the field named.
    let r = stack
        .http
        .post(stack.admin.url("/v1/timers"))
        .json(&json!({"name": "bad", "schedule": {"delay_ms": 1000}, "action": {"kafka": {"topic": "no spaces"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    assert_eq!(r.json::<Value>().await.unwrap()["field"], "action.kafka.topic");
}

/// `POST /v1/timers/{id}/trigger` runs a timer now, once, with an identity of its own,
/// through the scanner and an executor like any occurrence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_triggered_timer_runs_now_once() {
    let sink = Sink::start().await;
    let stack = Stack::start(&[]).await;
    // Its schedule fires only in an hour.
    let timer = stack
        .create_timer(&json!({"name": "hourly", "schedule": {"every_ms": 3_600_000},
            "action": {"http": {"url": sink.url("/now")}}}))
        .await;
    let id = timer["id"].as_str().unwrap();
    let r = stack.http.post(stack.admin.url(&format!("/v1/timers/{id}/trigger"))).send().await.unwrap();
    assert_eq!(r.status(), 202);
    let triggered: Value = r.json().await.unwrap();
    let calls = eventually(Duration::from_secs(30), "the triggered call", || async {
        let calls = sink.calls_to("/now");
        (!calls.is_empty()).then_some(calls)
    })
    .await;
    assert_eq!(calls[0].idempotency_key.as_deref(), triggered["idempotency_key"].as_str());
    assert!(stack.wait_settled(None).await, "the occurrence finished\n{}", dump_logs(&stack));
    assert_eq!(sink.calls_to("/now").len(), 1, "once");
    let succeeded: Vec<Value> = stack.runs(id).await.into_iter().filter(|r| r["status"] == "succeeded").collect();
    assert_eq!(succeeded.len(), 1, "{succeeded:?}");
    assert_eq!(succeeded[0]["scheduled_at"], triggered["scheduled_at"]);

    // A backfill of the last three hours of an hourly cron runs their three occurrences,
    // each under its own hour's identity.
    let hourly = stack
        .create_timer(&json!({"name": "on-the-hour", "schedule": {"cron": "0 0 * * * *"},
            "action": {"http": {"url": sink.url("/hourly")}}}))
        .await;
    let hourly_id = hourly["id"].as_str().unwrap();
    let now = Utc::now();
    let r = stack
        .http
        .post(stack.admin.url(&format!("/v1/timers/{hourly_id}/backfill")))
        .json(&json!({"from": now - chrono::Duration::hours(3), "to": now}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let calls = eventually(Duration::from_secs(30), "three backfilled calls", || async {
        let calls = sink.calls_to("/hourly");
        (calls.len() == 3).then_some(calls)
    })
    .await;
    let mut hours: Vec<String> = calls.iter().map(|c| c.idempotency_key.clone().unwrap()).collect();
    hours.sort();
    for (key, ago) in hours.iter().zip([2, 1, 0]) {
        let hour = now - chrono::Duration::hours(ago);
        let expected = format!("{hourly_id}:{}", hour.format("%Y-%m-%dT%H:00:00.000Z"));
        assert_eq!(key, &expected);
    }
}
