//! kube-proxy's ipsets: names, types, and the entry syntax of `ipset save`.
//!
//! The names are a compatibility surface: operators' own rules and
//! monitoring match on them, so they are kube-proxy's letter for letter,
//! including the IPv6 prefix `KUBE-6-` and the kernel's 31-character limit
//! that truncates two IPv6 names.

use std::{fmt, net::IpAddr};

use ipnet::IpNet;
use serde::Serialize;

use crate::model::Protocol;

/// The longest set name the kernel accepts (`IPSET_MAXNAMELEN - 1`).
const MAX_NAME_LEN: usize = 31;

/// One of kube-proxy's sets, independent of the address family.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize,
)]
pub enum SetKind {
    LoopBack,
    ClusterIp,
    ExternalIp,
    ExternalIpLocal,
    LoadBalancer,
    LoadBalancerFw,
    LoadBalancerLocal,
    LoadBalancerSourceIp,
    LoadBalancerSourceCidr,
    NodePortTcp,
    NodePortLocalTcp,
    NodePortUdp,
    NodePortLocalUdp,
    NodePortSctp,
    NodePortLocalSctp,
    HealthCheckNodePort,
    IpvsIps,
}

/// The kernel set type, as `ipset create NAME TYPE` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SetType {
    HashIp,
    HashIpPort,
    HashIpPortIp,
    HashIpPortNet,
    BitmapPort,
}

impl SetType {
    pub fn as_str(self) -> &'static str {
        match self {
            SetType::HashIp => "hash:ip",
            SetType::HashIpPort => "hash:ip,port",
            SetType::HashIpPortIp => "hash:ip,port,ip",
            SetType::HashIpPortNet => "hash:ip,port,net",
            SetType::BitmapPort => "bitmap:port",
        }
    }
}

impl SetKind {
    pub const ALL: [SetKind; 17] = [
        SetKind::LoopBack,
        SetKind::ClusterIp,
        SetKind::ExternalIp,
        SetKind::ExternalIpLocal,
        SetKind::LoadBalancer,
        SetKind::LoadBalancerFw,
        SetKind::LoadBalancerLocal,
        SetKind::LoadBalancerSourceIp,
        SetKind::LoadBalancerSourceCidr,
        SetKind::NodePortTcp,
        SetKind::NodePortLocalTcp,
        SetKind::NodePortUdp,
        SetKind::NodePortLocalUdp,
        SetKind::NodePortSctp,
        SetKind::NodePortLocalSctp,
        SetKind::HealthCheckNodePort,
        SetKind::IpvsIps,
    ];

    /// The IPv4 name; IPv6 names derive from it (see [`SetName`]).
    pub fn base_name(self) -> &'static str {
        match self {
            SetKind::LoopBack => "KUBE-LOOP-BACK",
            SetKind::ClusterIp => "KUBE-CLUSTER-IP",
            SetKind::ExternalIp => "KUBE-EXTERNAL-IP",
            SetKind::ExternalIpLocal => "KUBE-EXTERNAL-IP-LOCAL",
            SetKind::LoadBalancer => "KUBE-LOAD-BALANCER",
            SetKind::LoadBalancerFw => "KUBE-LOAD-BALANCER-FW",
            SetKind::LoadBalancerLocal => "KUBE-LOAD-BALANCER-LOCAL",
            SetKind::LoadBalancerSourceIp => "KUBE-LOAD-BALANCER-SOURCE-IP",
            SetKind::LoadBalancerSourceCidr => "KUBE-LOAD-BALANCER-SOURCE-CIDR",
            SetKind::NodePortTcp => "KUBE-NODE-PORT-TCP",
            SetKind::NodePortLocalTcp => "KUBE-NODE-PORT-LOCAL-TCP",
            SetKind::NodePortUdp => "KUBE-NODE-PORT-UDP",
            SetKind::NodePortLocalUdp => "KUBE-NODE-PORT-LOCAL-UDP",
            SetKind::NodePortSctp => "KUBE-NODE-PORT-SCTP-HASH",
            SetKind::NodePortLocalSctp => "KUBE-NODE-PORT-LOCAL-SCTP-HASH",
            SetKind::HealthCheckNodePort => "KUBE-HEALTH-CHECK-NODE-PORT",
            SetKind::IpvsIps => "KUBE-IPVS-IPS",
        }
    }

    pub fn set_type(self) -> SetType {
        match self {
            SetKind::LoopBack | SetKind::LoadBalancerSourceIp => {
                SetType::HashIpPortIp
            }
            SetKind::LoadBalancerSourceCidr => SetType::HashIpPortNet,
            SetKind::NodePortTcp
            | SetKind::NodePortLocalTcp
            | SetKind::NodePortUdp
            | SetKind::NodePortLocalUdp
            | SetKind::HealthCheckNodePort => SetType::BitmapPort,
            SetKind::IpvsIps => SetType::HashIp,
            _ => SetType::HashIpPort,
        }
    }
}

/// A set of one family: `KUBE-CLUSTER-IP` or `KUBE-6-CLUSTER-IP`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize,
)]
pub struct SetName {
    pub kind: SetKind,
    pub ipv6: bool,
}

impl SetName {
    #[cfg(test)]
    pub fn v4(kind: SetKind) -> Self {
        Self { kind, ipv6: false }
    }

    pub fn for_addr(kind: SetKind, addr: IpAddr) -> Self {
        Self {
            kind,
            ipv6: addr.is_ipv6(),
        }
    }

    /// The kernel name. IPv6 sets swap the `KUBE-` prefix for `KUBE-6-`
    /// and are cut at the kernel's limit, exactly as kube-proxy does, so
    /// `KUBE-6-LOAD-BALANCER-SOURCE-CID` is the real name of that set.
    pub fn name(&self) -> String {
        let base = self.kind.base_name();
        if !self.ipv6 {
            return base.to_string();
        }
        let mut name = format!("KUBE-6-{}", &base["KUBE-".len()..]);
        name.truncate(MAX_NAME_LEN);
        name
    }

    /// The set of kube-proxy's, of either family, that the kernel knows
    /// as `name`; `None` for any other set.
    pub fn from_kernel_name(name: &str) -> Option<SetName> {
        static BY_NAME: std::sync::OnceLock<
            std::collections::HashMap<String, SetName>,
        > = std::sync::OnceLock::new();
        BY_NAME
            .get_or_init(|| {
                SetKind::ALL
                    .iter()
                    .flat_map(|&kind| {
                        [false, true].map(|ipv6| SetName { kind, ipv6 })
                    })
                    .map(|set| (set.name(), set))
                    .collect()
            })
            .get(name)
            .copied()
    }
}

impl fmt::Display for SetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// One member of a set. `Display` gives the syntax `ipset save` prints,
/// which is also what `ipset add` and `ipset restore` accept.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SetEntry {
    /// hash:ip
    Ip(IpAddr),
    /// hash:ip,port
    IpPort(IpAddr, Protocol, u16),
    /// hash:ip,port,ip
    IpPortIp(IpAddr, Protocol, u16, IpAddr),
    /// hash:ip,port,net
    IpPortNet(IpAddr, Protocol, u16, IpNet),
    /// bitmap:port
    Port(u16),
}

impl fmt::Display for SetEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetEntry::Ip(ip) => write!(f, "{ip}"),
            SetEntry::IpPort(ip, proto, port) => {
                write!(f, "{ip},{}:{port}", proto.ipset_name())
            }
            SetEntry::IpPortIp(ip, proto, port, ip2) => {
                write!(f, "{ip},{}:{port},{ip2}", proto.ipset_name())
            }
            SetEntry::IpPortNet(ip, proto, port, net) => {
                // `ipset save` omits a host-length prefix.
                let net = net.trunc();
                if net.prefix_len() == net.max_prefix_len() {
                    write!(
                        f,
                        "{ip},{}:{port},{}",
                        proto.ipset_name(),
                        net.addr()
                    )
                } else {
                    write!(f, "{ip},{}:{port},{net}", proto.ipset_name())
                }
            }
            SetEntry::Port(port) => write!(f, "{port}"),
        }
    }
}
