//! The task state machine against a real Postgres: each transition applies once, and only
//! from the states it names.

use std::time::Duration;

use chrono::Utc;
use punctual_shared::task::{self, Outcome, PlannedTask, TaskStatus};
use punctual_testkit::TestDb;
use uuid::Uuid;

async fn timer(db: &TestDb) -> Uuid {
    sqlx::query_scalar(
        "INSERT INTO timers (name, schedule_kind, cron_expr, http_url, plan_status) VALUES ($1, 'cron', '* * * * * *', 'http://127.0.0.1:9/x', 'planned') RETURNING id",
    )
    .bind(Uuid::new_v4().to_string())
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

async fn status(db: &TestDb, id: i64) -> String {
    sqlx::query_scalar("SELECT status FROM tasks WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

async fn claimed_tasks(db: &TestDb, timer_id: Uuid, n: i64) -> Vec<i64> {
    let planned: Vec<PlannedTask> = (0..n)
        .map(|i| PlannedTask {
            timer_id,
            scheduled_at: Utc::now() + chrono::Duration::milliseconds(i),
            timer_version: 1,
        })
        .collect();
    task::plan(&db.pool, &planned).await.unwrap();
    let claimed = task::claim(
        &db.pool,
        "owner",
        Duration::from_secs(5),
        Duration::from_secs(30),
        1000,
    )
    .await
    .unwrap();
    claimed
        .into_iter()
        .filter(|t| t.timer_id == timer_id)
        .map(|t| t.id)
        .collect()
}

#[tokio::test]
async fn a_task_starts_once_and_finishes_once() {
    let db = TestDb::create().await;
    let t = timer(&db).await;
    let ids = claimed_tasks(&db, t, 3).await;
    assert_eq!(
        task::mark_published(&db.pool, "owner", &ids[..1])
            .await
            .unwrap(),
        1
    );

    // Claimed and published tasks both start (the published mark may trail the executor).
    let started = task::start(&db.pool, &ids).await.unwrap();
    assert_eq!(started.len(), 3);
    assert!(started
        .iter()
        .all(|s| s.http_url.as_deref() == Some("http://127.0.0.1:9/x")));
    // A redelivered message starts nothing, and cancels nothing.
    assert!(task::start(&db.pool, &ids).await.unwrap().is_empty());
    assert_eq!(status(&db, ids[0]).await, "running");
    // A late published mark does not move a running task back.
    assert_eq!(
        task::mark_published(&db.pool, "owner", &ids).await.unwrap(),
        0
    );

    let outcome = |id, status| Outcome {
        task_id: id,
        status,
        http_status: Some(200),
        response_excerpt: Some("ok".into()),
        error: None,
        duration_ms: 12,
    };
    let outcomes = vec![
        outcome(ids[0], TaskStatus::Succeeded),
        outcome(ids[1], TaskStatus::Failed),
    ];
    assert_eq!(task::finish(&db.pool, &outcomes).await.unwrap(), 2);
    assert_eq!(
        task::finish(&db.pool, &outcomes).await.unwrap(),
        0,
        "finishing twice changes nothing"
    );
    assert_eq!(status(&db, ids[0]).await, "succeeded");
    assert_eq!(status(&db, ids[1]).await, "failed");
    assert_eq!(status(&db, ids[2]).await, "running");
    let (code, duration): (Option<i16>, Option<i32>) =
        sqlx::query_as("SELECT http_status, duration_ms FROM tasks WHERE id = $1")
            .bind(ids[0])
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((code, duration), (Some(200), Some(12)));
}

#[tokio::test]
async fn tasks_of_paused_deleted_or_edited_timers_are_cancelled_not_run() {
    let db = TestDb::create().await;
    let paused = timer(&db).await;
    let deleted = timer(&db).await;
    let edited = timer(&db).await;
    let kept = timer(&db).await;
    let mut ids = Vec::new();
    for t in [paused, deleted, edited, kept] {
        ids.push(claimed_tasks(&db, t, 1).await[0]);
    }
    sqlx::query("UPDATE timers SET state = 'paused' WHERE id = $1")
        .bind(paused)
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE timers SET state = 'deleted' WHERE id = $1")
        .bind(deleted)
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE timers SET cron_expr = '*/2 * * * * *' WHERE id = $1")
        .bind(edited)
        .execute(&db.pool)
        .await
        .unwrap();
    let version: i64 = sqlx::query_scalar("SELECT version FROM timers WHERE id = $1")
        .bind(edited)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(version, 2, "an edit bumps the version");

    let started = task::start(&db.pool, &ids).await.unwrap();
    assert_eq!(
        started.iter().map(|s| s.timer_id).collect::<Vec<_>>(),
        vec![kept]
    );
    for id in &ids[..3] {
        assert_eq!(status(&db, *id).await, "cancelled");
    }
}
