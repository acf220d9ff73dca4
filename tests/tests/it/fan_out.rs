//! Fan-out on the real stack: an occurrence split into shards, each a call with its own
//! identity, attempts and outcome, and the occurrence judged from its shards.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use punctual_shared::fan_out::Shard;
use punctual_testkit::repeats::{Repeats, WRITE_BACK};
use punctual_testkit::stack::dump_logs;
use punctual_testkit::{eventually, Behaviour, Call, Sink, Stack};
use serde_json::{json, Value};
use uuid::Uuid;

/// The shard a call says it is (`Punctual-Shard`), checked against its key's suffix.
fn shard_of(call: &Call) -> (u16, u16) {
    let (index, total) = call.shard().expect("a Punctual-Shard header");
    let key = call.idempotency_key.as_deref().expect("an Idempotency-Key");
    assert!(key.ends_with(&format!("/{index}")), "the key {key} names shard {index}");
    (index, total)
}

/// A timer's occurrence as `GET /v1/timers/{id}/occurrences/{at}` answers it: `null` until
/// it is planned.
async fn occurrence(stack: &Stack, timer: &str, at: DateTime<Utc>) -> Value {
    let at = at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let r = stack.http.get(stack.admin.url(&format!("/v1/timers/{timer}/occurrences/{at}"))).send().await.unwrap();
    match r.status().as_u16() {
        200 => r.json().await.unwrap(),
        404 => Value::Null,
        other => panic!("the occurrence answered {other}: {}", r.text().await.unwrap_or_default()),
    }
}

/// A one-shot timer due shortly with `shards` shards, calling `path`.
async fn sharded_one_shot(
    stack: &Stack,
    sink: &Sink,
    path: &str,
    shards: i32,
    retry: Value,
) -> (String, DateTime<Utc>) {
    let at = (Utc::now() + chrono::Duration::milliseconds(1_500)).trunc_subsecs(3);
    let timer = stack
        .create_timer(&json!({
            "name": path, "schedule": {"at": at}, "retry": retry, "fan_out": {"shards": shards},
            "action": {"http": {"url": sink.url(path)}}
        }))
        .await;
    assert_eq!(timer["fan_out"]["shards"], shards);
    (timer["id"].as_str().unwrap().to_owned(), at)
}

/// Each of two timers of 16 shards fires every second for 8 s, at a target that answers in
/// 300 ms; the executor is killed (SIGKILL) mid-occurrence and restarted at once, as a
/// supervisor would. Every shard of every occurrence is called with indexes 0 to 15 and a
/// key of its own, and only the calls in flight at the kill are made again, with the same
/// key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_shards_each_run_once_across_an_executor_kill() {
    let sink = Sink::start().await;
    sink.behave("/shards", Behaviour::slow(Duration::from_millis(300)));
    let mut stack = Stack::start(&[
        ("PUNCTUAL_LEASE_MS", "4000".into()),
        ("PUNCTUAL_LOOKAHEAD_MS", "1500".into()),
        ("PUNCTUAL_KAFKA_SESSION_TIMEOUT_MS", "6000".into()),
    ])
    .await;
    let start = (Utc::now() + chrono::Duration::seconds(3)).trunc_subsecs(0);
    let mut timers = Vec::new();
    for name in ["a", "b"] {
        let timer = stack
            .create_timer(&json!({
                "name": name, "fan_out": {"shards": 16},
                "schedule": {"every_ms": 1000, "start_at": start, "end_at": start + chrono::Duration::seconds(8)},
                "action": {"http": {"url": sink.url("/shards")}}
            }))
            .await;
        timers.push(Uuid::parse_str(timer["id"].as_str().unwrap()).unwrap());
    }
    // Mid-occurrence: the fourth second's calls have begun and take 300 ms.
    let fourth = start + chrono::Duration::seconds(3);
    eventually(Duration::from_secs(30), "the fourth occurrence's calls", || async {
        sink.calls().iter().any(|c| c.scheduled_at() == Some(fourth)).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    stack.executor.kill();
    let killed_at = Utc::now();
    stack.executor.restart();

    let expected = 2 * 8 * 16;
    let tasks: Vec<(Uuid, DateTime<Utc>, i16, i16, i16)> =
        eventually(Duration::from_secs(90), "every shard", || async {
            let rows: Vec<(Uuid, DateTime<Utc>, i16, i16, i16)> = sqlx::query_as(
                "SELECT timer_id, scheduled_at, shard, shards, bucket FROM tasks
              WHERE timer_id = ANY($1) AND status = 'succeeded'",
            )
            .bind(&timers)
            .fetch_all(&stack.db.pool)
            .await
            .ok()?;
            (rows.len() == expected).then_some(rows)
        })
        .await;
    assert!(stack.wait_settled(Some(&timers)).await, "settled\n{}", dump_logs(&stack));
    let calls = sink.calls_to("/shards");

    // Each task's identity was called, and nothing else.
    let identities: BTreeSet<String> =
        tasks.iter().map(|(t, at, index, total, _)| Shard { index: *index, total: *total }.identity(*t, *at)).collect();
    assert_eq!(identities.len(), expected, "a key per shard");
    let called: BTreeSet<String> = calls.iter().filter_map(|c| c.idempotency_key.clone()).collect();
    assert_eq!(called, identities, "every shard called, under its own key");
    // Each occurrence's calls name shards 0 to 15 of 16.
    let mut by_occurrence: BTreeMap<String, BTreeSet<(u16, u16)>> = BTreeMap::new();
    for call in &calls {
        let key = call.idempotency_key.clone().unwrap();
        let occurrence = key.rsplit_once('/').unwrap().0.to_owned();
        by_occurrence.entry(occurrence).or_default().insert(shard_of(call));
    }
    let all: BTreeSet<(u16, u16)> = (0..16).map(|i| (i, 16)).collect();
    assert_eq!(by_occurrence.len(), 16, "two timers, eight occurrences each");
    assert!(by_occurrence.values().all(|shards| *shards == all), "shards 0 to 15 of each occurrence");
    // An occurrence's shards spread over buckets (and so over partitions).
    let mut buckets: HashMap<(Uuid, DateTime<Utc>), BTreeSet<i16>> = HashMap::new();
    for (t, at, _, _, bucket) in &tasks {
        buckets.entry((*t, *at)).or_default().insert(*bucket);
    }
    assert!(buckets.values().all(|b| b.len() == 16), "sixteen buckets an occurrence");

    // Repeated: only calls in flight at the kill, each under the key it had.
    let repeats = Repeats::of(&calls, killed_at);
    println!("calls: {}, repeated keys: {}", calls.len(), repeats.len());
    repeats.assert_in_flight(Duration::from_millis(300) + WRITE_BACK);
    assert_eq!(more_than_twice(&calls), 0, "a call is made at most twice");

    // The runs API shows the shards, and the occurrence as a whole.
    let runs = stack.runs(&timers[0].to_string()).await;
    assert_eq!(runs.len(), 8 * 16);
    assert!(runs.iter().all(|r| r["shards"] == 16));
    let whole = occurrence(&stack, &timers[0].to_string(), fourth).await;
    assert_eq!((whole["status"].as_str(), whole["shards"].as_i64()), (Some("succeeded"), Some(16)), "{whole}");
    let indexes: Vec<i64> = whole["runs"].as_array().unwrap().iter().map(|r| r["shard"].as_i64().unwrap()).collect();
    assert_eq!(indexes, (0..16).collect::<Vec<_>>());
}

/// Calls beyond each key's second.
fn more_than_twice(calls: &[Call]) -> usize {
    let mut per_key: HashMap<&str, usize> = HashMap::new();
    for c in calls {
        *per_key.entry(c.idempotency_key.as_deref().unwrap_or_default()).or_default() += 1;
    }
    per_key.values().map(|n| n.saturating_sub(2)).sum()
}

/// One shard fails twice, then succeeds: it alone is retried, under its own key, and the
/// occurrence succeeds with that shard's failed attempts listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_fails_twice_is_retried_alone_and_the_occurrence_succeeds() {
    let sink = Sink::start().await;
    let stack = Stack::start(&[]).await;
    sink.behave_for_shard("/parts", 2, Behaviour::fail_first(2, 503));
    let (timer, at) = sharded_one_shot(&stack, &sink, "/parts", 4, json!({"max_attempts": 4, "initial_ms": 300})).await;

    eventually(Duration::from_secs(30), "the occurrence succeeds", || async {
        let whole = occurrence(&stack, &timer, at).await;
        (whole["status"] == "succeeded").then_some(())
    })
    .await;
    let calls = sink.calls_to("/parts");
    let per_shard = |index: u16| calls.iter().filter(|c| shard_of(c).0 == index).collect::<Vec<_>>();
    for index in [0, 1, 3] {
        assert_eq!(per_shard(index).len(), 1, "shard {index} called once");
    }
    let third = per_shard(2);
    assert_eq!(third.len(), 3, "two failures, then success");
    assert!(third.iter().all(|c| c.idempotency_key == third[0].idempotency_key), "one key for its attempts");
    let attempts: Vec<&str> = third.iter().map(|c| c.headers["x-punctual-attempt"].to_str().unwrap()).collect();
    assert_eq!(attempts, ["1", "2", "3"]);

    let whole = occurrence(&stack, &timer, at).await;
    let runs = whole["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    assert_eq!((runs[2]["attempt"].as_i64(), runs[2]["status"].as_str()), (Some(3), Some("succeeded")));
    let failed = runs[2]["failed_attempts"].as_array().unwrap();
    assert_eq!(failed.iter().map(|a| a["http_status"].as_i64()).collect::<Vec<_>>(), [Some(503), Some(503)]);
    assert!(runs.iter().filter(|r| r["shard"] != 2).all(|r| r["attempt"] == 1));
}

/// One shard dead makes the occurrence dead; replaying that shard's task runs it alone
/// again, and then the occurrence succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_shard_makes_the_occurrence_dead_and_its_replay_reruns_only_it() {
    let sink = Sink::start().await;
    let stack = Stack::start(&[]).await;
    sink.behave_for_shard("/split", 1, Behaviour::fail_first(10, 500));
    let (timer, at) = sharded_one_shot(&stack, &sink, "/split", 3, json!({"max_attempts": 2, "initial_ms": 200})).await;

    let whole = eventually(Duration::from_secs(30), "the occurrence is dead", || async {
        let whole = occurrence(&stack, &timer, at).await;
        let finished = whole["runs"].as_array()?.iter().all(|r| r["status"] == "succeeded" || r["status"] == "dead");
        (finished && whole["status"] == "dead").then_some(whole)
    })
    .await;
    let statuses: Vec<&str> = whole["runs"].as_array().unwrap().iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["succeeded", "dead", "succeeded"]);
    let dead: Value =
        stack.http.get(stack.admin.url("/v1/tasks?status=dead")).send().await.unwrap().json().await.unwrap();
    let dead = dead["tasks"].as_array().unwrap().clone();
    assert_eq!(dead.len(), 1, "only the failing shard is dead: {dead:?}");
    assert_eq!(dead[0]["shard"], 1);

    sink.behave_for_shard("/split", 1, Behaviour::default());
    let task_id = dead[0]["id"].as_i64().unwrap();
    let r = stack.http.post(stack.admin.url(&format!("/v1/tasks/{task_id}/replay"))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    eventually(Duration::from_secs(20), "the occurrence succeeds", || async {
        (occurrence(&stack, &timer, at).await["status"] == "succeeded").then_some(())
    })
    .await;
    assert!(stack.wait_settled(None).await);
    let calls = sink.calls_to("/split");
    let per_shard: Vec<usize> = (0..3).map(|i| calls.iter().filter(|c| shard_of(c).0 == i).count()).collect();
    assert_eq!(per_shard, [1, 3, 1], "the replay ran shard 1 alone, as its third attempt");
}

/// A broadcast by DNS: each occurrence of a timer whose URL's host resolves to three
/// loopback addresses (`PUNCTUAL_HOST_ADDRESSES`, as `/etc/hosts` would; the test's allow
/// list admits them) reaches the instance at each address once, each call a shard of its
/// own key and naming its address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_broadcast_reaches_each_address_once_an_occurrence() {
    let ips = ["127.0.0.2", "127.0.0.3", "127.0.0.4"].map(|ip| ip.parse().unwrap());
    let instances = Sink::start_on_each(&ips).await;
    let port = instances[0].addr.port();
    let stack =
        Stack::start(&[("PUNCTUAL_HOST_ADDRESSES", "instances.test=127.0.0.2,127.0.0.3,127.0.0.4".into())]).await;
    let start = (Utc::now() + chrono::Duration::seconds(2)).trunc_subsecs(0);
    let timer = stack
        .create_timer(&json!({
            "name": "everywhere", "fan_out": {"broadcast": "dns"},
            "schedule": {"every_ms": 1000, "start_at": start, "end_at": start + chrono::Duration::seconds(3)},
            "action": {"http": {"url": format!("http://instances.test:{port}/flush")}}
        }))
        .await;
    assert_eq!(timer["fan_out"], json!({"broadcast": "dns"}));
    let id = timer["id"].as_str().unwrap().to_owned();
    eventually(Duration::from_secs(30), "three calls at each instance", || async {
        instances.iter().all(|s| s.calls().len() >= 3).then_some(())
    })
    .await;
    let timers = [Uuid::parse_str(&id).unwrap()];
    assert!(stack.wait_settled(Some(&timers)).await, "settled\n{}", dump_logs(&stack));

    let mut keys = BTreeSet::new();
    for instance in &instances {
        let calls = instance.calls_to("/flush");
        let ip = instance.addr.ip().to_string();
        assert_eq!(calls.len(), 3, "{ip}: once an occurrence\n{}", dump_logs(&stack));
        for call in &calls {
            assert_eq!(call.headers["punctual-address"].to_str().unwrap(), ip, "the address called is named");
            assert_eq!(shard_of(call).1, 3, "three shards an occurrence");
            assert!(keys.insert(call.idempotency_key.clone().unwrap()), "a key per call");
        }
        let occurrences: BTreeSet<_> = calls.iter().map(|c| c.scheduled_at().unwrap()).collect();
        assert_eq!(occurrences.len(), 3, "{ip}: each occurrence");
    }
    let whole = occurrence(&stack, &id, start).await;
    assert_eq!((whole["status"].as_str(), whole["shards"].as_i64()), (Some("succeeded"), Some(3)), "{whole}");
    let addresses: Vec<&str> =
        whole["runs"].as_array().unwrap().iter().map(|r| r["address"].as_str().unwrap()).collect();
    assert_eq!(addresses, ["127.0.0.2", "127.0.0.3", "127.0.0.4"]);
}

/// A broadcast to listed URLs: each occurrence calls each URL once, as the shard of its
/// place in the list, with the action's method and body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_calls_each_listed_url_once() {
    let sink = Sink::start().await;
    let stack = Stack::start(&[]).await;
    let at = (Utc::now() + chrono::Duration::milliseconds(1_500)).trunc_subsecs(3);
    let urls: Vec<String> = ["/a", "/b", "/c"].iter().map(|p| sink.url(p)).collect();
    let timer = stack
        .create_timer(&json!({
            "name": "listed", "schedule": {"at": at}, "fan_out": {"broadcast": urls},
            "action": {"http": {"method": "PUT", "url": sink.url("/unused"), "body": {"flush": true}}}
        }))
        .await;
    let id = timer["id"].as_str().unwrap().to_owned();
    eventually(Duration::from_secs(30), "the occurrence succeeds", || async {
        (occurrence(&stack, &id, at).await["status"] == "succeeded").then_some(())
    })
    .await;
    assert!(sink.calls_to("/unused").is_empty(), "the listed URLs instead of the action's");
    for (index, path) in ["/a", "/b", "/c"].iter().enumerate() {
        let calls = sink.calls_to(path);
        assert_eq!(calls.len(), 1, "{path} once");
        assert_eq!(shard_of(&calls[0]), (index as u16, 3));
        assert_eq!((calls[0].method.as_str(), &calls[0].body[..]), ("PUT", &br#"{"flush":true}"#[..]));
    }
}
