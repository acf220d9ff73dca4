//! Retention against a real Postgres: old finished occurrences go, everything else stays,
//! and a one-shot timer whose history went never fires again, even when edited.

use std::time::Duration;

use chrono::{SubsecRound, Utc};
use punctual_scanner::planner::Planner;
use punctual_shared::bucket::Held;
use punctual_shared::task;
use punctual_testkit::TestDb;
use uuid::Uuid;

const WEEK: Duration = Duration::from_secs(7 * 86_400);

async fn insert_timer(db: &TestDb, columns: &str, values: &str) -> Uuid {
    sqlx::query_scalar(&format!("INSERT INTO timers ({columns}) VALUES ({values}) RETURNING id"))
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

async fn count(db: &TestDb, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(&db.pool).await.unwrap()
}

/// Runs passes of `limit`-row batches as the scanner does, until one reaches young rows.
async fn prune(db: &TestDb, held: &Held, limit: i64) -> i64 {
    let (mut after, mut deleted) = (0, 0);
    loop {
        let batch = task::prune_batch(&db.pool, held, 0, after, limit, WEEK).await.unwrap();
        deleted += batch.deleted;
        match batch.last_id {
            Some(last) if !batch.reached_young => after = last,
            _ => return deleted,
        }
    }
}

#[tokio::test]
async fn old_finished_occurrences_go_and_a_pruned_one_shot_never_fires_again() {
    let db = TestDb::create().await;
    let now = Utc::now().trunc_subsecs(0);
    let days_ago = |d: i64| (now - chrono::Duration::days(d)).to_rfc3339();
    let hourly = insert_timer(
        &db,
        "name, schedule_kind, cron_expr, http_url, plan_status, next_plan_at",
        &format!("'hourly', 'cron', '0 0 * * * *', 'http://127.0.0.1:1/x', 'planned', '{}'", days_ago(-1)),
    )
    .await;
    let once = insert_timer(
        &db,
        "name, schedule_kind, run_at, http_url, plan_status",
        &format!("'once', 'once', '{}', 'http://127.0.0.1:1/x', 'done'", days_ago(9)),
    )
    .await;
    // In id order, as planning leaves them: old first. (timer, occurrence, status, finished)
    let rows = [
        (hourly, days_ago(10), "succeeded", Some(days_ago(10))),
        (once, days_ago(9), "succeeded", Some(days_ago(9))),
        (hourly, days_ago(9), "dead", Some(days_ago(9))),
        (hourly, days_ago(8), "pending", None),
        (hourly, days_ago(8), "cancelled", Some(days_ago(1))),
        (hourly, days_ago(2), "succeeded", Some(days_ago(2))),
        (hourly, days_ago(0), "succeeded", Some(days_ago(0))),
    ];
    for (i, (timer, at, status, finished)) in rows.iter().enumerate() {
        sqlx::query(
            "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, status, finished_at)
             VALUES ($1, $2::timestamptz + $5 * interval '1 second', $2::timestamptz, 1, 0, $3, $4::timestamptz)",
        )
        .bind(timer)
        .bind(at)
        .bind(status)
        .bind(finished)
        .bind(i as i32)
        .execute(&db.pool)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO task_attempts (task_id, attempt, error) SELECT id, 1, 'failed' FROM tasks WHERE status = 'dead'",
    )
    .execute(&db.pool)
    .await
    .unwrap();

    // A scanner not holding bucket 0 deletes nothing.
    let other = Held::new("not-the-runner", &[(0, 1)]);
    assert_eq!(prune(&db, &other, 2).await, 0);

    let held = db.hold_buckets("runner").await;
    assert_eq!(prune(&db, &held, 2).await, 3, "the three finished more than a week ago");
    let left: Vec<String> =
        sqlx::query_scalar("SELECT status FROM tasks ORDER BY id").fetch_all(&db.pool).await.unwrap();
    assert_eq!(left, ["pending", "cancelled", "succeeded", "succeeded"], "unfinished and recently finished stay");
    assert_eq!(count(&db, "SELECT count(*) FROM task_attempts").await, 0, "the dead one's attempts went with it");
    assert_eq!(prune(&db, &held, 2).await, 0, "a second pass finds nothing");

    // The one-shot timer's run is recorded on it; an edit does not make it fire again.
    sqlx::query("UPDATE timers SET http_url = 'http://127.0.0.1:1/edited' WHERE id = $1")
        .bind(once)
        .execute(&db.pool)
        .await
        .unwrap();
    let planner = Planner { horizon: Duration::from_secs(10), misfire_threshold: Duration::from_secs(60) };
    planner.validate_new(&db.pool, Utc::now(), &held, None).await.unwrap();
    let (status, planned): (String, i64) = sqlx::query_as(
        "SELECT plan_status, (SELECT count(*) FROM tasks WHERE timer_id = $1) FROM timers WHERE id = $1",
    )
    .bind(once)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((status.as_str(), planned), ("done", 0), "the pruned one-shot was planned again");
    // Moved to a new time, it fires then.
    sqlx::query("UPDATE timers SET run_at = now() + interval '5 seconds' WHERE id = $1")
        .bind(once)
        .execute(&db.pool)
        .await
        .unwrap();
    planner.validate_new(&db.pool, Utc::now(), &held, None).await.unwrap();
    assert_eq!(count(&db, &format!("SELECT count(*) FROM tasks WHERE timer_id = '{once}'")).await, 1);
}
