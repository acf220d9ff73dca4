//! The HTTP callback action.

use std::time::{Duration, Instant};

use punctual_shared::task::{Outcome, StartedTask, TaskStatus};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use serde_json::Value;

/// How much of a response body is kept with the task.
pub const EXCERPT_BYTES: usize = 1024;

/// One client for every callback: connections are pooled and kept alive per host.
pub fn client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(256)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("punctual/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Runs the task's callback and says how it ended. Never fails: every error is an outcome.
pub async fn call(client: &reqwest::Client, task: &StartedTask) -> Outcome {
    let started = Instant::now();
    let (http_status, response_excerpt, error) = match request(client, task).await {
        Ok((status, excerpt)) => {
            let error =
                (!(200..300).contains(&status)).then(|| format!("target answered HTTP {status}"));
            (Some(status as i16), Some(excerpt), error)
        }
        Err(e) => (None, None, Some(e)),
    };
    Outcome {
        task_id: task.id,
        status: if error.is_none() {
            TaskStatus::Succeeded
        } else {
            TaskStatus::Failed
        },
        http_status,
        response_excerpt,
        error,
        duration_ms: started.elapsed().as_millis().min(i32::MAX as u128) as i32,
    }
}

async fn request(client: &reqwest::Client, task: &StartedTask) -> Result<(u16, String), String> {
    let url = task.http_url.as_deref().ok_or("timer has no http_url")?;
    let method =
        reqwest::Method::from_bytes(task.http_method.as_bytes()).map_err(|e| e.to_string())?;
    let mut headers = HeaderMap::new();
    if let Value::Object(map) = &task.http_headers {
        for (name, value) in map {
            let (Ok(name), Some(Ok(value))) = (
                HeaderName::from_bytes(name.as_bytes()),
                value.as_str().map(HeaderValue::from_str),
            ) else {
                return Err(format!("invalid header {name:?}"));
            };
            headers.insert(name, value);
        }
    }
    let identity = task.identity();
    headers.insert(
        "idempotency-key",
        HeaderValue::from_str(&identity).map_err(|e| e.to_string())?,
    );
    headers.insert("x-punctual-attempt", HeaderValue::from(task.attempt));
    let mut request = client
        .request(method, url)
        .timeout(Duration::from_millis(task.http_timeout_ms.max(1) as u64));
    match &task.http_body {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => request = request.body(text.clone()),
        Some(json) => {
            if !headers.contains_key(CONTENT_TYPE) {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            }
            request = request.body(json.to_string());
        }
    }
    let mut response = request.headers(headers).send().await.map_err(describe)?;
    let status = response.status().as_u16();
    let mut excerpt = Vec::new();
    while excerpt.len() < EXCERPT_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                excerpt.extend_from_slice(&chunk[..chunk.len().min(EXCERPT_BYTES - excerpt.len())])
            }
            Ok(None) => break,
            // The status is what counts; a body cut short is kept as far as it came.
            Err(_) => break,
        }
    }
    Ok((status, String::from_utf8_lossy(&excerpt).into_owned()))
}

fn describe(e: reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    // reqwest's Display omits the cause chain; the cause says what went wrong.
    let mut text = format!("{kind}: {e}");
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}
