use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;

/// What the proxy reads from its own Node object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    pub name: String,
    /// `spec.podCIDRs`.
    pub pod_cidrs: Vec<IpNet>,
    /// The `topology.kubernetes.io/zone` label, empty when unset.
    pub zone: String,
    /// `status.addresses` of type InternalIP then ExternalIP, in the
    /// order the API lists them; used for node ports when there is no
    /// kernel to ask for local addresses.
    pub addresses: Vec<IpAddr>,
    /// False when the node is being deleted or the cluster autoscaler
    /// has tainted it `ToBeDeletedByClusterAutoscaler`, which makes
    /// `/healthz` report the node as not eligible for traffic.
    pub eligible: bool,
}
