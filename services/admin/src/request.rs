//! Reading requests: JSON bodies (naming the field at fault), page sizes and ids.

use std::fmt::Display;
use std::ops::RangeInclusive;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use axum::http::{header, HeaderMap};
use serde_json::Value;
use uuid::Uuid;

use crate::error::ApiError;
use punctual_shared::timer::FieldError;

/// Parses a JSON body, naming the field at fault when its shape is wrong.
pub fn parse_json<T: serde::de::DeserializeOwned>(headers: &HeaderMap, body: &Bytes) -> Result<T, ApiError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.contains("+json"));
    if !is_json {
        return Err(ApiError::BadRequest {
            field: None,
            detail: "expected a JSON body with Content-Type: application/json".into(),
        });
    }
    let value: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::BadRequest { field: None, detail: e.to_string() })?;
    if let Some(field) = nul_in(&value, "") {
        // Postgres stores no NUL in text or jsonb: refused here rather than failing there.
        return Err(FieldError::new(field, "must not contain the NUL character (\\u0000)").into());
    }
    from_value(value)
}

/// Reads a request's JSON as `T`, naming the field at fault when its shape is wrong.
pub fn from_value<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // serde names a missing field in its message only: the problem names it too.
        let message = inner.to_string();
        let missing = message.strip_prefix("missing field `").and_then(|m| m.split('`').next()).map(|m| {
            if path == "." {
                m.to_owned()
            } else {
                format!("{path}.{m}")
            }
        });
        let field = missing.or((path != ".").then_some(path));
        let detail = match &field {
            Some(f) => format!("{f}: {inner}"),
            None => inner.to_string(),
        };
        ApiError::BadRequest { field, detail }
    })
}

/// The path of the first string (or object key) that holds a NUL character, if any.
fn nul_in(value: &Value, path: &str) -> Option<String> {
    let join = |key: &str| if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") };
    match value {
        Value::String(s) if s.contains('\0') => Some(if path.is_empty() { ".".to_owned() } else { path.to_owned() }),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| nul_in(item, &format!("{path}[{i}]"))),
        Value::Object(map) => map.iter().find_map(|(key, item)| {
            if key.contains('\0') {
                Some(join(&key.replace('\0', "\\u0000")))
            } else {
                nul_in(item, &join(key))
            }
        }),
        _ => None,
    }
}

/// A query string as `T`, or a 400 naming `field` when it does not parse.
pub fn query<T>(query: Result<Query<T>, QueryRejection>, field: Option<&str>) -> Result<T, ApiError> {
    query.map(|Query(q)| q).map_err(|e| ApiError::BadRequest { field: field.map(str::to_owned), detail: e.body_text() })
}

/// A query parameter's number: `default` unless given, within `range` (a 400 naming
/// `field` outside it).
pub fn bounded<T>(field: &str, value: Option<T>, default: T, range: RangeInclusive<T>) -> Result<T, ApiError>
where
    T: PartialOrd + Display + Copy,
{
    let value = value.unwrap_or(default);
    if !range.contains(&value) {
        return Err(ApiError::BadRequest {
            field: Some(field.into()),
            detail: format!("{field}: must be between {} and {}", range.start(), range.end()),
        });
    }
    Ok(value)
}

/// A page size: 100 unless given, at most 1000.
pub fn page_limit(limit: Option<i64>) -> Result<i64, ApiError> {
    bounded("limit", limit, 100, 1..=1000)
}

pub fn parse_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id)
        .map_err(|_| ApiError::BadRequest { field: Some("id".into()), detail: format!("id: not a timer id: {id:?}") })
}
