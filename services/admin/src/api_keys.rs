//! `/v1/keys`: the API keys, for admin keys only. A key is shown once, when it is created;
//! listings show its id, name, a short prefix, role and namespaces. Revoking keeps the row
//! and refuses the key from the next request on.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use chrono::{DateTime, Utc};
use punctual_shared::api_key::{self, ApiKey, Role};
use punctual_shared::audit::AuditAction;
use punctual_shared::timer::{check_namespace, FieldError};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::audit;
use crate::auth::Caller;
use crate::error::{ApiError, Problem};
use crate::openapi::Errors;
use crate::request::parse_json;
use crate::state::AppState;

/// Most namespaces one key lists.
pub const MAX_KEY_NAMESPACES: usize = 100;
const MAX_KEY_NAME_CHARS: usize = 256;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_keys, create_key)).routes(routes!(revoke_key))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateKey {
    name: String,
    role: Role,
    /// The namespaces a `read` or `write` key sees; none for an `admin` key.
    #[serde(default)]
    namespaces: Vec<String>,
}

/// A key as created: the only answer that shows it.
#[derive(Debug, Serialize, ToSchema)]
struct CreatedKey {
    id: Uuid,
    name: String,
    key: String,
    role: Role,
    namespaces: Vec<String>,
    created_at: DateTime<Utc>,
}

/// A key as listed: never the key itself.
#[derive(Debug, Serialize, sqlx::FromRow, ToSchema)]
struct ListedKey {
    id: Uuid,
    name: String,
    /// `pct_` and the key's first characters.
    prefix: String,
    role: Role,
    namespaces: Vec<String>,
    created_at: DateTime<Utc>,
    revoked_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, ToSchema)]
struct KeyList {
    keys: Vec<ListedKey>,
}

fn check(request: &CreateKey) -> Result<(), ApiError> {
    let name_chars = request.name.chars().count();
    if name_chars == 0 || name_chars > MAX_KEY_NAME_CHARS || request.name.chars().any(char::is_control) {
        return Err(FieldError::new(
            "name",
            format!("must be 1 to {MAX_KEY_NAME_CHARS} characters, without control characters"),
        )
        .into());
    }
    match (request.role, request.namespaces.len()) {
        (Role::Admin, 0) => {}
        (Role::Admin, _) => {
            return Err(FieldError::new("namespaces", "an admin key sees every namespace: list none").into())
        }
        (_, 0) => return Err(FieldError::new("namespaces", "a read or write key lists its namespaces").into()),
        (_, n) if n > MAX_KEY_NAMESPACES => {
            return Err(FieldError::new("namespaces", format!("at most {MAX_KEY_NAMESPACES}")).into())
        }
        _ => {}
    }
    for (i, namespace) in request.namespaces.iter().enumerate() {
        check_namespace(namespace).map_err(|e| FieldError::new(format!("namespaces[{i}]"), e.message))?;
    }
    Ok(())
}

/// A new API key: the only answer that shows it.
#[utoipa::path(
    post, path = "/v1/keys", tag = "keys", request_body = CreateKey,
    responses((status = 201, description = "Created", body = CreatedKey), Errors)
)]
async fn create_key(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<CreatedKey>), ApiError> {
    caller.require(Role::Admin)?;
    let mut request: CreateKey = parse_json(&headers, &body)?;
    check(&request)?;
    request.namespaces.sort();
    request.namespaces.dedup();
    let key = ApiKey::generate();
    // A new random key's digest is new: a conflict would be a broken generator.
    let (id, created_at) = api_key::store(&state.pool, &request.name, &key, request.role, &request.namespaces)
        .await?
        .ok_or(ApiError::Database(sqlx::Error::RowNotFound))?;
    tracing::info!(key_id = %id, role = request.role.as_str(), by = ?caller.key_id, "API key created");
    let detail = serde_json::json!({"name": request.name, "role": request.role, "namespaces": request.namespaces});
    audit::record(&state, &caller, None, AuditAction::KeyCreated, Some(id.to_string()), detail).await;
    Ok((
        StatusCode::CREATED,
        Json(CreatedKey {
            id,
            name: request.name,
            key: key.expose().to_owned(),
            role: request.role,
            namespaces: request.namespaces,
            created_at,
        }),
    ))
}

/// Every key: id, name, prefix, role, namespaces; never the key.
#[utoipa::path(
    get, path = "/v1/keys", tag = "keys",
    responses((status = 200, description = "The keys", body = KeyList), Errors)
)]
async fn list_keys(State(state): State<AppState>, caller: Caller) -> Result<Json<KeyList>, ApiError> {
    caller.require(Role::Admin)?;
    let keys = sqlx::query_as!(
        ListedKey,
        r#"SELECT id, name, prefix, role AS "role: Role", namespaces, created_at, revoked_at
             FROM api_keys ORDER BY created_at, id"#
    )
    .fetch_all(&state.pool)
    .await?;
    Ok(Json(KeyList { keys }))
}

/// Revokes a key, from its next request on; revoking a revoked key again changes nothing.
#[utoipa::path(
    delete, path = "/v1/keys/{id}", tag = "keys",
    params(("id" = Uuid, Path, description = "The key's id")),
    responses(
        (status = 204, description = "Revoked"),
        (status = 404, description = "No such key", body = Problem, content_type = "application/problem+json"),
        Errors
    )
)]
async fn revoke_key(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    caller.require(Role::Admin)?;
    let unknown = || ApiError::NotFound(format!("no API key with id {id}"));
    let Ok(key_id) = Uuid::parse_str(&id) else {
        return Err(unknown());
    };
    if !punctual_shared::api_key::revoke(&state.pool, key_id).await? {
        return Err(unknown());
    }
    tracing::info!(key_id = %key_id, by = ?caller.key_id, "API key revoked");
    audit::record(&state, &caller, None, AuditAction::KeyRevoked, Some(key_id.to_string()), serde_json::Value::Null)
        .await;
    Ok(StatusCode::NO_CONTENT)
}
