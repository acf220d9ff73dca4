//! API keys: `pct_` followed by the base64url of 32 random bytes. Only a key's SHA-256 is
//! stored (table `api_keys`). A slow password hash would buy nothing here: a key has 256
//! bits of entropy, so its digest cannot be reversed by guessing, and a fast digest lets
//! every request be checked with one indexed lookup.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

/// What every key starts with, so that a leaked key is recognisable (secret scanners).
pub const KEY_PREFIX: &str = "pct_";
const KEY_BYTES: usize = 32;
/// How many characters of a key (after its prefix) a listing shows, to tell keys apart.
pub const SHOWN_CHARS: usize = 6;

/// An API key. Its `Debug` form does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("an API key is {KEY_PREFIX} followed by 43 base64url characters")]
pub struct MalformedKey;

impl ApiKey {
    /// A new random key (from the operating system's generator).
    pub fn generate() -> Self {
        let mut bytes = [0u8; KEY_BYTES];
        rand::fill(&mut bytes);
        Self(format!("{KEY_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
    }

    /// The key itself, to show once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// What is stored and looked up.
    pub fn digest(&self) -> Vec<u8> {
        Sha256::digest(self.0.as_bytes()).to_vec()
    }

    /// The start of the key that listings show (`pct_AbC123…`).
    pub fn shown_prefix(&self) -> String {
        format!("{}…", &self.0[..KEY_PREFIX.len() + SHOWN_CHARS])
    }
}

impl FromStr for ApiKey {
    type Err = MalformedKey;

    fn from_str(s: &str) -> Result<Self, MalformedKey> {
        let body = s.strip_prefix(KEY_PREFIX).ok_or(MalformedKey)?;
        match URL_SAFE_NO_PAD.decode(body) {
            Ok(bytes) if bytes.len() == KEY_BYTES => Ok(Self(s.to_owned())),
            _ => Err(MalformedKey),
        }
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKey({})", self.shown_prefix())
    }
}

/// What a key may do. Each role includes the ones before it.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
    sqlx::Type,
)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "text", rename_all = "lowercase")]
pub enum Role {
    /// Read the timers, runs and stats of the key's namespaces.
    Read,
    /// Also create, change, delete, pause, resume, trigger and backfill them, replay their
    /// dead tasks and manage their signing secrets.
    Write,
    /// Everything in every namespace, and the keys.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "read" => Ok(Role::Read),
            "write" => Ok(Role::Write),
            "admin" => Ok(Role::Admin),
            other => Err(format!("unknown role {other:?}: read, write or admin")),
        }
    }
}

/// Stores a key (its digest and shown prefix) with its role and namespaces (none for an
/// admin key); `None` if a key with the same digest is stored already.
pub async fn store(
    db: &sqlx::PgPool,
    name: &str,
    key: &ApiKey,
    role: Role,
    namespaces: &[String],
) -> Result<Option<(uuid::Uuid, chrono::DateTime<chrono::Utc>)>, sqlx::Error> {
    let stored = sqlx::query!(
        "INSERT INTO api_keys (name, digest, prefix, role, namespaces) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (digest) DO NOTHING
         RETURNING id, created_at",
        name,
        key.digest(),
        key.shown_prefix(),
        role.as_str(),
        namespaces
    )
    .fetch_optional(db)
    .await?;
    Ok(stored.map(|row| (row.id, row.created_at)))
}

/// Revokes a key (it stays, revoked, for the record; revoking it again keeps the first
/// time); false if there is no such key.
pub async fn revoke(db: &sqlx::PgPool, id: uuid::Uuid) -> Result<bool, sqlx::Error> {
    let found = sqlx::query!("UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1", id)
        .execute(db)
        .await?
        .rows_affected();
    Ok(found > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_parses_back_and_hides_in_debug() {
        let key = ApiKey::generate();
        assert_eq!(key.expose().len(), KEY_PREFIX.len() + 43);
        let parsed: ApiKey = key.expose().parse().unwrap();
        assert_eq!(parsed.digest(), key.digest());
        assert_eq!(key.digest().len(), 32);
        let debug = format!("{key:?}");
        assert!(!debug.contains(&key.expose()[KEY_PREFIX.len() + SHOWN_CHARS..]), "{debug}");
    }

    #[test]
    fn malformed_keys_are_refused() {
        for bad in ["", "pct_", "pct_short", "xyz_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "pct_!!!!"] {
            assert_eq!(bad.parse::<ApiKey>(), Err(MalformedKey), "{bad}");
        }
        // 32 bytes in base64url is 43 characters; one more or fewer is refused.
        assert!("pct_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".parse::<ApiKey>().is_ok());
        assert!("pct_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".parse::<ApiKey>().is_err());
    }

    #[test]
    fn roles_are_ordered() {
        assert!(Role::Read < Role::Write && Role::Write < Role::Admin);
        assert_eq!("write".parse::<Role>(), Ok(Role::Write));
        assert!("root".parse::<Role>().is_err());
    }
}
