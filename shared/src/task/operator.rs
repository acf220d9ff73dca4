//! An operator's transitions: dead tasks replayed, occurrences added and backfilled.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::bucket::BUCKETS;
use crate::namespace_policy;
use crate::timer_state::TimerState;

/// Replays dead tasks: dead → pending, as a further attempt, due within their namespace's
/// catch-up budget (see [`namespace_policy::book_catch_up`]): at once for a few, spread
/// over the following seconds for many, oldest first. Returns the ids replayed (tasks not
/// dead are left alone).
pub async fn replay(db: &PgPool, ids: &[i64]) -> Result<Vec<i64>, sqlx::Error> {
    let mut tx = db.begin().await?;
    let dead: Vec<(i64, String)> = sqlx::query!(
        "SELECT t.id, tm.namespace FROM tasks t JOIN timers tm ON tm.id = t.timer_id
          WHERE t.id = ANY($1) AND t.status = 'dead'
          ORDER BY tm.namespace, t.scheduled_at, t.id
            FOR UPDATE OF t",
        ids
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|row| (row.id, row.namespace))
    .collect();
    let mut replayed = Vec::with_capacity(dead.len());
    let mut due = Vec::with_capacity(dead.len());
    for namespace in dead.chunk_by(|a, b| a.1 == b.1) {
        let (first, apart) = namespace_policy::book_catch_up(&mut tx, &namespace[0].1, namespace.len()).await?;
        for (i, (id, _)) in namespace.iter().enumerate() {
            replayed.push(*id);
            due.push(first + apart * i as i32);
        }
    }
    let replayed = sqlx::query_scalar!(
        "UPDATE tasks t SET status = 'pending', due_at = v.due_at, attempt = attempt + 1, finished_at = NULL,
                claim_owner = NULL, claim_epoch = NULL, lease_until = NULL, deferred_reason = NULL
           FROM UNNEST($1::bigint[], $2::timestamptz[]) AS v(id, due_at)
          WHERE t.id = v.id AND t.status = 'dead'
         RETURNING t.id",
        &replayed,
        &due
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(replayed)
}

/// Adds occurrences of an active timer at the times `at`, due at once, beside its
/// schedule's (the operator's trigger): each is claimed, published and run like any
/// other, with its own identity, so one that exists already (it ran, or is planned) is
/// left alone and never runs twice. A fanned-out timer's occurrence is added as its shards.
/// Returns the id of each occurrence added (its first shard's task): none when the timer is
/// not active.
pub async fn add_occurrences(db: &PgPool, timer_id: Uuid, at: &[DateTime<Utc>]) -> Result<Vec<i64>, sqlx::Error> {
    let now = vec![Utc::now(); at.len()];
    insert_occurrences(db, timer_id, at, &now).await
}

/// As [`add_occurrences`], for a backfill: due within the timer's namespace's catch-up
/// budget (see [`namespace_policy::book_catch_up`]), oldest first.
pub async fn backfill(db: &PgPool, timer_id: Uuid, at: &[DateTime<Utc>]) -> Result<Vec<i64>, sqlx::Error> {
    let mut tx = db.begin().await?;
    let namespace =
        sqlx::query_scalar!("SELECT namespace FROM timers WHERE id = $1", timer_id).fetch_optional(&mut *tx).await?;
    let Some(namespace) = namespace else {
        return Ok(Vec::new());
    };
    let (first, apart) = namespace_policy::book_catch_up(&mut tx, &namespace, at.len()).await?;
    let due: Vec<DateTime<Utc>> = (0..at.len()).map(|i| first + apart * i as i32).collect();
    let added = insert_occurrences(&mut *tx, timer_id, at, &due).await?;
    tx.commit().await?;
    Ok(added)
}

/// How many of the occurrences of `timer_id` at `at` exist already (ran, or planned): what
/// a backfill of them would not add.
pub async fn existing_occurrences(db: &PgPool, timer_id: Uuid, at: &[DateTime<Utc>]) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(DISTINCT scheduled_at) AS "existing!" FROM tasks WHERE timer_id = $1 AND scheduled_at = ANY($2)"#,
        timer_id,
        at
    )
    .fetch_one(db)
    .await
}

async fn insert_occurrences(
    db: impl sqlx::PgExecutor<'_>,
    timer_id: Uuid,
    at: &[DateTime<Utc>],
    due: &[DateTime<Utc>],
) -> Result<Vec<i64>, sqlx::Error> {
    let added = sqlx::query!(
        "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, shard, shards, status)
         SELECT tm.id, s.at, s.due_at, tm.version, ((punctual_bucket(tm.id) + i) % $4)::smallint, i, n.shards,
                'pending'
           FROM timers tm
          CROSS JOIN LATERAL (SELECT COALESCE(cardinality(tm.fan_out_urls), tm.fan_out_shards) AS shards) n
          CROSS JOIN UNNEST($2::timestamptz[], $3::timestamptz[]) AS s(at, due_at)
          CROSS JOIN generate_series(0, n.shards - 1) AS i
          WHERE tm.id = $1 AND tm.state = $5
         ON CONFLICT (timer_id, scheduled_at, shard) DO NOTHING
         RETURNING id, shard",
        timer_id,
        at,
        due,
        i32::from(BUCKETS),
        TimerState::Active.as_str()
    )
    .fetch_all(db)
    .await?;
    Ok(added.into_iter().filter(|row| row.shard == 0).map(|row| row.id).collect())
}
