//! The callbacks' name resolution, through the target guard: a host's addresses that the
//! guard refuses are dropped, so the connector can only connect to one that passed (no
//! second lookup between the check and the connection for a name to change its answer).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use punctual_shared::target_guard::{Refused, TargetGuard};

#[derive(Clone)]
pub struct GuardedResolver {
    inner: GaiResolver,
    guard: Arc<TargetGuard>,
}

impl GuardedResolver {
    pub fn new(guard: Arc<TargetGuard>) -> Self {
        Self { inner: GaiResolver::new(), guard }
    }
}

impl tower_service::Service<Name> for GuardedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let host = name.as_str().to_owned();
        let guard = self.guard.clone();
        let resolving = self.inner.call(name);
        Box::pin(async move {
            let addresses: Vec<SocketAddr> = resolving.await?.collect();
            let allowed =
                guard.filter(&host, addresses.iter().map(SocketAddr::ip).collect()).map_err(std::io::Error::other)?;
            Ok(addresses.into_iter().filter(|a| allowed.contains(&a.ip())).collect::<Vec<_>>().into_iter())
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
