//! Each namespace's signing secrets (table `signing_secrets`, sealed with
//! `PUNCTUAL_SECRET_KEY`), held in memory opened and read again every few seconds: a
//! callback is signed without a query, and a secret added or removed is used or dropped
//! within [`REFRESH_INTERVAL`]. The keys also open the timers' sealed header values.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use punctual_runtime::periodic::Ticks;
use punctual_shared::sealed::{OpenError, Purpose, SecretKeys};
use punctual_shared::unpoisoned;
use punctual_shared::webhook_signature::SigningSecret;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// How often the secrets are read again.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(5);

/// The secrets of each namespace that has any, oldest first.
#[derive(Debug, Default)]
pub struct SigningKeys {
    keys: SecretKeys,
    by_namespace: RwLock<HashMap<String, Arc<[SigningSecret]>>>,
}

#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// The keys do not open a stored secret: calls would go out unsigned.
    #[error("PUNCTUAL_SECRET_KEY does not open the signing secret {id} of namespace {namespace}: {error}")]
    Sealed { id: Uuid, namespace: String, error: OpenError },
}

impl SigningKeys {
    pub fn new(keys: SecretKeys) -> Self {
        SigningKeys { keys, by_namespace: RwLock::default() }
    }

    /// The keys that open sealed values.
    pub fn keys(&self) -> &SecretKeys {
        &self.keys
    }

    /// The namespace's secrets; none when it has none (its calls go unsigned).
    pub fn get(&self, namespace: &str) -> Option<Arc<[SigningSecret]>> {
        unpoisoned::read(&self.by_namespace).get(namespace).cloned()
    }

    /// Reads every namespace's secrets. A secret that is not a valid `whsec_…` value (one
    /// written with SQL) is left out and logged; the namespace's others still sign. A sealed
    /// one that does not open fails the whole read: the secrets held stay.
    pub async fn refresh(&self, pool: &PgPool) -> Result<(), RefreshError> {
        let rows = sqlx::query!("SELECT id, namespace, secret FROM signing_secrets ORDER BY namespace, created_at, id")
            .fetch_all(pool)
            .await?;
        let mut by_namespace: HashMap<String, Vec<SigningSecret>> = HashMap::new();
        let mut invalid = 0;
        for row in rows {
            let namespace = row.namespace;
            let secret = self.keys.open(&row.secret, Purpose::SigningSecret).map_err(|error| RefreshError::Sealed {
                id: row.id,
                namespace: namespace.clone(),
                error,
            })?;
            match secret.parse::<SigningSecret>() {
                Ok(secret) => by_namespace.entry(namespace).or_default().push(secret),
                Err(e) => {
                    invalid += 1;
                    tracing::debug!(%namespace, error = %e, "signing secret left out");
                }
            }
        }
        let by_namespace = by_namespace.into_iter().map(|(ns, secrets)| (ns, Arc::from(secrets))).collect();
        let mut held = unpoisoned::write(&self.by_namespace);
        if invalid > 0 && *held != by_namespace {
            tracing::warn!(
                invalid,
                "signing secrets that are not whsec_ followed by a 24- to 64-byte base64 key are not used"
            );
        }
        *held = by_namespace;
        Ok(())
    }

    /// Refreshes every [`REFRESH_INTERVAL`] until cancelled; a failed read keeps the
    /// secrets held.
    pub async fn refresh_periodically(self: Arc<Self>, pool: PgPool, token: CancellationToken) {
        let mut ticks = Ticks::every_from_now(REFRESH_INTERVAL, token);
        while ticks.next().await {
            if let Err(e) = self.refresh(&pool).await {
                tracing::warn!(error = %e, "reading the signing secrets failed; the ones held still sign");
            }
        }
    }
}
