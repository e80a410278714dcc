//! Endpoint selection: which endpoints of a service port receive traffic
//! from this node, under the traffic policies and topology hints, as
//! upstream's `pkg/proxy/topology.go` (`CategorizeEndpoints`), and which
//! of them IPVS mode programs as real servers.

use std::{
    borrow::Cow,
    collections::{HashMap, HashSet},
    net::IpAddr,
    sync::Arc,
};

use crate::model::{
    EndpointInfo, EndpointsMap, Protocol, ServicePortInfo, ServicePortName,
};

pub mod reasons;
#[cfg(test)]
mod tests;

/// The endpoints of one service port, sorted as in the
/// [`EndpointsMap`](crate::model::EndpointsMap) they came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Categorized {
    /// Usable endpoints under the Cluster policy, topology applied. Empty
    /// when the service never uses the Cluster policy.
    pub cluster: Vec<Arc<EndpointInfo>>,
    /// Usable local endpoints under the Local policy. Empty when the
    /// service never uses the Local policy.
    pub local: Vec<Arc<EndpointInfo>>,
    /// The union of the two: every endpoint this node may send to.
    pub all_reachable: Vec<Arc<EndpointInfo>>,
    /// Whether any endpoint anywhere is usable (possibly none from here).
    pub has_any_endpoints: bool,
}

/// What one node uses of one service port's endpoints: everything the
/// desired state, the health checks, the conntrack cleanup and the
/// `no_local_endpoints` metric read, and nothing else. A proxy computes it
/// from the whole [`EndpointsMap`]; a node fed by the API side receives it
/// ready-made, so it never holds endpoints it would discard.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeEndpoints {
    pub ipv4: Categorized,
    pub ipv6: Categorized,
    /// The node's own endpoints whatever their conditions: a pod reaching
    /// its own service is masqueraded (hairpin) even while not ready, and
    /// the health check counts the ready ones.
    pub local: Vec<Arc<EndpointInfo>>,
    /// UDP ports only: the address of every serving endpoint, on any node.
    /// The conntrack cleanup keeps a flow answered by any of them, as
    /// upstream's does, not only by those this node selects.
    pub serving: Vec<IpAddr>,
}

impl NodeEndpoints {
    /// The selection for the family of `ip` (a cluster IP).
    pub fn family(&self, ip: IpAddr) -> &Categorized {
        if ip.is_ipv6() {
            &self.ipv6
        } else {
            &self.ipv4
        }
    }
}

/// Selects what the node `node_name` in `zone` uses of a service port's
/// `endpoints` (both families, as [`EndpointsMap`] lists hold them).
///
/// Upstream runs one proxier per IP family, so each family's endpoints are
/// categorized apart: "every ready endpoint has a hint" and "has any
/// endpoints" are per family.
pub fn select(
    svc: &ServicePortInfo,
    endpoints: &[Arc<EndpointInfo>],
    node_name: &str,
    zone: &str,
) -> NodeEndpoints {
    let (v4, v6): (Vec<_>, Vec<_>) =
        endpoints.iter().cloned().partition(|ep| ep.ip.is_ipv4());
    let serving = if svc.protocol == Protocol::Udp {
        serving_addresses(endpoints)
    } else {
        Vec::new()
    };
    NodeEndpoints {
        ipv4: categorize_endpoints(&v4, svc, node_name, zone),
        ipv6: categorize_endpoints(&v6, svc, node_name, zone),
        local: filter(endpoints, |ep| ep.is_local),
        serving,
    }
}

/// Distinct addresses of the serving endpoints, sorted.
fn serving_addresses(endpoints: &[Arc<EndpointInfo>]) -> Vec<IpAddr> {
    let mut serving: Vec<IpAddr> = endpoints
        .iter()
        .filter(|ep| ep.serving)
        .map(|ep| ep.ip)
        .collect();
    serving.sort();
    serving.dedup();
    serving
}

/// Where a node's consumers find each service port's [`NodeEndpoints`]:
/// selected on demand from the whole [`EndpointsMap`] in a proxy that
/// watches the API server, or kept as received from the API side.
pub trait EndpointsView {
    fn node_endpoints(
        &self,
        name: &ServicePortName,
        svc: &ServicePortInfo,
        node_name: &str,
        zone: &str,
    ) -> Cow<'_, NodeEndpoints>;

    /// [`NodeEndpoints::local`] alone, without selecting the rest.
    fn local_endpoints(
        &self,
        name: &ServicePortName,
    ) -> Cow<'_, [Arc<EndpointInfo>]>;

    /// [`NodeEndpoints::serving`] alone, for a UDP port.
    fn serving_addresses(&self, name: &ServicePortName) -> Cow<'_, [IpAddr]>;

    /// Every endpoint of the port known here, and whether that is all of
    /// the Service's slices' (a node fed by the API side knows only those
    /// its view selected for it): what `explain` shows.
    fn known_endpoints(
        &self,
        name: &ServicePortName,
    ) -> (Cow<'_, [Arc<EndpointInfo>]>, bool);
}

impl EndpointsView for EndpointsMap {
    fn node_endpoints(
        &self,
        name: &ServicePortName,
        svc: &ServicePortInfo,
        node_name: &str,
        zone: &str,
    ) -> Cow<'_, NodeEndpoints> {
        let endpoints = self.get(name).map(Vec::as_slice).unwrap_or(&[]);
        Cow::Owned(select(svc, endpoints, node_name, zone))
    }

    fn local_endpoints(
        &self,
        name: &ServicePortName,
    ) -> Cow<'_, [Arc<EndpointInfo>]> {
        let endpoints = self.get(name).map(Vec::as_slice).unwrap_or(&[]);
        Cow::Owned(filter(endpoints, |ep| ep.is_local))
    }

    fn serving_addresses(&self, name: &ServicePortName) -> Cow<'_, [IpAddr]> {
        let endpoints = self.get(name).map(Vec::as_slice).unwrap_or(&[]);
        Cow::Owned(serving_addresses(endpoints))
    }

    fn known_endpoints(
        &self,
        name: &ServicePortName,
    ) -> (Cow<'_, [Arc<EndpointInfo>]>, bool) {
        let endpoints = self.get(name).map(Vec::as_slice).unwrap_or(&[]);
        (Cow::Borrowed(endpoints), true)
    }
}

/// The selections a node received, per service port.
pub type NodeEndpointsMap = HashMap<ServicePortName, Arc<NodeEndpoints>>;

impl EndpointsView for NodeEndpointsMap {
    fn node_endpoints(
        &self,
        name: &ServicePortName,
        _svc: &ServicePortInfo,
        _node_name: &str,
        _zone: &str,
    ) -> Cow<'_, NodeEndpoints> {
        match self.get(name) {
            Some(selected) => Cow::Borrowed(&**selected),
            None => Cow::Owned(NodeEndpoints::default()),
        }
    }

    fn local_endpoints(
        &self,
        name: &ServicePortName,
    ) -> Cow<'_, [Arc<EndpointInfo>]> {
        Cow::Borrowed(self.get(name).map_or(&[][..], |s| &s.local))
    }

    fn serving_addresses(&self, name: &ServicePortName) -> Cow<'_, [IpAddr]> {
        Cow::Borrowed(self.get(name).map_or(&[][..], |s| &s.serving))
    }

    fn known_endpoints(
        &self,
        name: &ServicePortName,
    ) -> (Cow<'_, [Arc<EndpointInfo>]>, bool) {
        let Some(selected) = self.get(name) else {
            return (Cow::Borrowed(&[][..]), false);
        };
        let mut seen = HashSet::new();
        let known = (selected.ipv4.all_reachable.iter())
            .chain(&selected.ipv6.all_reachable)
            .chain(&selected.local)
            .filter(|ep| seen.insert((ep.ip, ep.port)))
            .cloned()
            .collect();
        (Cow::Owned(known), false)
    }
}

/// How topology hints narrow the cluster endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Topology {
    /// No hints used: every ready endpoint.
    All,
    PreferSameZone,
    PreferSameNode,
}

/// Sorts `endpoints` (of one address family) into the cluster and local
/// sets. Their family is the one whose external addresses count, as in
/// upstream's per-family proxiers.
///
/// Usable means ready; when no endpoint is ready (counted separately for
/// the cluster and the local set) serving-terminating endpoints are used
/// instead, so that connections drain instead of failing. Hints narrow
/// the cluster set only when every ready endpoint carries one and one
/// matches this node (node hints, checked first) or zone.
pub fn categorize_endpoints(
    endpoints: &[Arc<EndpointInfo>],
    svc: &ServicePortInfo,
    node_name: &str,
    node_zone: &str,
) -> Categorized {
    let mut out = Categorized::default();
    let Some(first) = endpoints.first() else {
        return out;
    };
    let ipv6 = first.ip.is_ipv6();

    let mut topology = Topology::All;
    if svc.uses_cluster_endpoints(ipv6) {
        topology = topology_from_hints(endpoints, node_name, node_zone);
        out.cluster = filter(endpoints, |ep| {
            ep.ready && available_for(ep, topology, node_name, node_zone)
        });
        // Topology was already dropped if it left no ready endpoint, so
        // an empty set here means nothing is ready anywhere.
        if out.cluster.is_empty() {
            out.cluster = filter(endpoints, |ep| ep.serving && ep.terminating);
        }
        out.has_any_endpoints = !out.cluster.is_empty();
    }

    if !svc.uses_local_endpoints(ipv6) {
        out.all_reachable = out.cluster.clone();
        return out;
    }

    let usable = |ep: &EndpointInfo| ep.ready || (ep.serving && ep.terminating);
    out.has_any_endpoints |= endpoints.iter().any(|ep| usable(ep));
    let local_ready = endpoints.iter().any(|ep| ep.is_local && ep.ready);
    let mut local_terminating = false;
    if local_ready {
        out.local = filter(endpoints, |ep| ep.is_local && ep.ready);
    } else {
        out.local =
            filter(endpoints, |ep| ep.is_local && ep.serving && ep.terminating);
        local_terminating = !out.local.is_empty();
    }

    if !svc.uses_cluster_endpoints(ipv6) {
        out.all_reachable = out.local.clone();
        return out;
    }
    if topology == Topology::All && !local_terminating {
        // Every ready endpoint is in the cluster set, and the local set
        // holds only ready ones: the cluster set covers it.
        out.all_reachable = out.cluster.clone();
        return out;
    }
    let members: HashSet<(IpAddr, u16)> = out
        .cluster
        .iter()
        .chain(&out.local)
        .map(|ep| (ep.ip, ep.port))
        .collect();
    out.all_reachable =
        filter(endpoints, |ep| members.contains(&(ep.ip, ep.port)));
    out
}

/// Upstream's `topologyModeFromHints`.
fn topology_from_hints(
    endpoints: &[Arc<EndpointInfo>],
    node_name: &str,
    zone: &str,
) -> Topology {
    let mut has_ready = false;
    let mut all_node_hints = true;
    let mut hinted_for_node = false;
    let mut all_zone_hints = true;
    let mut hinted_for_zone = false;
    for ep in endpoints.iter().filter(|ep| ep.ready) {
        has_ready = true;
        if ep.node_hints.is_empty() {
            all_node_hints = false;
        } else if hinted_for(ep, node_name) {
            hinted_for_node = true;
        }
        if ep.zone_hints.is_empty() {
            all_zone_hints = false;
        } else if ep.zone_hints.contains(zone) {
            hinted_for_zone = true;
        }
    }
    if !has_ready {
        return Topology::All;
    }
    if all_node_hints && hinted_for_node {
        return Topology::PreferSameNode;
    }
    if all_zone_hints && hinted_for_zone {
        return Topology::PreferSameZone;
    }
    Topology::All
}

fn available_for(
    ep: &EndpointInfo,
    topology: Topology,
    node_name: &str,
    zone: &str,
) -> bool {
    match topology {
        Topology::All => true,
        Topology::PreferSameNode => hinted_for(ep, node_name),
        Topology::PreferSameZone => ep.zone_hints.contains(zone),
    }
}

/// Whether a hint names the node. No hint names the empty name: it is
/// what the API side selects for when the selection is for no node in
/// particular (a zone's), and a hint for "" from a malformed slice must
/// not make that selection differ from an unnamed node's.
fn hinted_for(ep: &EndpointInfo, node_name: &str) -> bool {
    !node_name.is_empty() && ep.node_hints.contains(node_name)
}

fn filter(
    endpoints: &[Arc<EndpointInfo>],
    keep: impl Fn(&EndpointInfo) -> bool,
) -> Vec<Arc<EndpointInfo>> {
    endpoints.iter().filter(|ep| keep(ep)).cloned().collect()
}

/// The real servers IPVS mode programs behind one virtual server.
/// `only_local` is the virtual server's policy: `internalTrafficPolicy:
/// Local` for the cluster IP, `externalTrafficPolicy: Local` for external
/// IPs, load-balancer IPs and node ports.
///
/// Upstream `pkg/proxy/ipvs/proxier.go`, `syncEndpoint`: under a Local
/// policy with no local endpoint it programs the *cluster* endpoints
/// (kubernetes PR 97081), so that pods on this node can still reach the
/// service; external clients' replies then come from the pod's address
/// and are dropped, which is the intended failure for them. This is
/// unlike iptables/nftables mode, which drops such traffic.
pub fn ipvs_real_servers(
    c: &Categorized,
    only_local: bool,
) -> &[Arc<EndpointInfo>] {
    if only_local && !c.local.is_empty() {
        &c.local
    } else {
        &c.cluster
    }
}

/// Whether [`ipvs_real_servers`] fell back for lack of local endpoints
/// while the service has endpoints elsewhere; upstream counts such
/// services in `kubeproxy_sync_proxy_rules_no_local_endpoints_total`.
pub fn ipvs_lacks_local_endpoints(c: &Categorized, only_local: bool) -> bool {
    only_local && c.local.is_empty() && c.has_any_endpoints
}
