//! The rules the schema keeps for writes through SQL, checked against the migrated schema.

use std::collections::BTreeSet;

use punctual_testkit::TestDb;

/// The before-update trigger of timers fires only for updates naming one of its columns
/// (so the planner's own writes skip it). A column the trigger's function compares but the
/// trigger does not name would let an edit of that column through plain SQL skip the
/// version bump and the re-plan.
#[tokio::test]
async fn the_timer_trigger_names_every_column_its_function_compares() {
    let db = TestDb::create().await;
    let source: String =
        sqlx::query_scalar("SELECT prosrc FROM pg_proc WHERE proname = 'punctual_timers_before_update'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    // The columns read in its conditions (`OLD.version` is read only to be assigned from).
    let compared: BTreeSet<String> = source
        .lines()
        .filter(|line| !line.contains(":="))
        .flat_map(|line| line.split("OLD.").skip(1))
        .map(|rest| rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect())
        .collect();
    let named: BTreeSet<String> = sqlx::query_scalar(
        "SELECT a.attname::text FROM pg_trigger t
           JOIN pg_attribute a ON a.attrelid = t.tgrelid AND a.attnum = ANY (t.tgattr::int2[])
          WHERE t.tgname = 'timers_before_update'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    assert!(compared.len() >= 20, "the function compares the definition and the state: {compared:?}");
    let missing: Vec<_> = compared.difference(&named).collect();
    assert!(missing.is_empty(), "compared but not named by the trigger: {missing:?}");
}

/// An update that names none of those columns (the planner's) leaves the version alone;
/// one that changes the definition bumps it, as before.
#[tokio::test]
async fn only_a_change_of_definition_bumps_a_timers_version() {
    let db = TestDb::create().await;
    let id: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO timers (name, schedule_kind, interval_ms, http_url)
         VALUES ('rules', 'interval', 1000, 'http://127.0.0.1:1/') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    sqlx::query("UPDATE timers SET plan_status = 'planned', next_plan_at = now() WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(version_and_plan_status(&db, id).await.0, 1);
    sqlx::query("UPDATE timers SET kafka_key = 'k' WHERE id = $1").bind(id).execute(&db.pool).await.unwrap();
    let (version, plan_status) = version_and_plan_status(&db, id).await;
    assert_eq!(version, 2);
    assert_eq!(plan_status, "new", "an edited timer goes back to the planner");
}

async fn version_and_plan_status(db: &TestDb, id: uuid::Uuid) -> (i64, String) {
    sqlx::query_as("SELECT version, plan_status FROM timers WHERE id = $1").bind(id).fetch_one(&db.pool).await.unwrap()
}

/// Deleting timers deletes their tasks and the tasks' attempts, and leaves other timers'
/// tasks alone; truncating timers empties both. (Tasks reference their timer without a
/// foreign key, so these are the rules that keep no task whose timer is gone.)
#[tokio::test]
async fn deleting_timers_deletes_their_tasks_and_attempts() {
    let db = TestDb::create().await;
    let timers: Vec<uuid::Uuid> = sqlx::query_scalar(
        "INSERT INTO timers (name, schedule_kind, interval_ms, http_url)
         SELECT 'cascade-' || g, 'interval', 1000, 'http://127.0.0.1:1/' FROM generate_series(1, 3) g
         RETURNING id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket)
         SELECT t, s, s, 1, 0 FROM UNNEST($1::uuid[]) t, generate_series(now(), now() + interval '4 s', interval '1 s') s",
    )
    .bind(&timers)
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO task_attempts (task_id, attempt, error) SELECT id, 1, 'failed' FROM tasks")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(count(&db, "SELECT count(*) FROM tasks").await, 15);

    sqlx::query("DELETE FROM timers WHERE id = ANY($1)").bind(&timers[..2]).execute(&db.pool).await.unwrap();
    let left: Vec<uuid::Uuid> =
        sqlx::query_scalar("SELECT DISTINCT timer_id FROM tasks").fetch_all(&db.pool).await.unwrap();
    assert_eq!(left, vec![timers[2]], "only the tasks of the timer not deleted are left");
    assert_eq!(count(&db, "SELECT count(*) FROM task_attempts").await, 5);

    sqlx::query("TRUNCATE timers").execute(&db.pool).await.unwrap();
    assert_eq!(count(&db, "SELECT count(*) FROM tasks").await, 0);
    assert_eq!(count(&db, "SELECT count(*) FROM task_attempts").await, 0);
}

async fn count(db: &TestDb, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(&db.pool).await.unwrap()
}
