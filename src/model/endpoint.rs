use std::{
    collections::{BTreeSet, HashMap},
    net::IpAddr,
    sync::Arc,
};

use serde::Serialize;

use super::ServicePortName;

/// One endpoint of one service port, as kube-proxy reads it from an
/// EndpointSlice (upstream's `BaseEndpointInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointInfo {
    /// The endpoint's first address; EndpointSlices allow more, but every
    /// consumer uses only the first.
    pub ip: IpAddr,
    pub port: u16,
    /// `nodeName` equals this proxy's node.
    pub is_local: bool,
    /// `nodeName`, which the API side reads to give each node its own
    /// endpoints (it converts slices for no node, so `is_local` is false).
    pub node_name: Option<Arc<str>>,
    /// `conditions.ready`, nil counted as true.
    pub ready: bool,
    /// `conditions.serving`, nil counted as true (upstream's
    /// `endpointslicecache.go`; the API server fills it in since 1.26).
    pub serving: bool,
    /// `conditions.terminating`, nil counted as false.
    pub terminating: bool,
    /// `hints.forZones[].name`; empty when the endpoint has no zone hints.
    pub zone_hints: BTreeSet<String>,
    /// `hints.forNodes[].name`; empty when the endpoint has no node hints.
    pub node_hints: BTreeSet<String>,
}

impl EndpointInfo {
    /// `ip:port` with brackets for IPv6, as upstream's `String()`.
    #[cfg(test)]
    pub fn endpoint_string(&self) -> String {
        std::net::SocketAddr::new(self.ip, self.port).to_string()
    }
}

/// The tracked endpoints per service port, as upstream's `EndpointsMap`.
/// Each list is sorted by address then port and free of duplicate
/// `ip:port` pairs. Lists hold both IP families: consumers pick the
/// endpoints whose family matches the virtual server's.
pub type EndpointsMap = HashMap<ServicePortName, Vec<Arc<EndpointInfo>>>;
