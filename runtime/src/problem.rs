//! Errors answered as `application/problem+json` (RFC 9457), with a stable `type` per kind
//! of error (`urn:punctual:problem:<kind>`) and, where one field is at fault, its path in
//! `field`. Answers that axum or the server make themselves (an unknown route, a method
//! not allowed, a body too large, a timeout) are turned into problems too, by
//! [`as_problem`], which every service's HTTP server applies.

use axum::body::{to_bytes, Body};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// `urn:punctual:problem:<kind>`, stable per kind of error.
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    /// The path of the field at fault (`action.http.url`, `namespaces[0]`), when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl Problem {
    pub fn new(status: StatusCode, detail: impl Into<String>, field: Option<String>) -> Self {
        Self {
            kind: format!("urn:punctual:problem:{}", kind(status)),
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            status: status.as_u16(),
            detail: detail.into(),
            field,
        }
    }

    /// A problem with a kind of its own, where the status alone would not tell it apart.
    pub fn of_kind(status: StatusCode, kind: &str, detail: impl Into<String>, field: Option<String>) -> Self {
        Self { kind: format!("urn:punctual:problem:{kind}"), ..Self::new(status, detail, field) }
    }
}

/// The stable name of each status's kind of problem.
fn kind(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "malformed-request",
        StatusCode::UNAUTHORIZED => "unauthenticated",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::TOO_MANY_REQUESTS => "rate-limited",
        StatusCode::UNPROCESSABLE_ENTITY => "invalid-field",
        StatusCode::NOT_FOUND => "not-found",
        StatusCode::METHOD_NOT_ALLOWED => "method-not-allowed",
        StatusCode::CONFLICT => "conflict",
        StatusCode::PAYLOAD_TOO_LARGE => "payload-too-large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported-media-type",
        StatusCode::REQUEST_TIMEOUT => "request-timeout",
        s if s.is_server_error() => "internal",
        _ => "client-error",
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).expect("a problem serializes");
        (status, [(header::CONTENT_TYPE, PROBLEM_JSON)], body).into_response()
    }
}

/// The longest text of an answer made elsewhere that is kept as a problem's detail.
const MAX_DETAIL_BYTES: usize = 1024;

/// Turns an error answer that is not a problem yet (axum's rejections, an unknown route, a
/// method not allowed, a body too large, a timeout) into one, keeping its status and
/// headers (`Allow`, say) and its text as the detail.
pub async fn as_problem(response: Response) -> Response {
    let status = response.status();
    // Only bare or plain-text answers: a problem already, or a JSON answer of its own (a
    // 503 from /readyz with its checks), is left alone.
    let plain = response.headers().get(header::CONTENT_TYPE).is_none_or(|v| v.as_bytes().starts_with(b"text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !plain {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = to_bytes(body, MAX_DETAIL_BYTES).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_owned();
    let detail = match (text.is_empty(), status) {
        (false, _) => text,
        (true, StatusCode::NOT_FOUND) => "no such resource".to_owned(),
        (true, StatusCode::METHOD_NOT_ALLOWED) => "method not allowed here (see the Allow header)".to_owned(),
        (true, _) => status.canonical_reason().unwrap_or("error").to_owned(),
    };
    let problem = serde_json::to_vec(&Problem::new(status, detail, None)).expect("a problem serializes");
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(problem))
}
