//! The caller: the HTTP clients (one for all, one per namespace with its own allow-list), the
//! parsed URLs and the targets.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Uri;
use hyper_tls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use prometheus::IntGauge;
use punctual_shared::paused_target::target_of;
use punctual_shared::target_guard::TargetGuard;
use url::Url;

use super::target::{CallLimits, Target, Turn};
use crate::failing_targets::FailingTargets;
use crate::guarded_resolver::{refusal, GuardedResolver};
use crate::host_addresses::HostAddresses;
use crate::namespaces::Namespaces;
use crate::signing_keys::SigningKeys;
use crate::turns::HeldBack;
use punctual_shared::unpoisoned;

/// Makes the callbacks: one HTTP client for all, and a limit of calls at once to each
/// target (scheme, host and port), between [`CallLimits`]' `min` and `max` (see [`Target`]),
/// the others waiting their turn.
///
/// Without a limit, an executor catching up on a backlog had a call in flight for almost
/// every task it held (up to `PUNCTUAL_MAX_IN_FLIGHT`, thousands), each on a connection of
/// its own, kept open afterwards by the pool: at 15,000 fires/s offered, its memory grew
/// from 178 to 300 MB within a minute (peak 361 MB), against 86 to 142 MB (peak 169 MB) with
/// 512 (docs/bench/history.md, item 12). A target sees at most `max` connections from an
/// executor, as from a connection-limited proxy (Envoy's default limit is 1,024).
pub struct Caller {
    pub(super) client: HttpClient,
    pub(super) limits: CallLimits,
    /// Which addresses calls may reach (`PUNCTUAL_CALLBACK_ALLOW`).
    pub(super) guard: Arc<TargetGuard>,
    /// The clients of the namespaces whose policy opens more (`callback_allow`), each with
    /// the guard it was made with: a connection made for one namespace's private target is
    /// never reused for another's.
    pub(super) namespace_clients: Mutex<HashMap<String, NamespaceClient>>,
    /// One entry per target called since the start; a few hundred bytes each.
    pub(super) targets: Mutex<HashMap<String, Arc<Target>>>,
    /// URLs called lately, parsed, with their target's turns: parsing every call's URL
    /// (IDNA included) was a twentieth of the executor's own CPU at 15,000 calls/s
    /// (docs/bench/history.md, item 15). Emptied when it reaches [`MAX_PARSED_URLS`], so
    /// timers with a URL each cost a parse per call, as before, and no unbounded memory.
    pub(super) parsed: Mutex<HashMap<Box<str>, ParsedUrl>>,
    /// Calls waiting for a turn (`punctual_callbacks_waiting`).
    pub(super) waiting: IntGauge,
    /// Addresses given to host names instead of the system resolver's.
    hosts: Arc<HostAddresses>,
    /// The clients of a DNS broadcast's shards, each connecting to one address of the
    /// host, by namespace and address, with the guard each was made with; emptied when it
    /// reaches [`MAX_PINNED_CLIENTS`].
    pinned_clients: Mutex<HashMap<(String, IpAddr), NamespaceGuarded>>,
    /// Each namespace's secrets, which sign its calls.
    pub(super) signing: Arc<SigningKeys>,
    /// Each namespace's limits, and the turns of its calls.
    pub(super) namespaces: Arc<Namespaces>,
    /// Targets paused for a namespace, and the failures that pause them (none without).
    pub(super) failing: Option<Arc<FailingTargets>>,
}

/// hyper's HTTP/1.1 client, with TLS for `https` targets.
///
/// Not reqwest, which wraps this same client: reqwest 0.12 (and 0.13) formats every
/// response's request URI as a string and parses it again as a `Url` (IDNA included), for
/// a redirect it may have followed; that was 5 % of the executor's CPU at 20,000 calls/s
/// (`perf record --call-graph dwarf`, docs/bench/history.md item 19). Callbacks follow no
/// redirects, so nothing is lost by calling hyper directly.
pub(super) type HttpClient =
    hyper_util::client::legacy::Client<HttpsConnector<HttpConnector<GuardedResolver>>, Full<Bytes>>;

/// The HTTP client of calls that `guard` admits, keeping up to `max_idle` idle
/// connections per target.
fn http_client(resolver: GuardedResolver, max_idle: usize) -> Result<HttpClient, native_tls::Error> {
    let mut http = HttpConnector::new_with_resolver(resolver);
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

/// A client and the guard it was made with.
type NamespaceGuarded = (Arc<TargetGuard>, HttpClient);

/// A URL checked and parsed for the client, and its target.
type ParsedUrl = (Uri, Arc<Target>);

/// Most URLs kept parsed (a few hundred bytes each).
const MAX_PARSED_URLS: usize = 10_000;
/// Most clients kept for the addresses of DNS broadcasts.
const MAX_PINNED_CLIENTS: usize = 1_024;

impl Caller {
    /// The client keeps as many idle connections per target as there can be calls at once:
    /// with fewer, every burst above the pool's size opens connections that are closed again
    /// right after, and connect/close becomes the executor's main cost (measured: a third of
    /// its CPU at 8,000 calls/s with 256 idle connections and 2,000 calls).
    pub fn new(limits: CallLimits, waiting: IntGauge, guard: TargetGuard) -> Result<Self, native_tls::Error> {
        let guard = Arc::new(guard);
        let hosts = Arc::new(HostAddresses::default());
        let client = http_client(GuardedResolver::new(guard.clone(), hosts.clone()), limits.max)?;
        Ok(Self {
            client,
            limits,
            guard,
            namespace_clients: Mutex::new(HashMap::new()),
            targets: Mutex::new(HashMap::new()),
            parsed: Mutex::new(HashMap::new()),
            waiting,
            hosts,
            pinned_clients: Mutex::new(HashMap::new()),
            signing: Arc::default(),
            namespaces: Arc::default(),
            failing: None,
        })
    }

    /// Resolves the host names of `hosts` to the addresses it gives them.
    pub fn with_host_addresses(mut self, hosts: HostAddresses) -> Result<Self, native_tls::Error> {
        self.hosts = Arc::new(hosts);
        self.client = http_client(GuardedResolver::new(self.guard.clone(), self.hosts.clone()), self.limits.max)?;
        Ok(self)
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
    pub(super) fn client_for(&self, namespace: &str) -> Result<(Arc<TargetGuard>, HttpClient), String> {
        let extra = self.namespaces.callback_allow(namespace);
        if extra.is_empty() {
            return Ok((self.guard.clone(), self.client.clone()));
        }
        let mut clients = unpoisoned::lock(&self.namespace_clients);
        if let Some((made_for, guard, client)) = clients.get(namespace) {
            if *made_for == extra {
                return Ok((guard.clone(), client.clone()));
            }
        }
        let guard = Arc::new(self.guard.with(&extra));
        let resolver = GuardedResolver::new(guard.clone(), self.hosts.clone());
        let client = http_client(resolver, self.limits.max).map_err(|e| format!("TLS: {e}"))?;
        clients.insert(namespace.to_owned(), (extra, guard.clone(), client.clone()));
        Ok((guard, client))
    }

    /// The guard and a client of `namespace`'s calls that connects to `address` alone,
    /// whatever the URL's host resolves to: a DNS broadcast's shard. The guard still checks
    /// the address, for the URL's host, as it checks any other.
    pub(super) fn client_to(&self, namespace: &str, address: &str) -> Result<(Arc<TargetGuard>, HttpClient), String> {
        let address: IpAddr = address.parse().map_err(|_| format!("not an address: {address:?}"))?;
        let (guard, _) = self.client_for(namespace)?;
        let mut clients = unpoisoned::lock(&self.pinned_clients);
        let key = (namespace.to_owned(), address);
        // Made again when the namespace's allow-list changed since.
        if let Some((made_with, client)) = clients.get(&key).filter(|(made_with, _)| **made_with == *guard) {
            return Ok((made_with.clone(), client.clone()));
        }
        if clients.len() >= MAX_PINNED_CLIENTS {
            clients.clear();
        }
        let resolver = GuardedResolver::new(guard.clone(), self.hosts.clone()).pinned(address);
        let client = http_client(resolver, self.limits.max).map_err(|e| format!("TLS: {e}"))?;
        clients.insert(key, (guard.clone(), client.clone()));
        Ok((guard, client))
    }

    /// Every address of `url`'s host that `namespace`'s calls may reach, sorted: the
    /// shards of a DNS broadcast. Err: why none, and whether that may pass.
    pub async fn addresses(&self, namespace: &str, url: &str) -> Result<Vec<String>, (String, bool)> {
        let (uri, _) = self.parse(url).map_err(|e| (format!("invalid http_url: {e}"), false))?;
        let (guard, _) = self.client_for(namespace).map_err(|e| (e, true))?;
        let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
        if let Ok(literal) = host.parse::<IpAddr>() {
            guard.check_literal(host).map_err(|refused| (refused.to_string(), false))?;
            return Ok(vec![literal.to_string()]);
        }
        let resolver = GuardedResolver::new(guard, self.hosts.clone());
        match resolver.addresses(host).await {
            Ok(addresses) if !addresses.is_empty() => Ok(addresses.iter().map(IpAddr::to_string).collect()),
            Ok(_) => Err((format!("{host} resolves to no address"), true)),
            Err(e) => Err(match refusal(&e) {
                Some(refused) => (refused.to_string(), false),
                None => (format!("resolving {host}: {e}"), true),
            }),
        }
    }

    /// `raw` checked (an absolute `http` or `https` URL) and parsed, and its target
    /// (scheme, host and port).
    pub(super) fn parse(&self, raw: &str) -> Result<ParsedUrl, String> {
        if let Some((uri, calls)) = unpoisoned::lock(&self.parsed).get(raw) {
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
            let mut targets = unpoisoned::lock(&self.targets);
            let limits = self.limits;
            targets.entry(target).or_insert_with_key(|key| Arc::new(Target::new(key, limits))).clone()
        };
        let mut parsed = unpoisoned::lock(&self.parsed);
        if parsed.len() >= MAX_PARSED_URLS {
            parsed.clear();
        }
        parsed.insert(raw.into(), (uri.clone(), calls.clone()));
        Ok((uri, calls))
    }

    /// A turn to call `target`, or held back (see [`Turns::take`]).
    pub(super) async fn turn(&self, target: Arc<Target>) -> Result<Turn, HeldBack> {
        target.asked(Instant::now());
        let permit = target.turns.take(self.limits.turn_wait, &self.waiting).await?;
        Ok(Turn { permit, target })
    }
}
