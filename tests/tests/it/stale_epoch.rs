//! A message from a superseded epoch never runs an occurrence a second time: a scanner
//! that lost its bucket (frozen past its lease, say) may still send what it held, and the
//! executor must refuse it, even where the task would start without a write.

use std::time::Duration;

use chrono::{DateTime, Utc};
use punctual_shared::bucket::bucket_of;
use punctual_shared::task::TaskMessage;
use punctual_testkit::stack::TASKS_PARTITIONS;
use punctual_testkit::{eventually, kafka_brokers, Sink, Stack};
use rdkafka::producer::{FutureProducer, FutureRecord};
use uuid::Uuid;

/// Sends `message` to the tasks topic, as a scanner would.
pub(crate) async fn inject(stack: &Stack, message: &TaskMessage) {
    let producer: FutureProducer =
        rdkafka::ClientConfig::new().set("bootstrap.servers", kafka_brokers()).create().expect("producer");
    let payload = serde_json::to_vec(message).unwrap();
    let partition = i32::from(message.bucket) % TASKS_PARTITIONS;
    producer
        .send(
            FutureRecord::to(&stack.topic).partition(partition).key(&message.key()).payload(&payload),
            Duration::from_secs(10),
        )
        .await
        .expect("sent");
}

async fn claim_epoch(stack: &Stack, task_id: i64) -> Option<i64> {
    sqlx::query_scalar("SELECT claim_epoch FROM tasks WHERE id = $1")
        .bind(task_id)
        .fetch_one(&stack.db.pool)
        .await
        .unwrap()
}

/// A message for the first attempt of `timer`'s occurrence at `scheduled_at` (task
/// `task_id`), claimed at `epoch`, that says it is due now.
pub(crate) fn due_now(timer: Uuid, scheduled_at: DateTime<Utc>, task_id: i64, epoch: i64) -> TaskMessage {
    TaskMessage {
        task_id,
        timer_id: timer,
        scheduled_at,
        attempt: 1,
        due_at: Some(Utc::now()),
        bucket: bucket_of(timer),
        epoch,
        shard: None,
    }
}

/// A one-shot timer due at `run_at`, calling `sink`'s `/once`, once its task is claimed:
/// the timer, the task and the claim's epoch.
pub(crate) async fn claimed_once_timer(stack: &Stack, sink: &Sink, run_at: DateTime<Utc>) -> (Uuid, i64, i64) {
    let timer: Uuid = sqlx::query_scalar(
        "INSERT INTO timers (name, schedule_kind, run_at, http_url) VALUES ('once', 'once', $1, $2) RETURNING id",
    )
    .bind(run_at)
    .bind(sink.url("/once"))
    .fetch_one(&stack.db.pool)
    .await
    .unwrap();
    let (task_id, epoch): (i64, i64) = eventually(Duration::from_secs(30), "the task claimed", || async {
        sqlx::query_as("SELECT id, claim_epoch FROM tasks WHERE timer_id = $1 AND status = 'claimed'")
            .bind(timer)
            .fetch_optional(&stack.db.pool)
            .await
            .unwrap()
    })
    .await;
    (timer, task_id, epoch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_from_a_superseded_epoch_never_runs_an_occurrence_again() {
    let sink = Sink::start().await;
    let mut stack = Stack::start(&[]).await;
    let run_at = Utc::now() + chrono::Duration::seconds(15);
    let (timer, task_id, old_epoch) = claimed_once_timer(&stack, &sink, run_at).await;

    // Its scanner dies; another takes the bucket over at a new epoch and claims the task again.
    stack.scanner.kill();
    let _successor = stack.start_another("punctual-scanner", "PUNCTUAL_SCANNER_ADDR").await;
    let new_epoch = eventually(Duration::from_secs(30), "the task claimed again at a new epoch", || async {
        claim_epoch(&stack, task_id).await.filter(|e| *e > old_epoch)
    })
    .await;
    let message = |epoch| due_now(timer, run_at, task_id, epoch);

    // The old owner's message, due now: refused, though the task is claimed and would start
    // without a write.
    inject(&stack, &message(old_epoch)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(sink.calls_to("/once").is_empty(), "a stale epoch's message ran the occurrence");

    // The new owner's message runs it, once.
    eventually(Duration::from_secs(30), "the occurrence run", || async {
        (!sink.calls_to("/once").is_empty()).then_some(())
    })
    .await;
    eventually(Duration::from_secs(10), "its outcome written", || async {
        let status: String = sqlx::query_scalar("SELECT status FROM tasks WHERE id = $1")
            .bind(task_id)
            .fetch_one(&stack.db.pool)
            .await
            .unwrap();
        (status == "succeeded").then_some(())
    })
    .await;
    // Late copies of either epoch's message change nothing.
    inject(&stack, &message(old_epoch)).await;
    inject(&stack, &message(new_epoch)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let calls = sink.calls_to("/once");
    assert_eq!(calls.len(), 1, "the occurrence ran {} times", calls.len());
    println!("epochs {old_epoch} -> {new_epoch}: one call; the stale messages ran nothing");
}
