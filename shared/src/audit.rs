//! The audit log (`audit_log`): who changed what through the admin API, and when. This
//! module owns the table's writes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

/// What a change was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum AuditAction {
    TimerCreated,
    TimerChanged,
    TimerPaused,
    TimerResumed,
    TimerDeleted,
    TimerTriggered,
    TimerBackfilled,
    TimersPaused,
    TimersResumed,
    TimersDeleted,
    TasksReplayed,
    NamespaceChanged,
    TargetResumed,
    SigningSecretCreated,
    SigningSecretDeleted,
    KeyCreated,
    KeyRevoked,
}

/// A change to record.
pub struct Change<'a> {
    pub key_id: Option<Uuid>,
    pub key_name: &'a str,
    pub namespace: Option<&'a str>,
    pub action: AuditAction,
    pub target: Option<String>,
    pub detail: serde_json::Value,
}

/// A change as recorded.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AuditEntry {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub key_id: Option<Uuid>,
    /// The name of the key that made it.
    pub key_name: String,
    pub namespace: Option<String>,
    pub action: AuditAction,
    /// What was changed: a timer's or key's id, a target.
    pub target: Option<String>,
    /// What else the change said (the ids a bulk change or replay changed, a range).
    pub detail: serde_json::Value,
}

pub async fn record(db: &PgPool, change: &Change<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO audit_log (key_id, key_name, namespace, action, target, detail) VALUES ($1, $2, $3, $4, $5, $6)",
        change.key_id,
        change.key_name,
        change.namespace,
        change.action as AuditAction,
        change.target,
        change.detail
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The latest changes, newest first: of `namespace` if given, of the namespaces `visible`
/// (all, with those of no namespace, when `None`), before the entry `before`.
pub async fn list(
    db: &PgPool,
    visible: Option<&[String]>,
    namespace: Option<&str>,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<AuditEntry>, sqlx::Error> {
    sqlx::query_as!(
        AuditEntry,
        r#"SELECT id, at, key_id, key_name, namespace, action AS "action: AuditAction", target, detail
             FROM audit_log
            WHERE ($1::text[] IS NULL OR namespace = ANY($1)) AND ($2::text IS NULL OR namespace = $2)
              AND ($3::bigint IS NULL OR id < $3)
            ORDER BY id DESC LIMIT $4"#,
        visible,
        namespace,
        before,
        limit
    )
    .fetch_all(db)
    .await
}
