//! Every write of `signing_secrets`: the API's creates and deletes, and the resealing of a
//! stored secret with the current key. The values are sealed by the caller.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

/// Stores `sealed` as a new signing secret of `namespace`, unless the namespace holds `max`
/// already (`None`). Concurrent creates in one namespace take turns, so the count holds.
pub async fn insert(
    pool: &PgPool,
    namespace: &str,
    sealed: &str,
    max: i64,
) -> Result<Option<(Uuid, DateTime<Utc>)>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query!("SELECT pg_advisory_xact_lock(hashtext('signing_secrets ' || $1))", namespace)
        .execute(&mut *tx)
        .await?;
    let created = sqlx::query!(
        "INSERT INTO signing_secrets (namespace, secret)
         SELECT $1, $2 WHERE (SELECT count(*) FROM signing_secrets WHERE namespace = $1) < $3
         RETURNING id, created_at",
        namespace,
        sealed,
        max
    )
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(created.map(|row| (row.id, row.created_at)))
}

/// Deletes a signing secret of `namespace`; false if it has none with that id.
pub async fn delete(pool: &PgPool, namespace: &str, id: Uuid) -> Result<bool, sqlx::Error> {
    let deleted = sqlx::query!("DELETE FROM signing_secrets WHERE namespace = $1 AND id = $2", namespace, id)
        .execute(pool)
        .await?
        .rows_affected();
    Ok(deleted > 0)
}

/// Replaces a stored secret by `resealed`, unless it changed since it was read as `stored`.
/// Returns whether it wrote.
pub async fn reseal(pool: &PgPool, id: Uuid, stored: &str, resealed: &str) -> Result<bool, sqlx::Error> {
    let changed =
        sqlx::query!("UPDATE signing_secrets SET secret = $3 WHERE id = $1 AND secret = $2", id, stored, resealed)
            .execute(pool)
            .await?;
    Ok(changed.rows_affected() > 0)
}
