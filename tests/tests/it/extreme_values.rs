//! No value a user can store stops the planner: each extreme value, through the API and
//! through SQL, is refused or marked invalid while the other timers keep firing on time.

use std::time::Duration;

use chrono::{DateTime, DurationRound, Utc};
use punctual_testkit::extreme_values::{insert_statement, EXTREME_ROWS};
use punctual_testkit::stack::dump_logs;
use punctual_testkit::{eventually, Sink, Stack};
use serde_json::{json, Value};

const FIRES: i64 = 8;

/// API bodies, each with one value at the edge of its type, and the field the answer must
/// name.
fn extreme_bodies(url: &str) -> Vec<(Value, &'static str)> {
    let http = json!({"http": {"url": url}});
    let every_second = json!({"cron": "* * * * * *"});
    vec![
        (json!({"schedule": {"delay_ms": i64::MAX}}), "schedule.delay_ms"),
        (json!({"schedule": {"every_ms": i64::MAX}}), "schedule.every_ms"),
        (json!({"schedule": {"every_ms": 8_300_000_000_000_000i64}}), "schedule.every_ms"),
        (json!({"schedule": every_second, "catchup_window_ms": i64::MAX}), "catchup_window_ms"),
        (json!({"schedule": {"at": "+262142-12-31T00:00:00Z"}}), "schedule.at"),
        (json!({"schedule": {"at": "-4713-01-01T00:00:00Z"}}), "schedule.at"),
        (json!({"schedule": {"every_ms": 1000, "start_at": "-262143-01-01T00:00:00Z"}}), "schedule.start_at"),
        (json!({"schedule": {"cron": "* * * * * *", "end_at": "+200000-01-01T00:00:00Z"}}), "schedule.end_at"),
    ]
    .into_iter()
    .map(|(mut body, field)| {
        body["name"] = json!(format!("extreme {field}"));
        body["action"] = http.clone();
        (body, field)
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extreme_values_are_refused_or_marked_invalid_while_other_timers_fire_on_time() {
    let sink = Sink::start().await;
    let stack = Stack::start(&[]).await;
    let start = (Utc::now() + chrono::Duration::seconds(3)).duration_trunc(chrono::Duration::seconds(1)).unwrap();
    let steady = stack
        .create_timer(&json!({"name": "steady",
            "schedule": {"cron": "* * * * * *", "start_at": start, "end_at": start + chrono::Duration::seconds(FIRES)},
            "action": {"http": {"url": sink.url("/steady")}}}))
        .await;
    let steady_id = steady["id"].as_str().unwrap().to_owned();

    // Through the API: 422 naming the field, and nothing written.
    for (body, field) in extreme_bodies(&sink.url("/never")) {
        let r = stack.http.post(stack.admin.url("/v1/timers")).json(&body).send().await.unwrap();
        let status = r.status().as_u16();
        let content_type = r.headers()["content-type"].to_str().unwrap().to_owned();
        let problem: Value = r.json().await.unwrap();
        assert_eq!((status, problem["field"].as_str()), (422, Some(field)), "{body}: {problem}");
        assert_eq!(content_type, "application/problem+json");
    }
    // A PATCH to such a value too, and the timer stays as it was.
    let patch = json!({"revision": steady["revision"], "catchup_window_ms": i64::MAX});
    let r = stack.http.patch(stack.admin.url(&format!("/v1/timers/{steady_id}"))).json(&patch).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 422);
    let listed: Value =
        stack.http.get(stack.admin.url("/v1/timers?limit=100")).send().await.unwrap().json().await.unwrap();
    let names: Vec<&str> = listed["timers"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["steady"], "nothing but the steady timer was written");

    // Through SQL: the schema refuses them.
    for (column, columns, values) in EXTREME_ROWS {
        let err = sqlx::query(&insert_statement(columns, values, &sink.url("/never")))
            .execute(&stack.db.pool)
            .await
            .expect_err(column);
        assert!(err.to_string().contains("timers_values_in_range"), "{column}: {err}");
    }
    // Rows stored before the schema checked them (the check dropped to write them): the
    // running scanner marks each invalid with its reason, and goes on planning.
    sqlx::query("ALTER TABLE timers DROP CONSTRAINT timers_values_in_range").execute(&stack.db.pool).await.unwrap();
    for (_, columns, values) in EXTREME_ROWS {
        sqlx::query(&insert_statement(columns, values, &sink.url("/never"))).execute(&stack.db.pool).await.unwrap();
    }
    let invalid = eventually(Duration::from_secs(20), "every stored extreme row marked invalid", || async {
        let rows: Vec<(String, Option<String>)> =
            sqlx::query_as("SELECT plan_status, invalid_reason FROM timers WHERE name LIKE 'sql %'")
                .fetch_all(&stack.db.pool)
                .await
                .unwrap();
        rows.iter().all(|(status, _)| status == "invalid").then_some(rows)
    })
    .await;
    for (column, _, _) in EXTREME_ROWS {
        assert!(
            invalid.iter().any(|(_, reason)| reason.as_deref().is_some_and(|r| r.starts_with(&format!("{column}:")))),
            "no row marked invalid for {column}: {invalid:?}"
        );
    }

    // Meanwhile the steady timer fired every second, on time.
    let fires = eventually(Duration::from_secs(30), "every steady occurrence", || async {
        let calls = sink.calls_to("/steady");
        (calls.len() >= FIRES as usize).then_some(calls)
    })
    .await;
    let mut lags = Vec::new();
    for (s, call) in fires.iter().enumerate() {
        let due: DateTime<Utc> = start + chrono::Duration::seconds(s as i64);
        assert_eq!(call.scheduled_at(), Some(due));
        let lag = call.received_at - due;
        assert!(lag <= chrono::Duration::seconds(1), "fired {lag} late\n{}", dump_logs(&stack));
        lags.push(lag.num_milliseconds());
    }
    println!("steady timer lags (ms): {lags:?}");
    assert!(sink.calls_to("/never").is_empty());
    let health = stack.http.get(stack.scanner.url("/healthz")).send().await.unwrap();
    assert!(health.status().is_success());
}
