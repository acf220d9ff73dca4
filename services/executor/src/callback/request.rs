//! One callback: its turns taken, the signed request sent, the answer read.

use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::Utc;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use hyper::{Method, Request, Uri};
use punctual_shared::fan_out::{ADDRESS_HEADER, SHARD_HEADER};
use punctual_shared::sealed::{Purpose, SecretKeys};
use punctual_shared::task::{DeferReason, StartedTask};
use punctual_shared::timer::is_reserved_http_header;
use punctual_shared::webhook_signature::{signature_header, SigningSecret};
use serde_json::Value;

use super::attempt::{parse_retry_after, Attempt};
use super::caller::{Caller, HttpClient};
use super::EXCERPT_BYTES;
use crate::guarded_resolver::refusal;
use crate::turns::HeldBack;

/// Runs the task's callback, when its target has room for another call. Never fails: every
/// error is an attempt that failed.
pub async fn call(caller: &Caller, task: &StartedTask) -> Attempt {
    let (uri, target) = match task.action.url_for(task.shard.index).map(|raw| caller.parse(raw)) {
        Some(Ok(parsed)) => parsed,
        Some(Err(e)) => return Attempt::failed(format!("invalid http_url: {e}"), false, Duration::ZERO),
        None => return Attempt::failed("timer has no http_url".to_owned(), false, Duration::ZERO),
    };
    let namespace = &task.action.namespace;
    let chosen = match &task.address {
        Some(address) => caller.client_to(namespace, address),
        None => caller.client_for(namespace),
    };
    let (guard, client) = match chosen {
        Ok(chosen) => chosen,
        Err(e) => return Attempt::failed(e, true, Duration::ZERO),
    };
    // A literal address is never resolved, so the resolver cannot check it: here.
    if let Err(refused) = guard.check_literal(uri.host().unwrap_or_default()) {
        return Attempt::failed(refused.to_string(), false, Duration::ZERO);
    }
    if let Some(pause) = caller.failing.as_ref().and_then(|f| f.paused(namespace, &target.key)) {
        return Attempt::paused(&pause);
    }
    let namespace_state = caller.namespaces.state(namespace);
    let (limits, namespace_turns) = (namespace_state.limits, &namespace_state.turns);
    let _namespace_turn = match namespace_turns.take(caller.limits.turn_wait, &caller.waiting).await {
        Ok(permit) => permit,
        Err(held) => return Attempt::held_back(namespace_turns.limit(), held.wait, DeferReason::NamespaceLimit),
    };
    let turn = match caller.turn(target.clone()).await {
        Ok(turn) => turn,
        Err(HeldBack { wait, asked: true }) => return Attempt::asked_to_wait(wait),
        Err(held) => return Attempt::held_back(target.turns.limit(), held.wait, DeferReason::TargetLimit),
    };
    let started = Instant::now();
    let timeout_ms = task.action.http_timeout_ms.max(1).min(limits.max_callback_timeout_ms as i32);
    let timeout = Duration::from_millis(timeout_ms.max(1) as u64);
    let secrets = caller.signing.get(&task.action.namespace);
    let answer =
        match tokio::time::timeout(timeout, request(&client, uri, task, secrets.as_deref(), caller.signing.keys()))
            .await
        {
            Ok(answer) => answer,
            Err(_) => Err((format!("timed out: no answer within {} ms", timeout.as_millis()), true)),
        };
    let ended = Instant::now();
    let took = ended - started;
    // No answer in time, no connection, or an answer that says so.
    let strained = match &answer {
        Ok((status, _, _)) => *status >= 500 || *status == 429,
        Err((_, retryable)) => *retryable,
    };
    turn.end(ended, took, strained);
    namespace_turns.record(ended, took.as_micros().min(u128::from(u64::MAX)) as u64);
    let attempt = match answer {
        Ok((status, excerpt, retry_after)) => Attempt::from_status(status, excerpt, retry_after, took),
        Err((error, retryable)) => Attempt::failed(error, retryable, took),
    };
    // A target asking to be called later gets no call before then: the calls meanwhile are
    // held back, spread over the turns after it.
    let asked_to_wait = attempt.retry_after.filter(|_| matches!(attempt.http_status, Some(429 | 503)));
    if let Some(wait) = asked_to_wait {
        target.turns.ask_to_wait(wait);
    }
    if let Some(failing) = &caller.failing {
        // Asking to wait is neither failing nor answering.
        if asked_to_wait.is_none() {
            if let Some(reason) = failing.record(namespace, &target.key, attempt.error.as_deref()) {
                failing.pause(namespace, &target.key, &reason).await;
            }
        }
    }
    attempt
}

/// The user agent of every callback.
const PUNCTUAL_USER_AGENT: &str = concat!("punctual/", env!("CARGO_PKG_VERSION"));

/// Ok: status, body excerpt, Retry-After. Err: what went wrong, and whether it may pass.
/// The caller bounds it by the timer's timeout, the answer's body included.
async fn request(
    client: &HttpClient,
    uri: Uri,
    task: &StartedTask,
    secrets: Option<&[SigningSecret]>,
    keys: &SecretKeys,
) -> Result<(u16, String, Option<Duration>), (String, bool)> {
    let method = Method::from_bytes(task.action.http_method.as_bytes()).map_err(|e| (e.to_string(), false))?;
    let mut request = Request::builder().method(method).uri(uri);
    let headers = request.headers_mut().expect("a new request builder has headers");
    headers.insert(USER_AGENT, HeaderValue::from_static(PUNCTUAL_USER_AGENT));
    if let Value::Object(map) = &task.action.http_headers {
        // A row written with SQL is not checked by the API: the connection's and the
        // service's headers are never the timer's.
        for (name, value) in map.iter().filter(|(name, _)| !is_reserved_http_header(name)) {
            let value = match value.as_str().map(|v| keys.open(v, Purpose::Header)) {
                Some(Ok(opened)) => opened,
                // Never sent sealed: the target would get the ciphertext.
                Some(Err(e)) => return Err((format!("header {name:?} not sent: {e}"), false)),
                None => return Err((format!("invalid header {name:?}"), false)),
            };
            let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(&value)) else {
                return Err((format!("invalid header {name:?}"), false));
            };
            headers.insert(name, value);
        }
    }
    let identity = task.identity();
    // Also the Standard Webhooks `webhook-id`, below: built once, shared.
    let identity_header = HeaderValue::from_str(&identity).map_err(|e| (e.to_string(), false))?;
    headers.insert("idempotency-key", identity_header.clone());
    headers.insert("x-punctual-attempt", HeaderValue::from(task.attempt));
    if task.shard.is_fanned_out() {
        headers.insert(SHARD_HEADER, HeaderValue::from_str(&task.shard.header_value()).expect("digits and a slash"));
    }
    if let Some(address) = &task.address {
        headers.insert(ADDRESS_HEADER, HeaderValue::from_str(address).map_err(|e| (e.to_string(), false))?);
    }
    // A timer's own traceparent header, if it sets one, is kept.
    if !headers.contains_key("traceparent") {
        // The run's exported span when spans are exported (so the target's spans join
        // it), else an id of the attempt's own.
        let span_id =
            punctual_runtime::otlp::current_span_id().unwrap_or_else(punctual_shared::trace_context::new_span_id);
        let traceparent = punctual_shared::trace_context::traceparent(task.timer_id, task.scheduled_at, span_id);
        headers.insert("traceparent", HeaderValue::from_str(&traceparent).expect("hex digits and dashes"));
    }
    let body = match &task.action.http_body {
        None | Some(Value::Null) => Bytes::new(),
        Some(Value::String(text)) => Bytes::from(text.clone()),
        Some(json) => {
            if !headers.contains_key(CONTENT_TYPE) {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            }
            Bytes::from(json.to_string())
        }
    };
    // Standard Webhooks: the identity, the time of this attempt, and the signature of both
    // with the exact body sent, per secret of the namespace.
    let timestamp = Utc::now().timestamp();
    headers.insert("webhook-id", identity_header);
    headers.insert("webhook-timestamp", HeaderValue::from(timestamp));
    if let Some(signature) = signature_header(secrets.unwrap_or_default(), &identity, timestamp, &body) {
        headers.insert("webhook-signature", HeaderValue::from_str(&signature).expect("base64 and spaces"));
    }
    let request = request.body(Full::new(body)).map_err(|e| (e.to_string(), false))?;
    let response = client.request(request).await.map_err(|e| match refusal(&e) {
        Some(refused) => {
            tracing::info!(host = %refused.host, addresses = ?refused.addresses, "a callback's target refused");
            (refused.to_string(), false)
        }
        None => (describe(&e), true),
    })?;
    let status = response.status().as_u16();
    let retry_after = response.headers().get(RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(parse_retry_after);
    let mut body = response.into_body();
    let mut excerpt = Vec::new();
    while excerpt.len() < EXCERPT_BYTES {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(chunk) = frame.data_ref() {
                    excerpt.extend_from_slice(&chunk[..chunk.len().min(EXCERPT_BYTES - excerpt.len())]);
                }
            }
            None => break,
            // The status is what counts; a body cut short is kept as far as it came.
            Some(Err(_)) => break,
        }
    }
    Ok((status, String::from_utf8_lossy(&excerpt).into_owned(), retry_after))
}

fn describe(e: &hyper_util::client::legacy::Error) -> String {
    let kind = if e.is_connect() { "connection failed" } else { "request failed" };
    // The error's Display omits the cause chain; the cause says what went wrong.
    let mut text = format!("{kind}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}
