//! Which address types (IP families) a Service gets slices for, and which
//! family a pod IP belongs to.

use std::{collections::BTreeSet, fmt, net::IpAddr};

use k8s_openapi::api::core::v1::Service;

/// The `addressType` of a slice the controller manages. Upstream's
/// deprecated `IP` and the `FQDN` type are never produced, so slices of
/// those types are not reconcilable and get deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddressType {
    IPv4,
    IPv6,
}

impl AddressType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::IPv4 => "IPv4",
            Self::IPv6 => "IPv6",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "IPv4" => Some(Self::IPv4),
            "IPv6" => Some(Self::IPv6),
            _ => None,
        }
    }

    /// An IPv4-mapped IPv6 address counts as IPv4, as it does for Go's
    /// `net.IP`, which the controller parses pod IPs with.
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(_) => Self::IPv4,
            IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => Self::IPv4,
            IpAddr::V6(_) => Self::IPv6,
        }
    }
}

impl fmt::Display for AddressType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The address types the Service's slices have: its `ipFamilies`; failing
/// those, the families of its cluster IPs; failing those, both families for
/// a headless Service (upstream's guess for objects from old API servers).
///
/// A Service with neither families nor cluster IPs cannot come from an API
/// server; it can come from a hand-written state file, where IPv4 is what a
/// single-stack cluster would have allocated.
pub(super) fn for_service(service: &Service) -> BTreeSet<AddressType> {
    let Some(spec) = &service.spec else {
        return BTreeSet::from([AddressType::IPv4]);
    };
    let families: BTreeSet<AddressType> = spec
        .ip_families
        .iter()
        .flatten()
        .filter_map(|f| AddressType::parse(f))
        .collect();
    if !families.is_empty() {
        return families;
    }

    let cluster_ips: Vec<&str> = match &spec.cluster_ips {
        Some(ips) if !ips.is_empty() => {
            ips.iter().map(String::as_str).collect()
        }
        _ => spec.cluster_ip.as_deref().into_iter().collect(),
    };
    let headless = cluster_ips.contains(&"None");
    let from_ips: BTreeSet<AddressType> = cluster_ips
        .iter()
        .filter(|ip| !ip.is_empty() && **ip != "None")
        // Like upstream, anything that does not parse as IPv6 counts as
        // IPv4.
        .map(|ip| match ip.parse::<IpAddr>() {
            Ok(ip) => AddressType::of(ip),
            Err(_) => AddressType::IPv4,
        })
        .collect();
    if !from_ips.is_empty() {
        from_ips
    } else if headless {
        BTreeSet::from([AddressType::IPv4, AddressType::IPv6])
    } else {
        BTreeSet::from([AddressType::IPv4])
    }
}
