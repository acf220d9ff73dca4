//! What a tenant may not reach, tried as a tenant would: topics its namespace's policy does
//! not list (with a row written by SQL, which the API never sees), and the tasks topic
//! (with a message produced into it directly).

use std::time::Duration;

use chrono::{DateTime, Utc};
use punctual_testkit::stack::{create_topic, dump_logs, read_topic};
use punctual_testkit::{eventually, unique_name, Sink, Stack};
use serde_json::json;
use uuid::Uuid;

use crate::stale_epoch::{claimed_once_timer, due_now, inject};

async fn kafka_timer(stack: &Stack, namespace: &str, topic: &str, at: DateTime<Utc>) -> Uuid {
    sqlx::query_scalar(
        "INSERT INTO timers (namespace, name, schedule_kind, run_at, action_kind, kafka_topic)
         VALUES ($1, $2, 'once', $3, 'kafka', $4) RETURNING id",
    )
    .bind(namespace)
    .bind(unique_name("to-kafka"))
    .bind(at)
    .bind(topic)
    .fetch_one(&stack.db.pool)
    .await
    .unwrap()
}

async fn task_of(stack: &Stack, timer: Uuid) -> Option<(String, Option<String>)> {
    sqlx::query_as("SELECT status, error FROM tasks WHERE timer_id = $1")
        .bind(timer)
        .fetch_optional(&stack.db.pool)
        .await
        .unwrap()
}

/// Timers written with SQL get no further than the API lets them: the executor publishes
/// only to a topic the namespace's policy lists, so a timer aimed at an unlisted topic or
/// at another namespace's ends dead without a message, and one aimed at the service's own
/// tasks topic is refused as invalid before it is planned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_written_with_sql_publish_only_where_their_namespace_may() {
    let stack = Stack::start(&[]).await;
    let (listed, unlisted) = (unique_name("t1.orders"), unique_name("unlisted"));
    for topic in [&listed, &unlisted] {
        create_topic(topic, 1).await;
    }
    let policy = stack
        .http
        .patch(stack.admin.url("/v1/namespaces/t1"))
        .json(&json!({"kafka_topics": ["t1.*"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(policy.status(), 200);
    // The executor reads policies every 5 s; it read this one at its start if it started
    // after the change, else within those 5 s, before the timers below are due.
    let at = Utc::now() + chrono::Duration::seconds(8);
    let allowed = kafka_timer(&stack, "t1", &listed, at).await;
    let to_unlisted = kafka_timer(&stack, "t1", &unlisted, at).await;
    let to_another = kafka_timer(&stack, "t2", &listed, at).await;
    let to_tasks = kafka_timer(&stack, "t1", &stack.topic, at).await;

    let records = read_topic(&listed, 1, Duration::from_secs(30)).await;
    assert_eq!(records.len(), 1, "the listed topic got its message\n{}", dump_logs(&stack));
    for (timer, who) in [(to_unlisted, "an unlisted topic"), (to_another, "another namespace's topic")] {
        let (status, error) = eventually(Duration::from_secs(30), "the refused task ended", || async {
            task_of(&stack, timer).await.filter(|(status, _)| status == "dead")
        })
        .await;
        let error = error.unwrap_or_default();
        assert!(error.contains("may not publish"), "{who}: {status} {error}");
    }
    // The message is read before its outcome is written back.
    eventually(Duration::from_secs(30), "the listed topic's task succeeded", || async {
        task_of(&stack, allowed).await.filter(|(status, _)| status == "succeeded")
    })
    .await;
    let (plan_status, reason): (String, Option<String>) =
        sqlx::query_as("SELECT plan_status, invalid_reason FROM timers WHERE id = $1")
            .bind(to_tasks)
            .fetch_one(&stack.db.pool)
            .await
            .unwrap();
    assert_eq!(plan_status, "invalid", "{reason:?}");
    assert!(reason.unwrap_or_default().contains("service's own topics"));
    assert_eq!(task_of(&stack, to_tasks).await, None, "never planned");
    assert!(read_topic(&listed, 2, Duration::from_secs(2)).await.len() == 1, "nothing more published");
    assert!(read_topic(&unlisted, 1, Duration::from_secs(2)).await.is_empty(), "nothing to the unlisted topic");
}

/// A message produced into the tasks topic by anyone but a scanner, naming a real task at
/// its attempt and epoch with an earlier due time, runs nothing early: the executor takes
/// the due time from the task's row, and a message for a task due beyond the scanner's
/// publish lead runs nothing at all. The occurrence runs once, when due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_forged_into_the_tasks_topic_runs_nothing_early() {
    let sink = Sink::start().await;
    // Claimed up to 30 s ahead, so that the forged message can come before the scanner's.
    let stack = Stack::start(&[("PUNCTUAL_LOOKAHEAD_MS", "30000".into()), ("PUNCTUAL_LEASE_MS", "40000".into())]).await;
    let run_at = Utc::now() + chrono::Duration::seconds(20);
    let (timer, task_id, epoch) = claimed_once_timer(&stack, &sink, run_at).await;
    let forged = || due_now(timer, run_at, task_id, epoch);
    // Due in more than the longest publish lead: runs nothing, and the task stays claimed.
    inject(&stack, &forged()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(sink.calls_to("/once").is_empty(), "a forged message ran the occurrence early");
    assert_eq!(task_of(&stack, timer).await.unwrap().0, "claimed");
    // Within the lead: taken, but run at the row's due time, and once with the scanner's.
    let within_lead = run_at - chrono::Duration::seconds(5);
    tokio::time::sleep((within_lead - Utc::now()).to_std().unwrap_or_default()).await;
    inject(&stack, &forged()).await;
    eventually(Duration::from_secs(30), "the occurrence run", || async {
        (task_of(&stack, timer).await.unwrap().0 == "succeeded").then_some(())
    })
    .await;
    let calls = sink.calls_to("/once");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(calls[0].received_at >= run_at, "called at {}, due at {run_at}", calls[0].received_at);
    inject(&stack, &forged()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(sink.calls_to("/once").len(), 1, "a late copy ran it again");
}

/// A namespace's own callback allow-list opens a private network for its timers and not
/// for another namespace's: the executor calls the loopback target for the one and refuses
/// it (dead, uncalled) for the other, which could only be written with SQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespaces_allow_list_opens_a_private_network_for_it_only() {
    let sink = Sink::start().await;
    // Loopback is not opened for all here.
    let stack = Stack::start(&[("PUNCTUAL_CALLBACK_ALLOW", "10.99.0.0/16".to_owned())]).await;
    let r = stack
        .http
        .put(stack.admin.url("/v1/namespaces/t1"))
        .json(&json!({"callback_allow": ["127.0.0.0/8", "localhost"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let port = sink.addr.port();
    let at = Utc::now() + chrono::Duration::seconds(8);
    let mut timers = Vec::new();
    for (namespace, url) in [
        ("t1", format!("http://127.0.0.1:{port}/t1-literal")),
        ("t1", format!("http://localhost:{port}/t1-name")),
        ("t2", format!("http://127.0.0.1:{port}/t2-literal")),
        ("t2", format!("http://localhost:{port}/t2-name")),
    ] {
        let id: Uuid = sqlx::query_scalar(
            "INSERT INTO timers (namespace, name, schedule_kind, run_at, http_url) VALUES ($1, $2, 'once', $3, $4)
             RETURNING id",
        )
        .bind(namespace)
        .bind(unique_name("call"))
        .bind(at)
        .bind(&url)
        .fetch_one(&stack.db.pool)
        .await
        .unwrap();
        timers.push((namespace, url, id));
    }
    for (namespace, url, id) in &timers {
        let (status, error) = eventually(Duration::from_secs(40), "the occurrence ended", || async {
            task_of(&stack, *id).await.filter(|(status, _)| status == "succeeded" || status == "dead")
        })
        .await;
        if *namespace == "t1" {
            assert_eq!(status, "succeeded", "{url}: {error:?}\n{}", dump_logs(&stack));
        } else {
            assert_eq!(status, "dead", "{url}");
            assert!(error.unwrap_or_default().contains("callback_allow"), "{url}: the rule named");
        }
    }
    let called: Vec<String> = sink.calls().into_iter().map(|c| c.path).collect();
    assert!(called.iter().all(|p| p.starts_with("/t1")), "t2's target never called: {called:?}");
    assert_eq!(called.len(), 2, "{called:?}");
}
