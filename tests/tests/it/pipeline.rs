//! End to end on the real stack: Postgres → scanner → Kafka → executor → HTTP sink →
//! Postgres, with every service a separate process.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, DurationRound, Utc};
use punctual_testkit::stack::{dump_logs, metric_value};
use punctual_testkit::{eventually, Behaviour, Call, Sink, Stack};
use serde_json::json;

fn whole_seconds_from_now(s: i64) -> DateTime<Utc> {
    (Utc::now() + chrono::Duration::seconds(s)).duration_trunc(chrono::Duration::seconds(1)).unwrap()
}

fn ms(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// Counts calls per Idempotency-Key.
fn by_key(calls: &[Call]) -> HashMap<String, Vec<&Call>> {
    let mut m: HashMap<String, Vec<&Call>> = HashMap::new();
    for c in calls {
        m.entry(c.idempotency_key.clone().unwrap_or_default()).or_default().push(c);
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_and_sql_timers_fire_once_each_on_time() {
    let sink = Sink::start().await;
    // Tasks are published a second before they are due (the default is 200 ms), so that
    // an executor that did not hold them until then would fire them a second early.
    let stack = Stack::start(&[("PUNCTUAL_PUBLISH_LEAD_MS", "1000".into())]).await;

    let once_at = Utc::now() + chrono::Duration::milliseconds(2_500);
    let once = stack
        .create_timer(&json!({"name": "once", "schedule": {"at": once_at},
            "action": {"http": {"url": sink.url("/once"), "headers": {"X-Env": "prod"}, "body": {"k": 1}}}}))
        .await;
    let delay = stack
        .create_timer(&json!({"name": "delay", "schedule": {"delay_ms": 2_000},
            "action": {"http": {"method": "PUT", "url": sink.url("/delay")}}}))
        .await;
    let start = whole_seconds_from_now(2);
    let cron = stack
        .create_timer(&json!({"name": "cron", "schedule": {"cron": "* * * * * *", "start_at": start, "end_at": start + chrono::Duration::seconds(5)},
            "action": {"http": {"url": sink.url("/cron")}}}))
        .await;
    let sql_at = Utc::now() + chrono::Duration::seconds(3);
    let sql_id: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO timers (namespace, name, schedule_kind, run_at, http_url, http_body)
         VALUES ('ops', 'sql-once', 'once', $1, $2, '\"plain text\"') RETURNING id",
    )
    .bind(sql_at)
    .bind(sink.url("/sql"))
    .fetch_one(&stack.db.pool)
    .await
    .unwrap();

    let id = |v: &serde_json::Value| v["id"].as_str().unwrap().to_owned();
    let delay_at: DateTime<Utc> = serde_json::from_value(delay["next_fire_times"][0].clone()).unwrap();
    let expected: Vec<(String, String, DateTime<Utc>)> = [
        ("/once", id(&once), punctual_shared::schedule::to_millis(once_at)),
        ("/delay", id(&delay), delay_at),
        ("/sql", sql_id.to_string(), punctual_shared::schedule::to_millis(sql_at)),
    ]
    .into_iter()
    .map(|(p, i, t)| (p.to_owned(), i, t))
    .chain((0..5).map(|s| ("/cron".to_owned(), id(&cron), start + chrono::Duration::seconds(s))))
    .collect();

    let want = expected.len();
    eventually(Duration::from_secs(30), "every expected callback", || async {
        (sink.calls().len() >= want).then_some(())
    })
    .await;
    // Anything fired twice would have been called by the time nothing due is unfinished.
    assert!(stack.wait_settled(None).await, "everything due finished\n{}", dump_logs(&stack));

    let calls = sink.calls();
    let keys = by_key(&calls);
    let mut report = Vec::new();
    for (path, timer_id, at) in &expected {
        let key = format!("{timer_id}:{}", ms(*at));
        let got = keys.get(&key).map_or(0, Vec::len);
        assert_eq!(got, 1, "{path} {key} received {got} times\n{}", dump_logs(&stack));
        let call = keys[&key][0];
        assert_eq!(&call.path, path);
        let lag = call.received_at - *at;
        report.push(format!("{path} lag {} ms", lag.num_milliseconds()));
        assert!(lag >= chrono::Duration::zero(), "{path} fired early by {lag}");
        assert!(lag <= chrono::Duration::seconds(1), "{path} fired {lag} late");
    }
    assert_eq!(calls.len(), want, "no call beyond the expected ones: {:?}", keys.keys().collect::<Vec<_>>());
    println!("{}", report.join("\n"));

    let once_call = &sink.calls_to("/once")[0];
    assert_eq!(once_call.method, "POST");
    assert_eq!(once_call.headers["x-env"], "prod");
    assert_eq!(once_call.headers["content-type"], "application/json");
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&once_call.body).unwrap(), json!({"k": 1}));
    assert_eq!(sink.calls_to("/delay")[0].method, "PUT");
    assert_eq!(&sink.calls_to("/sql")[0].body[..], b"plain text");

    // Every task row ends succeeded, with the answer's code and the call's duration, and
    // started when it was due, not when its message arrived.
    let rows: Vec<(String, Option<i16>, Option<i32>, bool)> = sqlx::query_as(
        "SELECT status, http_status, duration_ms, started_at >= scheduled_at FROM tasks ORDER BY scheduled_at",
    )
    .fetch_all(&stack.db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), want);
    for (status, code, duration, started_in_time) in &rows {
        assert_eq!((status.as_str(), *code), ("succeeded", Some(200)));
        assert!(duration.is_some());
        assert!(started_in_time, "a task's started_at is before its scheduled_at: {rows:?}");
    }
    let runs = stack.runs(&id(&cron)).await;
    assert_eq!(runs.len(), 5);
    assert!(runs.iter().all(|r| r["status"] == "succeeded" && r["http_status"] == 200));

    let executor_metrics = stack.metrics(&stack.executor).await;
    assert_eq!(
        metric_value(&executor_metrics, "punctual_tasks_executed_total{outcome=\"succeeded\"}"),
        Some(want as f64)
    );
    assert!(metric_value(&executor_metrics, "punctual_fire_lag_seconds_count").unwrap() >= want as f64);
    let scanner_metrics = stack.metrics(&stack.scanner).await;
    assert_eq!(metric_value(&scanner_metrics, "punctual_tasks_published_total"), Some(want as f64));
}

/// How soon after a pause no occurrence of the timer starts: the publish lead, and a margin
/// for a busy machine.
const PAUSE_LANDS_WITHIN_MS: i64 = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_firing_and_resume_restarts_without_the_missed_occurrences() {
    let sink = Sink::start().await;
    let stack = Stack::start(&[]).await;
    let timer = stack
        .create_timer(&json!({"name": "ticker", "schedule": {"cron": "* * * * * *"}, "action": {"http": {"url": sink.url("/tick")}}}))
        .await;
    let id = timer["id"].as_str().unwrap().to_owned();
    eventually(Duration::from_secs(15), "two ticks", || async { (sink.calls().len() >= 2).then_some(()) }).await;

    stack.timer_action(&id, "pause").await;
    let paused_at = Utc::now();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let during_pause = sink.calls().len();
    let resumed_at = Utc::now();
    stack.timer_action(&id, "resume").await;
    eventually(Duration::from_secs(15), "three ticks after resume", || async {
        let after = sink.calls().iter().filter(|c| c.scheduled_at().unwrap() >= resumed_at).count();
        (after >= 3).then_some(())
    })
    .await;

    let calls = sink.calls();
    let keys = by_key(&calls);
    assert!(keys.values().all(|v| v.len() == 1), "no occurrence twice\n{}", dump_logs(&stack));
    // Occurrences while paused are not fired, then or later; allow for the one in flight
    // when the pause landed: an executor starts an occurrence when its message arrives, up
    // to the publish lead (200 ms) before it is due, and one started runs.
    let landed = paused_at + chrono::Duration::milliseconds(PAUSE_LANDS_WITHIN_MS);
    let fired_while_paused: Vec<_> =
        calls.iter().filter_map(Call::scheduled_at).filter(|t| *t > landed && *t < resumed_at).collect();
    assert!(fired_while_paused.is_empty(), "fired while paused: {fired_while_paused:?}");
    assert!(during_pause <= calls.len());
    // What the pause skipped is on record as cancelled, not left pending.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let runs = stack.runs(&id).await;
    let skipped = runs
        .iter()
        .filter(|r| {
            let at: DateTime<Utc> = serde_json::from_value(r["scheduled_at"].clone()).unwrap();
            at > landed && at < resumed_at - chrono::Duration::milliseconds(100)
        })
        .collect::<Vec<_>>();
    assert!(skipped.len() >= 3, "{skipped:?}");
    assert!(skipped.iter().all(|r| r["status"] == "cancelled"), "{skipped:?}");
}

/// `PUNCTUAL_MAX_IN_FLIGHT` bounds the tasks an executor has at once, from the message's
/// arrival to its outcome's write-back, whatever the target would take: it is what keeps
/// the executor's memory flat under a backlog (docs/bench/history.md, items 12 and 18). With a
/// bound of 4, twelve occurrences due together reach a target that answers in 600 ms in
/// waves of at most four; without it, all twelve would arrive together (16 calls at once
/// per target are allowed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_has_at_most_max_in_flight_tasks_at_once() {
    const BOUND: usize = 4;
    const ANSWER: Duration = Duration::from_millis(600);
    let sink = Sink::start().await;
    sink.behave("/slow", Behaviour::slow(ANSWER));
    let stack = Stack::start(&[("PUNCTUAL_MAX_IN_FLIGHT", BOUND.to_string())]).await;
    let due = whole_seconds_from_now(3);
    for i in 0..3 * BOUND {
        stack
            .create_timer(&json!({"name": format!("slow-{i}"), "schedule": {"at": due},
                "action": {"http": {"url": sink.url("/slow")}}}))
            .await;
    }
    eventually(Duration::from_secs(30), "every call", || async { (sink.calls().len() >= 3 * BOUND).then_some(()) })
        .await;

    let mut received: Vec<DateTime<Utc>> = sink.calls().iter().map(|c| c.received_at).collect();
    received.sort();
    let waves: Vec<i64> = received.iter().map(|t| (*t - received[0]).num_milliseconds()).collect();
    // A slot is free again only once a call has been answered and its outcome written, so
    // the call after any `BOUND` in a row arrives at least an answer's time after the first
    // of them (less a margin for scheduling; every time here is the sink's own clock).
    for k in 0..received.len() - BOUND {
        let apart = received[k + BOUND] - received[k];
        assert!(
            apart >= chrono::Duration::milliseconds(ANSWER.as_millis() as i64 - 100),
            "calls {k} and {} arrived {} ms apart; arrivals (ms after the first): {waves:?}\n{}",
            k + BOUND,
            apart.num_milliseconds(),
            dump_logs(&stack)
        );
    }
    println!("arrivals, ms after the first: {waves:?}");
}
