//! Conversion of API objects into the model.
//!
//! Every function here is total: malformed input never fails the whole
//! object. The smallest broken unit (one port, one address, one source
//! range) is left out and described by an [`InvalidObject`], which the
//! caller reports once (log line plus metric) through
//! `telemetry::events::ReportProblems`.

use std::{
    fmt,
    net::IpAddr,
    sync::Arc,
    time::{Duration, SystemTime},
};

use ipnet::IpNet;
use k8s_openapi::{
    api::{
        core::v1::{Node, Service, ServicePort, ServiceSpec},
        discovery::v1::{Endpoint, EndpointPort, EndpointSlice},
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

use super::{
    EndpointInfo, NamespacedName, NodeInfo, Protocol, ServicePortInfo,
    ServicePortName, ServiceScheduling,
};

#[cfg(test)]
mod tests;

/// Session affinity timeout when `sessionAffinityConfig` leaves it out:
/// the API server's default (3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10_800;
/// The API server's upper bound for the session affinity timeout (1 day).
const MAX_AFFINITY_TIMEOUT: i32 = 86_400;

/// Label linking an EndpointSlice to its Service.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// Annotation the endpoint controllers set to the time of the change that
/// triggered the slice update; feeds the network programming latency.
pub const ANNOTATION_LAST_CHANGE_TRIGGER_TIME: &str =
    "endpoints.kubernetes.io/last-change-trigger-time";
/// Node label carrying the node's zone, matched against zone hints.
pub const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";
/// Taint the cluster autoscaler puts on a node it is about to remove.
pub const TAINT_TO_BE_DELETED: &str = "ToBeDeletedByClusterAutoscaler";

/// The kind of API object a problem was found in; the `kind` label of
/// the invalid-objects metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    Service,
    EndpointSlice,
    Node,
}

impl ObjectKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Service => "Service",
            ObjectKind::EndpointSlice => "EndpointSlice",
            ObjectKind::Node => "Node",
        }
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a part of an object was left out. `field` is the JSON path of the
/// offending value, e.g. `spec.ports[1].port`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidReason {
    #[error("{field}: {value:?} is not an IP address")]
    Ip { field: String, value: String },
    #[error("{field}: {value:?} is not a CIDR")]
    Cidr { field: String, value: String },
    #[error("{field}: {value} is not a valid port number")]
    Port { field: String, value: i32 },
    #[error("{field}: unknown protocol {value:?}")]
    Protocol { field: String, value: String },
    #[error(
        "{field}: session affinity timeout {value} is outside 1..=86400, \
         using the default {DEFAULT_AFFINITY_TIMEOUT}"
    )]
    AffinityTimeout { field: String, value: i32 },
    #[error("{field}: no usable cluster IP, service skipped")]
    NoClusterIp { field: String },
    #[error("{field}: endpoint has no address, skipped")]
    NoAddress { field: String },
    #[error(
        "{field}: {address} is not of the slice's addressType {address_type}, \
         skipped"
    )]
    AddressFamily {
        field: String,
        address: IpAddr,
        address_type: String,
    },
    #[error("{field}: port has no name, skipped")]
    UnnamedPort { field: String },
    #[error("label {LABEL_SERVICE_NAME} is missing, slice ignored")]
    MissingServiceName,
    #[error("metadata.namespace and metadata.name must be set, ignored")]
    MissingName,
    #[error(
        "annotation {ANNOTATION_LAST_CHANGE_TRIGGER_TIME}: {value:?} is not \
         an RFC 3339 time"
    )]
    TriggerTime { value: String },
    #[error(
        "annotated scheduler {scheduler:?} is not among \
         --ipvs-service-schedulers, the node's is used"
    )]
    SchedulerNotAllowed { scheduler: String },
    #[error(
        "annotated scheduler {scheduler:?}: the kernel has none, the \
         node's is used"
    )]
    SchedulerNotInKernel { scheduler: String },
    #[error("annotation {annotation}: {value:?}: {reason}, ignored")]
    SchedulingAnnotation {
        annotation: &'static str,
        value: String,
        reason: String,
    },
}

impl InvalidReason {
    /// A Service's scheduling annotations, which its author can fix: they
    /// are recorded as an Event on the Service too.
    pub fn is_scheduling(&self) -> bool {
        matches!(
            self,
            InvalidReason::SchedulingAnnotation { .. }
                | InvalidReason::SchedulerNotAllowed { .. }
                | InvalidReason::SchedulerNotInKernel { .. }
        )
    }

    /// The `reason` label of the invalid-objects metric: bounded, unlike
    /// the message.
    pub fn metric_label(&self) -> &'static str {
        match self {
            InvalidReason::Ip { .. } => "invalid_ip",
            InvalidReason::Cidr { .. } => "invalid_cidr",
            InvalidReason::Port { .. } => "invalid_port",
            InvalidReason::Protocol { .. } => "unknown_protocol",
            InvalidReason::AffinityTimeout { .. } => "invalid_affinity_timeout",
            InvalidReason::NoClusterIp { .. } => "no_cluster_ip",
            InvalidReason::NoAddress { .. } => "no_address",
            InvalidReason::AddressFamily { .. } => "address_family",
            InvalidReason::UnnamedPort { .. } => "unnamed_port",
            InvalidReason::MissingServiceName => "missing_service_name",
            InvalidReason::MissingName => "missing_name",
            InvalidReason::TriggerTime { .. } => "invalid_trigger_time",
            InvalidReason::SchedulingAnnotation { .. } => {
                "invalid_scheduling_annotation"
            }
            InvalidReason::SchedulerNotAllowed { .. } => {
                "scheduler_not_allowed"
            }
            InvalidReason::SchedulerNotInKernel { .. } => {
                "scheduler_not_in_kernel"
            }
        }
    }
}

/// One problem found in one object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {object}: {reason}")]
pub struct InvalidObject {
    pub kind: ObjectKind,
    pub object: NamespacedName,
    pub reason: InvalidReason,
}

/// A conversion result and the problems met on the way; the telemetry
/// layer reports them (`telemetry::events::ReportProblems`).
#[derive(Debug, Clone, PartialEq)]
pub struct Converted<T> {
    pub value: T,
    pub problems: Vec<InvalidObject>,
}

/// Collects problems for one object.
struct Problems {
    kind: ObjectKind,
    object: NamespacedName,
    found: Vec<InvalidObject>,
}

impl Problems {
    fn new(kind: ObjectKind, meta: &ObjectMeta) -> Self {
        Self {
            kind,
            object: object_name(meta),
            found: Vec::new(),
        }
    }

    fn push(&mut self, reason: InvalidReason) {
        self.found.push(InvalidObject {
            kind: self.kind,
            object: self.object.clone(),
            reason,
        });
    }

    fn finish<T>(self, value: T) -> Converted<T> {
        Converted {
            value,
            problems: self.found,
        }
    }

    fn ip(
        &mut self,
        field: impl FnOnce() -> String,
        value: &str,
    ) -> Option<IpAddr> {
        match parse_ip(value) {
            Some(ip) => Some(ip),
            None => {
                self.push(InvalidReason::Ip {
                    field: field(),
                    value: value.to_owned(),
                });
                None
            }
        }
    }

    fn port(
        &mut self,
        field: impl FnOnce() -> String,
        value: i32,
    ) -> Option<u16> {
        match u16::try_from(value) {
            Ok(port) => Some(port),
            Err(_) => {
                self.push(InvalidReason::Port {
                    field: field(),
                    value,
                });
                None
            }
        }
    }
}

/// `namespace/name` of any object's metadata; absent parts are empty.
pub fn object_name(meta: &ObjectMeta) -> NamespacedName {
    NamespacedName::new(
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// Parses an IP address as the API spells it. Surrounding whitespace is
/// not accepted, as in the API server's validation.
fn parse_ip(value: &str) -> Option<IpAddr> {
    value.parse().ok()
}

/// Parses a CIDR, keeping only the network part as Go's `ParseCIDR` does
/// (so `198.18.1.7/24` means `198.18.1.0/24`).
fn parse_cidr(value: &str) -> Option<IpNet> {
    value.parse::<IpNet>().ok().map(|net| net.trunc())
}

/// The service ports kube-proxy tracks for `svc`, keyed as upstream's
/// `ServicePortMap`. ExternalName services and services without a
/// cluster IP (`None` or empty: headless or not yet allocated) yield
/// nothing, which is not a problem.
pub fn service_ports(
    svc: &Service,
) -> Converted<Vec<(ServicePortName, ServicePortInfo)>> {
    let mut problems = Problems::new(ObjectKind::Service, &svc.metadata);
    // As for slices: the API server always sets both, and the node-view
    // stream refuses a port named without them.
    let object = &problems.object;
    if object.namespace.is_empty() || object.name.is_empty() {
        problems.push(InvalidReason::MissingName);
        return problems.finish(Vec::new());
    }
    let Some(spec) = svc.spec.as_ref() else {
        return problems.finish(Vec::new());
    };
    let svc_type = spec.type_.as_deref().unwrap_or("ClusterIP");
    let primary = spec.cluster_ip.as_deref().unwrap_or("");
    // Upstream's ShouldSkipService looks at spec.clusterIP only.
    if svc_type == "ExternalName" || primary.is_empty() || primary == "None" {
        return problems.finish(Vec::new());
    }

    let cluster_ips = cluster_ips(spec, primary, &mut problems);
    if cluster_ips.is_empty() {
        problems.push(InvalidReason::NoClusterIp {
            field: "spec.clusterIPs".to_owned(),
        });
        return problems.finish(Vec::new());
    }
    let external_ips = external_ips(spec, &mut problems);
    let load_balancer_vips = load_balancer_vips(svc, &mut problems);
    let load_balancer_source_ranges =
        load_balancer_source_ranges(spec, &mut problems);
    let policies = TrafficPolicies::of(spec, svc_type, &external_ips);
    let health_check_node_port =
        health_check_node_port(spec, &policies, &mut problems);
    let session_affinity_timeout =
        session_affinity_timeout(spec, &mut problems);
    let mut bad_annotations = Vec::new();
    let scheduling = ServiceScheduling::from_annotations(
        svc.metadata.annotations.as_ref(),
        &mut bad_annotations,
    );
    for bad in bad_annotations {
        problems.push(InvalidReason::SchedulingAnnotation {
            annotation: bad.annotation,
            value: bad.value,
            reason: bad.reason,
        });
    }

    let mut ports = Vec::new();
    for (i, port) in spec.ports.iter().flatten().enumerate() {
        let Some((protocol, number, node_port)) =
            port_numbers(i, port, &mut problems)
        else {
            continue;
        };
        let name = ServicePortName {
            service: problems.object.clone(),
            port: port.name.clone().unwrap_or_default(),
            protocol,
        };
        let info = ServicePortInfo {
            cluster_ips: cluster_ips.clone(),
            port: number,
            protocol,
            node_port,
            session_affinity_timeout,
            external_ips: external_ips.clone(),
            load_balancer_vips: load_balancer_vips.clone(),
            load_balancer_source_ranges: load_balancer_source_ranges.clone(),
            external_policy_local: policies.external_local,
            internal_policy_local: policies.internal_local,
            health_check_node_port,
            is_load_balancer: policies.load_balancer,
            scheduling: scheduling.clone(),
        };
        ports.push((name, info));
    }
    problems.finish(ports)
}

fn external_ips(spec: &ServiceSpec, problems: &mut Problems) -> Vec<IpAddr> {
    spec.external_ips
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, ip)| {
            problems.ip(|| format!("spec.externalIPs[{i}]"), ip)
        })
        .collect()
}

fn load_balancer_source_ranges(
    spec: &ServiceSpec,
    problems: &mut Problems,
) -> Vec<IpNet> {
    // The API's validation lets whitespace padding through, so trim
    // before parsing, as upstream does.
    spec.load_balancer_source_ranges
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, range)| {
            let range = range.trim();
            let net = parse_cidr(range);
            if net.is_none() {
                problems.push(InvalidReason::Cidr {
                    field: format!("spec.loadBalancerSourceRanges[{i}]"),
                    value: range.to_owned(),
                });
            }
            net
        })
        .collect()
}

/// The service's type and traffic policies, as the proxy reads them.
struct TrafficPolicies {
    load_balancer: bool,
    external_local: bool,
    internal_local: bool,
}

impl TrafficPolicies {
    fn of(spec: &ServiceSpec, svc_type: &str, external_ips: &[IpAddr]) -> Self {
        let load_balancer = svc_type == "LoadBalancer";
        // Upstream's apiservice.ExternallyAccessible / ExternalPolicyLocal:
        // the policy only exists for services that take external traffic.
        let externally_accessible = load_balancer
            || svc_type == "NodePort"
            || (svc_type == "ClusterIP" && !external_ips.is_empty());
        Self {
            load_balancer,
            external_local: externally_accessible
                && spec.external_traffic_policy.as_deref() == Some("Local"),
            internal_local: spec.internal_traffic_policy.as_deref()
                == Some("Local"),
        }
    }
}

/// Upstream's NeedsHealthCheck: only ETP=Local load balancers get one.
fn health_check_node_port(
    spec: &ServiceSpec,
    policies: &TrafficPolicies,
    problems: &mut Problems,
) -> u16 {
    if !(policies.load_balancer && policies.external_local) {
        return 0;
    }
    match spec.health_check_node_port.unwrap_or(0) {
        0 => {
            tracing::warn!(
                namespace = %problems.object.namespace,
                name = %problems.object.name,
                "service has no healthCheckNodePort"
            );
            0
        }
        port => problems
            .port(|| "spec.healthCheckNodePort".to_owned(), port)
            .unwrap_or(0),
    }
}

/// A port's protocol, number and node port; `None` (with the problem
/// noted) when one of them is invalid, which skips that port alone.
fn port_numbers(
    i: usize,
    port: &ServicePort,
    problems: &mut Problems,
) -> Option<(Protocol, u16, u16)> {
    let Some(protocol) = Protocol::from_api(port.protocol.as_deref()) else {
        problems.push(InvalidReason::Protocol {
            field: format!("spec.ports[{i}].protocol"),
            value: port.protocol.clone().unwrap_or_default(),
        });
        return None;
    };
    let number =
        match problems.port(|| format!("spec.ports[{i}].port"), port.port)? {
            0 => {
                problems.push(InvalidReason::Port {
                    field: format!("spec.ports[{i}].port"),
                    value: 0,
                });
                return None;
            }
            number => number,
        };
    let node_port = problems.port(
        || format!("spec.ports[{i}].nodePort"),
        port.node_port.unwrap_or(0),
    )?;
    Some((protocol, number, node_port))
}

/// `spec.clusterIPs` (or `spec.clusterIP` when the list is absent), one
/// address per family, primary first.
fn cluster_ips(
    spec: &k8s_openapi::api::core::v1::ServiceSpec,
    primary: &str,
    problems: &mut Problems,
) -> Vec<IpAddr> {
    let listed: Vec<&str> = match spec.cluster_ips.as_deref() {
        Some(ips) if !ips.is_empty() => {
            ips.iter().map(String::as_str).collect()
        }
        _ => vec![primary],
    };
    let mut ips: Vec<IpAddr> = Vec::with_capacity(listed.len());
    for (i, value) in listed.into_iter().enumerate() {
        let Some(ip) = problems.ip(|| format!("spec.clusterIPs[{i}]"), value)
        else {
            continue;
        };
        // At most one address per family can exist; a second one of the
        // same family would be an API server bug, and upstream would only
        // ever look at the first.
        if !ips.iter().any(|known| known.is_ipv4() == ip.is_ipv4()) {
            ips.push(ip);
        }
    }
    ips
}

/// Ingress IPs of VIP-style load balancers. Hostname-only ingresses and
/// `ipMode: Proxy` (the load balancer proxies to the node, so capturing
/// the address locally would break it) are left out, as upstream's
/// `IsVIPMode`.
fn load_balancer_vips(svc: &Service, problems: &mut Problems) -> Vec<IpAddr> {
    let ingresses = svc
        .status
        .as_ref()
        .and_then(|status| status.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default();
    ingresses
        .iter()
        .enumerate()
        .filter_map(|(i, ingress)| {
            let ip = ingress.ip.as_deref().filter(|ip| !ip.is_empty())?;
            match ingress.ip_mode.as_deref() {
                None | Some("VIP") => problems
                    .ip(|| format!("status.loadBalancer.ingress[{i}].ip"), ip),
                Some(_) => None,
            }
        })
        .collect()
}

fn session_affinity_timeout(
    spec: &k8s_openapi::api::core::v1::ServiceSpec,
    problems: &mut Problems,
) -> Option<u32> {
    if spec.session_affinity.as_deref() != Some("ClientIP") {
        return None;
    }
    let configured = spec
        .session_affinity_config
        .as_ref()
        .and_then(|config| config.client_ip.as_ref())
        .and_then(|client_ip| client_ip.timeout_seconds);
    match configured {
        None => Some(DEFAULT_AFFINITY_TIMEOUT),
        Some(value @ 1..=MAX_AFFINITY_TIMEOUT) => u32::try_from(value).ok(),
        Some(value) => {
            problems.push(InvalidReason::AffinityTimeout {
                field: "spec.sessionAffinityConfig.clientIP.timeoutSeconds"
                    .to_owned(),
                value,
            });
            Some(DEFAULT_AFFINITY_TIMEOUT)
        }
    }
}

/// One port of an EndpointSlice, usable as a ServicePortName.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlicePort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// What kube-proxy keeps of one EndpointSlice: its ports, and for each
/// port its endpoints with that port filled in, shared (`Arc`) with the
/// [`EndpointsMap`](super::EndpointsMap) merged from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSliceInfo {
    pub service: NamespacedName,
    pub name: String,
    pub ports: Vec<SlicePort>,
    /// Parallel to `ports`.
    pub endpoints: Vec<Vec<Arc<EndpointInfo>>>,
}

impl EndpointSliceInfo {
    /// Each service port the slice serves with its endpoints: one key per
    /// port, not per endpoint, as a key is three strings to copy.
    pub fn endpoints_per_port(
        &self,
    ) -> impl Iterator<Item = (ServicePortName, &[Arc<EndpointInfo>])> + '_
    {
        self.ports
            .iter()
            .zip(&self.endpoints)
            .map(|(port, endpoints)| {
                let key = ServicePortName {
                    service: self.service.clone(),
                    port: port.name.clone(),
                    protocol: port.protocol,
                };
                (key, endpoints.as_slice())
            })
    }
}

/// Why a whole EndpointSlice is not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SliceIgnored {
    /// `addressType: FQDN` (or anything but IPv4/IPv6): kube-proxy has
    /// never supported it. Not an error.
    UnsupportedAddressType(String),
    /// No `kubernetes.io/service-name` label (the slice belongs to no
    /// service), or no namespace or name to key it by.
    NoService,
}

/// The service a slice belongs to and the slice's name. Fails, as
/// upstream's `endpointSliceCacheKeys`, when the service-name label is
/// missing or empty, or the slice has no namespace or name.
pub fn slice_keys(
    slice: &EndpointSlice,
) -> Result<(NamespacedName, String), InvalidReason> {
    let service = slice
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(LABEL_SERVICE_NAME))
        .filter(|name| !name.is_empty())
        .ok_or(InvalidReason::MissingServiceName)?;
    let namespace = slice.metadata.namespace.as_deref().unwrap_or_default();
    let name = slice.metadata.name.as_deref().unwrap_or_default();
    if namespace.is_empty() || name.is_empty() {
        return Err(InvalidReason::MissingName);
    }
    Ok((
        NamespacedName::new(namespace, service.clone()),
        name.to_owned(),
    ))
}

/// Converts an EndpointSlice. `node_name` is this proxy's node: endpoints
/// on it are local.
pub fn endpoint_slice_info(
    slice: &EndpointSlice,
    node_name: &str,
) -> Converted<Result<EndpointSliceInfo, SliceIgnored>> {
    let mut problems =
        Problems::new(ObjectKind::EndpointSlice, &slice.metadata);
    if !matches!(slice.address_type.as_str(), "IPv4" | "IPv6") {
        return problems.finish(Err(SliceIgnored::UnsupportedAddressType(
            slice.address_type.clone(),
        )));
    }
    let (service, name) = match slice_keys(slice) {
        Ok(keys) => keys,
        Err(reason) => {
            problems.push(reason);
            return problems.finish(Err(SliceIgnored::NoService));
        }
    };
    let ports: Vec<SlicePort> = slice
        .ports
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, port)| slice_port(i, port, &mut problems))
        .collect();
    let ipv6 = slice.address_type == "IPv6";
    let endpoints: Vec<EndpointInfo> = slice
        .endpoints
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, endpoint)| {
            let info = endpoint_info(i, endpoint, node_name, &mut problems)?;
            // Upstream's cache takes a slice only into the proxier of
            // its addressType, which ignores an endpoint of the other
            // family; the API server refuses such a slice.
            if info.ip.is_ipv6() != ipv6 {
                problems.push(InvalidReason::AddressFamily {
                    field: format!("endpoints[{i}].addresses[0]"),
                    address: info.ip,
                    address_type: slice.address_type.clone(),
                });
                return None;
            }
            Some(info)
        })
        .collect();
    // One list per port: the trackers key endpoints by service port.
    let endpoints = ports
        .iter()
        .map(|port| {
            endpoints
                .iter()
                .map(|endpoint| {
                    Arc::new(EndpointInfo {
                        port: port.port,
                        ..endpoint.clone()
                    })
                })
                .collect()
        })
        .collect();
    problems.finish(Ok(EndpointSliceInfo {
        service,
        name,
        ports,
        endpoints,
    }))
}

/// A slice port, or `None` (with the problem noted) when it has no name,
/// an unknown protocol or an invalid number.
fn slice_port(
    i: usize,
    port: &EndpointPort,
    problems: &mut Problems,
) -> Option<SlicePort> {
    let Some(name) = port.name.clone() else {
        problems.push(InvalidReason::UnnamedPort {
            field: format!("ports[{i}]"),
        });
        return None;
    };
    let Some(protocol) = Protocol::from_api(port.protocol.as_deref()) else {
        problems.push(InvalidReason::Protocol {
            field: format!("ports[{i}].protocol"),
            value: port.protocol.clone().unwrap_or_default(),
        });
        return None;
    };
    match problems
        .port(|| format!("ports[{i}].port"), port.port.unwrap_or(0))?
    {
        0 => {
            problems.push(InvalidReason::Port {
                field: format!("ports[{i}].port"),
                value: 0,
            });
            None
        }
        port => Some(SlicePort {
            name,
            protocol,
            port,
        }),
    }
}

/// An endpoint without its port (one copy per slice port is made from
/// it), or `None` (with the problem noted) without a valid first address,
/// the only one any consumer uses.
fn endpoint_info(
    i: usize,
    endpoint: &Endpoint,
    node_name: &str,
    problems: &mut Problems,
) -> Option<EndpointInfo> {
    let Some(address) = endpoint.addresses.first() else {
        problems.push(InvalidReason::NoAddress {
            field: format!("endpoints[{i}].addresses"),
        });
        return None;
    };
    let ip = problems.ip(|| format!("endpoints[{i}].addresses[0]"), address)?;
    let conditions = endpoint.conditions.as_ref();
    let hints = endpoint.hints.as_ref();
    Some(EndpointInfo {
        ip,
        port: 0,
        is_local: !node_name.is_empty()
            && endpoint.node_name.as_deref() == Some(node_name),
        node_name: endpoint.node_name.as_deref().map(Arc::from),
        ready: conditions.and_then(|c| c.ready).unwrap_or(true),
        serving: conditions.and_then(|c| c.serving).unwrap_or(true),
        terminating: conditions.and_then(|c| c.terminating).unwrap_or(false),
        zone_hints: hints
            .and_then(|h| h.for_zones.as_ref())
            .into_iter()
            .flatten()
            .map(|zone| zone.name.clone())
            .collect(),
        node_hints: hints
            .and_then(|h| h.for_nodes.as_ref())
            .into_iter()
            .flatten()
            .map(|node| node.name.clone())
            .collect(),
    })
}

/// The slice's `last-change-trigger-time`, if set and well-formed.
pub fn last_change_trigger_time(
    slice: &EndpointSlice,
) -> Converted<Option<SystemTime>> {
    let mut problems =
        Problems::new(ObjectKind::EndpointSlice, &slice.metadata);
    let Some(value) = slice
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_LAST_CHANGE_TRIGGER_TIME))
    else {
        return problems.finish(None);
    };
    let parsed = value
        .parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .and_then(timestamp_to_system_time);
    if parsed.is_none() {
        problems.push(InvalidReason::TriggerTime {
            value: value.clone(),
        });
    }
    problems.finish(parsed)
}

/// Times before 1970 cannot be trigger times of anything we track.
fn timestamp_to_system_time(
    ts: k8s_openapi::jiff::Timestamp,
) -> Option<SystemTime> {
    let seconds = u64::try_from(ts.as_second()).ok()?;
    let nanos = u32::try_from(ts.subsec_nanosecond()).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::new(seconds, nanos))
}

/// What the proxy reads from a Node.
pub fn node_info(node: &Node) -> Converted<NodeInfo> {
    let mut problems = Problems::new(ObjectKind::Node, &node.metadata);
    let spec = node.spec.as_ref();
    let listed: Vec<&str> = match spec.and_then(|s| s.pod_cidrs.as_deref()) {
        Some(cidrs) if !cidrs.is_empty() => {
            cidrs.iter().map(String::as_str).collect()
        }
        _ => spec
            .and_then(|s| s.pod_cidr.as_deref())
            .filter(|cidr| !cidr.is_empty())
            .into_iter()
            .collect(),
    };
    let pod_cidrs = listed
        .into_iter()
        .enumerate()
        .filter_map(|(i, value)| {
            let net = parse_cidr(value);
            if net.is_none() {
                problems.push(InvalidReason::Cidr {
                    field: format!("spec.podCIDRs[{i}]"),
                    value: value.to_owned(),
                });
            }
            net
        })
        .collect();

    let zone = node
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(LABEL_TOPOLOGY_ZONE))
        .cloned()
        .unwrap_or_default();

    let status_addresses = node
        .status
        .as_ref()
        .and_then(|status| status.addresses.as_deref())
        .unwrap_or_default();
    let mut addresses: Vec<IpAddr> = Vec::new();
    for wanted in ["InternalIP", "ExternalIP"] {
        for (i, address) in status_addresses.iter().enumerate() {
            if address.type_ != wanted {
                continue;
            }
            let Some(ip) = problems.ip(
                || format!("status.addresses[{i}].address"),
                &address.address,
            ) else {
                continue;
            };
            if !addresses.contains(&ip) {
                addresses.push(ip);
            }
        }
    }

    let being_deleted = node.metadata.deletion_timestamp.is_some();
    let to_be_deleted = spec
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|taint| taint.key == TAINT_TO_BE_DELETED);

    let info = NodeInfo {
        name: node.metadata.name.clone().unwrap_or_default(),
        pod_cidrs,
        zone,
        addresses,
        eligible: !being_deleted && !to_be_deleted,
    };
    problems.finish(info)
}
