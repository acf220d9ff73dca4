//! Query strings with a NUL character are refused before any handler sees them: Postgres
//! stores no NUL in text, and a filter holding one failed as a database error (500).

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::Problem;

pub async fn refuse_nul(request: Request, next: Next) -> Response {
    if let Some(query) = request.uri().query() {
        let nul = url::form_urlencoded::parse(query.as_bytes()).find(|(k, v)| k.contains('\0') || v.contains('\0'));
        if let Some((name, _)) = nul {
            let name = name.replace('\0', "\\u0000");
            return Problem::new(
                StatusCode::BAD_REQUEST,
                format!("{name}: must not contain the NUL character (\\u0000)"),
                Some(name),
            )
            .into_response();
        }
    }
    next.run(request).await
}
