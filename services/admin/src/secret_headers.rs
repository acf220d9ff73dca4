//! Callback headers that carry secrets (`Authorization`, cookies, API keys, and the names
//! an operator adds with `PUNCTUAL_SECRET_HEADERS`) are stored as given and sent by the
//! executor, but no API answer shows their values: they read [`REDACTED`]. A timer sent
//! back with a header still reading [`REDACTED`] (a PATCH of what was read) keeps the
//! stored value.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::str::FromStr;
use std::sync::Arc;

use punctual_shared::timer::{Action, FieldError};
use serde_json::Value;

use crate::timer_view::TimerView;

/// What a secret header's value reads in every answer.
pub const REDACTED: &str = "<redacted>";

/// Header names whose values are always redacted.
pub const ALWAYS_SECRET: [&str; 5] = ["authorization", "proxy-authorization", "cookie", "x-api-key", "x-auth-token"];

/// The names of the headers whose values are secret, lowercase.
#[derive(Debug, Clone)]
pub struct SecretHeaders(Arc<BTreeSet<String>>);

impl Default for SecretHeaders {
    fn default() -> Self {
        Self(Arc::new(ALWAYS_SECRET.iter().map(|n| (*n).to_owned()).collect()))
    }
}

/// A comma-separated list of further names (`PUNCTUAL_SECRET_HEADERS`).
impl FromStr for SecretHeaders {
    type Err = Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut names = (*Self::default().0).clone();
        names.extend(s.split(',').map(|n| n.trim().to_ascii_lowercase()).filter(|n| !n.is_empty()));
        Ok(Self(Arc::new(names)))
    }
}

impl SecretHeaders {
    pub fn is_secret(&self, name: &str) -> bool {
        self.0.contains(&name.to_ascii_lowercase())
    }

    /// Redacts the secret headers of a timer's answer (`action.http.headers`).
    pub fn redact(&self, view: &mut TimerView) {
        if let Action::Http(http) = &mut view.action {
            for (name, value) in http.headers.iter_mut() {
                if self.is_secret(name) {
                    *value = REDACTED.to_owned();
                }
            }
        }
    }

    /// Puts the stored values back where a timer given to be stored still reads
    /// [`REDACTED`] (`stored`: the timer's view as stored, unredacted; none for a new timer).
    /// A [`REDACTED`] header without a stored value is refused: it would be sent as is.
    /// A stored value goes back only to the target it was given for (the same scheme, host
    /// and port): a key that may change a timer but not read its secrets cannot send them
    /// elsewhere by changing the URL.
    pub fn restore(&self, spec: &mut Value, stored: Option<&Value>) -> Result<(), FieldError> {
        let same_target =
            origin(spec.pointer("/action/http/url")) == origin(stored.and_then(|s| s.pointer("/action/http/url")));
        let Some(Value::Object(headers)) = spec.pointer_mut("/action/http/headers") else {
            return Ok(());
        };
        let stored = stored.and_then(|s| s.pointer("/action/http/headers")).and_then(Value::as_object);
        for (name, value) in headers.iter_mut() {
            if value.as_str() != Some(REDACTED) {
                continue;
            }
            match stored.and_then(|s| s.get(name)) {
                Some(_) if !same_target => {
                    return Err(FieldError::new(
                        format!("action.http.headers.{name}"),
                        format!(
                            "{REDACTED} keeps the stored value only for the same target (scheme, host and port); the \
                             URL's target changed: give the header's value again"
                        ),
                    ))
                }
                Some(kept) => *value = kept.clone(),
                None => {
                    return Err(FieldError::new(
                        format!("action.http.headers.{name}"),
                        format!("{REDACTED} stands for a stored value, and this timer has none for this header"),
                    ))
                }
            }
        }
        Ok(())
    }
}

/// A URL's scheme, host and port, if it is one.
fn origin(url: Option<&Value>) -> Option<(String, String, Option<u16>)> {
    let url = url::Url::parse(url?.as_str()?).ok()?;
    Some((url.scheme().to_owned(), url.host_str()?.to_owned(), url.port_or_known_default()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn redacts_secret_names_whatever_their_case_and_restores_them() {
        let secret: SecretHeaders = "X-Tenant-Key, ".parse().unwrap();
        let stored = json!({"action": {"http": {"headers": {"Authorization": "Bearer s3cr3t", "X-Tenant-Key": "k", "X-Env": "prod"}}}});
        let mut headers: std::collections::BTreeMap<String, String> =
            serde_json::from_value(stored["action"]["http"]["headers"].clone()).unwrap();
        headers.retain(|name, _| secret.is_secret(name));
        assert_eq!(headers.len(), 2, "Authorization and X-Tenant-Key");
        let mut sent_back = json!({"action": {"http": {"headers": {"Authorization": REDACTED, "X-Tenant-Key": REDACTED, "X-Env": "prod"}}}});
        secret.restore(&mut sent_back, Some(&stored)).unwrap();
        assert_eq!(sent_back, stored);
        let stored_at = |url: &str| {
            let mut s = stored.clone();
            s["action"]["http"]["url"] = json!(url);
            s
        };
        let mut same_host = json!({"action": {"http": {"url": "https://hooks.example.com:443/other",
                                                     "headers": {"Authorization": REDACTED}}}});
        secret.restore(&mut same_host, Some(&stored_at("https://hooks.example.com/hook"))).unwrap();
        assert_eq!(same_host["action"]["http"]["headers"]["Authorization"], "Bearer s3cr3t");
        let mut elsewhere = json!({"action": {"http": {"url": "https://attacker.example.net/",
                                                     "headers": {"Authorization": REDACTED}}}});
        let refused = secret.restore(&mut elsewhere, Some(&stored_at("https://hooks.example.com/hook"))).unwrap_err();
        assert_eq!(refused.field, "action.http.headers.Authorization");
        let mut new = json!({"action": {"http": {"headers": {"Cookie": REDACTED}}}});
        assert_eq!(secret.restore(&mut new, None).unwrap_err().field, "action.http.headers.Cookie");
        assert!(!SecretHeaders::default().is_secret("x-tenant-key"));
    }
}
