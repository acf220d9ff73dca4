//! A timer's fan-out through the API: stored, changed as part of the definition, refused
//! out of range, and an occurrence read as a whole from its shards.

use serde_json::{json, Value};

use crate::common::{example, spawn_api, Api};

/// Writes shard `shard` of `shards` of `timer`'s occurrence at `at`, in `status`.
async fn shard(api: &Api, timer: &str, at: &str, shard: i16, shards: i16, status: &str) {
    sqlx::query(
        "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, shard, shards, status)
         VALUES ($1::uuid, $2::timestamptz, now(), 1, 0, $3, $4, $5)",
    )
    .bind(timer)
    .bind(at)
    .bind(shard)
    .bind(shards)
    .bind(status)
    .execute(&api.db.pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn a_timers_fan_out_is_part_of_its_definition_and_bounded() {
    let api = spawn_api().await;
    let mut body = example();
    body["fan_out"] = json!({"shards": 16});
    let (status, _, timer) = api.post("/v1/timers", &body).await;
    assert_eq!(status, 201, "{timer}");
    assert_eq!(timer["fan_out"], json!({"shards": 16}));
    let id = timer["id"].as_str().unwrap();
    let stored: i32 = sqlx::query_scalar("SELECT fan_out_shards FROM timers WHERE id = $1::uuid")
        .bind(id)
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(stored, 16);

    // A change of fan-out is a new version, as a change of the action is; null: one call.
    let patch = json!({"revision": timer["revision"], "fan_out": {"shards": 4}});
    let (status, _, four) = api.send("PATCH", &format!("/v1/timers/{id}"), Some(&patch)).await;
    assert_eq!(status, 200, "{four}");
    assert_eq!((four["fan_out"]["shards"].as_i64(), four["version"].as_i64()), (Some(4), Some(2)));
    let urls = json!({"broadcast": ["https://a.example.com/x", "https://b.example.com/x"]});
    let patch = json!({"revision": four["revision"], "fan_out": urls});
    let (status, _, listed) = api.send("PATCH", &format!("/v1/timers/{id}"), Some(&patch)).await;
    assert_eq!((status, &listed["fan_out"]), (200, &urls), "{listed}");
    let patch = json!({"revision": listed["revision"], "fan_out": {"broadcast": "dns"}});
    let (_, _, four) = api.send("PATCH", &format!("/v1/timers/{id}"), Some(&patch)).await;
    assert_eq!((&four["fan_out"], four["version"].as_i64()), (&json!({"broadcast": "dns"}), Some(4)), "{four}");
    let patch = json!({"revision": four["revision"], "fan_out": null});
    let (_, _, one) = api.send("PATCH", &format!("/v1/timers/{id}"), Some(&patch)).await;
    assert_eq!((one.get("fan_out"), one["version"].as_i64()), (None, Some(5)), "{one}");
    // A broadcast calls URLs: not for a Kafka action.
    let mut kafka = example();
    kafka["name"] = json!("to-kafka");
    kafka["action"] = json!({"kafka": {"topic": "orders"}});
    kafka["fan_out"] = json!({"broadcast": "dns"});
    let (status, _, problem) = api.post("/v1/timers", &kafka).await;
    assert_eq!((status, &problem["field"]), (422, &json!("fan_out.broadcast")), "{problem}");

    for (fan_out, want, field) in [
        (json!({"shards": 0}), 422, "fan_out.shards"),
        (json!({"shards": 1001}), 422, "fan_out.shards"),
        (json!({"shards": 2, "broadcast": "dns"}), 422, "fan_out"),
        (json!({"shards": 2, "spread": 1}), 400, "fan_out.spread"),
        (json!({"broadcast": []}), 422, "fan_out.broadcast"),
        (json!({"broadcast": ["https://a.example.com/", "ftp://b.example.com/"]}), 422, "fan_out.broadcast[1]"),
        (json!({"broadcast": ["https://a.example.com/", "http://10.1.2.3/x"]}), 422, "fan_out.broadcast[1]"),
    ] {
        let mut body = example();
        body["name"] = json!("refused");
        body["fan_out"] = fan_out.clone();
        let (status, content_type, problem) = api.post("/v1/timers", &body).await;
        assert_eq!((status, content_type.as_deref()), (want, Some("application/problem+json")), "{fan_out}: {problem}");
        assert_eq!(problem["field"], field, "{fan_out}: {problem}");
    }
    // The shard header is the service's.
    let mut body = example();
    body["name"] = json!("forged");
    body["action"]["http"]["headers"] = json!({"Punctual-Shard": "0/1"});
    let (status, _, problem) = api.post("/v1/timers", &body).await;
    assert_eq!(status, 422, "{problem}");
    assert!(problem["field"].as_str().unwrap().contains("Punctual-Shard"), "{problem}");
    assert_eq!(api.timer_count().await, 1, "nothing refused was written");
}

#[tokio::test]
async fn an_occurrence_is_dead_if_a_shard_is_and_succeeded_when_all_are() {
    let api = spawn_api().await;
    let (_, _, timer) = api.post("/v1/timers", &example()).await;
    let id = timer["id"].as_str().unwrap();
    let (done, failed) = ("2026-12-01T02:00:00Z", "2026-12-02T02:00:00Z");
    for i in 0..3 {
        shard(&api, id, done, i, 3, "succeeded").await;
        shard(&api, id, failed, i, 3, if i == 1 { "dead" } else { "running" }).await;
    }
    let occurrence = |at: &str| format!("/v1/timers/{id}/occurrences/{at}");
    let (status, _, whole) = api.get(&occurrence("2026-12-01T02:00:00.000Z")).await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!((whole["status"].as_str(), whole["shards"].as_i64()), (Some("succeeded"), Some(3)));
    let shards: Vec<Value> = whole["runs"].as_array().unwrap().iter().map(|r| r["shard"].clone()).collect();
    assert_eq!(shards, [json!(0), json!(1), json!(2)]);
    let (_, _, whole) = api.get(&occurrence(failed)).await;
    assert_eq!(whole["status"], "dead", "one dead shard: {whole}");
    // The runs list shows each shard.
    let (_, _, runs) = api.get(&format!("/v1/timers/{id}/runs")).await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 6);
    assert!(runs["runs"].as_array().unwrap().iter().all(|r| r["shards"] == 3));

    let (status, _, problem) = api.get(&occurrence("2026-12-03T02:00:00Z")).await;
    assert_eq!(status, 404, "{problem}");
    let (status, _, problem) = api.get(&occurrence("yesterday")).await;
    assert_eq!((status, problem["field"].as_str()), (422, Some("scheduled_at")), "{problem}");
}

/// A key that may change a timer but not read its secrets cannot send them to a new target
/// through a broadcast: a URL of another origin is refused while the action keeps a stored
/// secret value, and taken once the value is given again.
#[tokio::test]
async fn a_broadcast_does_not_carry_stored_secrets_to_a_new_target() {
    let api = spawn_api().await;
    let mut body = example();
    body["action"]["http"]["headers"] = json!({"Authorization": "Bearer s3cr3t"});
    let (status, _, timer) = api.post("/v1/timers", &body).await;
    assert_eq!(status, 201, "{timer}");
    let id = timer["id"].as_str().unwrap();
    let elsewhere = json!({"broadcast": ["https://hooks.example.com/a", "https://attacker.example.net/"]});
    let patch = json!({"revision": timer["revision"], "fan_out": elsewhere});
    let (status, _, problem) = api.send("PATCH", &format!("/v1/timers/{id}"), Some(&patch)).await;
    assert_eq!((status, &problem["field"]), (422, &json!("fan_out.broadcast[1]")), "{problem}");
    // The same origin as the URL keeps the stored value.
    let same = json!({"broadcast": ["https://hooks.example.com/a", "https://hooks.example.com/b"]});
    let patch = json!({"revision": timer["revision"], "fan_out": same});
    let (status, _, changed) = api.send("PATCH", &format!("/v1/timers/{id}"), Some(&patch)).await;
    assert_eq!(status, 200, "{changed}");
    // Given again, the value goes where the caller says.
    let mut action = example()["action"].clone();
    action["http"]["headers"] = json!({"Authorization": "Bearer given-again"});
    let patch = json!({"revision": changed["revision"], "fan_out": elsewhere, "action": action});
    let (status, _, changed) = api.send("PATCH", &format!("/v1/timers/{id}"), Some(&patch)).await;
    assert_eq!(status, 200, "{changed}");
}
