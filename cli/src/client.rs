//! Requests to the admin API, and its answers: JSON, or an error saying what went wrong in
//! one line (the problem's status, type and detail, for an error answer).

use std::time::Duration;

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("cannot reach the admin API at {addr} ({reason}): is it running? (--addr, PUNCTUAL_ADDR)")]
    Unreachable { addr: String, reason: String },
    /// An error answer, as its problem says.
    #[error("{status} {kind}: {detail}{}", field.as_ref().map(|f| format!(" (field {f})")).unwrap_or_default())]
    Api { status: u16, kind: String, detail: String, field: Option<String> },
    #[error("{0}")]
    Usage(String),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migrations: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
}

/// An RFC 9457 problem, as the API answers errors.
#[derive(Debug, Deserialize)]
struct Problem {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    detail: String,
    field: Option<String>,
}

/// The innermost cause of an error (`Connection refused`, not `client error (Connect)`).
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

pub struct Client {
    addr: String,
    key: Option<String>,
    http: reqwest::Client,
}

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

impl Client {
    pub fn new(addr: &str, key: Option<String>) -> Result<Self, CliError> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| CliError::Usage(format!("cannot make an HTTP client: {e}")))?;
        Ok(Self { addr: addr.trim_end_matches('/').to_owned(), key, http })
    }

    /// `query`: the query's parameters, encoded here.
    pub async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, CliError> {
        self.send_query(Method::GET, path, query, None::<&()>).await
    }

    pub async fn post<B: Serialize>(&self, path: &str, body: Option<&B>) -> Result<Value, CliError> {
        self.send(Method::POST, path, body).await
    }

    pub async fn patch<B: Serialize>(&self, path: &str, body: &B) -> Result<Value, CliError> {
        self.send(Method::PATCH, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> Result<Value, CliError> {
        self.send(Method::DELETE, path, None::<&()>).await
    }

    /// The answer's JSON (null for an empty one), or the error it is.
    async fn send<B: Serialize>(&self, method: Method, path: &str, body: Option<&B>) -> Result<Value, CliError> {
        self.send_query(method, path, &[], body).await
    }

    async fn send_query<B: Serialize>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&B>,
    ) -> Result<Value, CliError> {
        let url = format!("{}{path}", self.addr);
        let mut request = self.http.request(method, &url).query(query);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| CliError::Unreachable { addr: self.addr.clone(), reason: innermost(&e) })?;
        let status = response.status();
        let text = response.text().await.map_err(|e| CliError::Unreachable {
            addr: self.addr.clone(),
            reason: format!("the answer broke off: {e}"),
        })?;
        if status.is_success() {
            return Ok(if text.is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&text).unwrap_or(Value::String(text))
            });
        }
        let problem: Problem = serde_json::from_str(&text).unwrap_or(Problem {
            kind: String::new(),
            detail: text.chars().take(200).collect(),
            field: None,
        });
        let kind = problem.kind.strip_prefix("urn:punctual:problem:").unwrap_or(&problem.kind).to_owned();
        let detail = if self.key.is_none() && status == reqwest::StatusCode::UNAUTHORIZED {
            format!("{} (give a key with --api-key or PUNCTUAL_API_KEY)", problem.detail)
        } else {
            problem.detail
        };
        Err(CliError::Api { status: status.as_u16(), kind, detail, field: problem.field })
    }
}
