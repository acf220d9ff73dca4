//! The HTTP callback action, and what its answer means for the task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use prometheus::IntGauge;
use punctual_shared::task::{Next, Outcome, StartedTask};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use reqwest::Url;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How much of a response body is kept with the task.
pub const EXCERPT_BYTES: usize = 1024;
/// The longest `Retry-After` honoured; a longer one is cut to this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Makes the callbacks: one HTTP client for all, and at most `per_target` calls at once to
/// each target (scheme, host and port), the others waiting their turn.
///
/// Without a limit, an executor catching up on a backlog had a call in flight for almost
/// every task it held (up to `PUNCTUAL_MAX_IN_FLIGHT`, thousands), each on a connection of
/// its own, kept open afterwards by the pool: at 15,000 fires/s offered, its memory grew
/// from 178 to 300 MB within a minute (peak 361 MB), against 86 to 142 MB (peak 169 MB) with
/// 512 (docs/BENCHMARKS.md, item 12). A target sees at most `per_target` connections from
/// an executor, as from a connection-limited proxy (Envoy's default limit is 1,024).
pub struct Caller {
    client: reqwest::Client,
    per_target: usize,
    /// One entry per target called since the start; a few hundred bytes each.
    targets: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Calls waiting for a turn (`punctual_callbacks_waiting`).
    waiting: IntGauge,
}

impl Caller {
    /// The client keeps as many idle connections per target as there can be calls at once:
    /// with fewer, every burst above the pool's size opens connections that are closed again
    /// right after, and connect/close becomes the executor's main cost (measured: a third of
    /// its CPU at 8,000 calls/s with 256 idle connections and 2,000 calls).
    pub fn new(per_target: usize, waiting: IntGauge) -> reqwest::Result<Self> {
        let client = reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(per_target)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("punctual/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self { client, per_target: per_target.max(1), targets: Mutex::new(HashMap::new()), waiting })
    }

    /// A turn to call `url`'s target; waits while `per_target` calls to it are in flight.
    async fn turn(&self, url: &Url) -> OwnedSemaphorePermit {
        let target =
            format!("{}://{}:{}", url.scheme(), url.host_str().unwrap_or(""), url.port_or_known_default().unwrap_or(0));
        let calls = {
            let mut targets = self.targets.lock().expect("targets lock");
            targets.entry(target).or_insert_with(|| Arc::new(Semaphore::new(self.per_target))).clone()
        };
        if let Ok(turn) = calls.clone().try_acquire_owned() {
            return turn;
        }
        self.waiting.inc();
        let turn = calls.acquire_owned().await.expect("semaphore never closed");
        self.waiting.dec();
        turn
    }
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub http_status: Option<u16>,
    pub excerpt: Option<String>,
    /// None on success.
    pub error: Option<String>,
    /// Worth another attempt: connection errors, timeouts, 5xx, 408 and 429.
    pub retryable: bool,
    /// The target's own `Retry-After`, in seconds or as an HTTP date.
    pub retry_after: Option<Duration>,
    pub duration: Duration,
}

impl Attempt {
    /// An attempt that ended in `error`, without an answer from the target.
    pub fn failed(error: String, retryable: bool, duration: Duration) -> Self {
        Attempt { http_status: None, excerpt: None, error: Some(error), retryable, retry_after: None, duration }
    }

    /// An attempt that succeeded without an answer to keep (e.g. a published message).
    pub fn succeeded(duration: Duration) -> Self {
        Attempt { http_status: None, excerpt: None, error: None, retryable: false, retry_after: None, duration }
    }

    fn from_status(status: u16, excerpt: String, retry_after: Option<Duration>, duration: Duration) -> Self {
        let ok = (200..300).contains(&status);
        Attempt {
            http_status: Some(status),
            excerpt: Some(excerpt),
            error: (!ok).then(|| format!("target answered HTTP {status}")),
            retryable: status >= 500 || status == 408 || status == 429,
            retry_after,
            duration,
        }
    }

    /// Decides what becomes of the task: success; another attempt after the policy's
    /// backoff (or the target's Retry-After, when longer); or dead.
    pub fn into_outcome(self, task: &StartedTask, jitter: f64) -> Outcome {
        let policy = task.retry_policy();
        let next = if self.error.is_none() {
            Next::Succeeded
        } else if self.retryable && policy.has_attempt_after(task.attempt) {
            let wait = policy.backoff(task.attempt, jitter).max(self.retry_after.unwrap_or_default());
            Next::Retry { due_at: Utc::now() + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::zero()) }
        } else {
            Next::Dead
        };
        Outcome {
            task_id: task.id,
            attempt: task.attempt,
            started_at: task.started_at,
            next,
            http_status: self.http_status.map(|s| s as i16),
            response_excerpt: self.excerpt,
            error: self.error,
            duration_ms: self.duration.as_millis().min(i32::MAX as u128) as i32,
        }
    }
}

/// Runs the task's callback, when its target has room for another call. Never fails: every
/// error is an attempt that failed.
pub async fn call(caller: &Caller, task: &StartedTask) -> Attempt {
    let url = match task.http_url.as_deref().map(Url::parse) {
        Some(Ok(url)) => url,
        Some(Err(e)) => return Attempt::failed(format!("invalid http_url: {e}"), false, Duration::ZERO),
        None => return Attempt::failed("timer has no http_url".to_owned(), false, Duration::ZERO),
    };
    let _turn = caller.turn(&url).await;
    let started = Instant::now();
    match request(&caller.client, url, task).await {
        Ok((status, excerpt, retry_after)) => Attempt::from_status(status, excerpt, retry_after, started.elapsed()),
        Err((error, retryable)) => Attempt::failed(error, retryable, started.elapsed()),
    }
}

/// Ok: status, body excerpt, Retry-After. Err: what went wrong, and whether it may pass.
async fn request(
    client: &reqwest::Client,
    url: Url,
    task: &StartedTask,
) -> Result<(u16, String, Option<Duration>), (String, bool)> {
    let method = reqwest::Method::from_bytes(task.http_method.as_bytes()).map_err(|e| (e.to_string(), false))?;
    let mut headers = HeaderMap::new();
    if let Value::Object(map) = &task.http_headers {
        for (name, value) in map {
            let (Ok(name), Some(Ok(value))) =
                (HeaderName::from_bytes(name.as_bytes()), value.as_str().map(HeaderValue::from_str))
            else {
                return Err((format!("invalid header {name:?}"), false));
            };
            headers.insert(name, value);
        }
    }
    let identity = task.identity();
    headers.insert("idempotency-key", HeaderValue::from_str(&identity).map_err(|e| (e.to_string(), false))?);
    headers.insert("x-punctual-attempt", HeaderValue::from(task.attempt));
    let mut request = client.request(method, url).timeout(Duration::from_millis(task.http_timeout_ms.max(1) as u64));
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
    let mut response = request.headers(headers).send().await.map_err(|e| (describe(&e), true))?;
    let status = response.status().as_u16();
    let retry_after = response.headers().get(RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(parse_retry_after);
    let mut excerpt = Vec::new();
    while excerpt.len() < EXCERPT_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => excerpt.extend_from_slice(&chunk[..chunk.len().min(EXCERPT_BYTES - excerpt.len())]),
            Ok(None) => break,
            // The status is what counts; a body cut short is kept as far as it came.
            Err(_) => break,
        }
    }
    Ok((status, String::from_utf8_lossy(&excerpt).into_owned(), retry_after))
}

/// `Retry-After: <seconds>` or `Retry-After: <HTTP date>`.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let wait = if let Ok(seconds) = value.trim().parse::<u64>() {
        Duration::from_secs(seconds)
    } else {
        let at = chrono::DateTime::parse_from_rfc2822(value.trim()).ok()?;
        (at.with_timezone(&Utc) - Utc::now()).to_std().unwrap_or_default()
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

fn describe(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    // reqwest's Display omits the cause chain; the cause says what went wrong.
    let mut text = format!("{kind}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_answers_are_retried() {
        let d = Duration::ZERO;
        for (status, retryable) in
            [(500, true), (503, true), (429, true), (408, true), (404, false), (400, false), (422, false)]
        {
            assert_eq!(Attempt::from_status(status, String::new(), None, d).retryable, retryable, "{status}");
        }
        let ok = Attempt::from_status(204, String::new(), None, d);
        assert_eq!(ok.error, None);
    }

    fn task_calling(url: &str) -> StartedTask {
        StartedTask {
            id: 1,
            timer_id: uuid::Uuid::new_v4(),
            scheduled_at: Utc::now(),
            attempt: 1,
            started_at: Utc::now(),
            action_kind: "http".into(),
            http_method: "POST".into(),
            http_url: Some(url.into()),
            http_headers: Value::Object(Default::default()),
            http_body: None,
            http_timeout_ms: 10_000,
            kafka_topic: None,
            kafka_key: None,
            kafka_headers: Value::Null,
            kafka_value: None,
            retry_max_attempts: 1,
            retry_initial_ms: 1_000,
            retry_multiplier: 2.0,
            retry_max_ms: 60_000,
        }
    }

    #[tokio::test]
    async fn calls_to_a_busy_target_wait_their_turn_and_other_targets_do_not() {
        use punctual_testkit::sink::{Behaviour, Sink};
        let (busy, other) = (Sink::start().await, Sink::start().await);
        busy.behave("/slow", Behaviour::slow(Duration::from_secs(2)));
        let caller = Arc::new(Caller::new(2, IntGauge::new("waiting", "test").unwrap()).unwrap());
        let calls: Vec<_> = (0..5)
            .map(|_| {
                let (caller, task) = (caller.clone(), task_calling(&busy.url("/slow")));
                tokio::spawn(async move { call(&caller, &task).await })
            })
            .collect();
        while busy.calls().len() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Another target is called at once, while the busy one has its two calls.
        let elsewhere = call(&caller, &task_calling(&other.url("/quick"))).await;
        assert_eq!(elsewhere.http_status, Some(200));
        assert_eq!(busy.calls().len(), 2, "the other three wait for a turn");
        for c in calls {
            assert_eq!(c.await.unwrap().http_status, Some(200));
        }
        assert_eq!(busy.calls().len(), 5);
    }

    #[tokio::test]
    async fn an_unparsable_url_fails_for_good_without_a_call() {
        let caller = Caller::new(2, IntGauge::new("waiting", "test").unwrap()).unwrap();
        let attempt = call(&caller, &task_calling("not a url")).await;
        assert!(!attempt.retryable);
        assert!(attempt.error.unwrap().starts_with("invalid http_url"));
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("99999999"), Some(MAX_RETRY_AFTER));
        let in_a_minute = (Utc::now() + chrono::Duration::seconds(60)).to_rfc2822();
        let wait = parse_retry_after(&in_a_minute).unwrap();
        assert!(wait > Duration::from_secs(55) && wait <= Duration::from_secs(60), "{wait:?}");
        assert_eq!(parse_retry_after("soon"), None);
    }
}
