//! Callback targets paused for a namespace (table `paused_targets`): a target (scheme,
//! host and port) whose calls from one namespace have all failed for a sustained time is
//! paused for it, as Svix disables a failing endpoint, so that it stops costing calls that
//! cannot succeed; its owner resumes it once it is fixed. This module owns the table's
//! writes.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

/// A target paused for a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct PausedTarget {
    pub namespace: String,
    /// `scheme://host:port`.
    pub target: String,
    /// Why: how long its calls failed, how many, and the last error.
    pub reason: String,
    pub paused_at: DateTime<Utc>,
}

/// A target's key: `scheme://host:port`, the port spelled out.
pub fn target_of(scheme: &str, host: &str, port: u16) -> String {
    format!("{scheme}://{host}:{port}")
}

/// Pauses `target` for `namespace`; false when it was paused already.
pub async fn pause(db: &PgPool, namespace: &str, target: &str, reason: &str) -> Result<bool, sqlx::Error> {
    let inserted = sqlx::query!(
        "INSERT INTO paused_targets (namespace, target, reason) VALUES ($1, $2, $3)
         ON CONFLICT (namespace, target) DO NOTHING",
        namespace,
        target,
        reason
    )
    .execute(db)
    .await?
    .rows_affected();
    Ok(inserted > 0)
}

/// Resumes `target` for `namespace`; false when it was not paused.
pub async fn resume(db: &PgPool, namespace: &str, target: &str) -> Result<bool, sqlx::Error> {
    let deleted = sqlx::query!("DELETE FROM paused_targets WHERE namespace = $1 AND target = $2", namespace, target)
        .execute(db)
        .await?
        .rows_affected();
    Ok(deleted > 0)
}

/// The targets paused for `namespace`, oldest pause first.
pub async fn list(db: &PgPool, namespace: &str) -> Result<Vec<PausedTarget>, sqlx::Error> {
    sqlx::query_as!(
        PausedTarget,
        "SELECT namespace, target, reason, paused_at FROM paused_targets WHERE namespace = $1
          ORDER BY paused_at, target",
        namespace
    )
    .fetch_all(db)
    .await
}

/// Every paused target, by namespace and target.
pub async fn all(db: &PgPool) -> Result<HashMap<(String, String), PausedTarget>, sqlx::Error> {
    let rows: Vec<PausedTarget> =
        sqlx::query_as!(PausedTarget, "SELECT namespace, target, reason, paused_at FROM paused_targets")
            .fetch_all(db)
            .await?;
    Ok(rows.into_iter().map(|p| ((p.namespace.clone(), p.target.clone()), p)).collect())
}
