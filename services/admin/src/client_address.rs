//! Which client a request comes from, for the budget of requests without a valid key: the
//! connection's peer, unless the peer is a proxy the operator trusts
//! (`PUNCTUAL_TRUSTED_PROXIES`); then the address that proxy saw, the rightmost entry of
//! `X-Forwarded-For` that is not itself a trusted proxy. Entries further left are the
//! client's own say, and are never believed.

use std::net::IpAddr;
use std::str::FromStr;

use axum::http::HeaderMap;
use ipnet::IpNet;

/// The networks of the proxies in front of the admin, comma-separated (none by default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

/// An entry that is neither an address nor a network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("PUNCTUAL_TRUSTED_PROXIES: {0:?} is not an IP address or a network (e.g. 10.0.0.0/8)")]
pub struct InvalidProxy(String);

impl FromStr for TrustedProxies {
    type Err = InvalidProxy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let networks = s
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|entry| {
                entry
                    .parse::<IpNet>()
                    .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| InvalidProxy(entry.to_owned()))
            })
            .collect::<Result<_, _>>()?;
        Ok(TrustedProxies(networks))
    }
}

impl TrustedProxies {
    fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|n| n.contains(&ip))
    }

    /// The client of a request that came from `peer` with `headers`.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if !self.trusts(peer) {
            return peer;
        }
        let forwarded = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect::<Vec<_>>();
        for entry in forwarded.into_iter().rev() {
            match entry.parse::<IpAddr>() {
                Ok(ip) if self.trusts(ip) => continue,
                Ok(ip) => return ip,
                // Not an address: nothing left of it can be believed.
                Err(_) => break,
            }
        }
        peer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn forwarded(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append("x-forwarded-for", v.parse().unwrap());
        }
        headers
    }

    #[test]
    fn the_forwarded_address_counts_only_behind_a_trusted_proxy() {
        let proxies: TrustedProxies = "10.0.0.0/8, 192.168.1.1".parse().unwrap();
        let headers = forwarded(&["198.51.100.9, 203.0.113.7", "10.0.0.2"]);
        assert_eq!(proxies.client(ip("10.0.0.1"), &headers), ip("203.0.113.7"), "the first hop no proxy of ours made");
        assert_eq!(proxies.client(ip("198.51.100.1"), &headers), ip("198.51.100.1"), "an untrusted peer's header");
        assert_eq!(TrustedProxies::default().client(ip("10.0.0.1"), &headers), ip("10.0.0.1"), "none trusted");
        assert_eq!(proxies.client(ip("10.0.0.1"), &HeaderMap::new()), ip("10.0.0.1"), "no header");
        assert_eq!(proxies.client(ip("10.0.0.1"), &forwarded(&["junk, 10.0.0.3"])), ip("10.0.0.1"));
        assert!("10.0.0.0/8,not-an-address".parse::<TrustedProxies>().is_err());
    }
}
