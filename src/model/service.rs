use std::{collections::HashMap, fmt, net::IpAddr, sync::Arc};

use ipnet::IpNet;
use serde::Serialize;

use super::{Protocol, ServiceScheduling};

/// `namespace/name` of an API object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct NamespacedName {
    pub namespace: String,
    pub name: String,
}

impl NamespacedName {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for NamespacedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Identifies one port of one Service, as upstream's `ServicePortName`:
/// the port's name (possibly empty) and its protocol, so that a service
/// exposing port 53 over TCP and UDP under one name still yields two keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServicePortName {
    pub service: NamespacedName,
    pub port: String,
    pub protocol: Protocol,
}

impl ServicePortName {
    #[cfg(any(test, feature = "test-support"))]
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        port: impl Into<String>,
        protocol: Protocol,
    ) -> Self {
        Self {
            service: NamespacedName::new(namespace, name),
            port: port.into(),
            protocol,
        }
    }
}

/// `ns/name:port` — the spelling upstream logs and the plan's `service`
/// field use. An unnamed port prints as `ns/name:`, as upstream does.
impl fmt::Display for ServicePortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.service, self.port)
    }
}

impl Serialize for ServicePortName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Everything kube-proxy reads from one port of a Service.
///
/// Equality is what the change tracker uses to decide that an update is a
/// no-op, so every field here must be one that changes kernel state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePortInfo {
    /// `spec.clusterIPs`, primary family first. Never empty: services
    /// without a cluster IP are not tracked.
    pub cluster_ips: Vec<IpAddr>,
    pub port: u16,
    pub protocol: Protocol,
    /// 0 when the service has no node port.
    pub node_port: u16,
    /// `Some(timeout in seconds)` for `sessionAffinity: ClientIP`.
    pub session_affinity_timeout: Option<u32>,
    pub external_ips: Vec<IpAddr>,
    /// Load-balancer ingress IPs whose `ipMode` is unset or `VIP`; the
    /// `Proxy` mode means the load balancer delivers to the node, so the
    /// proxy must not capture the address.
    pub load_balancer_vips: Vec<IpAddr>,
    /// `spec.loadBalancerSourceRanges`, trimmed and parsed.
    pub load_balancer_source_ranges: Vec<IpNet>,
    /// `externalTrafficPolicy: Local` on a service that has external
    /// addresses (NodePort, LoadBalancer, externalIPs).
    pub external_policy_local: bool,
    /// `internalTrafficPolicy: Local`.
    pub internal_policy_local: bool,
    /// 0 unless the service is an ETP=Local load balancer.
    pub health_check_node_port: u16,
    /// `spec.type == LoadBalancer`, needed because a load balancer without
    /// ingress IPs still gets node ports but no LB entries.
    pub is_load_balancer: bool,
    /// Ours: the Service's own scheduler and flags, from its annotations;
    /// `None` without them, and the node's are used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<ServiceScheduling>,
}

impl ServicePortInfo {
    /// Whether the service is reachable from outside the cluster through
    /// `ipv6`'s family (upstream's `ExternallyAccessible`). Upstream runs
    /// one proxier per family and each one's service port keeps only its
    /// own family's external and load-balancer IPs, so an IPv6 external IP
    /// does not make a single-stack IPv4 service external.
    pub fn externally_accessible(&self, ipv6: bool) -> bool {
        let same = |ip: &IpAddr| ip.is_ipv6() == ipv6;
        self.node_port != 0
            || self.load_balancer_vips.iter().any(same)
            || self.external_ips.iter().any(same)
    }

    /// Whether the cluster-traffic policy applies to some traffic of
    /// `ipv6`'s family: the internal policy is Cluster, or the service
    /// takes external traffic at all (even under ETP=Local, in-cluster
    /// clients of the external addresses are short-circuited to all
    /// endpoints). Upstream's `UsesClusterEndpoints`.
    pub fn uses_cluster_endpoints(&self, ipv6: bool) -> bool {
        !self.internal_policy_local || self.externally_accessible(ipv6)
    }

    /// Whether the local-traffic policy of any kind applies to `ipv6`'s
    /// family, i.e. whether local endpoints must be computed (upstream's
    /// `UsesLocalEndpoints`).
    pub fn uses_local_endpoints(&self, ipv6: bool) -> bool {
        self.internal_policy_local
            || (self.external_policy_local && self.externally_accessible(ipv6))
    }
}

/// The tracked set of service ports, as upstream's `ServicePortMap`.
pub type ServicePortMap = HashMap<ServicePortName, Arc<ServicePortInfo>>;
