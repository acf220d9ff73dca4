//! Secrets at rest: signing secrets and secret header values are stored sealed
//! (XChaCha20-Poly1305) with a key from `PUNCTUAL_SECRET_KEY`, so that a database dump or a
//! SQL reader sees no secret. A sealed value reads
//! `sealed:v1:<key id>:<base64 of nonce and ciphertext>`; the key id says which key opens
//! it, so keys can rotate: the setting lists the key that seals first, then older keys that
//! still open, and `punctual secrets rotate` seals everything again with the first.
//!
//! A value without the prefix is plaintext (written with SQL, or before keys were set) and
//! is used as it is.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

/// What every sealed value starts with.
pub const SEALED_PREFIX: &str = "sealed:v1:";
const NONCE_BYTES: usize = 24;
const KEY_BYTES: usize = 32;
const MAX_KEY_ID_BYTES: usize = 32;

/// What a sealed value is for, bound into its seal: a value sealed as one cannot be opened
/// as the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    SigningSecret,
    Header,
}

impl Purpose {
    fn aad(self) -> &'static [u8] {
        match self {
            Purpose::SigningSecret => b"punctual signing secret",
            Purpose::Header => b"punctual header value",
        }
    }
}

/// The keys of `PUNCTUAL_SECRET_KEY`: `<id>:<base64 of 32 bytes>`, comma-separated, the
/// first sealing, all opening. `Debug` shows the ids only.
#[derive(Clone, Default)]
pub struct SecretKeys {
    keys: Vec<(String, XChaCha20Poly1305)>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSecretKey {
    #[error("PUNCTUAL_SECRET_KEY: an entry is <id>:<base64 of {KEY_BYTES} bytes>, e.g. k1:{example}", example = STANDARD.encode([0u8; KEY_BYTES]))]
    Form,
    #[error("PUNCTUAL_SECRET_KEY: the key id {0:?} is not 1 to {MAX_KEY_ID_BYTES} letters, digits, - or _")]
    Id(String),
    #[error("PUNCTUAL_SECRET_KEY: key {0:?} is not the base64 of {KEY_BYTES} bytes")]
    Key(String),
    #[error("PUNCTUAL_SECRET_KEY: key id {0:?} is listed twice")]
    Twice(String),
}

/// Why a sealed value could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("a value is sealed with key {0:?}, which PUNCTUAL_SECRET_KEY does not list")]
    UnknownKey(String),
    #[error("a value sealed with key {0:?} does not open with it: the key is not the one it was sealed with, or the value was altered")]
    Wrong(String),
    #[error("a sealed value is malformed")]
    Malformed,
}

impl FromStr for SecretKeys {
    type Err = InvalidSecretKey;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut keys: Vec<(String, XChaCha20Poly1305)> = Vec::new();
        for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (id, key) = entry.split_once(':').ok_or(InvalidSecretKey::Form)?;
            let id_ok = (1..=MAX_KEY_ID_BYTES).contains(&id.len())
                && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !id_ok {
                return Err(InvalidSecretKey::Id(id.to_owned()));
            }
            let bytes = STANDARD.decode(key).map_err(|_| InvalidSecretKey::Key(id.to_owned()))?;
            if bytes.len() != KEY_BYTES {
                return Err(InvalidSecretKey::Key(id.to_owned()));
            }
            if keys.iter().any(|(known, _)| known == id) {
                return Err(InvalidSecretKey::Twice(id.to_owned()));
            }
            let cipher = XChaCha20Poly1305::new_from_slice(&bytes).map_err(|_| InvalidSecretKey::Key(id.to_owned()))?;
            keys.push((id.to_owned(), cipher));
        }
        Ok(SecretKeys { keys })
    }
}

impl fmt::Debug for SecretKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.keys.iter().map(|(id, _)| id)).finish()
    }
}

/// Whether `value` is sealed (else it is plaintext).
pub fn is_sealed(value: &str) -> bool {
    value.starts_with(SEALED_PREFIX)
}

/// The id of the key that sealed `value`, if it is sealed.
pub fn key_id(value: &str) -> Option<&str> {
    value.strip_prefix(SEALED_PREFIX)?.split_once(':').map(|(id, _)| id)
}

impl SecretKeys {
    /// A new key entry for `PUNCTUAL_SECRET_KEY`, `<id>:<base64>`, from the operating
    /// system's generator.
    pub fn generate_entry(id: &str) -> String {
        let mut key = [0u8; KEY_BYTES];
        rand::fill(&mut key[..]);
        format!("{id}:{}", STANDARD.encode(key))
    }

    /// Whether any key is set: without one, values are stored as given.
    pub fn is_set(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The id of the key that seals.
    pub fn current_id(&self) -> Option<&str> {
        self.keys.first().map(|(id, _)| id.as_str())
    }

    /// `plaintext` sealed with the first key; as it is without keys.
    pub fn seal(&self, plaintext: &str, purpose: Purpose) -> String {
        let Some((id, cipher)) = self.keys.first() else {
            return plaintext.to_owned();
        };
        let mut nonce = [0u8; NONCE_BYTES];
        rand::fill(&mut nonce[..]);
        let sealed = cipher
            .encrypt(&XNonce::from(nonce), Payload { msg: plaintext.as_bytes(), aad: purpose.aad() })
            .expect("sealing a value in memory cannot fail");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        format!("{SEALED_PREFIX}{id}:{}", URL_SAFE_NO_PAD.encode(out))
    }

    /// `value` opened if sealed, as it is if plaintext.
    pub fn open(&self, value: &str, purpose: Purpose) -> Result<String, OpenError> {
        let Some(rest) = value.strip_prefix(SEALED_PREFIX) else {
            return Ok(value.to_owned());
        };
        let (id, body) = rest.split_once(':').ok_or(OpenError::Malformed)?;
        let (_, cipher) =
            self.keys.iter().find(|(known, _)| known == id).ok_or_else(|| OpenError::UnknownKey(id.to_owned()))?;
        let bytes = URL_SAFE_NO_PAD.decode(body).map_err(|_| OpenError::Malformed)?;
        if bytes.len() < NONCE_BYTES {
            return Err(OpenError::Malformed);
        }
        let (nonce, sealed) = bytes.split_at(NONCE_BYTES);
        let nonce: [u8; NONCE_BYTES] = nonce.try_into().expect("split at the nonce's length");
        let opened = cipher
            .decrypt(&XNonce::from(nonce), Payload { msg: sealed, aad: purpose.aad() })
            .map_err(|_| OpenError::Wrong(id.to_owned()))?;
        String::from_utf8(opened).map_err(|_| OpenError::Malformed)
    }

    /// Whether `value` should be sealed again: plaintext, or sealed with another key than
    /// the first (with keys set).
    pub fn needs_sealing(&self, value: &str) -> bool {
        self.current_id().is_some_and(|current| key_id(value) != Some(current))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_with_its_key_only_and_for_its_purpose() {
        let keys: SecretKeys = SecretKeys::generate_entry("k1").parse().unwrap();
        let sealed = keys.seal("Bearer s3cr3t", Purpose::Header);
        assert!(sealed.starts_with("sealed:v1:k1:") && !sealed.contains("s3cr3t"), "{sealed}");
        assert_ne!(keys.seal("Bearer s3cr3t", Purpose::Header), sealed, "a nonce of its own each time");
        assert_eq!(keys.open(&sealed, Purpose::Header).unwrap(), "Bearer s3cr3t");
        assert_eq!(keys.open(&sealed, Purpose::SigningSecret), Err(OpenError::Wrong("k1".into())));
        assert_eq!(keys.open("plain", Purpose::Header).unwrap(), "plain", "plaintext as it is");
        let other: SecretKeys = SecretKeys::generate_entry("k1").parse().unwrap();
        assert_eq!(other.open(&sealed, Purpose::Header), Err(OpenError::Wrong("k1".into())), "another k1");
        let unknown: SecretKeys = SecretKeys::generate_entry("k2").parse().unwrap();
        assert_eq!(unknown.open(&sealed, Purpose::Header), Err(OpenError::UnknownKey("k1".into())));
        let mut altered = sealed.clone();
        altered.pop();
        assert!(keys.open(&altered, Purpose::Header).is_err());
        assert_eq!(SecretKeys::default().seal("x", Purpose::Header), "x", "no keys: stored as given");
    }

    #[test]
    fn rotation_seals_with_the_first_key_and_opens_with_all() {
        let (old, new) = (SecretKeys::generate_entry("old"), SecretKeys::generate_entry("new"));
        let before: SecretKeys = old.parse().unwrap();
        let sealed_before = before.seal("v", Purpose::SigningSecret);
        let during: SecretKeys = format!("{new},{old}").parse().unwrap();
        assert_eq!(during.open(&sealed_before, Purpose::SigningSecret).unwrap(), "v");
        assert!(during.needs_sealing(&sealed_before) && during.needs_sealing("plain"));
        let resealed = during.seal("v", Purpose::SigningSecret);
        assert_eq!(key_id(&resealed), Some("new"));
        assert!(!during.needs_sealing(&resealed));
        let after: SecretKeys = new.parse().unwrap();
        assert_eq!(after.open(&resealed, Purpose::SigningSecret).unwrap(), "v");
        assert!(!SecretKeys::default().needs_sealing("plain"), "nothing to seal with");
    }

    #[test]
    fn bad_settings_say_why_without_the_key() {
        for (setting, expected) in [
            ("nocolon", InvalidSecretKey::Form),
            ("bad id!:AAAA", InvalidSecretKey::Id("bad id!".into())),
            ("k1:c2hvcnQ=", InvalidSecretKey::Key("k1".into())),
        ] {
            assert_eq!(setting.parse::<SecretKeys>().unwrap_err(), expected, "{setting}");
        }
        let entry = SecretKeys::generate_entry("k1");
        assert_eq!(format!("{entry},{entry}").parse::<SecretKeys>().unwrap_err(), InvalidSecretKey::Twice("k1".into()));
        let keys: SecretKeys = entry.parse().unwrap();
        assert_eq!(format!("{keys:?}"), "[\"k1\"]");
        assert!("".parse::<SecretKeys>().unwrap().current_id().is_none());
    }
}
