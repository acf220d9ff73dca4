//! The API's OpenAPI 3.1 document, generated from the handlers' `#[utoipa::path]`s and the
//! request and answer types: served at `/openapi.json` and committed as
//! `docs/openapi.json` (a test fails when the two differ).

use axum::routing::get;
use axum::{Json, Router};
use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi as Document, RefOr};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;

use crate::error::Problem;
use crate::state::AppState;
use crate::{
    api_keys, audit, bulk_actions, dead_tasks, live_stats, me, namespace_runs, namespace_stats, namespaces,
    operator_actions, paused_targets, signing_secrets, timer_occurrence, timer_runs, timers,
};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Punctual admin API",
        description = "Timers (one-shot, delay, interval, cron), their runs and dead tasks, signing secrets and \
                       API keys. Every error is application/problem+json.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    modifiers(&BearerKey),
    // Named by a query parameter only, which utoipa does not collect.
    components(schemas(punctual_shared::schedule::KindName)),
    security(("api_key" = [])),
    tags(
        (name = "timers", description = "Create, read, change and delete timers"),
        (name = "operations", description = "Run timers now, backfill, preview schedules, bulk changes"),
        (name = "runs", description = "Occurrences and their attempts; dead tasks"),
        (name = "namespaces", description = "Per-namespace limits, paused targets, stats and signing secrets"),
        (name = "keys", description = "API keys (admin keys only)"),
    )
)]
struct ApiDoc;

/// `Authorization: Bearer <key>` on every operation.
struct BearerKey;

impl Modify for BearerKey {
    fn modify(&self, doc: &mut Document) {
        let components = doc.components.get_or_insert_with(Default::default);
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some("An API key, `pct_` and 43 characters"))
            .build();
        components.add_security_scheme("api_key", SecurityScheme::Http(scheme));
    }
}

/// The error answers every operation may give, besides its own.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum Errors {
    /// The request is malformed: not JSON, a field of the wrong type, an unknown field.
    #[response(status = 400, content_type = "application/problem+json")]
    Malformed(Problem),
    /// No API key, or not a valid one.
    #[response(status = 401, content_type = "application/problem+json")]
    Unauthenticated(Problem),
    /// The key's role does not allow this, or the namespace named is not the key's.
    #[response(status = 403, content_type = "application/problem+json")]
    Forbidden(Problem),
    /// A field's value is not acceptable.
    #[response(status = 422, content_type = "application/problem+json")]
    Invalid(Problem),
    /// The key's request rate is spent: try again after `Retry-After` seconds.
    #[response(status = 429, content_type = "application/problem+json")]
    RateLimited(Problem),
}

/// The answer for an unknown timer id, or one of a namespace the key does not see.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum UnknownTimer {
    /// No such timer (or not the key's).
    #[response(status = 404, content_type = "application/problem+json")]
    NotFound(Problem),
}

/// The routes of the API and their document, without state.
pub fn routes() -> (Router<AppState>, Document) {
    let (router, mut document) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(timers::routes())
        .merge(timer_runs::routes())
        .merge(timer_occurrence::routes())
        .merge(operator_actions::routes())
        .merge(bulk_actions::routes())
        .merge(dead_tasks::routes())
        .merge(namespace_runs::routes())
        .merge(namespace_stats::routes())
        .merge(live_stats::routes())
        .merge(namespaces::routes())
        .merge(paused_targets::routes())
        .merge(me::routes())
        .merge(audit::routes())
        .merge(signing_secrets::routes())
        .merge(api_keys::routes())
        .split_for_parts();
    link_created_timers(&mut document);
    (router, document)
}

/// Links from a created timer to every operation on `/v1/timers/{id}…`, passing its id:
/// what a client (and a stateful test) follows from `POST /v1/timers`.
fn link_created_timers(document: &mut Document) {
    let mut targets = Vec::new();
    for (path, item) in &document.paths.paths {
        if !path.starts_with("/v1/timers/{id}") {
            continue;
        }
        for op in [&item.get, &item.post, &item.patch, &item.delete].into_iter().flatten() {
            targets.extend(op.operation_id.clone());
        }
    }
    let created = document
        .paths
        .paths
        .get_mut("/v1/timers")
        .and_then(|item| item.post.as_mut())
        .and_then(|op| op.responses.responses.get_mut("201"));
    if let Some(RefOr::T(created)) = created {
        for operation_id in targets {
            let link = LinkBuilder::new().operation_id(&operation_id).parameter("id", "$response.body#/id").build();
            created.links.insert(operation_id, RefOr::T(link));
        }
    }
}

/// The API's document.
pub fn document() -> Document {
    routes().1
}

/// `GET /openapi.json`, which needs no key.
pub fn router(document: Document) -> Router {
    let document = std::sync::Arc::new(document);
    Router::new().route("/openapi.json", get(move || async move { Json(document.as_ref().clone()) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/openapi.json is this document; `PUNCTUAL_UPDATE_OPENAPI=1 cargo test -p
    /// punctual-admin openapi` writes it anew.
    #[test]
    fn docs_openapi_json_is_the_generated_document() {
        let generated = document().to_pretty_json().expect("the document serializes") + "\n";
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.json");
        if std::env::var_os("PUNCTUAL_UPDATE_OPENAPI").is_some() {
            std::fs::write(path, &generated).expect("writing docs/openapi.json");
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == generated,
            "docs/openapi.json differs from the API's document: run PUNCTUAL_UPDATE_OPENAPI=1 cargo test -p \
             punctual-admin openapi, and commit it"
        );
    }

    #[test]
    fn every_operation_is_documented_with_its_errors() {
        let doc = document();
        let mut operations = 0;
        let mut ids = Vec::new();
        for (path, item) in &doc.paths.paths {
            for (method, op) in [
                ("get", &item.get),
                ("post", &item.post),
                ("patch", &item.patch),
                ("delete", &item.delete),
                ("put", &item.put),
            ] {
                let Some(op) = op else { continue };
                operations += 1;
                for status in ["401", "403", "429"] {
                    assert!(op.responses.responses.contains_key(status), "{method} {path} lacks {status}");
                }
                ids.push(op.operation_id.clone().unwrap_or_else(|| panic!("{method} {path} has no operation id")));
            }
        }
        assert!(operations >= 23, "{operations} operations");
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), operations, "operation ids are unique: {ids:?}");
    }

    /// A generator of clients follows every `$ref`: each must name a schema the document has.
    #[test]
    fn every_reference_names_a_schema_of_the_document() {
        fn refs(value: &serde_json::Value, found: &mut Vec<String>) {
            match value {
                serde_json::Value::Object(map) => {
                    if let Some(serde_json::Value::String(r)) = map.get("$ref") {
                        found.push(r.clone());
                    }
                    map.values().for_each(|v| refs(v, found));
                }
                serde_json::Value::Array(items) => items.iter().for_each(|v| refs(v, found)),
                _ => {}
            }
        }
        let doc = serde_json::to_value(document()).expect("the document serializes");
        let mut found = Vec::new();
        refs(&doc, &mut found);
        assert!(!found.is_empty());
        for r in found {
            let name = r.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("{r}: not a schema"));
            assert!(doc["components"]["schemas"].get(name).is_some(), "{r} names no schema of the document");
        }
    }
}
