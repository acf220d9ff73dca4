//! `PUNCTUAL_HOST_ADDRESSES`: addresses given to host names instead of the system
//! resolver's, as `/etc/hosts` does, for this process's callbacks only (a name served by
//! several instances that DNS does not list, a broadcast's instances on one machine).

use std::collections::HashMap;
use std::net::IpAddr;
use std::str::FromStr;

/// Host names and the addresses they resolve to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostAddresses(HashMap<String, Vec<IpAddr>>);

/// An entry of `PUNCTUAL_HOST_ADDRESSES` that is not `name=address,…`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("PUNCTUAL_HOST_ADDRESSES: {0:?} is not `name=address,address…` (entries separated by `;`)")]
pub struct InvalidHostAddresses(String);

impl FromStr for HostAddresses {
    type Err = InvalidHostAddresses;

    /// `instances.internal=10.0.0.5,10.0.0.6;other.internal=10.0.0.7`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut hosts = HashMap::new();
        for entry in s.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            let invalid = || InvalidHostAddresses(entry.to_owned());
            let (name, addresses) = entry.split_once('=').ok_or_else(invalid)?;
            let name = name.trim().to_ascii_lowercase();
            let addresses: Vec<IpAddr> =
                addresses.split(',').map(|a| a.trim().parse()).collect::<Result<_, _>>().map_err(|_| invalid())?;
            if name.is_empty() || addresses.is_empty() {
                return Err(invalid());
            }
            hosts.insert(name, addresses);
        }
        Ok(HostAddresses(hosts))
    }
}

impl HostAddresses {
    /// The addresses given to `host`, if any.
    pub fn get(&self, host: &str) -> Option<&[IpAddr]> {
        self.0.get(&host.to_ascii_lowercase()).map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_take_the_addresses_listed() {
        let hosts: HostAddresses = "Instances.test=127.0.0.2, 127.0.0.3;other=::1".parse().unwrap();
        assert_eq!(hosts.get("instances.test").unwrap().len(), 2);
        assert_eq!(hosts.get("OTHER"), Some(&["::1".parse().unwrap()][..]));
        assert_eq!(hosts.get("unknown"), None);
        assert_eq!("".parse::<HostAddresses>(), Ok(HostAddresses::default()));
        for wrong in ["name", "name=", "=127.0.0.1", "name=not-an-address"] {
            assert!(wrong.parse::<HostAddresses>().is_err(), "{wrong}");
        }
    }
}
