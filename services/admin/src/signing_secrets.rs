//! `/v1/namespaces/{namespace}/signing-secrets`: the Standard Webhooks secrets that sign a
//! namespace's callbacks. A secret is shown once, when it is created; afterwards only its
//! id, a short prefix and its age. Rotation: create a new one (calls then carry both
//! signatures, within 5 s), give it to the targets, delete the old one.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use chrono::{DateTime, Utc};
use punctual_shared::sealed::Purpose;
use punctual_shared::signing_secrets;
use punctual_shared::timer::FieldError;
use punctual_shared::webhook_signature::{SigningSecret, SECRET_PREFIX};
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
use punctual_shared::api_key::Role;
use punctual_shared::audit::AuditAction;

/// Most secrets a namespace holds at once: rotation needs two.
pub const MAX_SECRETS_PER_NAMESPACE: i64 = 5;
/// How many characters of a secret's key a listing shows, to tell secrets apart.
const SHOWN_PREFIX_CHARS: usize = 4;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_signing_secrets, create_signing_secret))
        .routes(routes!(delete_signing_secret))
}

/// `POST` body: empty (a new random secret), or `{"secret": "whsec_…"}` to bring one.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateSecret {
    secret: Option<String>,
}

/// A secret as created: the only answer that shows it.
#[derive(Debug, Serialize, ToSchema)]
struct CreatedSecret {
    id: Uuid,
    namespace: String,
    secret: String,
    created_at: DateTime<Utc>,
}

/// A secret as listed: never the secret itself.
#[derive(Debug, Serialize, ToSchema)]
struct ListedSecret {
    id: Uuid,
    namespace: String,
    /// `whsec_` and the key's first characters.
    prefix: String,
    created_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
struct SecretList {
    signing_secrets: Vec<ListedSecret>,
}

/// A new signing secret for the namespace's callbacks (the only answer that shows it); an
/// empty body makes a random one, `{"secret": "whsec_…"}` brings your own.
#[utoipa::path(
    post, path = "/v1/namespaces/{namespace}/signing-secrets", tag = "namespaces",
    request_body(content = Option<CreateSecret>, description = "Empty, or the secret to use"),
    params(("namespace" = String, Path, description = "The namespace")),
    responses(
        (status = 201, description = "Created", body = CreatedSecret),
        (status = 409, description = "The namespace holds 5 secrets already", body = Problem,
         content_type = "application/problem+json"),
        Errors
    )
)]
async fn create_signing_secret(
    State(state): State<AppState>,
    caller: Caller,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<CreatedSecret>), ApiError> {
    caller.require_namespace(&ns, Role::Write)?;
    let request: CreateSecret = if body.is_empty() { CreateSecret::default() } else { parse_json(&headers, &body)? };
    let secret = match request.secret {
        Some(given) => given.parse::<SigningSecret>().map_err(|e| FieldError::new("secret", e.to_string()))?,
        None => SigningSecret::generate(),
    };
    let encoded = secret.encoded();
    let stored = state.secret_keys.seal(&encoded, Purpose::SigningSecret);
    let created = signing_secrets::insert(&state.pool, &ns, &stored, MAX_SECRETS_PER_NAMESPACE).await?;
    let Some((id, created_at)) = created else {
        return Err(ApiError::Conflict {
            field: None,
            detail: format!(
                "namespace {ns} holds {MAX_SECRETS_PER_NAMESPACE} signing secrets already: delete one first"
            ),
        });
    };
    audit::record(
        &state,
        &caller,
        Some(&ns),
        AuditAction::SigningSecretCreated,
        Some(id.to_string()),
        serde_json::Value::Null,
    )
    .await;
    Ok((StatusCode::CREATED, Json(CreatedSecret { id, namespace: ns, secret: encoded, created_at })))
}

/// The namespace's signing secrets: ids and prefixes, never the secrets.
#[utoipa::path(
    get, path = "/v1/namespaces/{namespace}/signing-secrets", tag = "namespaces",
    params(("namespace" = String, Path, description = "The namespace")),
    responses((status = 200, description = "The secrets", body = SecretList), Errors)
)]
async fn list_signing_secrets(
    State(state): State<AppState>,
    caller: Caller,
    Path(ns): Path<String>,
) -> Result<Json<SecretList>, ApiError> {
    caller.require_namespace(&ns, Role::Read)?;
    let rows = sqlx::query!(
        "SELECT id, namespace, secret, created_at FROM signing_secrets WHERE namespace = $1 ORDER BY created_at, id",
        ns
    )
    .fetch_all(&state.pool)
    .await?;
    let shown = SECRET_PREFIX.len() + SHOWN_PREFIX_CHARS;
    let signing_secrets = rows
        .into_iter()
        .map(|row| {
            // A secret that does not open (sealed with a key no longer listed) shows no prefix.
            let opened = state.secret_keys.open(&row.secret, Purpose::SigningSecret).unwrap_or_default();
            let prefix = format!("{}…", opened.get(..shown).unwrap_or(SECRET_PREFIX));
            ListedSecret { id: row.id, namespace: row.namespace, prefix, created_at: row.created_at }
        })
        .collect();
    Ok(Json(SecretList { signing_secrets }))
}

/// Deletes a signing secret: calls stop carrying its signature within 5 s.
#[utoipa::path(
    delete, path = "/v1/namespaces/{namespace}/signing-secrets/{id}", tag = "namespaces",
    params(("namespace" = String, Path, description = "The namespace"),
           ("id" = uuid::Uuid, Path, description = "The secret's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such secret in the namespace", body = Problem,
         content_type = "application/problem+json"),
        Errors
    )
)]
async fn delete_signing_secret(
    State(state): State<AppState>,
    caller: Caller,
    Path((ns, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    caller.require_namespace(&ns, Role::Write)?;
    let unknown = || ApiError::NotFound(format!("no signing secret {id} in namespace {ns}"));
    let Ok(secret_id) = Uuid::parse_str(&id) else {
        return Err(unknown());
    };
    if !signing_secrets::delete(&state.pool, &ns, secret_id).await? {
        return Err(unknown());
    }
    audit::record(&state, &caller, Some(&ns), AuditAction::SigningSecretDeleted, Some(id), serde_json::Value::Null)
        .await;
    Ok(StatusCode::NO_CONTENT)
}
