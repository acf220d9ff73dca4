//! The REST API in-process against a real Postgres: shapes, errors, and that bad input
//! leaves nothing behind.

use crate::common::{example, spawn_api, spawn_api_with, test_config, Api};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

#[tokio::test]
async fn create_get_list_pause_resume_delete() {
    let api = spawn_api().await;
    let (status, _, timer) = api.post("/v1/timers", &example()).await;
    assert_eq!(status, 201, "{timer}");
    let id = timer["id"].as_str().unwrap().to_owned();
    assert_eq!(timer["schedule"], json!({"cron":"0 0 2 * * *","timezone":"Europe/Berlin","dst_gap":"next_valid"}));
    assert_eq!(timer["retry"], json!({"max_attempts":3,"initial_ms":1000,"multiplier":2.0,"max_ms":60000}));
    assert_eq!(
        (timer["misfire_policy"].as_str(), timer["overlap_policy"].as_str()),
        (Some("fire_once"), Some("allow"))
    );
    assert_eq!(timer["action"]["http"]["headers"], json!({"X-Env":"prod"}));
    assert_eq!(timer["state"], "active");
    let fires = timer["next_fire_times"].as_array().unwrap();
    assert_eq!(fires.len(), 5);
    // 02:00 in Berlin is 01:00 UTC in winter, 00:00 UTC in summer.
    assert!(
        fires.iter().all(|t| {
            let t = t.as_str().unwrap();
            t.contains("T01:00:00") || t.contains("T00:00:00")
        }),
        "{fires:?}"
    );

    let (status, _, got) = api.get(&format!("/v1/timers/{id}")).await;
    assert_eq!((status, &got["name"]), (200, &json!("nightly-invoices")));
    let (_, _, list) = api.get("/v1/timers?namespace=billing").await;
    assert_eq!(list["timers"].as_array().unwrap().len(), 1);
    let (_, _, other) = api.get("/v1/timers?namespace=other").await;
    assert!(other["timers"].as_array().unwrap().is_empty());

    let (status, _, paused) = api.post(&format!("/v1/timers/{id}/pause"), &json!({})).await;
    assert_eq!((status, &paused["state"]), (200, &json!("paused")));
    assert!(paused["next_fire_times"].as_array().unwrap().is_empty());
    let (status, _, resumed) = api.post(&format!("/v1/timers/{id}/resume"), &json!({})).await;
    assert_eq!((status, &resumed["state"]), (200, &json!("active")));
    assert_eq!(resumed["plan_status"], "new", "a resumed timer goes back to the planner");

    let (status, _, runs) = api.get(&format!("/v1/timers/{id}/runs")).await;
    assert_eq!((status, runs["runs"].as_array().unwrap().len()), (200, 0));

    assert_eq!(api.delete(&format!("/v1/timers/{id}")).await, 204);
    assert_eq!(api.get(&format!("/v1/timers/{id}")).await.0, 404);
    assert_eq!(api.delete(&format!("/v1/timers/{id}")).await, 404);
    // A deleted timer frees its name.
    assert_eq!(api.post("/v1/timers", &example()).await.0, 201);
}

/// A listing narrowed by a name prefix (LIKE's own characters matching themselves) and by
/// state, as the console's filters ask for it.
#[tokio::test]
async fn timers_are_listed_by_name_prefix_and_state() {
    let api = spawn_api().await;
    let mut ids = std::collections::HashMap::new();
    for name in ["report_daily", "report-weekly", "reportXdaily", "cleanup"] {
        let mut body = example();
        body["name"] = json!(name);
        let (status, _, timer) = api.post("/v1/timers", &body).await;
        assert_eq!(status, 201, "{timer}");
        ids.insert(name, timer["id"].as_str().unwrap().to_owned());
    }
    api.post(&format!("/v1/timers/{}/pause", ids["report-weekly"]), &json!({})).await;
    let names = |list: &Value| {
        let mut names: Vec<String> =
            list["timers"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect();
        names.sort();
        names
    };
    let (_, _, list) = api.get("/v1/timers?namespace=billing&name_prefix=report").await;
    assert_eq!(names(&list), ["report-weekly", "reportXdaily", "report_daily"]);
    let (_, _, list) = api.get("/v1/timers?namespace=billing&name_prefix=report_").await;
    assert_eq!(names(&list), ["report_daily"], "_ matches itself, not any character");
    let (_, _, list) = api.get("/v1/timers?namespace=billing&state=paused").await;
    assert_eq!(names(&list), ["report-weekly"]);
    let (_, _, list) = api.get("/v1/timers?namespace=billing&name_prefix=report&state=active").await;
    assert_eq!(names(&list), ["reportXdaily", "report_daily"]);
    let (status, _, problem) = api.get("/v1/timers?state=deleted").await;
    assert_eq!((status, &problem["field"]), (422, &json!("state")), "{problem}");
    let (status, _, problem) = api.get("/v1/timers?state=sleeping").await;
    assert_eq!(status, 400, "{problem}");
}

#[tokio::test]
async fn each_schedule_kind_is_accepted() {
    let api = spawn_api().await;
    let at = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    for (name, schedule) in [
        ("once", json!({"at": at})),
        ("delay", json!({"delay_ms": 1500})),
        ("interval", json!({"every_ms": 60000})),
        ("crontab", json!({"cron": "*/5 * * * *"})),
    ] {
        let body =
            json!({"name": name, "schedule": schedule, "action": {"http": {"url": "https://hooks.example.com/x"}}});
        let (status, _, timer) = api.post("/v1/timers", &body).await;
        assert_eq!(status, 201, "{name}: {timer}");
        assert_eq!(timer["namespace"], "default");
        assert_eq!(timer["action"]["http"]["method"], "POST");
        assert!(!timer["next_fire_times"].as_array().unwrap().is_empty(), "{name}");
    }
    for (kind, name) in [("once", "once"), ("delay", "delay"), ("interval", "interval"), ("cron", "crontab")] {
        let (status, _, list) = api.get(&format!("/v1/timers?schedule_kind={kind}")).await;
        let names: Vec<&str> = list["timers"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!((status, names), (200, vec![name]), "listed by schedule kind {kind}");
    }
    let (status, _, problem) = api.get("/v1/timers?schedule_kind=weekly").await;
    assert_eq!(status, 400, "{problem}");
}

#[tokio::test]
async fn bad_input_is_a_problem_naming_the_field_and_writes_nothing() {
    let api = spawn_api().await;
    let with = |pointer: &str, value: Value| {
        let mut v = example();
        *v.pointer_mut(pointer).unwrap() = value;
        v
    };
    let cases: Vec<(Value, u16, &str)> = vec![
        (with("/schedule", json!({"cron": "99 * * * * *"})), 422, "schedule.cron"),
        // Literal addresses callbacks may not reach (PUNCTUAL_CALLBACK_ALLOW is empty).
        (with("/action/http/url", json!("http://127.0.0.1:8080/hook")), 422, "action.http.url"),
        (with("/action/http/url", json!("http://[::1]/hook")), 422, "action.http.url"),
        (with("/action/http/url", json!("http://169.254.169.254/latest/meta-data/")), 422, "action.http.url"),
        (with("/action/http/url", json!("http://10.0.0.1/")), 422, "action.http.url"),
        (with("/action/http/url", json!("http://[::ffff:7f00:1]/")), 422, "action.http.url"),
        (with("/schedule", json!({"cron": "* * * * * *", "timezone": "Atlantis/Capital"})), 422, "schedule.timezone"),
        (with("/schedule", json!({})), 422, "schedule"),
        (with("/schedule", json!({"every_ms": 10})), 422, "schedule.every_ms"),
        (with("/schedule", json!({"cron": "0 0 30 2 *"})), 422, "schedule.cron"),
        (with("/schedule", json!({"cron": "0 0 31 4,6,9,11 *"})), 422, "schedule.cron"),
        (with("/schedule", json!({"cron": "@reboot"})), 422, "schedule.cron"),
        (with("/schedule", json!({"delay_ms": i64::MAX})), 422, "schedule.delay_ms"),
        (with("/schedule", json!({"at": "+200000-01-01T00:00:00Z"})), 422, "schedule.at"),
        (
            {
                let mut v = example();
                v["catchup_window_ms"] = json!(i64::MAX);
                v
            },
            422,
            "catchup_window_ms",
        ),
        (with("/schedule", json!({"at": "tomorrow"})), 400, "schedule.at"),
        (with("/action/http/url", json!("file:///etc/passwd")), 422, "action.http.url"),
        (with("/action/http/timeout_ms", json!(-1)), 422, "action.http.timeout_ms"),
        (with("/action/http/timeout_ms", json!("soon")), 400, "action.http.timeout_ms"),
        (with("/action", json!({})), 422, "action"),
        (with("/namespace", json!("UPPER")), 422, "namespace"),
        (with("/name", json!(42)), 400, "name"),
        (with("/action/http/headers", json!({"X-Ok": "a\r\nInjected: yes"})), 422, "action.http.headers.X-Ok"),
        (
            json!({"name": "x", "schedule": {"delay_ms": 1}, "action": {"http": {"url": "http://a/"}}, "colour": "red"}),
            400,
            "colour",
        ),
    ];
    for (body, want_status, want_field) in cases {
        let (status, content_type, problem) = api.post("/v1/timers", &body).await;
        assert_eq!(status, want_status, "{body} → {problem}");
        assert_eq!(content_type.as_deref(), Some("application/problem+json"));
        assert_eq!(problem["status"], want_status);
        assert_eq!(problem["field"], want_field, "{problem}");
        assert!(problem["detail"].as_str().unwrap().contains(want_field), "{problem}");
    }
    let (status, content_type, problem) = api.post_raw("/v1/timers", "{not json", "application/json").await;
    assert_eq!((status, content_type.as_deref()), (400, Some("application/problem+json")), "{problem}");
    let (status, _, _) = api.post_raw("/v1/timers", &example().to_string(), "text/plain").await;
    assert_eq!(status, 400);
    assert_eq!(api.timer_count().await, 0, "nothing half-written");

    assert_eq!(api.post("/v1/timers", &example()).await.0, 201);
    let (status, _, problem) = api.post("/v1/timers", &example()).await;
    assert_eq!((status, &problem["field"]), (409, &json!("name")), "{problem}");
    assert_eq!(api.timer_count().await, 1);
}

#[tokio::test]
async fn unknown_and_malformed_ids() {
    let api = spawn_api().await;
    let missing = uuid::Uuid::new_v4();
    for path in [format!("/v1/timers/{missing}"), format!("/v1/timers/{missing}/runs")] {
        let (status, ct, problem) = api.get(&path).await;
        assert_eq!((status, ct.as_deref()), (404, Some("application/problem+json")), "{problem}");
    }
    assert_eq!(api.post(&format!("/v1/timers/{missing}/pause"), &json!({})).await.0, 404);
    let (status, _, problem) = api.get("/v1/timers/not-a-uuid").await;
    assert_eq!((status, &problem["field"]), (400, &json!("id")));
    let (status, _, problem) = api.get("/v1/timers?limit=0").await;
    assert_eq!((status, &problem["field"]), (400, &json!("limit")));
    let (status, _, body) = api.get("/healthz").await;
    assert_eq!(status, 200, "{body}");
    let (status, _, metrics) = api.get("/metrics").await;
    assert_eq!(status, 200);
    assert!(metrics.as_str().unwrap().contains("punctual_timers_created_total"));
}

#[tokio::test]
async fn patch_changes_the_timer_conditional_on_its_revision() {
    let api = spawn_api().await;
    let (_, _, timer) = api.post("/v1/timers", &example()).await;
    assert_eq!((timer["version"].as_i64(), timer["revision"].as_i64()), (Some(1), Some(1)));
    let id = timer["id"].as_str().unwrap().to_owned();
    let patch = |body: Value| {
        let client = api.client.clone();
        let url = format!("{}/v1/timers/{id}", api.base);
        async move { Api::read(client.patch(url).json(&body).send().await.unwrap()).await }
    };
    let (status, _, changed) = patch(json!({"revision": 1, "schedule": {"every_ms": 60000}, "overlap_policy": "skip",
                                            "retry": {"max_attempts": 5}}))
    .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!((changed["version"].as_i64(), changed["revision"].as_i64()), (Some(2), Some(2)));
    assert_eq!(changed["schedule"], json!({"every_ms": 60000}));
    assert_eq!(changed["overlap_policy"], "skip");
    assert_eq!(changed["retry"]["max_attempts"], 5);
    assert_eq!(changed["action"], timer["action"], "what the patch does not name stays");
    assert_eq!(changed["plan_status"], "new", "re-planned with the new schedule");

    // A writer holding the old revision loses, and nothing is written.
    let (status, ct, problem) = patch(json!({"revision": 1, "name": "other"})).await;
    assert_eq!(
        (status, ct.as_deref(), &problem["field"]),
        (409, Some("application/problem+json"), &json!("revision")),
        "{problem}"
    );
    let (_, _, now) = api.get(&format!("/v1/timers/{id}")).await;
    assert_eq!((now["name"].as_str(), now["revision"].as_i64()), (Some("nightly-invoices"), Some(2)));

    // A change of name, retry or policy leaves the version (the tasks planned stay) but
    // bumps the revision: of two writers who read revision 2, the second loses.
    for (first, second) in [
        (json!({"name": "renamed"}), json!({"name": "renamed-again"})),
        (json!({"retry": {"max_attempts": 2}}), json!({"retry": {"max_attempts": 9}})),
        (json!({"misfire_policy": "skip"}), json!({"misfire_policy": "fire_all"})),
        (json!({"catchup_window_ms": 1000}), json!({"catchup_window_ms": 2000})),
        (json!({"overlap_policy": "allow"}), json!({"overlap_policy": "buffer_one"})),
    ] {
        let (_, _, read) = api.get(&format!("/v1/timers/{id}")).await;
        let revision = read["revision"].as_i64().unwrap();
        let with_revision = |mut body: Value| {
            body["revision"] = json!(revision);
            body
        };
        let (status, _, won) = patch(with_revision(first.clone())).await;
        assert_eq!((status, won["revision"].as_i64(), won["version"].as_i64()), (200, Some(revision + 1), Some(2)));
        let (status, _, problem) = patch(with_revision(second.clone())).await;
        assert_eq!((status, &problem["field"]), (409, &json!("revision")), "{second}: {problem}");
    }
    let (_, _, paused) = api.post(&format!("/v1/timers/{id}/pause"), &json!({})).await;
    let (_, _, before) = api.get(&format!("/v1/timers/{id}")).await;
    assert_eq!(paused["revision"], before["revision"]);
    assert_eq!(paused["revision"].as_i64(), Some(8), "a pause is a change too");

    for (body, status, field) in [
        (json!({"schedule": {"every_ms": 60000}}), 400, "revision"),
        (json!({"version": 2, "schedule": {"every_ms": 60000}}), 400, "revision"),
        (json!({"revision": "8"}), 400, "revision"),
        (json!({"revision": 8, "schedule": {"cron": "nope"}}), 422, "schedule.cron"),
        (json!({"revision": 8, "namespace": "elsewhere"}), 422, "namespace"),
        (json!({"revision": 8, "colour": "red"}), 400, "colour"),
        (json!({"revision": 8, "overlap_policy": "sometimes"}), 400, "overlap_policy"),
    ] {
        let (got, _, problem) = patch(body.clone()).await;
        assert_eq!((got, &problem["field"]), (status, &json!(field)), "{body} → {problem}");
    }
    let (_, _, after) = api.get(&format!("/v1/timers/{id}")).await;
    assert_eq!(after["revision"], 8, "rejected patches write nothing");
}

#[tokio::test]
async fn signing_secrets_are_shown_once_bounded_and_checked() {
    let api = spawn_api().await;
    let path = "/v1/namespaces/billing/signing-secrets";
    let (status, _, created) = api.post_raw(path, "", "application/json").await;
    assert_eq!(status, 201, "{created}");
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    let brought = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let (status, _, second) = api.post(path, &json!({"secret": brought})).await;
    assert_eq!((status, second["secret"].as_str()), (201, Some(brought)));

    let (status, _, listed) = api.get(path).await;
    assert_eq!(status, 200);
    let text = listed.to_string();
    assert!(!text.contains(&secret) && !text.contains(brought), "never shown again: {text}");
    assert_eq!(listed["signing_secrets"].as_array().unwrap().len(), 2);
    assert_eq!(listed["signing_secrets"][1]["prefix"], "whsec_MfKQ…");
    let (_, _, other) = api.get("/v1/namespaces/other/signing-secrets").await;
    assert_eq!(other["signing_secrets"], json!([]), "namespaces are apart");

    for (body, field) in [
        (json!({"secret": "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}), "secret"),
        (json!({"secret": "whsec_c2hvcnQ="}), "secret"),
        (json!({"secret": "whsec_***"}), "secret"),
    ] {
        let (status, ct, problem) = api.post(path, &body).await;
        assert_eq!((status, ct.as_deref(), &problem["field"]), (422, Some("application/problem+json"), &json!(field)));
    }
    let (status, _, problem) = api.post(path, &json!({"key": "x"})).await;
    assert_eq!(status, 400, "{problem}");
    let (status, _, problem) = api.post("/v1/namespaces/Not%20Valid/signing-secrets", &json!({})).await;
    assert_eq!((status, &problem["field"]), (422, &json!("namespace")));

    for _ in 0..3 {
        assert_eq!(api.post(path, &json!({})).await.0, 201);
    }
    let (status, _, problem) = api.post(path, &json!({})).await;
    assert_eq!(status, 409, "five at most: {problem}");

    let id = created["id"].as_str().unwrap();
    assert_eq!(api.delete(&format!("/v1/namespaces/other/signing-secrets/{id}")).await, 404, "another namespace's");
    assert_eq!(api.delete(&format!("{path}/{id}")).await, 204);
    assert_eq!(api.delete(&format!("{path}/{id}")).await, 404);
    assert_eq!(api.delete(&format!("{path}/not-an-id")).await, 404);
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM signing_secrets").fetch_one(&api.db.pool).await.unwrap();
    assert_eq!(stored, 4);
}

#[tokio::test]
async fn every_error_is_a_problem_and_oversized_or_nul_input_writes_nothing() {
    let api = spawn_api().await;
    let is_problem = |status: u16, ct: &Option<String>, problem: &Value, want: u16, kind: &str| {
        assert_eq!((status, ct.as_deref()), (want, Some("application/problem+json")), "{problem}");
        assert_eq!(problem["type"], format!("urn:punctual:problem:{kind}"), "{problem}");
        assert_eq!(problem["status"], want);
    };
    let (status, ct, problem) = api.get("/v1/nothing").await;
    is_problem(status, &ct, &problem, 404, "not-found");
    let r = api.client.put(format!("{}/v1/timers", api.base)).send().await.unwrap();
    assert!(r.headers()["allow"].to_str().unwrap().contains("POST"));
    let (status, ct, problem) = Api::read(r).await;
    is_problem(status, &ct, &problem, 405, "method-not-allowed");
    let huge = format!("{{\"name\": \"{}\"}}", "x".repeat(punctual_admin::MAX_BODY_BYTES));
    let (status, ct, problem) = api.post_raw("/v1/timers", &huge, "application/json").await;
    is_problem(status, &ct, &problem, 413, "payload-too-large");
    let (status, ct, problem) = api.post_raw("/v1/timers", "{", "application/json").await;
    is_problem(status, &ct, &problem, 400, "malformed-request");

    // NUL characters, which Postgres cannot store: named, never a 500.
    let (status, ct, problem) = api.get("/v1/timers?namespace=a%00b").await;
    is_problem(status, &ct, &problem, 400, "malformed-request");
    assert_eq!(problem["field"], "namespace");
    let (status, _, problem) = api.get("/v1/tasks?status=dead%00").await;
    assert_eq!((status, &problem["field"]), (400, &json!("status")));
    let with = |pointer: &str, value: Value| {
        let mut body = example();
        *body.pointer_mut(pointer).unwrap() = value;
        body
    };
    let long_url = format!("https://hooks.example.com/{}", "a".repeat(2048));
    let many_headers: serde_json::Map<String, Value> = (0..33).map(|i| (format!("X-H{i}"), json!("v"))).collect();
    for (body, field) in [
        (with("/action/http/body", json!({"k": ["x", "a\u{0}b"]})), "action.http.body.k[1]"),
        (with("/action/http/url", json!("https://hooks.example.com/\u{0}")), "action.http.url"),
        (with("/name", json!("a\u{0}")), "name"),
        (with("/action/http/url", json!(long_url)), "action.http.url"),
        (with("/action/http/headers", Value::Object(many_headers)), "action.http.headers"),
        (with("/action/http/headers", json!({"X-Big": "v".repeat(4097)})), "action.http.headers.X-Big"),
        (with("/action/http/headers", json!({"x".repeat(257): "v"})), "action.http.headers"),
    ] {
        let (status, ct, problem) = api.post("/v1/timers", &body).await;
        is_problem(status, &ct, &problem, 422, "invalid-field");
        assert_eq!(problem["field"], field, "{problem}");
        assert!(problem.to_string().len() < 1024, "the answer does not echo the input: {problem}");
    }
    assert_eq!(api.timer_count().await, 0);
}

#[tokio::test]
async fn a_client_stalled_in_its_head_or_body_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let api = spawn_api().await;
    let addr = api.base.trim_start_matches("http://").to_owned();
    let stall = |request: String| {
        let addr = addr.clone();
        async move {
            let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
            stream.write_all(request.as_bytes()).await.unwrap();
            let started = std::time::Instant::now();
            let mut answer = Vec::new();
            // Bounded only so that a regression fails instead of hanging the suite.
            tokio::time::timeout(std::time::Duration::from_secs(120), stream.read_to_end(&mut answer))
                .await
                .expect("the server ends the connection")
                .ok();
            (started.elapsed(), String::from_utf8_lossy(&answer).into_owned())
        }
    };
    let auth = format!("Authorization: Bearer {}\r\n", api.admin_key);
    let (head, body) = tokio::join!(
        stall(format!("GET /v1/timers HTTP/1.1\r\nHost: x\r\n{auth}")),
        stall(format!(
            "POST /v1/timers HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"na"
        )),
    );
    println!("stalled head cut after {:?}, stalled body after {:?}", head.0, body.0);
    assert!(head.0 >= punctual_runtime::http_server::HEADER_READ_TIMEOUT);
    assert!(body.0 >= punctual_runtime::http_server::REQUEST_TIMEOUT);
    assert!(body.1.starts_with("HTTP/1.1 408"), "{}", body.1);
    assert!(body.1.contains("urn:punctual:problem:request-timeout"), "{}", body.1);
}

#[tokio::test]
async fn a_schedule_is_previewed_without_creating_anything() {
    let api = spawn_api().await;
    let (status, _, preview) = api
        .post(
            "/v1/schedules/preview",
            &json!({"schedule": {"cron": "0 0 2 * * *", "timezone": "Europe/Berlin"}, "count": 3,
                    "from": "2026-12-05T12:00:00Z"}),
        )
        .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(
        preview["fire_times"],
        json!(["2026-12-06T01:00:00Z", "2026-12-07T01:00:00Z", "2026-12-08T01:00:00Z"]),
        "02:00 in Berlin is 01:00 UTC in winter"
    );
    let (_, _, every) = api
        .post("/v1/schedules/preview", &json!({"schedule": {"every_ms": 60000}, "from": "2026-12-05T12:00:00Z"}))
        .await;
    assert_eq!(every["fire_times"].as_array().unwrap().len(), 10);
    assert_eq!(every["fire_times"][0], "2026-12-05T12:01:00Z");
    for (body, status, field) in [
        (json!({"schedule": {"cron": "nope"}}), 422, "schedule.cron"),
        (json!({"schedule": {"every_ms": 1000}, "count": 0}), 422, "count"),
        (json!({"schedule": {"every_ms": 1000}, "count": 101}), 422, "count"),
        (json!({"schedule": {"every_ms": 1000}, "extra": 1}), 400, "extra"),
    ] {
        let (got, _, problem) = api.post("/v1/schedules/preview", &body).await;
        assert_eq!((got, &problem["field"]), (status, &json!(field)), "{body}: {problem}");
    }
    assert_eq!(api.timer_count().await, 0);
}

#[tokio::test]
async fn a_trigger_adds_one_occurrence_of_an_active_timer() {
    let api = spawn_api().await;
    let (_, _, timer) = api.post("/v1/timers", &example()).await;
    let id = timer["id"].as_str().unwrap();
    let (status, _, triggered) = api.post(&format!("/v1/timers/{id}/trigger"), &json!({})).await;
    assert_eq!(status, 202, "{triggered}");
    let at: chrono::DateTime<chrono::Utc> = triggered["scheduled_at"].as_str().unwrap().parse().unwrap();
    let identity = format!("{id}:{}", at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    assert_eq!(triggered["idempotency_key"], identity);
    let (task_status, scheduled): (String, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as("SELECT status, scheduled_at FROM tasks WHERE id = $1")
            .bind(triggered["task_id"].as_i64().unwrap())
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(task_status, "pending");
    assert!((chrono::Utc::now() - scheduled).num_seconds() < 60, "due now, not at the cron's 02:00");

    assert_eq!(api.post(&format!("/v1/timers/{id}/pause"), &json!({})).await.0, 200);
    let (status, _, problem) = api.post(&format!("/v1/timers/{id}/trigger"), &json!({})).await;
    assert_eq!(status, 409, "a paused timer is not triggered: {problem}");
    let (status, _, _) = api.post(&format!("/v1/timers/{}/trigger", uuid::Uuid::new_v4()), &json!({})).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn secret_headers_are_stored_but_never_shown() {
    let api = spawn_api().await;
    let mut body = example();
    body["action"]["http"]["headers"] =
        json!({"Authorization": "Bearer s3cr3t-1", "x-tenant-key": "tenant-s3cr3t", "X-Env": "prod"});
    let (status, _, created) = api.post("/v1/timers", &body).await;
    assert_eq!(status, 201, "{created}");
    let redacted = json!({"Authorization": "<redacted>", "x-tenant-key": "<redacted>", "X-Env": "prod"});
    assert_eq!(created["action"]["http"]["headers"], redacted);
    let id = created["id"].as_str().unwrap().to_owned();
    let (_, _, read) = api.get(&format!("/v1/timers/{id}")).await;
    let (_, _, listed) = api.get("/v1/timers").await;
    for answer in [&read, &listed] {
        assert!(!answer.to_string().contains("s3cr3t"), "{answer}");
    }
    let stored = || async {
        sqlx::query_scalar::<_, Value>("SELECT http_headers FROM timers").fetch_one(&api.db.pool).await.unwrap()
    };
    assert_eq!(stored().await["Authorization"], "Bearer s3cr3t-1");

    // What was read, sent back with a change elsewhere: the secrets stay as stored.
    let mut action = read["action"].clone();
    action["http"]["headers"]["X-Env"] = json!("staging");
    let patch = |body: Value| {
        let request = api.client.patch(format!("{}/v1/timers/{id}", api.base)).json(&body);
        async move { Api::read(request.send().await.unwrap()).await }
    };
    let (status, _, patched) = patch(json!({"revision": read["revision"], "action": action})).await;
    assert_eq!(status, 200, "{patched}");
    assert!(!patched.to_string().contains("s3cr3t"));
    assert_eq!(
        stored().await,
        json!({"Authorization": "Bearer s3cr3t-1", "x-tenant-key": "tenant-s3cr3t", "X-Env": "staging"})
    );
    // A new value replaces it.
    action["http"]["headers"]["Authorization"] = json!("Bearer s3cr3t-2");
    let (status, _, _) = patch(json!({"revision": patched["revision"], "action": action})).await;
    assert_eq!(status, 200);
    assert_eq!(stored().await["Authorization"], "Bearer s3cr3t-2");

    // A redacted secret kept, with a Host header that would send it elsewhere: refused,
    // as is every header of the connection or of the service's signature.
    let (_, _, read) = api.get(&format!("/v1/timers/{id}")).await;
    for name in [
        "Host",
        "connection",
        "Transfer-Encoding",
        "Content-Length",
        "TE",
        "Upgrade",
        "Proxy-Authorization",
        "webhook-signature",
    ] {
        let mut action = read["action"].clone();
        action["http"]["headers"][name] = json!("evil.example");
        let (status, _, problem) = patch(json!({"revision": read["revision"], "action": action})).await;
        let field = format!("action.http.headers.{name}");
        assert_eq!((status, problem["field"].as_str()), (422, Some(field.as_str())), "{problem}");
    }
    assert_eq!(stored().await["Authorization"], "Bearer s3cr3t-2", "unchanged");

    // "<redacted>" with nothing stored behind it is refused.
    let mut body = example();
    body["name"] = json!("other");
    body["action"]["http"]["headers"] = json!({"Cookie": "<redacted>"});
    let (status, _, problem) = api.post("/v1/timers", &body).await;
    assert_eq!((status, &problem["field"]), (422, &json!("action.http.headers.Cookie")), "{problem}");

    // A Kafka message's headers likewise.
    let topics = json!({"kafka_topics": ["billing", "elsewhere"]});
    assert_eq!(api.send("PATCH", "/v1/namespaces/billing", Some(&topics)).await.0, 200);
    let mut body = example();
    body["name"] = json!("message");
    body["action"] = json!({"kafka": {"topic": "billing", "headers": {"X-Api-Key": "kafka-s3cr3t", "X-Env": "prod"}}});
    let (status, _, created) = api.post("/v1/timers", &body).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["action"]["kafka"]["headers"], json!({"X-Api-Key": "<redacted>", "X-Env": "prod"}));
    let message_id = created["id"].as_str().unwrap().to_owned();
    let (_, _, read) = api.get(&format!("/v1/timers/{message_id}")).await;
    assert!(!read.to_string().contains("s3cr3t"), "{read}");
    let mut action = read["action"].clone();
    action["kafka"]["topic"] = json!("elsewhere");
    let request = api.client.patch(format!("{}/v1/timers/{message_id}", api.base));
    let request = request.json(&json!({"revision": read["revision"], "action": action}));
    let (status, _, problem) = Api::read(request.send().await.unwrap()).await;
    assert_eq!((status, &problem["field"]), (422, &json!("action.kafka.headers.X-Api-Key")), "{problem}");
    let kafka_headers = sqlx::query_scalar::<_, Value>("SELECT kafka_headers FROM timers WHERE name = 'message'")
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(kafka_headers["X-Api-Key"], "kafka-s3cr3t");
}

#[tokio::test]
async fn namespace_stats_count_timers_and_the_last_hours_occurrences() {
    let api = spawn_api().await;
    let billing = api.timer_in("billing", "billing").await;
    let paused = api.timer_in("billing", "paused").await;
    api.post(&format!("/v1/timers/{paused}/pause"), &json!({})).await;
    let other = api.timer_in("other", "other").await;
    for (timer, minutes_ago, status, attempt) in [
        (billing, 10, "succeeded", 1),
        (billing, 20, "succeeded", 2),
        (billing, 30, "dead", 3),
        (paused, 1, "pending", 1),
        (billing, 90, "dead", 3),
        (other, 5, "dead", 3),
    ] {
        api.occurrence(timer, minutes_ago, status, attempt).await;
    }
    let (status, _, stats) = api.get("/v1/namespaces/billing/stats").await;
    assert_eq!(status, 200, "{stats}");
    assert_eq!(stats["timers"], json!({"active": 1, "paused": 1, "invalid": 0, "finished": 0}));
    assert_eq!(
        stats["last_hour"]["occurrences"],
        json!({"waiting": 1, "running": 0, "succeeded": 2, "dead": 1, "cancelled": 0})
    );
    assert_eq!(stats["last_hour"]["failed_attempts"], 4);
    let (_, _, empty) = api.get("/v1/namespaces/nobody/stats").await;
    assert_eq!(empty["timers"]["active"], 0);
    let (status, _, problem) = api.get("/v1/namespaces/Bad%20Name/stats").await;
    assert_eq!((status, &problem["field"]), (422, &json!("namespace")));
}

/// The live figures: each namespace's occurrences of the last minute (started, ended, their
/// lag and failures, those deferred) and its due backlog; another key's namespaces unseen.
#[tokio::test]
async fn the_live_figures_give_each_namespaces_last_minute_and_backlog() {
    let api = spawn_api().await;
    let billing = api.timer_in("billing", "billing").await;
    let other = api.timer_in("other", "other").await;
    // (timer, seconds ago, status, attempt, lag in ms of the start, deferred)
    for (timer, ago, status, attempt, lag_ms, deferred) in [
        (billing, 10, "succeeded", 1, Some(20), false),
        (billing, 20, "succeeded", 1, Some(40), false),
        (billing, 30, "succeeded", 2, Some(5_000), false),
        (billing, 40, "dead", 3, Some(9_000), false),
        (billing, 50, "pending", 1, None, true),
        (billing, 600, "succeeded", 1, Some(10), false),
        (other, 5, "succeeded", 1, Some(100), false),
    ] {
        sqlx::query(
            "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, status, attempt, started_at,
                                deferred_reason)
             VALUES ($1, now() - $2 * interval '1 second', now() - $2 * interval '1 second', 1, 0, $3, $4,
                     now() - $2 * interval '1 second' + $5 * interval '1 millisecond', $6)",
        )
        .bind(timer)
        .bind(ago)
        .bind(status)
        .bind(attempt)
        .bind(lag_ms)
        .bind(deferred.then_some("target_limit"))
        .execute(&api.db.pool)
        .await
        .unwrap();
    }
    // The first attempts of the retried and the dead occurrence, in their history: 100 and
    // 60 ms late.
    for (ago, attempt_lag_ms) in [(30, 100), (40, 60)] {
        sqlx::query(
            "INSERT INTO task_attempts (task_id, attempt, started_at)
             SELECT id, 1, scheduled_at + $2 * interval '1 millisecond' FROM tasks
              WHERE timer_id = $1 AND scheduled_at > now() - ($3 + 1) * interval '1 second'
                AND scheduled_at <= now() - ($3 - 1) * interval '1 second'",
        )
        .bind(billing)
        .bind(attempt_lag_ms)
        .bind(ago)
        .execute(&api.db.pool)
        .await
        .unwrap();
    }
    let (status, _, live) = api.get("/v1/live").await;
    assert_eq!(status, 200, "{live}");
    assert_eq!(live["window_seconds"], 60);
    let namespaces = live["namespaces"].as_array().unwrap();
    let names: Vec<&str> = namespaces.iter().map(|n| n["namespace"].as_str().unwrap()).collect();
    assert_eq!(names, ["billing", "other"]);
    let billing_live = &namespaces[0];
    assert_eq!(
        (&billing_live["scheduled"], &billing_live["started"], &billing_live["succeeded"], &billing_live["dead"]),
        (&json!(5), &json!(4), &json!(3), &json!(1)),
        "{billing_live}"
    );
    assert_eq!((&billing_live["failed_attempts"], &billing_live["deferred"]), (&json!(4), &json!(1)));
    assert_eq!(billing_live["fires_per_second"].as_f64().unwrap(), 4.0 / 60.0);
    // The first attempts' starts: 20, 40, 60 and 100 ms (not the retries' 5 and 9 s).
    assert_eq!(billing_live["lag_p50_ms"].as_f64().unwrap().round(), 50.0, "{billing_live}");
    let p99 = billing_live["lag_p99_ms"].as_f64().unwrap();
    assert!((90.0..=100.0).contains(&p99), "{billing_live}");
    // The deferred occurrence, due 50 s ago, is the backlog.
    assert_eq!(billing_live["backlog"], 1);
    assert!(billing_live["backlog_oldest_seconds"].as_f64().unwrap() >= 50.0);
    assert_eq!(live["backlog_capped"], false);

    let (_, _, wide) = api.get("/v1/live?window_seconds=900").await;
    assert_eq!(wide["namespaces"][0]["scheduled"], 6, "{wide}");
    let (status, _, problem) = api.get("/v1/live?window_seconds=1").await;
    assert_eq!((status, &problem["field"]), (400, &json!("window_seconds")), "{problem}");

    let (_, _, key) = api.post("/v1/keys", &json!({"name": "reader", "role": "read", "namespaces": ["other"]})).await;
    let (status, _, theirs) = api.with_key(key["key"].as_str()).get("/v1/live").await;
    assert_eq!(status, 200, "{theirs}");
    let names: Vec<&str> =
        theirs["namespaces"].as_array().unwrap().iter().map(|n| n["namespace"].as_str().unwrap()).collect();
    assert_eq!(names, ["other"], "another key's namespaces are not seen");
}

/// A pause's note stays with the timer until its state changes again without one; a note
/// too long is refused, naming the field, and changes nothing; the audit log keeps it.
#[tokio::test]
async fn a_pause_keeps_its_note_until_the_state_changes_again() {
    let api = spawn_api().await;
    let id = api.timer_in("billing", "noted").await;
    let (status, _, paused) =
        api.post(&format!("/v1/timers/{id}/pause"), &json!({"note": "  invoices frozen until the audit  "})).await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(
        (&paused["state"], &paused["state_note"]),
        (&json!("paused"), &json!("invoices frozen until the audit"))
    );
    let (_, _, read) = api.get(&format!("/v1/timers/{id}")).await;
    assert_eq!(read["state_note"], "invoices frozen until the audit");

    let (status, _, problem) = api.post(&format!("/v1/timers/{id}/resume"), &json!({"note": "x".repeat(501)})).await;
    assert_eq!((status, &problem["field"]), (422, &json!("note")), "{problem}");
    let (status, _, problem) = api.post(&format!("/v1/timers/{id}/resume"), &json!({"reason": "typo"})).await;
    assert_eq!(status, 400, "an unknown field: {problem}");
    let (_, _, read) = api.get(&format!("/v1/timers/{id}")).await;
    assert_eq!((&read["state"], &read["state_note"]), (&json!("paused"), &json!("invoices frozen until the audit")));

    let resumed = api.client.post(format!("{}/v1/timers/{id}/resume", api.base)).send().await.unwrap();
    let (status, _, resumed) = Api::read(resumed).await;
    assert_eq!((status, &resumed["state"], &resumed["state_note"]), (200, &json!("active"), &Value::Null), "no body");

    let (_, _, audit) = api.get("/v1/audit?namespace=billing").await;
    let pause = audit["entries"].as_array().unwrap().iter().find(|e| e["action"] == "timer_paused").unwrap();
    assert_eq!(pause["detail"]["note"], "invoices frozen until the audit", "{pause}");
}

#[tokio::test]
async fn a_backfill_adds_a_past_ranges_occurrences_once() {
    let api = spawn_api().await;
    let mut body = example();
    body["schedule"] = json!({"cron": "0 * * * * *"});
    let (_, _, timer) = api.post("/v1/timers", &body).await;
    let id = timer["id"].as_str().unwrap();
    let minute = |ago: i64| {
        let now = chrono::Utc::now();
        let whole = now - chrono::Duration::seconds(now.timestamp() % 60) - chrono::Duration::minutes(ago);
        whole.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let path = format!("/v1/timers/{id}/backfill");
    let range = json!({"from": minute(10), "to": minute(5)});
    // A dry run counts, and adds nothing.
    let (status, _, counted) = api.post(&path, &json!({"from": minute(10), "to": minute(5), "dry_run": true})).await;
    assert_eq!((status, counted), (200, json!({"occurrences": 5, "added": 5})));
    let (status, _, backfilled) = api.post(&path, &range).await;
    assert_eq!(status, 202, "{backfilled}");
    assert_eq!(backfilled, json!({"occurrences": 5, "added": 5}));
    let (_, _, again) = api.post(&path, &range).await;
    assert_eq!(again, json!({"occurrences": 5, "added": 0}), "never twice");
    let (_, _, counted) = api.post(&path, &json!({"from": minute(12), "to": minute(5), "dry_run": true})).await;
    assert_eq!(counted, json!({"occurrences": 7, "added": 2}), "those that exist are not counted as added");
    let due_now: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE status = 'pending' AND due_at > now() - interval '1 minute'
            AND scheduled_at < now() - interval '4 minutes'",
    )
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    assert_eq!(due_now, 5, "due now, at their own times");

    for (body, status, field) in [
        (json!({"from": minute(5), "to": minute(-5)}), 422, "to"),
        (json!({"from": minute(5), "to": minute(5)}), 422, "from"),
        (json!({"from": minute(1001), "to": minute(0)}), 422, "to"),
        (json!({"from": minute(5)}), 400, "to"),
    ] {
        let (got, _, problem) = api.post(&path, &body).await;
        assert_eq!((got, &problem["field"]), (status, &json!(field)), "{body}: {problem}");
    }
    api.post(&format!("/v1/timers/{id}/pause"), &json!({})).await;
    assert_eq!(api.post(&path, &json!({"from": minute(3), "to": minute(1)})).await.0, 409);
}

#[tokio::test]
async fn bulk_actions_change_the_timers_a_filter_names_and_no_others() {
    let api = spawn_api().await;
    let mut ids = Vec::new();
    for (namespace, name) in
        [("billing", "report-a"), ("billing", "report-b"), ("billing", "invoice"), ("other", "report-a")]
    {
        let mut body = example();
        body["namespace"] = json!(namespace);
        body["name"] = json!(name);
        let (_, _, timer) = api.post("/v1/timers", &body).await;
        ids.push(timer["id"].as_str().unwrap().to_owned());
    }
    let states = || async {
        sqlx::query_scalar::<_, String>("SELECT state FROM timers ORDER BY namespace, name")
            .fetch_all(&api.db.pool)
            .await
            .unwrap()
    };
    let (status, _, paused) =
        api.post("/v1/timers/bulk/pause", &json!({"namespace": "billing", "name_prefix": "report-"})).await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!((paused["changed"].as_array().unwrap().len(), &paused["more"]), (2, &json!(false)));
    // billing/invoice, billing/report-a, billing/report-b, other/report-a
    assert_eq!(states().await, ["active", "paused", "paused", "active"]);
    let (_, _, resumed) = api.post("/v1/timers/bulk/resume", &json!({"namespace": "billing", "ids": [ids[0]]})).await;
    assert_eq!(resumed["changed"], json!([ids[0]]));
    assert_eq!(states().await, ["active", "active", "paused", "active"]);
    // A prefix's LIKE characters match only themselves.
    let (_, _, none) = api.post("/v1/timers/bulk/delete", &json!({"namespace": "billing", "name_prefix": "%"})).await;
    assert_eq!(none["changed"], json!([]));
    let (_, _, deleted) = api.post("/v1/timers/bulk/delete", &json!({"namespace": "billing"})).await;
    assert_eq!(deleted["changed"].as_array().unwrap().len(), 3);
    assert_eq!(states().await, ["deleted", "deleted", "deleted", "active"]);
    let (status, _, _) = api.post("/v1/timers/bulk/explode", &json!({"namespace": "billing"})).await;
    assert_eq!(status, 404);
    let (status, _, problem) = api.post("/v1/timers/bulk/pause", &json!({"name_prefix": "x"})).await;
    assert_eq!((status, &problem["field"]), (400, &json!("namespace")));
    // The single-timer routes are still there beside it.
    assert_eq!(api.post(&format!("/v1/timers/{}/pause", ids[3]), &json!({})).await.0, 200);
}

/// "All matching" is what the timer list showed: a bulk change narrowed by state and kind of
/// schedule changes only those timers.
#[tokio::test]
async fn a_bulk_change_narrowed_by_state_and_kind_of_schedule_changes_only_those() {
    let api = spawn_api().await;
    let mut ids = std::collections::HashMap::new();
    for (name, schedule) in [
        ("cron-a", json!({"cron": "0 0 2 * * *"})),
        ("every-b", json!({"every_ms": 60_000})),
        ("every-c", json!({"every_ms": 60_000})),
    ] {
        let mut body = example();
        body["name"] = json!(name);
        body["schedule"] = schedule;
        let (status, _, timer) = api.post("/v1/timers", &body).await;
        assert_eq!(status, 201, "{timer}");
        ids.insert(name, timer["id"].as_str().unwrap().to_owned());
    }
    api.post(&format!("/v1/timers/{}/pause", ids["every-c"]), &json!({})).await;
    let states = || async {
        sqlx::query_scalar::<_, String>("SELECT state FROM timers ORDER BY name").fetch_all(&api.db.pool).await.unwrap()
    };
    let (_, _, paused) =
        api.post("/v1/timers/bulk/pause", &json!({"namespace": "billing", "schedule_kind": "interval"})).await;
    assert_eq!(paused["changed"], json!([ids["every-b"]]), "{paused}");
    assert_eq!(states().await, ["active", "paused", "paused"]);
    let (_, _, none) = api.post("/v1/timers/bulk/resume", &json!({"namespace": "billing", "state": "active"})).await;
    assert_eq!(none["changed"], json!([]), "resuming active timers changes none: {none}");
    let filter = json!({"namespace": "billing", "state": "paused", "schedule_kind": "interval"});
    let (_, _, deleted) = api.post("/v1/timers/bulk/delete", &filter).await;
    assert_eq!(deleted["changed"].as_array().unwrap().len(), 2, "{deleted}");
    assert_eq!(states().await, ["active", "deleted", "deleted"]);
    let (status, _, problem) =
        api.post("/v1/timers/bulk/pause", &json!({"namespace": "billing", "state": "deleted"})).await;
    assert_eq!((status, &problem["field"]), (422, &json!("state")), "{problem}");
    let (status, _, problem) =
        api.post("/v1/timers/bulk/pause", &json!({"namespace": "billing", "schedule_kind": "weekly"})).await;
    assert_eq!(status, 400, "{problem}");
}

#[tokio::test]
async fn a_namespaces_runs_are_paged_newest_first_and_filtered() {
    let api = spawn_api().await;
    let billing = api.timer_in("billing", "billing").await;
    let other = api.timer_in("other", "other").await;
    for (timer, minutes_ago, status) in [
        (billing, 1, "succeeded"),
        (billing, 2, "dead"),
        (billing, 3, "succeeded"),
        (billing, 4, "succeeded"),
        (billing, 5, "succeeded"),
        (billing, 3000, "succeeded"),
        (other, 2, "succeeded"),
    ] {
        api.occurrence(timer, minutes_ago, status, 1).await;
    }
    let mut seen = Vec::new();
    let mut path = "/v1/namespaces/billing/runs?limit=2".to_owned();
    loop {
        let (status, _, page) = api.get(&path).await;
        assert_eq!(status, 200, "{page}");
        seen.extend(page["runs"].as_array().unwrap().iter().map(|r| r["scheduled_at"].as_str().unwrap().to_owned()));
        let Some(next) = page["next_before"].as_str() else { break };
        path = format!("/v1/namespaces/billing/runs?limit=2&before={next}");
    }
    assert_eq!(seen.len(), 5, "the last day's, newest first, once each: {seen:?}");
    assert!(seen.windows(2).all(|w| w[0] > w[1]), "{seen:?}");
    let (_, _, dead) = api.get("/v1/namespaces/billing/runs?status=dead").await;
    assert_eq!(dead["runs"].as_array().unwrap().len(), 1);
    assert_eq!(dead["runs"][0]["status"], "dead");
    let from = (chrono::Utc::now() - chrono::Duration::days(3)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let (_, _, all) = api.get(&format!("/v1/namespaces/billing/runs?from={from}")).await;
    assert_eq!(all["runs"].as_array().unwrap().len(), 6, "a wider range");
    for (query, field) in [
        ("status=done", "status"),
        ("before=nonsense", "before"),
        ("from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", "from"),
    ] {
        let (status, _, problem) = api.get(&format!("/v1/namespaces/billing/runs?{query}")).await;
        assert_eq!((status, &problem["field"]), (422, &json!(field)), "{query}: {problem}");
    }
}

#[tokio::test]
async fn timers_firing_more_often_than_the_minimum_interval_are_refused() {
    let api = spawn_api_with(|c| c.min_fire_interval_ms = 60_000).await;
    let with_schedule = |schedule: Value| {
        let mut body = example();
        body["schedule"] = schedule;
        body
    };
    for (schedule, field) in [
        (json!({"every_ms": 1000}), "schedule.every_ms"),
        (json!({"every_ms": 59_999}), "schedule.every_ms"),
        (json!({"cron": "*/10 * * * * *"}), "schedule.cron"),
        // Mostly hourly, but twice within a minute once an hour.
        (json!({"cron": "0,30 0 * * * *"}), "schedule.cron"),
    ] {
        let (status, _, problem) = api.post("/v1/timers", &with_schedule(schedule.clone())).await;
        assert_eq!((status, &problem["field"]), (422, &json!(field)), "{schedule}: {problem}");
        assert!(problem["detail"].as_str().unwrap().contains("PUNCTUAL_MIN_FIRE_INTERVAL_MS"));
    }
    assert_eq!(api.timer_count().await, 0);
    let (status, _, timer) = api.post("/v1/timers", &with_schedule(json!({"cron": "0 * * * * *"}))).await;
    assert_eq!(status, 201, "{timer}");
    let r = api
        .client
        .patch(format!("{}/v1/timers/{}", api.base, timer["id"].as_str().unwrap()))
        .json(&json!({"revision": timer["revision"], "schedule": {"every_ms": 30_000}}))
        .send()
        .await
        .unwrap();
    let (status, _, problem) = Api::read(r).await;
    assert_eq!((status, &problem["field"]), (422, &json!("schedule.every_ms")), "{problem}");
}

/// `null` in a PATCH resets a policy to its default, is refused for what has none, and a
/// stored secret header goes back only to the target it was given for.
#[tokio::test]
async fn patch_nulls_and_secret_headers_across_a_change_of_target() {
    let api = spawn_api().await;
    let mut body = example();
    body["retry"] = json!({"max_attempts": 7});
    body["overlap_policy"] = json!("skip");
    body["action"]["http"]["headers"] = json!({"Authorization": "Bearer s3cr3t"});
    let (_, _, timer) = api.post("/v1/timers", &body).await;
    let path = format!("/v1/timers/{}", timer["id"].as_str().unwrap());
    let (status, _, reset) =
        api.send("PATCH", &path, Some(&json!({"revision": 1, "retry": null, "overlap_policy": null}))).await;
    assert_eq!(status, 200, "{reset}");
    assert_eq!((reset["retry"]["max_attempts"].as_i64(), reset["overlap_policy"].as_str()), (Some(3), Some("allow")));
    for field in ["name", "schedule", "action", "namespace"] {
        let (status, _, problem) = api.send("PATCH", &path, Some(&json!({"revision": 2, field: null}))).await;
        assert_eq!((status, &problem["field"]), (400, &json!(field)), "{problem}");
    }
    // The read action sent back to the same host keeps the secret; to another, it is refused.
    let mut action = reset["action"].clone();
    assert_eq!(action["http"]["headers"]["Authorization"], "<redacted>");
    action["http"]["url"] = json!("https://hooks.example.com/elsewhere");
    let (status, _, moved) = api.send("PATCH", &path, Some(&json!({"revision": 2, "action": action}))).await;
    assert_eq!(status, 200, "{moved}");
    action["http"]["url"] = json!("https://collector.example.net/");
    let (status, _, problem) = api.send("PATCH", &path, Some(&json!({"revision": 3, "action": action}))).await;
    assert_eq!((status, &problem["field"]), (422, &json!("action.http.headers.Authorization")), "{problem}");
    let stored: Value = sqlx::query_scalar("SELECT http_headers FROM timers").fetch_one(&api.db.pool).await.unwrap();
    assert_eq!(stored, json!({"Authorization": "Bearer s3cr3t"}));
}

/// A namespace's limits: its readers see them, only admins change them; `null` returns a
/// limit to its default; a value out of range is a problem naming the field.
#[tokio::test]
async fn a_namespaces_limits_are_read_by_its_keys_and_changed_by_admins_only() {
    let api = spawn_api().await;
    let (status, _, policy) = api.get("/v1/namespaces/billing").await;
    assert_eq!(status, 200, "{policy}");
    assert_eq!(policy["limits"], policy["default_limits"], "the defaults until changed: {policy}");
    assert_eq!(policy["limits"]["max_concurrent_calls"], 2_000);

    let (status, _, changed) =
        api.send("PATCH", "/v1/namespaces/billing", Some(&json!({"limits": {"max_concurrent_calls": 10}}))).await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(changed["limits"]["max_concurrent_calls"], 10);
    assert_eq!(changed["limits"]["max_callback_timeout_ms"], 600_000, "the other kept its default");
    let patch = json!({"limits": {"max_callback_timeout_ms": 5_000}});
    let (_, _, changed) = api.send("PATCH", "/v1/namespaces/billing", Some(&patch)).await;
    assert_eq!(
        (&changed["limits"]["max_concurrent_calls"], &changed["limits"]["max_callback_timeout_ms"]),
        (&json!(10), &json!(5_000)),
        "a field left out is kept"
    );
    let (_, _, other) = api.get("/v1/namespaces/other").await;
    assert_eq!(other["limits"]["max_concurrent_calls"], 2_000, "namespaces are apart");

    for (body, status, field) in [
        (json!({"limits": {"max_concurrent_calls": 0}}), 422, "limits.max_concurrent_calls"),
        (json!({"limits": {"max_callback_timeout_ms": 600_001}}), 422, "limits.max_callback_timeout_ms"),
        (json!({"limits": {"max_fires_per_second": 0}}), 422, "limits.max_fires_per_second"),
        (json!({"limits": {"max_catch_up_per_second": 0}}), 422, "limits.max_catch_up_per_second"),
        (json!({"limits": {"max_calls": 3}}), 400, "limits"),
    ] {
        let (got, ct, problem) = api.send("PATCH", "/v1/namespaces/billing", Some(&body)).await;
        assert_eq!((got, ct.as_deref()), (status, Some("application/problem+json")), "{body}: {problem}");
        if status == 422 {
            assert_eq!(problem["field"], field, "{problem}");
        }
    }
    let (status, _, problem) = api.get("/v1/namespaces/Not%20Valid").await;
    assert_eq!((status, &problem["field"]), (422, &json!("namespace")));

    let (_, _, key) =
        api.post("/v1/keys", &json!({"name": "tenant", "role": "write", "namespaces": ["billing"]})).await;
    let tenant = api.with_key(key["key"].as_str());
    assert_eq!(tenant.get("/v1/namespaces/billing").await.0, 200, "its own namespace's limits");
    assert_eq!(tenant.get("/v1/namespaces/other").await.0, 403, "not another's");
    let lift = json!({"limits": {"max_concurrent_calls": null}});
    assert_eq!(tenant.send("PATCH", "/v1/namespaces/billing", Some(&lift)).await.0, 403, "nor lifts its own");
    let (_, _, reset) = api.send("PATCH", "/v1/namespaces/billing", Some(&lift)).await;
    assert_eq!(reset["limits"]["max_concurrent_calls"], 2_000, "null is the default again: {reset}");
    let stored: Option<i32> =
        sqlx::query_scalar("SELECT max_concurrent_calls FROM namespaces WHERE namespace = 'billing'")
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(stored, None);
}

/// A namespace's timers publish only to the Kafka topics its policy lists (none until an
/// admin lists them), never to the service's own topics nor with the service's own headers,
/// whatever its keys try: each refusal is a problem naming the field.
#[tokio::test]
async fn a_namespace_publishes_only_to_the_kafka_topics_its_policy_lists() {
    let api = spawn_api().await;
    let (_, _, key) = api.post("/v1/keys", &json!({"name": "t1", "role": "write", "namespaces": ["t1"]})).await;
    let tenant = api.with_key(key["key"].as_str());
    let timer = |name: &str, kafka: Value| json!({"namespace": "t1", "name": name, "schedule": {"every_ms": 60_000}, "action": {"kafka": kafka}});
    let (status, _, policy) = api.get("/v1/namespaces/t1").await;
    assert_eq!((status, &policy["kafka_topics"]), (200, &json!([])), "none by default: {policy}");
    let (status, _, problem) = tenant.post("/v1/timers", &timer("a", json!({"topic": "t1.orders"}))).await;
    assert_eq!((status, &problem["field"]), (422, &json!("action.kafka.topic")), "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("kafka_topics"), "says how: {problem}");

    let topics = json!({"kafka_topics": ["t1.*", "shared-events"]});
    assert_eq!(tenant.send("PATCH", "/v1/namespaces/t1", Some(&topics)).await.0, 403, "a tenant opens no wall");
    let (status, _, policy) = api.send("PATCH", "/v1/namespaces/t1", Some(&topics)).await;
    assert_eq!((status, &policy["kafka_topics"]), (200, &json!(["t1.*", "shared-events"])), "{policy}");
    assert_eq!(tenant.post("/v1/timers", &timer("a", json!({"topic": "t1.orders"}))).await.0, 201);
    assert_eq!(tenant.post("/v1/timers", &timer("b", json!({"topic": "shared-events"}))).await.0, 201);
    for (name, kafka, field) in [
        ("c", json!({"topic": "punctual.tasks"}), "action.kafka.topic"),
        ("d", json!({"topic": "punctual.dead"}), "action.kafka.topic"),
        ("e", json!({"topic": "__consumer_offsets"}), "action.kafka.topic"),
        ("f", json!({"topic": "t2.orders"}), "action.kafka.topic"),
        ("g", json!({"topic": "unlisted"}), "action.kafka.topic"),
        (
            "h",
            json!({"topic": "t1.orders", "headers": {"Punctual-Attempt": "1"}}),
            "action.kafka.headers.Punctual-Attempt",
        ),
    ] {
        let (status, ct, problem) = tenant.post("/v1/timers", &timer(name, kafka.clone())).await;
        assert_eq!((status, ct.as_deref()), (422, Some("application/problem+json")), "{kafka}: {problem}");
        assert_eq!(problem["field"], field, "{problem}");
    }
    // Changing a timer's topic is checked like creating one.
    let (_, _, created) = tenant.get("/v1/timers?namespace=t1").await;
    let stored = &created["timers"][0];
    let patch = json!({"revision": stored["revision"], "action": {"kafka": {"topic": "punctual.tasks"}}});
    let (status, _, problem) =
        tenant.send("PATCH", &format!("/v1/timers/{}", stored["id"].as_str().unwrap()), Some(&patch)).await;
    assert_eq!((status, &problem["field"]), (422, &json!("action.kafka.topic")), "{problem}");

    for (topics, field) in [
        (json!(["punctual.*"]), "kafka_topics[0]"),
        (json!(["ok", "bad name"]), "kafka_topics[1]"),
        (json!(["a*b"]), "kafka_topics[0]"),
    ] {
        let (status, _, problem) = api.send("PATCH", "/v1/namespaces/t1", Some(&json!({"kafka_topics": topics}))).await;
        assert_eq!((status, &problem["field"]), (422, &json!(field)), "{problem}");
    }
    // Even `*` leaves the service's topics out; a list changed by an admin applies to the
    // next write.
    api.send("PATCH", "/v1/namespaces/t1", Some(&json!({"kafka_topics": ["*"]}))).await;
    assert_eq!(tenant.post("/v1/timers", &timer("i", json!({"topic": "anything"}))).await.0, 201);
    assert_eq!(tenant.post("/v1/timers", &timer("j", json!({"topic": "punctual.tasks"}))).await.0, 422);
}

/// The targets paused for a namespace are listed to its keys and resumed by its writers;
/// another namespace's pause is neither shown nor resumed.
#[tokio::test]
async fn paused_targets_are_listed_and_resumed_within_their_namespace() {
    let api = spawn_api().await;
    let pool = &api.db.pool;
    for (ns, target) in [("billing", "https://hooks.example:443"), ("other", "https://hooks.example:443")] {
        assert!(punctual_shared::paused_target::pause(pool, ns, target, "every call failed for 3600 s").await.unwrap());
    }
    let (status, _, listed) = api.get("/v1/namespaces/billing/paused-targets").await;
    assert_eq!(status, 200, "{listed}");
    let paused = listed["paused_targets"].as_array().unwrap();
    assert_eq!(paused.len(), 1, "{listed}");
    assert_eq!(paused[0]["target"], "https://hooks.example:443");
    assert_eq!(paused[0]["reason"], "every call failed for 3600 s");

    let (_, _, reader) = api.post("/v1/keys", &json!({"name": "r", "role": "read", "namespaces": ["billing"]})).await;
    let reader = api.with_key(reader["key"].as_str());
    assert_eq!(reader.get("/v1/namespaces/billing/paused-targets").await.0, 200);
    let resume = json!({"target": "https://hooks.example:443"});
    let path = "/v1/namespaces/billing/paused-targets/resume";
    assert_eq!(reader.post(path, &resume).await.0, 403, "reading is not resuming");
    let (_, _, writer) = api.post("/v1/keys", &json!({"name": "w", "role": "write", "namespaces": ["billing"]})).await;
    let writer = api.with_key(writer["key"].as_str());
    assert_eq!(writer.post("/v1/namespaces/other/paused-targets/resume", &resume).await.0, 403, "not another's");
    assert_eq!(writer.post(path, &resume).await.0, 204);
    let (status, ct, problem) = writer.post(path, &resume).await;
    assert_eq!((status, ct.as_deref()), (404, Some("application/problem+json")), "resumed already: {problem}");
    assert_eq!(writer.post(path, &json!({"url": "x"})).await.0, 400);
    let (_, _, listed) = api.get("/v1/namespaces/billing/paused-targets").await;
    assert_eq!(listed["paused_targets"], json!([]));
    let (_, _, other) = api.get("/v1/namespaces/other/paused-targets").await;
    assert_eq!(other["paused_targets"].as_array().unwrap().len(), 1, "the other namespace's pause stays");
}

/// A replay is due within its namespace's catch-up budget: 1,500 dead tasks at the default
/// 1,000 a second come due over 1.5 s, and a second replay right after comes due after
/// the first; a namespace's own budget (PATCH) spreads its replays at that rate.
#[tokio::test]
async fn a_large_replay_is_spread_over_its_namespaces_catch_up_budget() {
    let api = spawn_api().await;
    let pool = &api.db.pool;
    let timer = api.timer_in("ops", "outage").await;
    let dead = |count: i32, offset: i32| {
        sqlx::query_scalar::<_, i64>(
            "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, status, attempt)
             SELECT $1, date_trunc('second', now()) - interval '1 day' + (i + $3) * interval '1 second', now(), 1,
                    punctual_bucket($1), 'dead', 3
               FROM generate_series(1, $2) AS i
             RETURNING id",
        )
        .bind(timer)
        .bind(count)
        .bind(offset)
        .fetch_all(pool)
    };
    let spread = |ids: Vec<i64>| async move {
        let (first, last): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) =
            sqlx::query_as("SELECT min(due_at), max(due_at) FROM tasks WHERE id = ANY($1) AND status = 'pending'")
                .bind(&ids)
                .fetch_one(pool)
                .await
                .unwrap();
        (first, last)
    };
    let first_ids = dead(1_500, 0).await.unwrap();
    let second_ids = dead(10, 10_000).await.unwrap();
    let (status, _, replayed) = api.post("/v1/tasks/replay", &json!({"ids": first_ids})).await;
    assert_eq!((status, replayed["replayed"].as_array().map(Vec::len)), (200, Some(1_500)), "{replayed}");
    assert_eq!(api.post("/v1/tasks/replay", &json!({"ids": second_ids})).await.0, 200);
    let (first, last) = spread(first_ids).await;
    let over = (last - first).num_milliseconds();
    assert!((1_490..=1_500).contains(&over), "1,500 at 1,000 a second: over {over} ms");
    let (after, _) = spread(second_ids).await;
    assert!(after > last, "the next replay after the first: {after} after {last}");

    let patch = json!({"limits": {"max_catch_up_per_second": 10}});
    assert_eq!(api.send("PATCH", "/v1/namespaces/ops", Some(&patch)).await.0, 200);
    let slow_ids = dead(20, 20_000).await.unwrap();
    assert_eq!(api.post("/v1/tasks/replay", &json!({"ids": slow_ids})).await.0, 200);
    let (first, last) = spread(slow_ids).await;
    assert_eq!((last - first).num_milliseconds(), 1_900, "20 at 10 a second");
}

/// With `PUNCTUAL_SECRET_KEY`, signing secrets and secret header values are stored sealed:
/// a SQL reader sees no secret, the API works as before (a secret sent back redacted keeps
/// its value), and what was stored in plaintext before the key was set is sealed when an
/// admin starts with it, without changing any timer's version.
#[tokio::test]
async fn secrets_are_stored_sealed_and_plaintext_ones_sealed_at_start() {
    use punctual_shared::sealed::{Purpose, SecretKeys};
    let entry = SecretKeys::generate_entry("k1");
    let keys: SecretKeys = entry.parse().unwrap();
    let key = entry.clone();
    let api = spawn_api_with(move |c| c.secrets.secret_key = Some(key)).await;
    let pool = &api.db.pool;

    let (status, _, created) = api.post("/v1/namespaces/billing/signing-secrets", &json!({})).await;
    assert_eq!(status, 201);
    let whsec = created["secret"].as_str().unwrap();
    let mut body = example();
    body["action"]["http"]["headers"] =
        json!({"Authorization": "Bearer s3cr3t", "X-Tenant-Key": "t3nant", "X-Env": "prod"});
    let (status, _, timer) = api.post("/v1/timers", &body).await;
    assert_eq!(status, 201, "{timer}");

    let secret: String = sqlx::query_scalar("SELECT secret FROM signing_secrets").fetch_one(pool).await.unwrap();
    let headers: Value = sqlx::query_scalar("SELECT http_headers FROM timers").fetch_one(pool).await.unwrap();
    let dump = format!("{secret} {headers}");
    for plaintext in [&whsec[6..], "s3cr3t", "t3nant"] {
        assert!(!dump.contains(plaintext), "{plaintext} stored: {dump}");
    }
    assert_eq!(headers["X-Env"], "prod", "what is not secret stays readable");
    assert_eq!(keys.open(&secret, Purpose::SigningSecret).unwrap(), whsec);
    assert_eq!(keys.open(headers["Authorization"].as_str().unwrap(), Purpose::Header).unwrap(), "Bearer s3cr3t");
    let (_, _, listed) = api.get("/v1/namespaces/billing/signing-secrets").await;
    assert_eq!(listed["signing_secrets"][0]["prefix"], format!("{}…", &whsec[..10]));

    // Sent back as read, with a change elsewhere: still the same secret, sealed.
    let id = timer["id"].as_str().unwrap();
    let mut action = timer["action"].clone();
    action["http"]["headers"]["X-Env"] = json!("staging");
    let patch = json!({"revision": timer["revision"], "action": action});
    let (status, _, patched) = api.send("PATCH", &format!("/v1/timers/{id}"), Some(&patch)).await;
    assert_eq!(status, 200, "{patched}");
    let headers: Value = sqlx::query_scalar("SELECT http_headers FROM timers").fetch_one(pool).await.unwrap();
    assert_eq!(keys.open(headers["Authorization"].as_str().unwrap(), Purpose::Header).unwrap(), "Bearer s3cr3t");
    // A value made to look sealed is refused: it would be sent as it is.
    action["http"]["headers"]["X-Env"] = json!("sealed:v1:k1:AAAA");
    let patch = json!({"revision": patched["revision"], "action": action});
    let (status, _, problem) = api.send("PATCH", &format!("/v1/timers/{id}"), Some(&patch)).await;
    assert_eq!((status, &problem["field"]), (422, &json!("action.http.headers.X-Env")), "{problem}");

    // Stored in plaintext before the key was set (or with SQL): sealed at the next start.
    sqlx::query("INSERT INTO signing_secrets (namespace, secret) VALUES ('old', $1)")
        .bind(punctual_shared::webhook_signature::SigningSecret::generate().encoded())
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("UPDATE timers SET http_headers = '{\"Authorization\": \"Bearer plain\"}'")
        .execute(pool)
        .await
        .unwrap();
    let (version, revision): (i64, i64) =
        sqlx::query_as("SELECT version, revision FROM timers").fetch_one(pool).await.unwrap();
    let mut config = test_config(&api.db, None);
    config.secrets.secret_key = Some(entry);
    punctual_admin::App::build(config).await.expect("an admin starts");
    let secrets: Vec<String> = sqlx::query_scalar("SELECT secret FROM signing_secrets").fetch_all(pool).await.unwrap();
    assert!(secrets.iter().all(|s| s.starts_with("sealed:v1:k1:")), "{secrets:?}");
    let (headers, version_after, revision_after): (Value, i64, i64) =
        sqlx::query_as("SELECT http_headers, version, revision FROM timers").fetch_one(pool).await.unwrap();
    assert_eq!(keys.open(headers["Authorization"].as_str().unwrap(), Purpose::Header).unwrap(), "Bearer plain");
    assert_eq!((version_after, revision_after), (version, revision), "sealing changed no definition");
}

/// A namespace's policy holds its own callback allow-list, quota of timers and shortest
/// fire interval, each applied to that namespace only; `PUT` sets it whole, `PATCH` in
/// part; the list shows the namespaces with a policy, to the keys that see them.
#[tokio::test]
async fn a_namespaces_policy_opens_and_limits_that_namespace_only() {
    let api = spawn_api().await;
    let timer = |ns: &str, name: &str, url: &str, every_ms: i64| json!({"namespace": ns, "name": name, "schedule": {"every_ms": every_ms}, "action": {"http": {"url": url}}});
    let private = "http://10.20.0.5/hook";
    assert_eq!(api.post("/v1/timers", &timer("t1", "a", private, 60_000)).await.0, 422, "private: refused");
    let policy = json!({"callback_allow": ["10.20.0.0/16", "hooks.internal"],
                        "limits": {"max_timers": 2, "min_fire_interval_ms": 5_000}});
    let (status, _, put) = api.send("PUT", "/v1/namespaces/t1", Some(&policy)).await;
    assert_eq!(status, 200, "{put}");
    assert_eq!(put["callback_allow"], json!(["10.20.0.0/16", "hooks.internal"]));
    assert_eq!((&put["limits"]["max_timers"], &put["default_limits"]["max_timers"]), (&json!(2), &json!(100_000)));
    assert_eq!(put["limits"]["max_concurrent_calls"], 2_000, "what PUT leaves out is the default");

    let (status, _, created) = api.post("/v1/timers", &timer("t1", "a", private, 60_000)).await;
    assert_eq!(status, 201, "opened for t1: {created}");
    let (status, _, problem) = api.post("/v1/timers", &timer("t2", "a", private, 60_000)).await;
    assert_eq!((status, &problem["field"]), (422, &json!("action.http.url")), "not for t2: {problem}");
    let (status, _, problem) = api.post("/v1/timers", &timer("t1", "b", "https://e.example/", 2_000)).await;
    assert_eq!((status, &problem["field"]), (422, &json!("schedule.every_ms")), "t1's own interval: {problem}");
    assert_eq!(api.post("/v1/timers", &timer("t2", "b", "https://e.example/", 2_000)).await.0, 201, "not t2's");
    assert_eq!(api.post("/v1/timers", &timer("t1", "b", "https://e.example/", 60_000)).await.0, 201);
    let (status, _, problem) = api.post("/v1/timers", &timer("t1", "c", "https://e.example/", 60_000)).await;
    assert_eq!(status, 409, "t1's quota of 2: {problem}");
    assert_eq!(api.post("/v1/timers", &timer("t2", "c", "https://e.example/", 60_000)).await.0, 201, "not t2's");

    // PATCH keeps what it leaves out; PUT does not.
    let (_, _, patched) = api.send("PATCH", "/v1/namespaces/t1", Some(&json!({"limits": {"max_timers": 3}}))).await;
    assert_eq!((&patched["limits"]["max_timers"], &patched["callback_allow"][0]), (&json!(3), &json!("10.20.0.0/16")));
    for (body, field) in [
        (json!({"callback_allow": ["not a host!"]}), "callback_allow[0]"),
        (json!({"callback_allow": ["a,b"]}), "callback_allow[0]"),
        (json!({"limits": {"max_timers": -1}}), "limits.max_timers"),
        (json!({"limits": {"min_fire_interval_ms": 86_400_001}}), "limits.min_fire_interval_ms"),
    ] {
        let (status, _, problem) = api.send("PATCH", "/v1/namespaces/t1", Some(&body)).await;
        assert_eq!((status, &problem["field"]), (422, &json!(field)), "{body}: {problem}");
    }

    let (_, _, listed) = api.get("/v1/namespaces").await;
    let names: Vec<&str> =
        listed["namespaces"].as_array().unwrap().iter().map(|n| n["namespace"].as_str().unwrap()).collect();
    assert_eq!(names, ["t1"], "only namespaces with a policy of their own");
    let (_, _, key) = api.post("/v1/keys", &json!({"name": "t2", "role": "read", "namespaces": ["t2"]})).await;
    let (status, _, seen) = api.with_key(key["key"].as_str()).get("/v1/namespaces").await;
    assert_eq!((status, &seen["namespaces"]), (200, &json!([])), "t2's key does not see t1's policy");
    let put = api.with_key(key["key"].as_str()).send("PUT", "/v1/namespaces/t2", Some(&json!({}))).await;
    assert_eq!(put.0, 403);
}

/// Listing finished tasks reads the scheduled times asked for (the last day unless given)
/// through the scheduled time's index, not the whole history: 30 days of succeeded tasks,
/// and the listing neither scans the table nor shows more than its range.
#[tokio::test]
async fn finished_tasks_are_listed_by_a_range_of_scheduled_times_without_a_full_scan() {
    let api = spawn_api().await;
    let pool = &api.db.pool;
    let (_, _, timer) = api.post("/v1/timers", &example()).await;
    let id: uuid::Uuid = timer["id"].as_str().unwrap().parse().unwrap();
    sqlx::query(
        "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, status, finished_at)
         SELECT $1, at, at, 1, 0, 'succeeded', at
           FROM generate_series(now() - interval '30 days', now() - interval '10 seconds', interval '10 seconds') AS at
          ORDER BY at",
    )
    .bind(id)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE tasks").execute(pool).await.unwrap();
    // The listing's plan, for the last day: through the scheduled time's index, no full scan.
    let explain = format!("EXPLAIN (FORMAT JSON) {}", punctual_admin::dead_tasks::list_statement());
    let plan: Value = sqlx::query_scalar(&explain)
        .bind("succeeded")
        .bind(None::<String>)
        .bind(1000_i64)
        .bind(None::<Vec<String>>)
        .bind(Some(Utc::now() - chrono::Duration::days(1)))
        .bind(Some(Utc::now()))
        .fetch_one(pool)
        .await
        .unwrap();
    fn nodes(node: &Value, out: &mut Vec<(String, String)>) {
        let field = |name: &str| node[name].as_str().unwrap_or_default().to_owned();
        out.push((field("Node Type"), field("Relation Name") + &field("Index Name")));
        for child in node["Plans"].as_array().into_iter().flatten() {
            nodes(child, out);
        }
    }
    let mut scans = Vec::new();
    nodes(&plan[0]["Plan"], &mut scans);
    assert!(scans.iter().any(|(_, on)| on == "tasks_scheduled_brin"), "{scans:?}");
    assert!(!scans.iter().any(|(kind, on)| kind == "Seq Scan" && on == "tasks"), "{scans:?}");

    let (status, _, listed) = api.get("/v1/tasks?status=succeeded&limit=1000").await;
    assert_eq!(status, 200, "{listed}");
    let tasks = listed["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1000, "a page of the last day's");
    let day_ago = Utc::now() - chrono::Duration::days(1);
    assert!(tasks.iter().all(|t| t["scheduled_at"].as_str().unwrap().parse::<DateTime<Utc>>().unwrap() >= day_ago));
    let from = (Utc::now() - chrono::Duration::days(20)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let to = (Utc::now() - chrono::Duration::days(19)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let (status, _, older) = api.get(&format!("/v1/tasks?status=succeeded&limit=10&from={from}&to={to}")).await;
    assert_eq!((status, older["tasks"].as_array().unwrap().len()), (200, 10), "{older}");
    let (status, _, problem) = api.get("/v1/tasks?status=gone").await;
    assert_eq!((status, &problem["field"]), (422, &json!("status")));
}
