//! Whose a virtual server in the kernel is: upstream deletes every
//! virtual server it does not know; we delete only our own.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use ipnet::IpNet;

use crate::{
    desired::{
        ServiceState, SetEntry, SetKind, SetName, VirtualServer,
        VirtualServerKind,
    },
    kernel::{ipsets::SetState, ipvs::VirtualServerKey},
    model::Protocol,
};

/// Whose a virtual server in the kernel is. Upstream deletes every
/// virtual server it does not know; we delete only our own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ownership {
    /// `excludeCIDRs`: virtual servers on these addresses are never
    /// deleted, as upstream's cleanup skips them.
    pub exclude_cidrs: Vec<IpNet>,
    /// Virtual servers this process programmed off the dummy link
    /// (NodePorts on node addresses) or failed to delete: ours although
    /// their address is not on the link.
    pub programmed: BTreeSet<VirtualServerKey>,
    /// The addresses NodePorts listen on.
    pub node_addresses: BTreeSet<IpAddr>,
    /// What the kernel's sets say a kube-proxy (ours or upstream's)
    /// programmed ([`listed_in_sets`]): after a restart or a takeover the
    /// process has no record of a NodePort or an external IP on a node
    /// address deleted meanwhile, and nothing else marks it.
    pub listed: Listed,
}

/// The virtual servers a kube-proxy's sets list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listed {
    /// From the sets of external and load-balancer IPs, and SCTP
    /// NodePorts (address, protocol and port in each entry).
    pub services: BTreeSet<VirtualServerKey>,
    /// From the TCP and UDP NodePort sets, which hold ports only: a
    /// virtual server on a node address with one of these is a NodePort,
    /// whatever the cluster's `--service-node-port-range`.
    pub node_ports: BTreeSet<(Protocol, u16)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    Ours,
    /// In `excludeCIDRs`: left alone whoever it belongs to.
    Excluded,
    Foreign,
}

impl Ownership {
    pub fn classify(
        &self,
        key: &VirtualServerKey,
        link_addresses: &BTreeSet<IpAddr>,
    ) -> Owner {
        if self
            .exclude_cidrs
            .iter()
            .any(|net| net.contains(&key.address))
        {
            return Owner::Excluded;
        }
        let listed_node_port = self.node_addresses.contains(&key.address)
            && self.listed.node_ports.contains(&(key.protocol, key.port));
        if link_addresses.contains(&key.address)
            || self.programmed.contains(key)
            || listed_node_port
            || self.listed.services.contains(key)
        {
            Owner::Ours
        } else {
            Owner::Foreign
        }
    }
}

/// What the sets of external and load-balancer IPs and of NodePorts (both
/// families, `Local` ones included) list. Only a kube-proxy writes those
/// sets, so a virtual server they list is one, even when its address is
/// the node's own: an external IP that is a node address needs no binding
/// to kube-ipvs0, a NodePort none, and upstream's state after a takeover
/// has no record of ours.
pub fn listed_in_sets(sets: &BTreeMap<String, SetState>) -> Listed {
    let kinds = [
        SetKind::ExternalIp,
        SetKind::ExternalIpLocal,
        SetKind::LoadBalancer,
        SetKind::LoadBalancerLocal,
        SetKind::NodePortTcp,
        SetKind::NodePortLocalTcp,
        SetKind::NodePortUdp,
        SetKind::NodePortLocalUdp,
        SetKind::NodePortSctp,
        SetKind::NodePortLocalSctp,
    ];
    let mut out = Listed::default();
    for ipv6 in [false, true] {
        for kind in kinds {
            let Some(set) = sets.get(&SetName { kind, ipv6 }.name()) else {
                continue;
            };
            let port_protocol = match kind {
                SetKind::NodePortTcp | SetKind::NodePortLocalTcp => {
                    Some(Protocol::Tcp)
                }
                SetKind::NodePortUdp | SetKind::NodePortLocalUdp => {
                    Some(Protocol::Udp)
                }
                _ => None,
            };
            for entry in &set.entries {
                match (entry, port_protocol) {
                    (SetEntry::IpPort(address, protocol, port), _) => {
                        out.services.insert(VirtualServerKey {
                            address: *address,
                            port: *port,
                            protocol: *protocol,
                        });
                    }
                    (SetEntry::Port(port), Some(protocol)) => {
                        out.node_ports.insert((protocol, *port));
                    }
                    _ => {}
                }
            }
        }
    }
    out
}

/// NodePort virtual servers of the given states: ours although their
/// address is not on the dummy link.
pub fn node_port_keys<'a>(
    states: impl IntoIterator<Item = &'a ServiceState> + 'a,
) -> impl Iterator<Item = VirtualServerKey> + 'a {
    states.into_iter().flat_map(|state| {
        state
            .virtual_servers
            .iter()
            .filter(|vs| vs.kind == VirtualServerKind::NodePort)
            .map(VirtualServer::key)
    })
}
