//! Sealing what is stored in plaintext, or sealed with a key that is not the current one:
//! the signing secrets, and the values of timers' secret headers (and every value sealed
//! already). The admin does it at its start (so values written before keys were set, or
//! with SQL, are sealed), and `punctual secrets rotate` on request, after a new key was put
//! first in `PUNCTUAL_SECRET_KEY`. Only the values change: a timer keeps its version and
//! revision (the schema's trigger is told so), so nothing planned is cancelled.

use serde_json::{Map, Value};
use sqlx::PgPool;
use uuid::Uuid;

use crate::sealed::{is_sealed, OpenError, Purpose, SecretKeys};
use crate::{signing_secrets, timer_store};

/// Rows sealed per transaction.
const BATCH: i64 = 500;

/// What [`seal_stored`] changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Resealed {
    pub signing_secrets: u64,
    pub timers: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error("{what}: {error}")]
    Open { what: String, error: OpenError },
}

/// Seals with the current key every stored secret that needs it. Without keys, nothing.
/// `is_secret` says which header names are secret (besides values sealed already).
pub async fn seal_stored(
    pool: &PgPool,
    keys: &SecretKeys,
    is_secret: &(dyn Fn(&str) -> bool + Sync),
) -> Result<Resealed, SealError> {
    let Some(current) = keys.current_id() else {
        return Ok(Resealed::default());
    };
    let current_prefix = format!("{}{current}:", crate::sealed::SEALED_PREFIX);
    let mut done = Resealed::default();
    let secrets = sqlx::query!(
        "SELECT id, namespace, secret FROM signing_secrets WHERE secret NOT LIKE $1 || '%'",
        current_prefix
    )
    .fetch_all(pool)
    .await?;
    for row in secrets {
        let opened = keys.open(&row.secret, Purpose::SigningSecret).map_err(|error| SealError::Open {
            what: format!("a signing secret of namespace {} ({})", row.namespace, row.id),
            error,
        })?;
        let sealed = keys.seal(&opened, Purpose::SigningSecret);
        if signing_secrets::reseal(pool, row.id, &row.secret, &sealed).await? {
            done.signing_secrets += 1;
        }
    }
    let mut after = Uuid::nil();
    loop {
        let rows = sqlx::query!(
            "SELECT id, http_headers, kafka_headers FROM timers
              WHERE id > $1 AND (http_headers <> '{}' OR kafka_headers <> '{}')
              ORDER BY id LIMIT $2",
            after,
            BATCH
        )
        .fetch_all(pool)
        .await?;
        let Some(last) = rows.last() else { break };
        after = last.id;
        let mut tx = pool.begin().await?;
        // The trigger leaves version and revision as they are for this transaction's updates.
        sqlx::query!("SET LOCAL punctual.resealing = 'on'").execute(&mut *tx).await?;
        for row in &rows {
            let (id, http, kafka) = (row.id, &row.http_headers, &row.kafka_headers);
            let what = |header: &str| format!("header {header} of timer {id}");
            let (http_new, kafka_new) = (reseal(keys, is_secret, http, &what)?, reseal(keys, is_secret, kafka, &what)?);
            if http_new.is_none() && kafka_new.is_none() {
                continue;
            }
            let resealed = timer_store::Resealed {
                id,
                http_headers: (http, http_new.as_ref().unwrap_or(http)),
                kafka_headers: (kafka, kafka_new.as_ref().unwrap_or(kafka)),
            };
            if timer_store::reseal_headers(&mut tx, &resealed).await? {
                done.timers += 1;
            }
        }
        tx.commit().await?;
    }
    Ok(done)
}

/// `headers` with every secret or sealed value sealed with the current key, if any changed.
fn reseal(
    keys: &SecretKeys,
    is_secret: &(dyn Fn(&str) -> bool + Sync),
    headers: &Value,
    what: &dyn Fn(&str) -> String,
) -> Result<Option<Value>, SealError> {
    let Value::Object(map) = headers else { return Ok(None) };
    let mut changed = false;
    let mut out = Map::new();
    for (name, value) in map {
        let sealed = match value.as_str() {
            Some(v) if (is_secret(name) || is_sealed(v)) && keys.needs_sealing(v) => {
                let opened =
                    keys.open(v, Purpose::Header).map_err(|error| SealError::Open { what: what(name), error })?;
                changed = true;
                Value::String(keys.seal(&opened, Purpose::Header))
            }
            _ => value.clone(),
        };
        out.insert(name.clone(), sealed);
    }
    Ok(changed.then_some(Value::Object(out)))
}
