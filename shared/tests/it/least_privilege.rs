//! The role the scanners and executors run as reads and writes rows and changes no
//! schema; a service started before the migrations waits for them.

use std::time::Duration;

use punctual_shared::db::{self, SchemaState};
use punctual_testkit::{TestDb, SERVICE_ROLE};
use sqlx::{Connection, PgConnection};

#[tokio::test]
async fn the_service_role_writes_rows_and_changes_no_schema() {
    let db = TestDb::create().await;
    let mut service = PgConnection::connect(&db.service_url()).await.unwrap();
    let user: String = sqlx::query_scalar("SELECT current_user").fetch_one(&mut service).await.unwrap();
    assert_eq!(user, SERVICE_ROLE);
    sqlx::query("INSERT INTO timers (name, schedule_kind, delay_ms, http_url) VALUES ('t', 'delay', 1000, 'https://e.example/')")
        .execute(&mut service)
        .await
        .expect("rows: written");
    let tasks: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks").fetch_one(&mut service).await.unwrap();
    assert_eq!(tasks, 0);
    for ddl in [
        "CREATE TABLE intruder (id int)",
        "ALTER TABLE timers ADD COLUMN intruder int",
        "DROP TABLE task_attempts",
        "TRUNCATE tasks",
        "CREATE INDEX intruder ON tasks (error)",
    ] {
        let refused = sqlx::query(ddl).execute(&mut service).await.unwrap_err();
        let code = refused.as_database_error().and_then(|e| e.code()).map(|c| c.into_owned());
        assert_eq!(code.as_deref(), Some("42501"), "{ddl}: {refused}"); // insufficient_privilege
    }
    assert_eq!(db::schema_state(&db.pool).await.unwrap(), SchemaState::Current);
}

#[tokio::test]
async fn a_service_waits_for_the_migrations() {
    let server = std::env::var("PUNCTUAL_TEST_DATABASE_URL").expect("PUNCTUAL_TEST_DATABASE_URL");
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(&format!("{server}/postgres")).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await.unwrap();
    let pool = sqlx::PgPool::connect(&format!("{server}/{name}")).await.unwrap();
    assert!(matches!(db::schema_state(&pool).await.unwrap(), SchemaState::Behind { applied: 0, .. }));
    let waiting = tokio::spawn({
        let pool = pool.clone();
        async move { db::wait_for_schema(&pool).await }
    });
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!waiting.is_finished(), "waits while nothing is migrated");
    db::MIGRATOR.run(&pool).await.unwrap();
    let waited = tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("done once migrated");
    assert_eq!(waited.unwrap(), Ok(()));
    // A schema newer than the build is an error at once, not a wait.
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
                 VALUES (99999999999999, 'newer', true, '\\x00', 0)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let ahead = tokio::time::timeout(Duration::from_secs(5), db::wait_for_schema(&pool)).await.unwrap();
    assert!(matches!(ahead, Err(SchemaState::Ahead { .. })), "{ahead:?}");
}
