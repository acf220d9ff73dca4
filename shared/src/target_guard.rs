//! Which network addresses callbacks may reach: by default only public ones, so that a
//! timer cannot turn the executor against the network it runs in (a cloud's metadata
//! service at 169.254.169.254, a database on localhost, a private network). The executor
//! checks every address a callback's host resolves to, and connects only to one that
//! passed; the admin API refuses a literal address at creation. `PUNCTUAL_CALLBACK_ALLOW`
//! opens chosen hosts and networks.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::sync::LazyLock;

use ipnet::{IpNet, Ipv6Net};

/// Networks no callback may reach unless allowed: not globally routable (RFC 6890 and
/// IANA's special-purpose registries).
static DENIED: LazyLock<Vec<IpNet>> = LazyLock::new(|| {
    [
        "0.0.0.0/8",       // "this network"
        "10.0.0.0/8",      // private
        "100.64.0.0/10",   // shared address space (carrier-grade NAT)
        "127.0.0.0/8",     // loopback
        "169.254.0.0/16",  // link-local, cloud metadata services among them
        "172.16.0.0/12",   // private
        "192.0.0.0/24",    // IETF protocol assignments
        "192.0.2.0/24",    // documentation
        "192.88.99.0/24",  // 6to4 relay anycast (deprecated)
        "192.168.0.0/16",  // private
        "198.18.0.0/15",   // benchmarking
        "198.51.100.0/24", // documentation
        "203.0.113.0/24",  // documentation
        "224.0.0.0/4",     // multicast
        "240.0.0.0/4",     // reserved, broadcast included
        "::/128",          // unspecified
        "::1/128",         // loopback
        "64:ff9b:1::/48",  // local-use IPv4/IPv6 translation
        "100::/64",        // discard-only
        "2001::/23",       // IETF protocol assignments (Teredo among them)
        "2001:db8::/32",   // documentation
        "2002::/16",       // 6to4: its embedded IPv4 address is what it reaches
        "fc00::/7",        // unique local
        "fe80::/10",       // link-local
        "fec0::/10",       // site-local (deprecated)
        "ff00::/8",        // multicast
    ]
    .iter()
    .map(|n| n.parse().expect("a valid network"))
    .collect()
});

/// What `PUNCTUAL_CALLBACK_ALLOW` opens: host names (exactly, any case) and networks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetGuard {
    hosts: Vec<String>,
    networks: Vec<IpNet>,
}

/// A target refused by the guard. What it says is stored with the occurrence, which the
/// timer's tenant reads: it names the rule, never the addresses a name resolved to (which
/// would map the service's internal network for the tenant); the executor's log has them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{host} {reaches} no public address, and neither PUNCTUAL_CALLBACK_ALLOW nor the namespace's callback_allow \
     allows it (loopback, private, link-local and other reserved networks are refused): refused"
)]
pub struct Refused {
    pub host: String,
    reaches: &'static str,
    /// What a name resolved to (empty for a literal address): for the operator's log only.
    pub addresses: Vec<IpAddr>,
}

impl Refused {
    pub fn resolved(host: &str, addresses: &[IpAddr]) -> Self {
        Refused { host: host.to_owned(), reaches: "resolves to", addresses: addresses.to_vec() }
    }

    pub fn literal(ip: IpAddr) -> Self {
        Refused { host: ip.to_string(), reaches: "is", addresses: Vec::new() }
    }
}

/// An entry of `PUNCTUAL_CALLBACK_ALLOW` that is neither a network nor a host name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("PUNCTUAL_CALLBACK_ALLOW: {0:?} is not a host name, an IP address or a network (e.g. 10.1.0.0/16)")]
pub struct InvalidAllowEntry(String);

impl FromStr for TargetGuard {
    type Err = InvalidAllowEntry;

    /// Comma-separated: `localhost,127.0.0.0/8,::1,hooks.internal`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut guard = TargetGuard::default();
        for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if let Ok(net) = entry.parse::<IpNet>() {
                guard.networks.push(net);
            } else if let Ok(ip) = entry.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
                guard.networks.push(IpNet::from(ip));
            } else if is_host_name(entry) {
                guard.hosts.push(entry.to_ascii_lowercase());
            } else {
                return Err(InvalidAllowEntry(entry.to_owned()));
            }
        }
        Ok(guard)
    }
}

fn is_host_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

impl TargetGuard {
    /// What this guard and `more` both open (a namespace's list added to the service's).
    pub fn with(&self, more: &TargetGuard) -> TargetGuard {
        let mut both = self.clone();
        both.hosts.extend(more.hosts.iter().filter(|h| !self.hosts.contains(h)).cloned());
        both.networks.extend(more.networks.iter().filter(|n| !self.networks.contains(n)).copied());
        both
    }

    /// Whether it opens nothing beyond public addresses.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.networks.is_empty()
    }

    /// Whether `host` (a URL's host, a name or an address) is allowed by name: then any
    /// address it resolves to may be reached.
    pub fn allows_host(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.');
        self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }

    /// Whether a callback may connect to `ip`.
    pub fn allows(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.networks.iter().any(|n| n.contains(&ip)) || is_public(ip)
    }

    /// The addresses of `addresses` a callback to `host` may connect to; refused when none.
    pub fn filter(&self, host: &str, addresses: Vec<IpAddr>) -> Result<Vec<IpAddr>, Refused> {
        if self.allows_host(host) {
            return Ok(addresses);
        }
        let allowed: Vec<IpAddr> = addresses.iter().copied().filter(|ip| self.allows(*ip)).collect();
        if allowed.is_empty() {
            Err(Refused::resolved(host, &addresses))
        } else {
            Ok(allowed)
        }
    }

    /// [`TargetGuard::check_literal`] on a URL's host (an unparsable URL passes: it is
    /// refused for what it is elsewhere).
    pub fn check_url(&self, url: &str) -> Result<(), Refused> {
        match url::Url::parse(url) {
            Ok(parsed) => self.check_literal(parsed.host_str().unwrap_or_default()),
            Err(_) => Ok(()),
        }
    }

    /// A URL host that is a literal address: refused unless allowed. Names pass here (they
    /// are checked when resolved).
    pub fn check_literal(&self, host: &str) -> Result<(), Refused> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        match bare.parse::<IpAddr>() {
            Ok(ip) if !self.allows_host(host) && !self.allows(ip) => Err(Refused::literal(ip)),
            _ => Ok(()),
        }
    }
}

/// An IPv4 address carried in IPv6 (mapped, or the deprecated compatible form) as IPv4,
/// so that `::ffff:127.0.0.1` is judged as `127.0.0.1`.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Globally routable: in none of the [`DENIED`] networks. An address of the NAT64 prefix
/// (64:ff9b::/96) is judged by the IPv4 address it carries.
pub fn is_public(ip: IpAddr) -> bool {
    let ip = canonical(ip);
    if let IpAddr::V6(v6) = ip {
        let nat64: Ipv6Net = "64:ff9b::/96".parse().expect("a valid network");
        if nat64.contains(&v6) {
            let o = v6.octets();
            return is_public(IpAddr::V4(Ipv4Addr::new(o[12], o[13], o[14], o[15])));
        }
        // IPv4-compatible (::a.b.c.d, deprecated): its IPv4 address.
        let compatible: Ipv6Net = "::/96".parse().expect("a valid network");
        if compatible.contains(&v6) && v6 != Ipv6Addr::UNSPECIFIED && v6 != Ipv6Addr::LOCALHOST {
            let o = v6.octets();
            return is_public(IpAddr::V4(Ipv4Addr::new(o[12], o[13], o[14], o[15])));
        }
    }
    !DENIED.iter().any(|n| n.contains(&ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_public_addresses_pass_by_default() {
        let guard = TargetGuard::default();
        for denied in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "10.0.0.1",
            "172.16.5.4",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "198.18.0.1",
            "::1",
            "::",
            "fd00::1",
            "fc00::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::10.0.0.1",
            "2001:db8::1",
        ] {
            assert!(!guard.allows(ip(denied)), "{denied} must be refused");
        }
        for public in ["8.8.8.8", "1.1.1.1", "93.184.216.34", "172.32.0.1", "2606:4700:4700::1111", "64:ff9b::808:808"]
        {
            assert!(guard.allows(ip(public)), "{public} is public");
        }
    }

    #[test]
    fn the_allow_list_opens_hosts_and_networks() {
        let guard: TargetGuard = "localhost, 127.0.0.0/8,[::1], 10.1.0.0/16,Hooks.Internal".parse().unwrap();
        assert!(guard.allows(ip("127.0.0.1")) && guard.allows(ip("::1")) && guard.allows(ip("10.1.2.3")));
        assert!(guard.allows(ip("::ffff:127.0.0.1")), "mapped IPv4 judged as IPv4");
        assert!(!guard.allows(ip("10.2.0.1")) && !guard.allows(ip("169.254.169.254")));
        assert!(guard.allows_host("hooks.internal") && guard.allows_host("LOCALHOST"));
        assert_eq!(guard.filter("hooks.internal", vec![ip("10.9.9.9")]), Ok(vec![ip("10.9.9.9")]));
        assert_eq!(guard.filter("mixed.example", vec![ip("10.9.9.9"), ip("8.8.8.8")]), Ok(vec![ip("8.8.8.8")]));
        let refused = TargetGuard::default().filter("evil.example", vec![ip("169.254.169.254")]).unwrap_err();
        let said = refused.to_string();
        assert!(
            said.contains("evil.example") && !said.contains("169.254.169.254"),
            "the rule, not the addresses: {said}"
        );
        assert_eq!(refused.addresses, vec![ip("169.254.169.254")], "kept for the operator's log");
        assert!("not a host!".parse::<TargetGuard>().is_err());
        assert!("".parse::<TargetGuard>().unwrap() == TargetGuard::default());
    }

    #[test]
    fn literal_hosts_are_checked_and_names_wait_for_resolution() {
        let guard = TargetGuard::default();
        assert!(guard.check_literal("127.0.0.1").is_err());
        assert!(guard.check_literal("[::1]").is_err());
        assert!(guard.check_literal("169.254.169.254").is_err());
        assert!(guard.check_literal("8.8.8.8").is_ok());
        assert!(guard.check_literal("localhost").is_ok(), "a name is judged by what it resolves to");
        let open: TargetGuard = "127.0.0.1".parse().unwrap();
        assert!(open.check_literal("127.0.0.1").is_ok());
    }
}
