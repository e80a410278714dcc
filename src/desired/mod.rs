//! The desired kernel state: what IPVS, kube-ipvs0 and the ipsets should
//! hold, as pure data computed by pure functions.
//!
//! The state is kept per service port, so that a sync recomputes only the
//! service ports the trackers checked out and hands the backend the
//! before/after of exactly those ([`ServiceDelta`]). Everything that is
//! derivable across services (bound addresses, KUBE-IPVS-IPS, the merged
//! sets) is derived on demand in [`DesiredState::snapshot`].

mod compute;
mod ipsets;
mod render;
mod schedulers;
mod sorted_set;
mod state;
#[cfg(test)]
mod tests;

use std::{collections::BTreeSet, net::IpAddr};

use serde::Serialize;

#[cfg(test)]
pub use compute::service_state;
pub use ipsets::{SetEntry, SetKind, SetName, SetType};
pub use schedulers::{Refusal, RefusedScheduler, SchedulerPolicy};
pub use sorted_set::SortedSet;
pub use state::{DesiredState, Plan, ServiceDelta};

use crate::model::{IpFamily, Protocol, Scheduling, ServicePortName};

/// Which address of a service a virtual server serves. Not part of the
/// plan's JSON: it is visible there from the address itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VirtualServerKind {
    ClusterIp,
    ExternalIp,
    LoadBalancer,
    NodePort,
}

impl VirtualServerKind {
    /// The frontend's name as the Service's fields spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            VirtualServerKind::ClusterIp => "clusterIP",
            VirtualServerKind::ExternalIp => "externalIP",
            VirtualServerKind::LoadBalancer => "loadBalancer",
            VirtualServerKind::NodePort => "nodePort",
        }
    }
}

/// The identity of an IPVS service in the kernel.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize,
)]
pub struct VirtualServerKey {
    pub address: IpAddr,
    pub port: u16,
    pub protocol: Protocol,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualServer {
    pub protocol: Protocol,
    pub address: IpAddr,
    pub port: u16,
    /// The scheduler's name is shared with every virtual server and the
    /// node context.
    #[serde(flatten)]
    pub scheduling: Scheduling,
    /// ClientIP session affinity, which IPVS implements as persistence.
    pub persistent: bool,
    /// The persistence timeout in seconds; 0 when not persistent.
    pub timeout: u32,
    pub service: ServicePortName,
    pub real_servers: Vec<RealServer>,
    #[serde(skip)]
    pub kind: VirtualServerKind,
}

impl VirtualServer {
    pub fn key(&self) -> VirtualServerKey {
        VirtualServerKey {
            address: self.address,
            port: self.port,
            protocol: self.protocol,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct RealServer {
    pub address: IpAddr,
    pub port: u16,
    pub weight: u32,
}

/// Everything one service port contributes to the kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceState {
    pub virtual_servers: Vec<VirtualServer>,
    /// Addresses this service port needs on kube-ipvs0.
    pub bound_addresses: SortedSet<IpAddr>,
    pub set_entries: SortedSet<(SetName, SetEntry)>,
    /// The Service's annotated scheduler, when the node would not run it.
    pub refused_scheduler: Option<RefusedScheduler>,
}

/// What the computation needs to know about the node it runs on. A change
/// here (rare: a new node IP, a zone label) recomputes every service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeContext {
    pub node_name: String,
    /// The node's `topology.kubernetes.io/zone`, for topology hints.
    pub zone: String,
    /// The addresses NodePort virtual servers listen on, already filtered
    /// by `nodePortAddresses`.
    pub node_port_addresses: Vec<IpAddr>,
    /// The node's primary IP per family (upstream's `nodeIP`): a load
    /// balancer whose source ranges admit it must accept the node's own
    /// traffic.
    pub primary_ips: Vec<IpAddr>,
    /// Addresses already on interfaces other than kube-ipvs0. External
    /// and load-balancer IPs among them are not bound again.
    pub local_addresses: BTreeSet<IpAddr>,
    /// The IPVS scheduler and its flags for every virtual server (`rr` by
    /// default), and what Services' annotations may choose instead.
    pub schedulers: SchedulerPolicy,
    /// Whether this node runs the IPv6 side too: it decides whether the
    /// `KUBE-6-` sets exist at all.
    pub ipv6: bool,
    /// Whether the IPv4 side runs (false only on IPv6-only nodes).
    pub ipv4: bool,
    /// The node's `spec.podCIDRs`: local-traffic detection under
    /// `detectLocalMode: NodeCIDR` reads them.
    pub pod_cidrs: Vec<ipnet::IpNet>,
    /// The `AllowServiceExternalIPs` gate turned off: Services' external
    /// IPs get no virtual server, address or set entry (their traffic
    /// policies still count them, as upstream's do).
    pub without_external_ips: bool,
}

impl NodeContext {
    /// The families this node programs, IPv4 first.
    pub fn families(&self) -> Vec<IpFamily> {
        let mut families = Vec::with_capacity(2);
        if self.ipv4 {
            families.push(IpFamily::V4);
        }
        if self.ipv6 {
            families.push(IpFamily::V6);
        }
        families
    }
}
