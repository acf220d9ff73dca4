//! A DNS broadcast's occurrence, split when it first runs into a shard for each address its
//! URL's host resolves to (docs/semantics.md, "Fan-out").

use std::time::Duration;

use punctual_shared::task::{self, StartedTask};
use sqlx::PgPool;

use crate::callback::{Attempt, Caller};

/// Splits `task` when it is a DNS broadcast's occurrence not split yet, and makes it its
/// first shard: the others are written for the scanners to claim. Err: the failed attempt
/// (no address the namespace may reach, or no answer from the resolver or the database).
pub async fn split_if_broadcast(pool: &PgPool, caller: &Caller, task: &mut StartedTask) -> Result<(), Attempt> {
    if !task.action.fan_out_dns || task.address.is_some() {
        return Ok(());
    }
    let url = task.action.http_url.as_deref().unwrap_or_default();
    // Within the call's own timeout: the claim outlives the run by that and a little more.
    let timeout = Duration::from_millis(task.action.http_timeout_ms.max(1) as u64);
    let resolved = tokio::time::timeout(timeout, caller.addresses(&task.action.namespace, url))
        .await
        .unwrap_or_else(|_| Err((format!("resolving the host took over {} ms", timeout.as_millis()), true)));
    let addresses = resolved
        .map_err(|(error, retryable)| Attempt::failed(format!("broadcast: {error}"), retryable, Duration::ZERO))?;
    match task::split(pool, task.id, &addresses).await {
        Ok(Some((shard, address))) => {
            tracing::debug!(task_id = task.id, shards = shard.total, "broadcast split");
            task.shard = shard;
            task.address = Some(address);
            Ok(())
        }
        Ok(None) => {
            Err(Attempt::failed("broadcast: the occurrence changed while splitting".into(), true, Duration::ZERO))
        }
        Err(e) => Err(Attempt::failed(format!("broadcast: splitting the occurrence: {e}"), true, Duration::ZERO)),
    }
}
