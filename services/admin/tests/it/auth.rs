//! API keys, roles and namespaces against the real admin service: 401 without a valid key,
//! 403 outside the key's role, and another namespace's ids answered as unknown ones.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{example, spawn_api, spawn_api_with, Api};

/// Creates a key with the admin key; returns the key.
async fn key(api: &Api, role: &str, namespaces: &[&str]) -> String {
    let (status, _, created) =
        api.post("/v1/keys", &json!({"name": format!("{role} key"), "role": role, "namespaces": namespaces})).await;
    assert_eq!(status, 201, "{created}");
    created["key"].as_str().unwrap().to_owned()
}

fn assert_problem(answer: &(u16, Option<String>, Value), status: u16, kind: &str) {
    assert_eq!((answer.0, answer.1.as_deref()), (status, Some("application/problem+json")), "{}", answer.2);
    assert_eq!(answer.2["type"], format!("urn:punctual:problem:{kind}"), "{}", answer.2);
}

#[tokio::test]
async fn a_request_without_a_valid_key_is_refused() {
    let api = spawn_api().await;
    let r = crate::common::client(None).get(format!("{}/v1/timers", api.base)).send().await.unwrap();
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    assert_problem(&Api::read(r).await, 401, "unauthenticated");
    let unknown = punctual_shared::api_key::ApiKey::generate();
    for key in ["not-a-key", "pct_short", unknown.expose()] {
        assert_problem(&api.with_key(Some(key)).get("/v1/timers").await, 401, "unauthenticated");
    }
    let basic = crate::common::client(None).get(format!("{}/v1/timers", api.base)).basic_auth("admin", Some("x"));
    assert_problem(&Api::read(basic.send().await.unwrap()).await, 401, "unauthenticated");

    // A revoked key is refused from the next request on.
    let (_, _, created) = api.post("/v1/keys", &json!({"name": "ci", "role": "read", "namespaces": ["billing"]})).await;
    let reader = api.with_key(created["key"].as_str());
    assert_eq!(reader.get("/v1/timers").await.0, 200);
    assert_eq!(api.delete(&format!("/v1/keys/{}", created["id"].as_str().unwrap())).await, 204);
    assert_problem(&reader.get("/v1/timers").await, 401, "unauthenticated");
    assert_eq!(api.delete(&format!("/v1/keys/{}", created["id"].as_str().unwrap())).await, 204, "idempotent");
    assert_eq!(api.delete(&format!("/v1/keys/{}", uuid::Uuid::new_v4())).await, 404);

    // The scheme's name in any case.
    let lower = crate::common::client(None)
        .get(format!("{}/v1/timers", api.base))
        .header("authorization", format!("bearer {}", api.admin_key));
    assert_eq!(lower.send().await.unwrap().status(), 200);

    // What needs no key: health, readiness, metrics and the API's description.
    for path in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        assert_eq!(crate::common::client(None).get(format!("{}{path}", api.base)).send().await.unwrap().status(), 200);
    }
}

/// Requests anyone can send without a key add no series to `/metrics`: made-up methods
/// and paths share one label each.
#[tokio::test]
async fn made_up_methods_and_paths_leave_the_metrics_the_same_size() {
    let api = spawn_api().await;
    let anyone = crate::common::client(None);
    let send = |i: usize| {
        let method = reqwest::Method::from_bytes(format!("M{i}").as_bytes()).unwrap();
        anyone.request(method, format!("{}/made-up/{i}", api.base)).send()
    };
    let size =
        || async { anyone.get(format!("{}/metrics", api.base)).send().await.unwrap().text().await.unwrap().len() };
    send(0).await.unwrap();
    size().await; // the /metrics route's own series
    let before = size().await;
    for chunk in (1..=3_000).collect::<Vec<_>>().chunks(100) {
        for answer in futures::future::join_all(chunk.iter().map(|i| send(*i))).await {
            answer.unwrap();
        }
    }
    let after = size().await;
    // Only the counts' digits grow.
    assert!(after < before + 1_024, "/metrics grew from {before} to {after} bytes");
}

#[tokio::test]
async fn a_key_is_shown_once_and_stored_only_as_its_digest() {
    let api = spawn_api().await;
    let (status, _, created) = api
        .post("/v1/keys", &json!({"name": "deploy bot", "role": "write", "namespaces": ["ops", "billing", "ops"]}))
        .await;
    assert_eq!(status, 201, "{created}");
    let secret = created["key"].as_str().unwrap();
    assert!(secret.starts_with("pct_"));
    assert_eq!(created["namespaces"], json!(["billing", "ops"]));
    let (_, _, listed) = api.get("/v1/keys").await;
    assert_eq!(listed["keys"].as_array().unwrap().len(), 2, "the bootstrap key and this one: {listed}");
    assert!(!listed.to_string().contains(&secret[10..]), "{listed}");
    let shown = listed["keys"][1]["prefix"].as_str().unwrap();
    assert!(secret.starts_with(shown.trim_end_matches('…')), "{shown}");
    let stored: String =
        sqlx::query_scalar("SELECT string_agg(k::text, ' ') FROM api_keys k").fetch_one(&api.db.pool).await.unwrap();
    assert!(!stored.contains(&secret[10..]), "{stored}");

    for (body, status, field) in [
        (json!({"name": "x", "role": "admin", "namespaces": ["ops"]}), 422, "namespaces"),
        (json!({"name": "x", "role": "read"}), 422, "namespaces"),
        (json!({"name": "x", "role": "read", "namespaces": ["Not Valid"]}), 422, "namespaces[0]"),
        (json!({"name": "", "role": "read", "namespaces": ["ops"]}), 422, "name"),
        (json!({"name": "x", "role": "root", "namespaces": ["ops"]}), 400, "role"),
        (json!({"role": "read", "namespaces": ["ops"]}), 400, "name"),
    ] {
        let (got, _, problem) = api.post("/v1/keys", &body).await;
        assert_eq!((got, &problem["field"]), (status, &json!(field)), "{body}: {problem}");
    }
}

#[tokio::test]
async fn a_keys_role_bounds_what_it_does() {
    let api = spawn_api().await;
    let id = api.timer_in("billing", "nightly").await;
    let reader = api.with_key(Some(&key(&api, "read", &["billing"]).await));
    let writer = api.with_key(Some(&key(&api, "write", &["billing"]).await));

    assert_eq!(reader.get(&format!("/v1/timers/{id}")).await.0, 200);
    assert_eq!(reader.get("/v1/namespaces/billing/stats").await.0, 200);
    let mut other = example();
    other["name"] = json!("another");
    for (method, path, body) in [
        ("POST", "/v1/timers".to_owned(), Some(other.clone())),
        ("POST", format!("/v1/timers/{id}/pause"), None),
        ("DELETE", format!("/v1/timers/{id}"), None),
        ("PATCH", format!("/v1/timers/{id}"), Some(json!({"revision": 1, "name": "renamed"}))),
        ("POST", format!("/v1/timers/{id}/trigger"), None),
        ("POST", "/v1/namespaces/billing/signing-secrets".to_owned(), None),
        ("POST", "/v1/timers/bulk/pause".to_owned(), Some(json!({"namespace": "billing"}))),
        ("GET", "/v1/keys".to_owned(), None),
    ] {
        assert_problem(&reader.send(method, &path, body.as_ref()).await, 403, "forbidden");
    }
    assert_eq!(reader.send("GET", &format!("/v1/timers/{id}"), None).await.2["state"], "active", "nothing changed");

    assert_eq!(writer.post("/v1/timers", &other).await.0, 201);
    assert_eq!(writer.send("POST", &format!("/v1/timers/{id}/pause"), None).await.0, 200);
    for (method, path, body) in [
        ("GET", "/v1/keys".to_owned(), None),
        ("POST", "/v1/keys".to_owned(), Some(json!({"name": "x", "role": "admin"}))),
        ("GET", "/v1/namespaces/ops/stats".to_owned(), None),
        ("GET", "/v1/namespaces/ops/runs".to_owned(), None),
        ("GET", "/v1/namespaces/ops/signing-secrets".to_owned(), None),
        ("GET", "/v1/timers?namespace=ops".to_owned(), None),
        ("GET", "/v1/tasks?status=dead&namespace=ops".to_owned(), None),
        ("POST", "/v1/timers/bulk/delete".to_owned(), Some(json!({"namespace": "ops"}))),
    ] {
        assert_problem(&writer.send(method, &path, body.as_ref()).await, 403, "forbidden");
    }
    let mut elsewhere = example();
    elsewhere["namespace"] = json!("ops");
    assert_problem(&writer.post("/v1/timers", &elsewhere).await, 403, "forbidden");
    assert_eq!(api.timer_count().await, 2);
}

/// Every route that takes an id answers for another namespace's timer or task exactly as
/// for an id that does not exist.
#[tokio::test]
async fn another_namespaces_ids_answer_as_unknown_ids_on_every_route() {
    let api = spawn_api().await;
    let theirs = api.timer_in("billing", "nightly").await;
    api.occurrence(theirs, 5, "dead", 3).await;
    let task: i64 = sqlx::query_scalar("SELECT id FROM tasks").fetch_one(&api.db.pool).await.unwrap();
    let mine = api.timer_in("ops", "mine").await;
    let ops = api.with_key(Some(&key(&api, "write", &["ops"]).await));
    let unknown = uuid::Uuid::new_v4();
    let past = json!({"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z"});
    let routes = |id: String| {
        vec![
            ("GET", format!("/v1/timers/{id}"), None),
            ("PATCH", format!("/v1/timers/{id}"), Some(json!({"revision": 1, "name": "taken"}))),
            ("POST", format!("/v1/timers/{id}/pause"), None),
            ("POST", format!("/v1/timers/{id}/resume"), None),
            ("GET", format!("/v1/timers/{id}/runs"), None),
            ("POST", format!("/v1/timers/{id}/trigger"), None),
            ("POST", format!("/v1/timers/{id}/backfill"), Some(past.clone())),
            ("DELETE", format!("/v1/timers/{id}"), None),
        ]
    };
    for ((method, path, body), (_, unknown_path, _)) in
        routes(theirs.to_string()).into_iter().zip(routes(unknown.to_string()))
    {
        let answer = ops.send(method, &path, body.as_ref()).await;
        let as_unknown = ops.send(method, &unknown_path, body.as_ref()).await;
        assert_problem(&answer, 404, "not-found");
        assert_eq!(
            answer.2["detail"].as_str().unwrap().replace(&theirs.to_string(), "ID"),
            as_unknown.2["detail"].as_str().unwrap().replace(&unknown.to_string(), "ID"),
            "{method} {path}"
        );
    }
    let replay = ops.send("POST", &format!("/v1/tasks/{task}/replay"), None).await;
    let replay_unknown = ops.send("POST", "/v1/tasks/987654321/replay", None).await;
    assert_problem(&replay, 404, "not-found");
    assert_eq!(
        replay.2["detail"].as_str().unwrap().replace(&task.to_string(), "ID"),
        replay_unknown.2["detail"].as_str().unwrap().replace("987654321", "ID")
    );
    assert_eq!(ops.post("/v1/tasks/replay", &json!({"ids": [task]})).await.2, json!({"replayed": []}));

    // Listings show only the key's namespaces.
    let (_, _, listed) = ops.get("/v1/timers").await;
    let ids: Vec<&str> = listed["timers"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![mine.to_string()]);
    assert_eq!(ops.get("/v1/tasks?status=dead").await.2, json!({"tasks": []}));

    // Nothing of theirs changed; the admin sees it all.
    let (_, _, timer) = api.get(&format!("/v1/timers/{theirs}")).await;
    assert_eq!((timer["name"].as_str(), timer["state"].as_str()), (Some("nightly"), Some("active")));
    let status: String = sqlx::query_scalar("SELECT status FROM tasks").fetch_one(&api.db.pool).await.unwrap();
    assert_eq!(status, "dead");
    assert_eq!(api.get("/v1/tasks?status=dead").await.2["tasks"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_keys_request_rate_is_limited() {
    let api = spawn_api_with(|c| c.auth.api_rate_limit = 5).await;
    let other = api.with_key(Some(&key(&api, "read", &["billing"]).await));
    let mut limited = None;
    for _ in 0..40 {
        let r = api.client.get(format!("{}/v1/timers", api.base)).send().await.unwrap();
        if r.status() == 429 {
            limited = Some(r);
            break;
        }
    }
    let r = limited.expect("40 requests at once exceed 5 a second with bursts of 10");
    assert!(r.headers()["retry-after"].to_str().unwrap().parse::<u64>().unwrap() >= 1);
    assert_problem(&Api::read(r).await, 429, "rate-limited");
    assert_eq!(other.get("/v1/timers").await.0, 200, "each key has its own rate");
}

#[tokio::test]
async fn an_address_sending_unknown_keys_is_refused_but_not_its_valid_keys() {
    // One a second, in bursts of two: the third spends the budget, and the address is then
    // refused for a second.
    let api = spawn_api_with(|c| c.auth.failed_auth_limit = 1).await;
    let unknown = punctual_shared::api_key::ApiKey::generate();
    let guesser = api.with_key(Some(unknown.expose()));
    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(guesser.get("/v1/timers").await.0);
        if statuses.last() == Some(&429) {
            break;
        }
    }
    assert_eq!(statuses.first(), Some(&401), "{statuses:?}");
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    // 40 more guesses from the same address (a proxy's, say), the last one refused: a
    // valid key still passes.
    let mut last = 0;
    for i in 0.. {
        let other = punctual_shared::api_key::ApiKey::generate();
        last = api.with_key(Some(other.expose())).get("/v1/timers").await.0;
        assert!(last == 401 || last == 429, "{last}");
        if i >= 40 && last == 429 {
            break;
        }
    }
    assert_eq!(last, 429);
    assert_eq!(api.get("/v1/timers").await.0, 200, "a valid key is never refused for the others' guesses");
}

/// Behind a trusted proxy each client is the address the proxy forwarded: one client's
/// guesses do not get another refused. Without the setting the header is not believed.
#[tokio::test]
async fn behind_a_trusted_proxy_clients_are_told_apart_by_their_forwarded_address() {
    let forwarded = |api: &Api, key: Option<&str>, client: &'static str| {
        let request = api.with_key(key).client.get(format!("{}/v1/timers", api.base));
        async move { request.header("x-forwarded-for", client).send().await.unwrap().status().as_u16() }
    };
    let unknown = punctual_shared::api_key::ApiKey::generate();
    // Five loops of guesses from 203.0.113.7, each sending again as soon as it is answered,
    // for the whole exchange: the budget (two at once, one a second) is spent as soon as it
    // refills, however slow a request is on a busy machine. After each refusal of a guess,
    // another client asks twice at once, up to `tries` times. Its own budget lets both
    // through; a budget shared with the guesses would have to refill twice over and be
    // won twice against five loops.
    let other_client_after_guesses = |api: Api, tries: usize| {
        let unknown = unknown.clone();
        async move {
            let (stop, refusals) = (AtomicBool::new(false), AtomicUsize::new(0));
            let guessing = futures::future::join_all((0..5).map(|_| async {
                while !stop.load(Ordering::Relaxed) {
                    if forwarded(&api, Some(unknown.expose()), "203.0.113.7").await == 429 {
                        refusals.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
            let other = async {
                let mut answers = Vec::new();
                for _ in 0..tries {
                    let seen = refusals.load(Ordering::Relaxed);
                    let refused = punctual_testkit::eventually_or(Duration::from_secs(30), || async {
                        (refusals.load(Ordering::Relaxed) > seen).then_some(())
                    })
                    .await;
                    assert!(refused.is_some(), "the guessing client refused");
                    let other = futures::future::join_all((0..2).map(|_| forwarded(&api, None, "203.0.113.8"))).await;
                    let refused = other.contains(&429);
                    answers.push(other);
                    if refused {
                        break;
                    }
                }
                stop.store(true, Ordering::Relaxed);
                answers
            };
            futures::join!(guessing, other).1
        }
    };
    let behind = spawn_api_with(|c| {
        c.auth.failed_auth_limit = 1;
        c.auth.trusted_proxies = "127.0.0.0/8,::1".parse().unwrap();
    })
    .await;
    let answers = other_client_after_guesses(behind, 1).await;
    assert_eq!(answers, [[401, 401]], "another client behind the proxy is not refused");
    let direct = spawn_api_with(|c| c.auth.failed_auth_limit = 1).await;
    let answers = other_client_after_guesses(direct, 5).await;
    let refused = answers.last().is_some_and(|other| other.contains(&429));
    assert!(refused, "a header from an untrusted peer is not believed: {answers:?}");
}

#[tokio::test]
async fn without_auth_every_caller_is_an_admin() {
    let api = spawn_api_with(|c| c.auth.auth_disabled = true).await;
    let anyone = api.with_key(None);
    assert_eq!(anyone.post("/v1/timers", &example()).await.0, 201);
    assert_eq!(anyone.get("/v1/keys").await.0, 200);
}

#[tokio::test]
async fn a_namespace_holds_at_most_its_quota_of_timers() {
    let api = spawn_api_with(|c| c.namespace_max_timers = 2).await;
    let first = api.timer_in("billing", "one").await;
    api.timer_in("billing", "two").await;
    let mut third = example();
    third["name"] = json!("three");
    let answer = api.post("/v1/timers", &third).await;
    assert_problem(&answer, 409, "quota-exceeded");
    assert_eq!(answer.2["field"], "namespace");
    assert!(answer.2["detail"].as_str().unwrap().contains("PUNCTUAL_NAMESPACE_MAX_TIMERS"));
    api.timer_in("ops", "elsewhere").await;
    assert_eq!(api.delete(&format!("/v1/timers/{first}")).await, 204);
    assert_eq!(api.post("/v1/timers", &third).await.0, 201, "a deleted timer does not count");
}

/// A malformed bootstrap key stops the admin with a message that does not show it.
#[tokio::test]
async fn a_malformed_bootstrap_key_is_refused_without_being_shown() {
    let db = punctual_testkit::TestDb::create().await;
    let mut config: punctual_admin::AdminConfig =
        clap::Parser::parse_from(["punctual-admin", "--database-url", &db.url, "--addr", "127.0.0.1:0"]);
    config.auth.bootstrap_api_key = Some("pct_almost-a-key-s3cr3t".into());
    let error = punctual_admin::App::build(config).await.err().expect("refused");
    let message = format!("{error:#}");
    assert!(message.contains("PUNCTUAL_BOOTSTRAP_API_KEY is not an API key"), "{message}");
    assert!(!message.contains("s3cr3t"), "{message}");
}

/// Every operation the API describes answers 401 without a key, and 403 to a read key
/// for every one that changes something: taken from /openapi.json, so that a new route
/// cannot be left out.
#[tokio::test]
async fn every_operation_needs_a_key_and_every_change_a_write_key() {
    let api = spawn_api().await;
    let reader = api.with_key(Some(&key(&api, "read", &["billing"]).await));
    let anonymous = api.with_key(None);
    let (_, _, document) = anonymous.get("/openapi.json").await;
    let mut checked = 0;
    for (path, item) in document["paths"].as_object().unwrap() {
        let concrete = path
            .replace("{id}", &uuid::Uuid::new_v4().to_string())
            .replace("{namespace}", "billing")
            .replace("{action}", "pause");
        for (method, operation) in item.as_object().unwrap() {
            let method = method.to_uppercase();
            let body = operation.get("requestBody").map(|_| json!({}));
            let answer = anonymous.send(&method, &concrete, body.as_ref()).await;
            assert_eq!(answer.0, 401, "{method} {path} without a key: {}", answer.2);
            let changes = method != "GET" && path != "/v1/schedules/preview";
            let answer = reader.send(&method, &concrete, body.as_ref()).await;
            if changes {
                assert_eq!(answer.0, 403, "{method} {path} with a read key: {}", answer.2);
            } else {
                assert_ne!(answer.0, 401, "{method} {path} with a read key: {}", answer.2);
            }
            checked += 1;
        }
    }
    assert!(checked >= 23, "{checked} operations");
}

/// Every change made through the API is in the audit log with the name of the key that
/// made it; a key sees the changes of its namespaces only, an admin key all of them.
#[tokio::test]
async fn changes_are_in_the_audit_log_under_the_name_of_the_key_that_made_them() {
    let api = spawn_api().await;
    let (_, _, created) =
        api.post("/v1/keys", &json!({"name": "deploy-bot", "role": "write", "namespaces": ["billing"]})).await;
    let writer = api.with_key(created["key"].as_str());
    let (_, _, other) =
        api.post("/v1/keys", &json!({"name": "other-team", "role": "read", "namespaces": ["other"]})).await;
    let other = api.with_key(other["key"].as_str());
    let (status, _, timer) = writer.post("/v1/timers", &example()).await;
    assert_eq!(status, 201, "{timer}");
    let id = timer["id"].as_str().unwrap();
    writer.post(&format!("/v1/timers/{id}/pause"), &json!({})).await;
    writer.post(&format!("/v1/timers/{id}/resume"), &json!({})).await;
    writer.post("/v1/timers/bulk/pause", &json!({"namespace": "billing", "name_prefix": "nightly"})).await;
    // Refused: not recorded.
    assert_eq!(writer.post("/v1/timers/bulk/pause", &json!({"namespace": "other"})).await.0, 403);

    let (status, _, page) = writer.get("/v1/audit?namespace=billing").await;
    assert_eq!(status, 200, "{page}");
    let entries = page["entries"].as_array().unwrap();
    let actions: Vec<&str> = entries.iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["timers_paused", "timer_resumed", "timer_paused", "timer_created"], "newest first");
    assert!(entries.iter().all(|e| e["key_name"] == "deploy-bot" && e["namespace"] == "billing"), "{page}");
    assert_eq!(entries[3]["target"], json!(id));
    assert_eq!(entries[0]["detail"]["timers"], json!([id]));
    // Another namespace's key sees none of it, nor may it ask.
    let (_, _, theirs) = other.get("/v1/audit").await;
    assert_eq!(theirs["entries"], json!([]));
    assert_eq!(other.get("/v1/audit?namespace=billing").await.0, 403);
    // The admin key sees everything, its own key changes (of no namespace) too, a page at a time.
    let (_, _, all) = api.get("/v1/audit?limit=2").await;
    assert_eq!(all["entries"].as_array().unwrap().len(), 2);
    let before = all["next_before"].as_i64().unwrap();
    let (_, _, rest) = api.get(&format!("/v1/audit?before={before}")).await;
    let rest: Vec<&str> = rest["entries"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(rest, ["timer_paused", "timer_created", "key_created", "key_created"]);
}
