//! `GET /v1/me`: the calling key as the API sees it (name, role, namespaces), so that a
//! client (the console) offers only what the key may do.

use axum::Json;
use punctual_shared::api_key::Role;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::openapi::Errors;
use crate::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(me))
}

/// The calling key.
#[derive(Debug, Serialize, ToSchema)]
struct Me {
    /// None when authentication is off.
    id: Option<Uuid>,
    name: String,
    role: Role,
    /// The namespaces the key sees; null for an admin key, which sees them all.
    namespaces: Option<Vec<String>>,
}

/// The calling key: its name, role and namespaces (any key, whatever its role).
#[utoipa::path(
    get, path = "/v1/me", tag = "keys",
    responses((status = 200, description = "The calling key", body = Me), Errors)
)]
async fn me(caller: Caller) -> Result<Json<Me>, ApiError> {
    caller.require(Role::Read)?;
    Ok(Json(Me {
        id: caller.key_id,
        name: caller.name.to_string(),
        role: caller.role,
        namespaces: caller.visible().map(<[String]>::to_vec),
    }))
}
