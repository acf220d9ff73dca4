//! API errors, answered as `application/problem+json` (RFC 9457). Clients never see raw
//! database errors: those are logged and answered with a generic 500.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use punctual_shared::timer::FieldError;
use serde_json::json;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not JSON, or not of the expected shape.
    #[error("{detail}")]
    BadRequest { field: Option<String>, detail: String },
    /// Well-formed, but a field's value is not acceptable.
    #[error(transparent)]
    Invalid(#[from] FieldError),
    #[error("{0}")]
    NotFound(String),
    #[error("{detail}")]
    Conflict { field: Option<String>, detail: String },
    #[error("database error")]
    Database(#[from] sqlx::Error),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, title, field, detail) = match &self {
            ApiError::BadRequest { field, detail } => {
                (StatusCode::BAD_REQUEST, "Malformed request", field.clone(), detail.clone())
            }
            ApiError::Invalid(e) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "Invalid field", Some(e.field.clone()), e.to_string())
            }
            ApiError::NotFound(detail) => (StatusCode::NOT_FOUND, "Not found", None, detail.clone()),
            ApiError::Conflict { field, detail } => (StatusCode::CONFLICT, "Conflict", field.clone(), detail.clone()),
            ApiError::Database(e) => {
                tracing::error!(error = %e, "database error");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Internal error",
                    None,
                    "the request could not be completed; try again".to_owned(),
                )
            }
        };
        let mut body = json!({ "type": "about:blank", "title": title, "status": status.as_u16(), "detail": detail });
        if let Some(field) = field {
            body["field"] = json!(field);
        }
        (status, [(header::CONTENT_TYPE, "application/problem+json")], body.to_string()).into_response()
    }
}
