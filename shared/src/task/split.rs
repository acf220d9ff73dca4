//! Splitting: a DNS broadcast's occurrence, when it is due, into a shard for each address its
//! host resolves to.

use sqlx::PgPool;

use crate::bucket::BUCKETS;
use crate::fan_out::Shard;

/// Splits the started task `id` (the occurrence's only task, not split yet) into a shard per
/// address of `addresses` (at least one): the task becomes shard 0, calling the first; a
/// task for each further address is inserted pending, due now, at the first attempt, for
/// the scanners to claim and the executors to run like any other shard. Returns the task's
/// shard and address as they stand: a task split already (a message delivered again) keeps
/// those it had.
pub async fn split(db: &PgPool, id: i64, addresses: &[String]) -> Result<Option<(Shard, String)>, sqlx::Error> {
    let total = addresses.len().clamp(1, crate::fan_out::MAX_SHARDS as usize) as i16;
    let mut tx = db.begin().await?;
    let first = sqlx::query!(
        "UPDATE tasks SET shards = $2, address = ($3::text[])[1]
          WHERE id = $1 AND shard = 0 AND shards = 1 AND address IS NULL
         RETURNING timer_id, scheduled_at, timer_version",
        id,
        total,
        addresses
    )
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(first) = first {
        sqlx::query!(
            "INSERT INTO tasks (timer_id, scheduled_at, due_at, timer_version, bucket, shard, shards, address, status)
             SELECT $1, $2, now(), $3, ((punctual_bucket($1) + i) % $4)::smallint, i, $5, ($6::text[])[i + 1], 'pending'
               FROM generate_series(1, $5::int - 1) AS i
             ON CONFLICT (timer_id, scheduled_at, shard) DO NOTHING",
            first.timer_id,
            first.scheduled_at,
            first.timer_version,
            i32::from(BUCKETS),
            i32::from(total),
            addresses
        )
        .execute(&mut *tx)
        .await?;
    }
    let now = sqlx::query!(
        r#"SELECT shard, shards, address AS "address!" FROM tasks WHERE id = $1 AND address IS NOT NULL"#,
        id
    )
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(now.map(|row| (Shard { index: row.shard, total: row.shards }, row.address)))
}
