//! API errors, answered as problems ([`Problem`]: `application/problem+json`) naming the
//! field at fault. Clients never see raw database errors: those are logged and answered
//! with a generic 500.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
pub use punctual_shared::problem::Problem;
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
            ApiError::Database(e) => {
                tracing::error!(error = %e, "database error");
                Problem::new(StatusCode::INTERNAL_SERVER_ERROR, "the request could not be completed; try again", None)
            }
        };
        problem.into_response()
    }
}
