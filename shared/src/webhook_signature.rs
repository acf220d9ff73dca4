//! Signed callbacks, per the Standard Webhooks specification (standardwebhooks.com): each
//! call carries `webhook-id` (the occurrence's identity), `webhook-timestamp` (Unix
//! seconds) and `webhook-signature`, so that a target can tell a call from Punctual from a
//! forged or replayed one with any Standard Webhooks library.
//!
//! A secret is `whsec_` followed by the base64 of its key (24 to 64 bytes). The signature
//! is `v1,` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")); while secrets rotate a
//! call carries one signature per secret, separated by spaces.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// What every secret starts with.
pub const SECRET_PREFIX: &str = "whsec_";
/// The key length of a generated secret, in bytes.
const GENERATED_KEY_BYTES: usize = 32;
const KEY_BYTES: std::ops::RangeInclusive<usize> = 24..=64;

/// A signing secret. Its `Debug` form does not show the key.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningSecret {
    key: Vec<u8>,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSecret {
    #[error("a signing secret starts with {SECRET_PREFIX}")]
    Prefix,
    #[error("a signing secret is {SECRET_PREFIX} followed by base64")]
    Base64,
    #[error("a signing secret's key must be 24 to 64 bytes, not {0}")]
    Length(usize),
}

impl SigningSecret {
    /// A new random secret (32 bytes from the operating system's generator).
    pub fn generate() -> Self {
        let mut key = vec![0u8; GENERATED_KEY_BYTES];
        rand::fill(&mut key[..]);
        Self { key }
    }

    /// The `whsec_…` form, to give to the target.
    pub fn encoded(&self) -> String {
        format!("{SECRET_PREFIX}{}", STANDARD.encode(&self.key))
    }

    /// `v1,<base64 signature>` of one message.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes a key of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

impl FromStr for SigningSecret {
    type Err = InvalidSecret;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let encoded = s.strip_prefix(SECRET_PREFIX).ok_or(InvalidSecret::Prefix)?;
        let key = STANDARD.decode(encoded).map_err(|_| InvalidSecret::Base64)?;
        if !KEY_BYTES.contains(&key.len()) {
            return Err(InvalidSecret::Length(key.len()));
        }
        Ok(Self { key })
    }
}

impl fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningSecret(redacted)")
    }
}

/// The `webhook-signature` header's value: one signature per secret, space-separated;
/// `None` without secrets.
pub fn signature_header(secrets: &[SigningSecret], id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
    if secrets.is_empty() {
        return None;
    }
    Some(secrets.iter().map(|s| s.sign(id, timestamp, body)).collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_as_the_specification_example() {
        // The example of the Standard Webhooks specification and its reference libraries.
        let secret: SigningSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse().unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn a_generated_secret_reads_back_and_hides_its_key() {
        let secret = SigningSecret::generate();
        let encoded = secret.encoded();
        assert!(encoded.starts_with("whsec_"));
        assert_eq!(encoded.parse::<SigningSecret>().unwrap(), secret);
        assert_ne!(SigningSecret::generate(), secret);
        assert_eq!(format!("{secret:?}"), "SigningSecret(redacted)");
    }

    #[test]
    fn bad_secrets_say_why() {
        assert_eq!("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse::<SigningSecret>(), Err(InvalidSecret::Prefix));
        assert_eq!("whsec_not base64!".parse::<SigningSecret>(), Err(InvalidSecret::Base64));
        assert_eq!("whsec_c2hvcnQ=".parse::<SigningSecret>(), Err(InvalidSecret::Length(5)));
    }

    #[test]
    fn rotation_signs_once_per_secret() {
        let (a, b) = (SigningSecret::generate(), SigningSecret::generate());
        assert_eq!(signature_header(&[], "id", 1, b""), None);
        let header = signature_header(&[a.clone(), b.clone()], "id", 1, b"x").unwrap();
        assert_eq!(header, format!("{} {}", a.sign("id", 1, b"x"), b.sign("id", 1, b"x")));
    }
}
