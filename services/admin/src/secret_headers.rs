//! Action headers that carry secrets (`Authorization`, cookies, API keys, and the names
//! an operator adds with `PUNCTUAL_SECRET_HEADERS`), of a callback or of a Kafka message,
//! are stored as given and sent by the executor, but no API answer shows their values: they
//! read [`REDACTED`]. A timer sent back with a header still reading [`REDACTED`] (a PATCH of
//! what was read) keeps the stored value.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::str::FromStr;
use std::sync::Arc;

use punctual_shared::fan_out::FanOutKind;
use punctual_shared::sealed::{is_sealed, Purpose, SecretKeys, SEALED_PREFIX};
use punctual_shared::timer::{Action, FieldError, NewTimer};
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

    /// Redacts the secret headers of a timer's answer (`action.http.headers` or
    /// `action.kafka.headers`).
    pub fn redact(&self, view: &mut TimerView) {
        let headers = match &mut view.action {
            Action::Http(http) => &mut http.headers,
            Action::Kafka(kafka) => &mut kafka.headers,
        };
        for (name, value) in headers.iter_mut() {
            if self.is_secret(name) {
                *value = REDACTED.to_owned();
            }
        }
    }

    /// Seals, with the current key of `keys`, the values of `action`'s secret headers (none
    /// without keys), and seals again those sealed with an older key. A value that looks
    /// sealed but does not open is refused: it would be sent as it is.
    pub fn seal(&self, keys: &SecretKeys, action: &mut Action) -> Result<(), FieldError> {
        let (kind, headers) = match action {
            Action::Http(http) => ("http", &mut http.headers),
            Action::Kafka(kafka) => ("kafka", &mut kafka.headers),
        };
        for (name, value) in headers.iter_mut() {
            let plaintext = if is_sealed(value) {
                keys.open(value, Purpose::Header).map_err(|e| {
                    FieldError::new(
                        format!("action.{kind}.headers.{name}"),
                        format!("values starting with {SEALED_PREFIX} are the service's sealed ones, and this one does not open ({e})"),
                    )
                })?
            } else if self.is_secret(name) {
                value.clone()
            } else {
                continue;
            };
            if keys.needs_sealing(value) {
                *value = keys.seal(&plaintext, Purpose::Header);
            }
        }
        Ok(())
    }

    /// Refuses a broadcast URL of a target the stored timer did not call while its action
    /// keeps a stored secret value, as [`Self::restore`] refuses a changed URL: a key that may
    /// change a timer but not read its secrets cannot send them elsewhere through its
    /// broadcast either (`stored`: the timer's view as stored, unredacted).
    pub fn check_broadcast(&self, timer: &NewTimer, stored: &Value) -> Result<(), FieldError> {
        let (Action::Http(http), FanOutKind::Urls(urls)) = (&timer.action, &timer.fan_out) else {
            return Ok(());
        };
        let stored_headers = stored.pointer("/action/http/headers").and_then(Value::as_object);
        let keeps_a_secret = http.headers.iter().any(|(name, value)| {
            (self.is_secret(name) || is_sealed(value))
                && stored_headers.and_then(|h| h.get(name)).and_then(Value::as_str) == Some(value.as_str())
        });
        if !keeps_a_secret {
            return Ok(());
        }
        let mut called: Vec<String> = origin(stored.pointer("/action/http/url")).into_iter().collect();
        if let Some(Value::Array(listed)) = stored.pointer("/fan_out/broadcast") {
            called.extend(listed.iter().filter_map(|url| origin(Some(url))));
        }
        for (i, url) in urls.iter().enumerate() {
            if origin(Some(&Value::String(url.clone()))).is_none_or(|o| !called.contains(&o)) {
                return Err(FieldError::new(
                    format!("fan_out.broadcast[{i}]"),
                    "a target this timer did not call, while its action keeps stored secret header values: give \
                     those values again in action.http.headers",
                ));
            }
        }
        Ok(())
    }

    /// Puts the stored values back where a timer given to be stored still reads
    /// [`REDACTED`] (`stored`: the timer's view as stored, unredacted; none for a new timer).
    /// A [`REDACTED`] header without a stored value is refused: it would be sent as is.
    /// A stored value goes back only to the target it was given for (a callback's scheme,
    /// host and port; a message's topic): a key that may change a timer but not read its
    /// secrets cannot send them elsewhere by changing the URL or the topic.
    pub fn restore(&self, spec: &mut Value, stored: Option<&Value>) -> Result<(), FieldError> {
        for kind in [ActionKind::Http, ActionKind::Kafka] {
            restore_kind(kind, spec, stored)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
enum ActionKind {
    Http,
    Kafka,
}

impl ActionKind {
    fn name(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Kafka => "kafka",
        }
    }

    /// Where this kind of action sends its headers: what a stored secret is bound to.
    fn target(self, timer: Option<&Value>) -> Option<String> {
        let action = timer?.get("action")?.get(self.name())?;
        match self {
            Self::Http => origin(action.get("url")),
            Self::Kafka => action.get("topic")?.as_str().map(str::to_owned),
        }
    }

    fn what_changed(self) -> &'static str {
        match self {
            Self::Http => "the URL's target (scheme, host and port) changed",
            Self::Kafka => "the topic changed",
        }
    }
}

fn restore_kind(kind: ActionKind, spec: &mut Value, stored: Option<&Value>) -> Result<(), FieldError> {
    let same_target = kind.target(Some(spec)) == kind.target(stored);
    let Some(Value::Object(headers)) =
        spec.get_mut("action").and_then(|a| a.get_mut(kind.name())).and_then(|a| a.get_mut("headers"))
    else {
        return Ok(());
    };
    let stored = stored.and_then(|s| s.get("action")?.get(kind.name())?.get("headers")).and_then(Value::as_object);
    for (name, value) in headers.iter_mut() {
        if value.as_str() != Some(REDACTED) {
            continue;
        }
        let field = format!("action.{}.headers.{name}", kind.name());
        match stored.and_then(|s| s.get(name)) {
            Some(_) if !same_target => {
                return Err(FieldError::new(
                    field,
                    format!(
                        "{REDACTED} keeps the stored value only for the same target; {}: give the header's value \
                         again",
                        kind.what_changed()
                    ),
                ))
            }
            Some(kept) => *value = kept.clone(),
            None => {
                return Err(FieldError::new(
                    field,
                    format!("{REDACTED} stands for a stored value, and this timer has none for this header"),
                ))
            }
        }
    }
    Ok(())
}

/// A URL's scheme, host and port, if it is one.
fn origin(url: Option<&Value>) -> Option<String> {
    let url = url::Url::parse(url?.as_str()?).ok()?;
    Some(format!("{}://{}:{}", url.scheme(), url.host_str()?, url.port_or_known_default()?))
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

    #[test]
    fn a_messages_secret_headers_stay_with_its_topic() {
        let secret = SecretHeaders::default();
        let stored =
            json!({"action": {"kafka": {"topic": "billing", "headers": {"X-Api-Key": "k1", "X-Env": "prod"}}}});
        let mut same_topic = json!({"action": {"kafka": {"topic": "billing", "headers": {"X-Api-Key": REDACTED}}}});
        secret.restore(&mut same_topic, Some(&stored)).unwrap();
        assert_eq!(same_topic["action"]["kafka"]["headers"]["X-Api-Key"], "k1");
        let mut other_topic = json!({"action": {"kafka": {"topic": "public", "headers": {"X-Api-Key": REDACTED}}}});
        let refused = secret.restore(&mut other_topic, Some(&stored)).unwrap_err();
        assert_eq!(refused.field, "action.kafka.headers.X-Api-Key");
        // A callback's stored secret is not a message's.
        let callback = json!({"action": {"http": {"url": "https://h.example/", "headers": {"X-Api-Key": "k2"}}}});
        let mut now_a_message = json!({"action": {"kafka": {"topic": "billing", "headers": {"X-Api-Key": REDACTED}}}});
        assert!(secret.restore(&mut now_a_message, Some(&callback)).is_err());
    }
}
