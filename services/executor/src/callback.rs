//! The HTTP callback action, and what its answer means for the task.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::Utc;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use hyper::{Method, Request, Uri};
use hyper_tls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use prometheus::IntGauge;
use punctual_shared::paused_target::target_of;
use punctual_shared::sealed::{Purpose, SecretKeys};
use punctual_shared::target_guard::TargetGuard;
use punctual_shared::task::{DeferReason, Next, Outcome, StartedTask};
use punctual_shared::timer::is_reserved_http_header;
use punctual_shared::webhook_signature::{signature_header, SigningSecret};
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;
use url::Url;

use crate::failing_targets::FailingTargets;
use crate::guarded_resolver::{refusal, GuardedResolver};
use crate::namespaces::Namespaces;
use crate::signing_keys::SigningKeys;
#[cfg(test)]
use crate::turns::MIN_HOLD_BACK;
use crate::turns::{HeldBack, Turns};

/// How much of a response body is kept with the task.
pub const EXCERPT_BYTES: usize = 1024;
/// An occurrence is deferred by its target's `Retry-After` (not counted as an attempt)
/// only while it would then be at most this late; after that, such an answer is a failed
/// attempt like any other, so that a target asking again and again cannot keep an
/// occurrence forever.
pub const DEFER_WHILE_LATE_BY: Duration = Duration::from_secs(3600);

/// The longest `Retry-After` honoured; a longer one is cut to this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Makes the callbacks: one HTTP client for all, and a limit of calls at once to each
/// target (scheme, host and port), between [`CallLimits`]' `min` and `max` (see [`Target`]),
/// the others waiting their turn.
///
/// Without a limit, an executor catching up on a backlog had a call in flight for almost
/// every task it held (up to `PUNCTUAL_MAX_IN_FLIGHT`, thousands), each on a connection of
/// its own, kept open afterwards by the pool: at 15,000 fires/s offered, its memory grew
/// from 178 to 300 MB within a minute (peak 361 MB), against 86 to 142 MB (peak 169 MB) with
/// 512 (docs/BENCHMARKS.md, item 12). A target sees at most `max` connections from an
/// executor, as from a connection-limited proxy (Envoy's default limit is 1,024).
pub struct Caller {
    client: HttpClient,
    limits: CallLimits,
    /// Which addresses calls may reach (`PUNCTUAL_CALLBACK_ALLOW`).
    guard: Arc<TargetGuard>,
    /// The clients of the namespaces whose policy opens more (`callback_allow`), each with
    /// the guard it was made with: a connection made for one namespace's private target is
    /// never reused for another's.
    namespace_clients: Mutex<HashMap<String, NamespaceClient>>,
    /// One entry per target called since the start; a few hundred bytes each.
    targets: Mutex<HashMap<String, Arc<Target>>>,
    /// URLs called lately, parsed, with their target's turns: parsing every call's URL
    /// (IDNA included) was a twentieth of the executor's own CPU at 15,000 calls/s
    /// (docs/BENCHMARKS.md, item 15). Emptied when it reaches [`MAX_PARSED_URLS`], so
    /// timers with a URL each cost a parse per call, as before, and no unbounded memory.
    parsed: Mutex<HashMap<Box<str>, ParsedUrl>>,
    /// Calls waiting for a turn (`punctual_callbacks_waiting`).
    waiting: IntGauge,
    /// Each namespace's secrets, which sign its calls.
    signing: Arc<SigningKeys>,
    /// Each namespace's limits, and the turns of its calls.
    namespaces: Arc<Namespaces>,
    /// Targets paused for a namespace, and the failures that pause them (none without).
    failing: Option<Arc<FailingTargets>>,
}

/// hyper's HTTP/1.1 client, with TLS for `https` targets.
///
/// Not reqwest, which wraps this same client: reqwest 0.12 (and 0.13) formats every
/// response's request URI as a string and parses it again as a `Url` (IDNA included), for
/// a redirect it may have followed; that was 5 % of the executor's CPU at 20,000 calls/s
/// (`perf record --call-graph dwarf`, docs/BENCHMARKS.md item 18). Callbacks follow no
/// redirects, so nothing is lost by calling hyper directly.
type HttpClient = hyper_util::client::legacy::Client<HttpsConnector<HttpConnector<GuardedResolver>>, Full<Bytes>>;

/// The HTTP client of calls that `guard` admits, keeping up to `max_idle` idle
/// connections per target.
fn http_client(guard: Arc<TargetGuard>, max_idle: usize) -> Result<HttpClient, native_tls::Error> {
    let mut http = HttpConnector::new_with_resolver(GuardedResolver::new(guard));
    // `https` URLs go through the TLS connector, which hands them to this one.
    http.enforce_http(false);
    // A callback is one small request: waiting to fill a segment only delays it.
    http.set_nodelay(true);
    let tls = native_tls::TlsConnector::new()?;
    let connector = HttpsConnector::from((http, tokio_native_tls::TlsConnector::from(tls)));
    Ok(hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(max_idle)
        .build(connector))
}

/// A namespace's own client: the allow-list it was made for, the guard (the service's and
/// that list) and the client.
type NamespaceClient = (TargetGuard, Arc<TargetGuard>, HttpClient);

/// A URL checked and parsed for the client, and its target.
type ParsedUrl = (Uri, Arc<Target>);

/// Most URLs kept parsed (a few hundred bytes each).
const MAX_PARSED_URLS: usize = 10_000;

/// How many calls at once a target gets: `min` always, up to `max` while it keeps its pace
/// (see [`Target`]); and how long a call may wait for its turn before it is deferred.
#[derive(Debug, Clone, Copy)]
pub struct CallLimits {
    pub min: usize,
    pub max: usize,
    pub turn_wait: Duration,
}

/// Calls are answered at the target's own pace while their running mean is at most this
/// many times the shortest call of the current window.
const PACE_FACTOR: u64 = 2;
/// The window over which the shortest call is taken, so that one early fluke does not
/// stop the growth for good.
const PACE_WINDOW_MS: u64 = 10_000;

/// The turns of one target: at most `limit` calls at once. The limit starts at
/// `PUNCTUAL_MIN_CALLS_PER_TARGET` (16) and grows by one for each call that ends while
/// others wait or were held back within the last second, as long as the calls' running mean is at most [`PACE_FACTOR`] times the
/// shortest call of the last [`PACE_WINDOW_MS`], up to `max`. A slow target that keeps its
/// pace (a 100 ms answer stays near 100 ms) gets more calls at once, doubling in a round
/// trip as TCP's slow start does; when the calls take more than twice that (a target that
/// slows down as calls are added, or an executor short of CPU, whose calls then take longer
/// for its own reasons) the limit falls back by one a call: more calls at once would only
/// queue elsewhere.
///
/// Every call beyond the client's idle connections opens one, so the limit is also the
/// number of connections to the target. Starting at the maximum (512) made a load's first
/// second open hundreds of connections at once (at 10,000 fires/s the lag of the first 5 s
/// reached 469-571 ms, against 92 ms with 32), and keeping them made every call dearer: at
/// 20,000 fires/s offered, a fixed 16 delivered 18,001 and 19,999 fires/s in two runs at
/// 93-107 µs of CPU a fire, 32 delivered 18,326 at 105 µs, 512 delivered 16,132 at 117 µs
/// (docs/BENCHMARKS.md, item 15).
struct Target {
    /// `scheme://host:port`.
    key: Arc<str>,
    turns: Turns,
    first: usize,
    max: usize,
    epoch: Instant,
    /// The shortest call of the current window, in µs.
    shortest_us: AtomicU64,
    /// When the current window began, in ms since `epoch`.
    window_ms: AtomicU64,
}

impl Target {
    fn new(key: &str, limits: CallLimits) -> Self {
        let max = limits.max.max(1);
        let first = limits.min.clamp(1, max);
        Target {
            key: key.into(),
            turns: Turns::new(first),
            first,
            max,
            epoch: Instant::now(),
            shortest_us: AtomicU64::new(u64::MAX),
            window_ms: AtomicU64::new(0),
        }
    }

    /// A call ended at `ended`, after `took`. One more turn if others want one (waiting, or
    /// held back lately), the calls keep the target's
    /// pace and the limit has room; one turn fewer (the ending call's, which the caller then
    /// forgets) if the calls take more than twice that pace and the limit is above its
    /// start.
    fn ended(&self, ended: Instant, took: Duration) -> Change {
        let took_us = took.as_micros().min(u128::from(u64::MAX / (2 * PACE_FACTOR))) as u64;
        let now_ms = ended.saturating_duration_since(self.epoch).as_millis() as u64;
        let window_ms = self.window_ms.load(Ordering::Relaxed);
        let shortest_us = if now_ms.saturating_sub(window_ms) >= PACE_WINDOW_MS
            && self.window_ms.compare_exchange(window_ms, now_ms, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            self.shortest_us.store(took_us, Ordering::Relaxed);
            took_us
        } else {
            self.shortest_us.fetch_min(took_us, Ordering::Relaxed).min(took_us)
        };
        let mean_us = self.turns.record(took_us);
        let limit = self.turns.limit();
        let change = if mean_us <= shortest_us * PACE_FACTOR {
            if !self.turns.has_demand(ended) || limit >= self.max {
                return Change::Keep;
            }
            Change::Grow
        } else if mean_us > shortest_us * 2 * PACE_FACTOR && limit > self.first {
            Change::Shrink
        } else {
            return Change::Keep;
        };
        let changed = if change == Change::Grow { limit + 1 } else { limit - 1 };
        if self.turns.limit.compare_exchange(limit, changed, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            // Another call changed it meanwhile; that one change is enough.
            return Change::Keep;
        }
        if changed.is_power_of_two() {
            tracing::debug!(calls_at_once = changed, mean_us, shortest_us, "a target's limit of calls changed");
        }
        if change == Change::Grow {
            self.turns.semaphore.add_permits(1);
        }
        change
    }

    #[cfg(test)]
    fn limit(&self) -> usize {
        self.turns.limit()
    }
}

/// A call's turn at its target.
struct Turn {
    permit: OwnedSemaphorePermit,
    target: Arc<Target>,
}

impl Turn {
    /// The call ended at `ended`, after `took` (a call given up on ends with its turn
    /// dropped, and does not count towards the limit).
    fn end(self, ended: Instant, took: Duration) {
        if self.target.ended(ended, took) == Change::Shrink {
            self.permit.forget();
        }
    }
}

/// What a call's end did to its target's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Grow,
    Shrink,
    Keep,
}

impl Caller {
    /// The client keeps as many idle connections per target as there can be calls at once:
    /// with fewer, every burst above the pool's size opens connections that are closed again
    /// right after, and connect/close becomes the executor's main cost (measured: a third of
    /// its CPU at 8,000 calls/s with 256 idle connections and 2,000 calls).
    pub fn new(limits: CallLimits, waiting: IntGauge, guard: TargetGuard) -> Result<Self, native_tls::Error> {
        let guard = Arc::new(guard);
        let client = http_client(guard.clone(), limits.max)?;
        Ok(Self {
            client,
            limits,
            guard,
            namespace_clients: Mutex::new(HashMap::new()),
            targets: Mutex::new(HashMap::new()),
            parsed: Mutex::new(HashMap::new()),
            waiting,
            signing: Arc::default(),
            namespaces: Arc::default(),
            failing: None,
        })
    }

    /// Signs the calls of each namespace with its secrets (none without this).
    pub fn with_signing(mut self, signing: Arc<SigningKeys>) -> Self {
        self.signing = signing;
        self
    }

    /// Limits the calls of each namespace by its policy (the defaults without this).
    pub fn with_namespaces(mut self, namespaces: Arc<Namespaces>) -> Self {
        self.namespaces = namespaces;
        self
    }

    /// Pauses the targets that fail everything for a namespace (never without this).
    pub fn with_failing_targets(mut self, failing: Arc<FailingTargets>) -> Self {
        self.failing = Some(failing);
        self
    }

    /// The guard and the client of `namespace`'s calls: the service's, or the namespace's
    /// own when its policy opens more.
    fn client_for(&self, namespace: &str) -> Result<(Arc<TargetGuard>, HttpClient), String> {
        let extra = self.namespaces.callback_allow(namespace);
        if extra.is_empty() {
            return Ok((self.guard.clone(), self.client.clone()));
        }
        let mut clients = self.namespace_clients.lock().expect("namespace clients lock");
        if let Some((made_for, guard, client)) = clients.get(namespace) {
            if *made_for == extra {
                return Ok((guard.clone(), client.clone()));
            }
        }
        let guard = Arc::new(self.guard.with(&extra));
        let client = http_client(guard.clone(), self.limits.max).map_err(|e| format!("TLS: {e}"))?;
        clients.insert(namespace.to_owned(), (extra, guard.clone(), client.clone()));
        Ok((guard, client))
    }

    /// `raw` checked (an absolute `http` or `https` URL) and parsed, and its target
    /// (scheme, host and port).
    fn parse(&self, raw: &str) -> Result<ParsedUrl, String> {
        if let Some((uri, calls)) = self.parsed.lock().expect("parsed lock").get(raw) {
            return Ok((uri.clone(), calls.clone()));
        }
        let url = Url::parse(raw).map_err(|e| e.to_string())?;
        if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
            return Err(format!("not an http or https URL: {raw:?}"));
        }
        // The `url` crate's form (host in ASCII, path percent-encoded) is one `Uri` accepts.
        let uri: Uri = url.as_str().parse().map_err(|e: hyper::http::uri::InvalidUri| e.to_string())?;
        let target = target_of(url.scheme(), url.host_str().unwrap_or(""), url.port_or_known_default().unwrap_or(0));
        let calls = {
            let mut targets = self.targets.lock().expect("targets lock");
            let limits = self.limits;
            targets.entry(target).or_insert_with_key(|key| Arc::new(Target::new(key, limits))).clone()
        };
        let mut parsed = self.parsed.lock().expect("parsed lock");
        if parsed.len() >= MAX_PARSED_URLS {
            parsed.clear();
        }
        parsed.insert(raw.into(), (uri.clone(), calls.clone()));
        Ok((uri, calls))
    }

    /// A turn to call `target`, or held back (see [`Turns::take`]).
    async fn turn(&self, target: Arc<Target>) -> Result<Turn, HeldBack> {
        let permit = target.turns.take(self.limits.turn_wait, &self.waiting).await?;
        Ok(Turn { permit, target })
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
    /// Not called: its target or its namespace had no turn soon enough, and one is
    /// expected after this long.
    pub held_back: Option<(Duration, DeferReason)>,
    /// Not called: its target is paused for its namespace.
    pub target_paused: bool,
}

impl Attempt {
    /// An attempt that ended in `error`, without an answer from the target.
    pub fn failed(error: String, retryable: bool, duration: Duration) -> Self {
        Attempt {
            http_status: None,
            excerpt: None,
            error: Some(error),
            retryable,
            retry_after: None,
            duration,
            held_back: None,
            target_paused: false,
        }
    }

    /// Not run: its namespace had taken its fires for now (`max_fires_per_second`), and its
    /// slot comes after `wait`. As [`Attempt::held_back`] otherwise.
    pub fn rate_held_back(per_second: u32, wait: Duration) -> Self {
        Attempt {
            held_back: Some((wait, DeferReason::NamespaceLimit)),
            ..Attempt::failed(
                format!("not run: its namespace's limit of {per_second} fires a second is taken for now"),
                false,
                Duration::ZERO,
            )
        }
    }

    /// Not called: its target or namespace (`reason`) was at its limit of calls, with a
    /// turn expected after `wait`. Deferred to it; when that is too late to defer, the
    /// occurrence is dead, not retried: a retry would find no sooner turn, and retrying
    /// them tripled what such a target's occurrences cost everyone (docs/BENCHMARKS.md,
    /// "Neighbours").
    fn held_back(limit: usize, wait: Duration, reason: DeferReason) -> Self {
        let whose = if reason == DeferReason::NamespaceLimit { "namespace" } else { "target" };
        Attempt {
            held_back: Some((wait, reason)),
            ..Attempt::failed(
                format!("not called: its {whose} had {limit} calls in flight and no turn soon"),
                false,
                Duration::ZERO,
            )
        }
    }

    /// Not called: its target asked not to be called yet (`Retry-After`), and a turn after
    /// that is expected after `wait`; as [`Attempt::held_back`] otherwise.
    fn asked_to_wait(wait: Duration) -> Self {
        Attempt {
            held_back: Some((wait, DeferReason::RetryAfter)),
            ..Attempt::failed("not called: its target asked to wait (Retry-After)".to_owned(), false, Duration::ZERO)
        }
    }

    /// Not called: its target is paused for its namespace.
    fn paused(pause: &punctual_shared::paused_target::PausedTarget) -> Self {
        Attempt {
            target_paused: true,
            ..Attempt::failed(
                format!(
                    "not called: target {} paused for namespace {} since {} ({}); resume it with POST \
                     /v1/namespaces/{}/paused-targets/resume",
                    pause.target,
                    pause.namespace,
                    pause.paused_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    pause.reason,
                    pause.namespace
                ),
                false,
                Duration::ZERO,
            )
        }
    }

    /// Whether the action was carried out (called or published), whatever came of it.
    pub fn was_made(&self) -> bool {
        self.held_back.is_none() && !self.target_paused
    }

    /// An attempt that succeeded without an answer to keep (e.g. a published message).
    pub fn succeeded(duration: Duration) -> Self {
        Attempt {
            http_status: None,
            excerpt: None,
            error: None,
            retryable: false,
            retry_after: None,
            duration,
            held_back: None,
            target_paused: false,
        }
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
            held_back: None,
            target_paused: false,
        }
    }

    /// Whether, why and how long the occurrence waits as the same attempt, while it would
    /// then be at most [`DEFER_WHILE_LATE_BY`] late: a call held back waits for its
    /// target's turn; a target that answered `429` or `503` with `Retry-After` asked to be
    /// called later, and is, at most the retry policy's longest backoff later.
    fn deferral(&self, task: &StartedTask) -> Option<(Duration, DeferReason)> {
        let (wait, reason) = match self.held_back {
            Some(held_back) => held_back,
            None => {
                let asked = self.retry_after.filter(|_| matches!(self.http_status, Some(429 | 503)))?;
                (asked.min(Duration::from_millis(task.retry.max_ms.max(0) as u64)), DeferReason::RetryAfter)
            }
        };
        let late = (Utc::now() - task.scheduled_at).to_std().unwrap_or_default() + wait;
        (late <= DEFER_WHILE_LATE_BY).then_some((wait, reason))
    }

    /// Decides what becomes of the task: success; deferred, when the target asked to be
    /// called later; another attempt after the policy's backoff (or the target's
    /// Retry-After, when longer); or dead.
    pub fn into_outcome(mut self, task: &StartedTask, jitter: f64) -> Outcome {
        let policy = task.retry;
        let next = if self.error.is_none() {
            Next::Succeeded
        } else if self.target_paused {
            Next::Cancelled
        } else if let Some((wait, reason)) = self.deferral(task) {
            if let Some(error) = self.error.as_mut() {
                let after = if self.http_status.is_some() { " with Retry-After" } else { "" };
                error.push_str(&format!("{after}: deferred {} ms, not counted as an attempt", wait.as_millis()));
            }
            let due_at = Utc::now() + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::zero());
            Next::Defer { due_at, reason }
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
    let (uri, target) = match task.action.http_url.as_deref().map(|raw| caller.parse(raw)) {
        Some(Ok(parsed)) => parsed,
        Some(Err(e)) => return Attempt::failed(format!("invalid http_url: {e}"), false, Duration::ZERO),
        None => return Attempt::failed("timer has no http_url".to_owned(), false, Duration::ZERO),
    };
    let namespace = &task.action.namespace;
    let (guard, client) = match caller.client_for(namespace) {
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
    turn.end(ended, took);
    namespace_turns.record(took.as_micros().min(u128::from(u64::MAX)) as u64);
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
    // A timer's own traceparent header, if it sets one, is kept.
    if !headers.contains_key("traceparent") {
        // The run's exported span when spans are exported (so the target's spans join
        // it), else an id of the attempt's own.
        let span_id =
            punctual_shared::otlp::current_span_id().unwrap_or_else(punctual_shared::trace_context::new_span_id);
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

#[cfg(test)]
mod tests {
    use super::*;
    use punctual_shared::retry::RetryPolicy;
    use punctual_shared::task::Action;

    /// Calls wait for their turns as long as it takes, unless a test says otherwise.
    fn limits(min: usize, max: usize) -> CallLimits {
        CallLimits { min, max, turn_wait: Duration::from_secs(3600) }
    }

    /// The tests' targets listen on loopback.
    fn local() -> TargetGuard {
        "127.0.0.1".parse().unwrap()
    }

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
            due_at: Utc::now(),
            started_at: Utc::now(),
            action: Arc::new(Action {
                namespace: "default".into(),
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
            }),
            retry: RetryPolicy { max_attempts: 1, initial_ms: 1_000, multiplier: 2.0, max_ms: 60_000 },
        }
    }

    /// `n` calls to `url`, each in a task of its own.
    fn spawn_calls(caller: &Arc<Caller>, url: &str, n: usize) -> Vec<tokio::task::JoinHandle<Attempt>> {
        (0..n)
            .map(|_| {
                let (caller, task) = (caller.clone(), task_calling(url));
                tokio::spawn(async move { call(&caller, &task).await })
            })
            .collect()
    }

    async fn wait_for_calls(sink: &punctual_testkit::sink::Sink, n: usize) {
        while sink.calls().len() < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn calls_to_a_busy_target_wait_their_turn_and_other_targets_do_not() {
        use punctual_testkit::sink::{Behaviour, Sink};
        let (busy, other) = (Sink::start().await, Sink::start().await);
        busy.behave("/slow", Behaviour::slow(Duration::from_secs(2)));
        let caller = Arc::new(Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), local()).unwrap());
        let calls = spawn_calls(&caller, &busy.url("/slow"), 5);
        wait_for_calls(&busy, 2).await;
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
    async fn a_call_given_up_while_it_waits_is_no_longer_counted_waiting() {
        use punctual_testkit::sink::{Behaviour, Sink};
        let sink = Sink::start().await;
        sink.behave("/slow", Behaviour::slow(Duration::from_secs(2)));
        let waiting = IntGauge::new("waiting", "test").unwrap();
        let caller = Arc::new(Caller::new(limits(1, 1), waiting.clone(), local()).unwrap());
        let calls = spawn_calls(&caller, &sink.url("/slow"), 3);
        wait_for_calls(&sink, 1).await;
        while waiting.get() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let target = caller.parse(&sink.url("/slow")).unwrap().1;
        assert_eq!(target.turns.waiting.load(Ordering::Relaxed), 2);
        // Abandoned, as the drain timeout abandons running callbacks.
        for c in &calls {
            c.abort();
        }
        for c in calls {
            let _ = c.await;
        }
        assert_eq!(waiting.get(), 0, "the gauge counts no call that stopped waiting");
        assert_eq!(target.turns.waiting.load(Ordering::Relaxed), 0, "nor does the target's count");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_target_that_keeps_its_pace_gets_more_calls_at_once() {
        use punctual_testkit::sink::{Behaviour, Sink};
        let sink = Sink::start().await;
        sink.behave("/steady", Behaviour::slow(Duration::from_millis(500)));
        let limits = limits(4, 64);
        let caller = Arc::new(Caller::new(limits, IntGauge::new("waiting", "test").unwrap(), local()).unwrap());
        let calls = spawn_calls(&caller, &sink.url("/steady"), 12);
        wait_for_calls(&sink, 4).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(sink.calls().len(), 4, "a new target starts at `min` calls at once");
        // Each of the first four ends at the target's pace while others wait: its turn
        // passes on and one more is added, so the other eight go together.
        wait_for_calls(&sink, 5).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(sink.calls().len(), 12, "eight at once after the first four");
        for c in calls {
            assert_eq!(c.await.unwrap().http_status, Some(200));
        }
    }

    /// A call whose turn does not come within the turn wait is not made but held back;
    /// once the target's pace is known, a call that could not get a turn in time is held
    /// back without waiting, booked after the calls held back before it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_target_without_a_turn_soon_holds_calls_back_spread_at_its_pace() {
        use punctual_testkit::sink::{Behaviour, Sink};
        let sink = Sink::start().await;
        sink.behave("/hang", Behaviour::slow(Duration::from_secs(2)));
        let limits = CallLimits { min: 1, max: 1, turn_wait: Duration::from_millis(300) };
        let caller = Arc::new(Caller::new(limits, IntGauge::new("waiting", "test").unwrap(), local()).unwrap());
        let first = spawn_calls(&caller, &sink.url("/hang"), 1);
        wait_for_calls(&sink, 1).await;
        let started = Instant::now();
        let second = call(&caller, &task_calling(&sink.url("/hang"))).await;
        assert!(started.elapsed() >= Duration::from_millis(300), "waited its turn that long first");
        assert!(second.held_back.unwrap().0 >= MIN_HOLD_BACK, "{second:?}");
        assert!(!second.was_made() && second.error.as_deref().unwrap().starts_with("not called"), "{second:?}");
        assert_eq!(first.into_iter().next().unwrap().await.unwrap().http_status, Some(200));
        assert_eq!(sink.calls().len(), 1, "the held-back call was not made");
        // The target's pace is known now (2 s a call, one at a time): calls arriving while
        // one is in flight are held back at once, the second a turn after the first.
        let busy = spawn_calls(&caller, &sink.url("/hang"), 1);
        wait_for_calls(&sink, 2).await;
        let started = Instant::now();
        let (a, b) = (
            call(&caller, &task_calling(&sink.url("/hang"))).await,
            call(&caller, &task_calling(&sink.url("/hang"))).await,
        );
        assert!(started.elapsed() < Duration::from_millis(300), "did not wait: {:?}", started.elapsed());
        let (a, b) = (a.held_back.unwrap().0, b.held_back.unwrap().0);
        assert!(a >= Duration::from_millis(1_500), "about a call's time: {a:?}");
        assert!(b >= a + Duration::from_millis(1_500), "booked a turn after the other: {a:?} then {b:?}");
        for c in busy {
            c.await.unwrap();
        }
        assert_eq!(sink.calls().len(), 2);
    }

    /// A target that answered 429 with `Retry-After` gets no call before that time: the
    /// calls meanwhile are held back as asked, to turns spread after it.
    #[tokio::test]
    async fn a_target_that_asked_to_wait_is_not_called_before_then() {
        use punctual_testkit::sink::{Behaviour, Sink};
        let sink = Sink::start().await;
        sink.behave("/busy", Behaviour { script: vec![429], retry_after: Some("3".into()), ..Default::default() });
        let caller = Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), local()).unwrap();
        let first = call(&caller, &task_calling(&sink.url("/busy"))).await;
        assert_eq!(first.http_status, Some(429));
        let (second, third) = (
            call(&caller, &task_calling(&sink.url("/busy"))).await,
            call(&caller, &task_calling(&sink.url("/busy"))).await,
        );
        assert_eq!(sink.calls().len(), 1, "no call while it asked to wait");
        let (second, third) = (second.held_back.unwrap(), third.held_back.unwrap());
        assert_eq!(second.1, DeferReason::RetryAfter);
        assert!(second.0 >= Duration::from_millis(2_500), "not before the 3 s it asked: {second:?}");
        assert!(third.0 >= second.0 + Duration::from_millis(1_000), "a turn later: {second:?} then {third:?}");
        let outcome = Attempt::asked_to_wait(second.0).into_outcome(&task_calling("http://x/"), 0.0);
        assert!(matches!(outcome.next, Next::Defer { reason: DeferReason::RetryAfter, .. }), "{outcome:?}");
        let error = outcome.error.unwrap();
        assert!(error.starts_with("not called: its target asked to wait (Retry-After): deferred"), "{error}");
    }

    #[test]
    fn a_limit_grows_while_calls_keep_pace_and_falls_back_when_they_slow_down() {
        let target = Target::new("http://t:80", limits(16, 20));
        assert_eq!(target.limit(), 16);
        let ms = Duration::from_millis;
        // Nobody waits: no reason to grow.
        assert_eq!(target.ended(Instant::now(), ms(100)), Change::Keep);
        target.turns.waiting.store(3, Ordering::Relaxed);
        for expected in 17..=20 {
            assert_eq!(target.ended(Instant::now(), ms(110)), Change::Grow);
            assert_eq!(target.limit(), expected);
        }
        assert_eq!(target.ended(Instant::now(), ms(100)), Change::Keep, "at most `max`");
        assert_eq!(target.turns.semaphore.available_permits(), 20);
        // Answers slow down (a busy target, or this executor short of CPU): the running
        // mean passes four times the shortest call, and the limit falls back to `min`.
        let mut changes = Vec::new();
        for _ in 0..60 {
            changes.push(target.ended(Instant::now(), ms(1_000)));
        }
        assert_eq!(changes.iter().filter(|c| **c == Change::Shrink).count(), 4, "{changes:?}");
        assert_eq!(target.limit(), 16);
        // In between (mean within two to four times the shortest): no change either way.
        let between = Target::new("http://t:80", limits(1, 64));
        between.turns.waiting.store(1, Ordering::Relaxed);
        assert_eq!(between.ended(Instant::now(), ms(100)), Change::Grow);
        for _ in 0..60 {
            between.ended(Instant::now(), ms(280));
        }
        let limit = between.limit();
        assert!(limit < 64, "the growth stopped as the mean passed twice the shortest: {limit}");
        assert_eq!(between.ended(Instant::now(), ms(280)), Change::Keep);
        assert_eq!(between.limit(), limit);
    }

    #[test]
    fn the_limits_are_kept_within_one_and_max() {
        assert_eq!(Target::new("http://t:80", limits(0, 8)).limit(), 1);
        assert_eq!(Target::new("http://t:80", limits(32, 8)).limit(), 8);
    }

    #[tokio::test]
    async fn a_call_slower_than_its_timeout_times_out_and_may_be_retried() {
        use punctual_testkit::sink::{Behaviour, Sink};
        let sink = Sink::start().await;
        sink.behave("/slow", Behaviour::slow(Duration::from_secs(5)));
        let caller = Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), local()).unwrap();
        let mut task = task_calling(&sink.url("/slow"));
        Arc::get_mut(&mut task.action).unwrap().http_timeout_ms = 300;
        let started = Instant::now();
        let attempt = call(&caller, &task).await;
        assert!(started.elapsed() < Duration::from_secs(2), "gave up after the timeout: {:?}", started.elapsed());
        assert!(attempt.retryable);
        assert_eq!(attempt.http_status, None);
        assert_eq!(attempt.error.as_deref(), Some("timed out: no answer within 300 ms"));
    }

    #[tokio::test]
    async fn an_answer_is_kept_with_its_status_headers_and_body() {
        use punctual_testkit::sink::{Behaviour, Sink};
        let sink = Sink::start().await;
        sink.behave("/busy", Behaviour { script: vec![503], retry_after: Some("7".into()), ..Default::default() });
        let caller = Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), local()).unwrap();
        let mut task = task_calling(&sink.url("/busy?x=1"));
        let action = Arc::get_mut(&mut task.action).unwrap();
        action.http_method = "PUT".into();
        // As a row written with SQL may have them: the connection's and the signature's
        // headers are not the timer's to set, and are not sent.
        action.http_headers =
            serde_json::json!({"X-Env": "prod", "Host": "evil.example", "webhook-signature": "v1,forged"});
        action.http_body = Some(serde_json::json!({"k": 1}));
        let attempt = call(&caller, &task).await;
        assert_eq!(attempt.http_status, Some(503));
        assert!(attempt.retryable);
        assert_eq!(attempt.retry_after, Some(Duration::from_secs(7)));
        let received = &sink.calls()[0];
        assert_eq!((received.method.as_str(), received.path.as_str()), ("PUT", "/busy"));
        assert_eq!(received.headers["x-env"], "prod");
        assert_eq!(received.headers["host"], sink.addr.to_string().as_str());
        assert!(!received.headers.contains_key("webhook-signature"), "unsigned: no secret");
        assert_eq!(received.headers["content-type"], "application/json");
        assert_eq!(received.headers["x-punctual-attempt"], "1");
        assert!(received.headers["user-agent"].to_str().unwrap().starts_with("punctual/"));
        let trace_id = format!("{:032x}", punctual_shared::trace_context::trace_id(task.timer_id, task.scheduled_at));
        let traceparent = received.headers["traceparent"].to_str().unwrap();
        assert!(traceparent.starts_with(&format!("00-{trace_id}-")), "{traceparent}");
        assert_eq!(received.idempotency_key.as_deref(), Some(task.identity().as_str()));
        assert_eq!(serde_json::from_slice::<Value>(&received.body).unwrap(), serde_json::json!({"k": 1}));
    }

    #[tokio::test]
    async fn a_url_that_is_not_http_fails_for_good_without_a_call() {
        let caller = Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), local()).unwrap();
        for url in ["ftp://127.0.0.1/x", "mailto:ops@example.com"] {
            let attempt = call(&caller, &task_calling(url)).await;
            assert!(!attempt.retryable, "{url}");
            assert!(attempt.error.unwrap().starts_with("invalid http_url: not an http or https URL"), "{url}");
        }
    }

    #[tokio::test]
    async fn private_targets_are_refused_unless_allowed_and_never_called() {
        let sink = punctual_testkit::Sink::start().await;
        let port = sink.addr.port();
        let guarded =
            Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), TargetGuard::default()).unwrap();
        // Literal addresses, and a name that resolves to loopback.
        for url in [
            format!("http://127.0.0.1:{port}/literal"),
            format!("http://[::1]:{port}/v6"),
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            "http://10.0.0.1/internal".to_owned(),
            format!("http://localhost:{port}/name"),
        ] {
            let attempt = call(&guarded, &task_calling(&url)).await;
            let error = attempt.error.unwrap_or_default();
            assert!(!attempt.retryable, "{url}: refused for good");
            assert!(error.contains("no public address") && error.contains("PUNCTUAL_CALLBACK_ALLOW"), "{url}: {error}");
        }
        assert!(sink.calls().is_empty(), "nothing was called");
        // Allowed by name, or by network.
        let by_name =
            Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), "localhost".parse().unwrap()).unwrap();
        assert_eq!(
            call(&by_name, &task_calling(&format!("http://localhost:{port}/name"))).await.http_status,
            Some(200)
        );
        let by_network =
            Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), "127.0.0.0/8".parse().unwrap())
                .unwrap();
        assert_eq!(
            call(&by_network, &task_calling(&format!("http://127.0.0.1:{port}/literal"))).await.http_status,
            Some(200)
        );
        assert_eq!(sink.calls().len(), 2);
    }

    #[tokio::test]
    async fn an_unparsable_url_fails_for_good_without_a_call() {
        let caller = Caller::new(limits(2, 2), IntGauge::new("waiting", "test").unwrap(), local()).unwrap();
        let attempt = call(&caller, &task_calling("not a url")).await;
        assert!(!attempt.retryable);
        assert!(attempt.error.unwrap().starts_with("invalid http_url"));
    }

    #[test]
    fn an_answer_asking_to_wait_defers_as_the_same_attempt_within_bounds() {
        let answer = |status: u16, retry_after: Option<u64>| {
            Attempt::from_status(status, String::new(), retry_after.map(Duration::from_secs), Duration::ZERO)
        };
        let task = task_calling("http://127.0.0.1:1/");
        let waits = |outcome: Outcome| match outcome.next {
            Next::Defer { due_at, .. } => Some((due_at - Utc::now()).num_milliseconds()),
            _ => None,
        };
        for status in [429, 503] {
            let outcome = answer(status, Some(3)).into_outcome(&task, 0.0);
            assert_eq!(outcome.attempt, 1);
            assert!(outcome.error.as_deref().unwrap().contains("deferred"), "{:?}", outcome.error);
            // Read back a moment later: up to a second of slack for a machine busy with other tests.
            assert!(waits(outcome).is_some_and(|ms| (2_000..=3_000).contains(&ms)), "{status} with Retry-After: 3");
        }
        // Not asked to wait: a failed attempt (the task allows one, so dead).
        for (status, retry_after) in [(429, None), (503, None), (500, Some(3))] {
            assert_eq!(answer(status, retry_after).into_outcome(&task, 0.0).next, Next::Dead, "{status}");
        }
        // At most the retry policy's longest wait.
        let short = StartedTask { retry: RetryPolicy { max_ms: 1_000, ..task.retry }, ..task_calling("http://x/") };
        assert!(waits(answer(429, Some(30)).into_outcome(&short, 0.0)).is_some_and(|ms| ms <= 1_000));
        // Not for an occurrence that would then be more than an hour late.
        let old = StartedTask { scheduled_at: Utc::now() - chrono::Duration::minutes(59), ..task_calling("http://x/") };
        assert_eq!(answer(429, Some(120)).into_outcome(&old, 0.0).next, Next::Dead);
        assert!(waits(answer(429, Some(30)).into_outcome(&old, 0.0)).is_some());
        // A call held back waits for its target's turn as the same attempt, however long
        // its retry policy allows, while it would then be at most an hour late.
        let held = Attempt::held_back(16, Duration::from_secs(90), DeferReason::TargetLimit).into_outcome(&short, 0.0);
        assert!(matches!(held.next, Next::Defer { reason: DeferReason::TargetLimit, .. }), "{held:?}");
        assert!(waits(held.clone()).is_some_and(|ms| ms > 80_000));
        assert_eq!(held.attempt, 1);
        assert!(held.error.as_deref().unwrap().starts_with("not called"), "{:?}", held.error);
        let too_late =
            Attempt::held_back(16, Duration::from_secs(120), DeferReason::TargetLimit).into_outcome(&old, 0.0);
        assert_eq!(too_late.next, Next::Dead, "a failed attempt, the last one this task allows");
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
