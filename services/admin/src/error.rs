//! API errors, answered as problems ([`Problem`]: `application/problem+json`) naming the
//! field at fault. Clients never see raw database errors: those are logged and answered
//! with a generic 500.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
pub use punctual_runtime::problem::Problem;
use punctual_shared::timer::FieldError;

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
    /// No key, or not a valid one.
    #[error("{0}")]
    Unauthenticated(String),
    /// The key may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// The key sent more requests than its rate allows; it may try again after this long.
    #[error("rate limit reached: retry after {retry_after_s} s")]
    RateLimited { retry_after_s: u64 },
    /// A namespace holds as many timers as it may.
    #[error("{0}")]
    QuotaExceeded(String),
    #[error("database error")]
    Database(#[from] sqlx::Error),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem = match self {
            ApiError::BadRequest { field, detail } => Problem::new(StatusCode::BAD_REQUEST, detail, field),
            ApiError::Invalid(e) => Problem::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string(), Some(e.field)),
            ApiError::NotFound(detail) => Problem::new(StatusCode::NOT_FOUND, detail, None),
            ApiError::Conflict { field, detail } => Problem::new(StatusCode::CONFLICT, detail, field),
            ApiError::Unauthenticated(detail) => {
                let mut response = Problem::new(StatusCode::UNAUTHORIZED, detail, None).into_response();
                response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return response;
            }
            ApiError::Forbidden(detail) => Problem::new(StatusCode::FORBIDDEN, detail, None),
            ApiError::RateLimited { retry_after_s } => {
                let detail = format!("this key's request rate is spent: retry after {retry_after_s} s");
                let mut response = Problem::new(StatusCode::TOO_MANY_REQUESTS, detail, None).into_response();
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s));
                return response;
            }
            ApiError::QuotaExceeded(detail) => {
                Problem::of_kind(StatusCode::CONFLICT, "quota-exceeded", detail, Some("namespace".into()))
            }
            ApiError::Database(e) => {
                tracing::error!(error = %e, "database error");
                Problem::new(StatusCode::INTERNAL_SERVER_ERROR, "the request could not be completed; try again", None)
            }
        };
        problem.into_response()
    }
}
