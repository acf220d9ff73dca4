//! The callbacks' name resolution, through the target guard: a host's addresses that the
//! guard refuses are dropped, so the connector can only connect to one that passed (no
//! second lookup between the check and the connection for a name to change its answer).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use punctual_shared::target_guard::{Refused, TargetGuard};
use tower_service::Service;

use crate::host_addresses::HostAddresses;

#[derive(Clone)]
pub struct GuardedResolver {
    inner: GaiResolver,
    guard: Arc<TargetGuard>,
    hosts: Arc<HostAddresses>,
    /// The one address every name resolves to: a DNS broadcast's shard calls its own.
    pinned: Option<IpAddr>,
}

impl GuardedResolver {
    pub fn new(guard: Arc<TargetGuard>, hosts: Arc<HostAddresses>) -> Self {
        Self { inner: GaiResolver::new(), guard, hosts, pinned: None }
    }

    /// Resolves every name to `address` alone (if the guard admits it for that name).
    pub fn pinned(self, address: IpAddr) -> Self {
        Self { pinned: Some(address), ..self }
    }

    /// Every address of `host` the guard admits, sorted, without duplicates.
    pub async fn addresses(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        let name = Name::from_str(host).map_err(std::io::Error::other)?;
        let mut resolver = self.clone();
        std::future::poll_fn(|cx| resolver.poll_ready(cx)).await?;
        let mut addresses: Vec<IpAddr> = resolver.call(name).await?.map(|a| a.ip()).collect();
        addresses.sort();
        addresses.dedup();
        Ok(addresses)
    }
}

impl Service<Name> for GuardedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let host = name.as_str().to_owned();
        let guard = self.guard.clone();
        let given = self.pinned.map(|a| vec![a]).or_else(|| self.hosts.get(&host).map(<[IpAddr]>::to_vec));
        let resolving = given.is_none().then(|| self.inner.call(name));
        Box::pin(async move {
            let addresses: Vec<IpAddr> = match (given, resolving) {
                (Some(given), _) => given,
                (None, Some(resolving)) => resolving.await?.map(|a| a.ip()).collect(),
                (None, None) => Vec::new(),
            };
            let allowed = guard.filter(&host, addresses).map_err(std::io::Error::other)?;
            Ok(allowed.into_iter().map(|ip| SocketAddr::new(ip, 0)).collect::<Vec<_>>().into_iter())
        })
    }
}

/// The guard's refusal behind a failed request, if that is why it failed.
pub fn refusal(error: &(dyn std::error::Error + 'static)) -> Option<Refused> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(refused) = e.downcast_ref::<Refused>() {
            return Some(refused.clone());
        }
        // io::Error hides its payload from `source()`: look inside.
        if let Some(refused) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<Refused>())
        {
            return Some(refused.clone());
        }
        current = e.source();
    }
    None
}
