//! Pods to endpoints: which pods belong in a Service's slices, and the
//! endpoint each contributes per address type.

use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
};

use k8s_openapi::api::{
    core::v1::{Node, ObjectReference, Pod, Service},
    discovery::v1::{Endpoint, EndpointConditions, EndpointPort},
};

use super::{
    address::AddressType,
    ports::{self, PortMapKey},
    slice::{namespace_of, ServiceRef},
    ReconcileError,
};

const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// A pod that belongs in the Service's slices, with what every address type
/// needs from it worked out once.
pub(super) struct PodCandidate<'a> {
    pod: &'a Pod,
    pub(super) ports: Vec<EndpointPort>,
    pub(super) key: PortMapKey,
    ips: Vec<IpAddr>,
    node: Option<&'a Node>,
}

/// The pods of `pods` that the Service selects and that should be in its
/// endpoints, in input order. Pods on unknown nodes are reported and left
/// out unless the Service publishes not-ready addresses; unparseable pod IPs
/// are reported and dropped.
pub(super) fn candidates<'a>(
    svc: &ServiceRef,
    service: &Service,
    pods: &'a [Pod],
    nodes: &HashMap<&str, &'a Node>,
    errors: &mut Vec<ReconcileError>,
) -> Vec<PodCandidate<'a>> {
    let selector = service.spec.as_ref().and_then(|s| s.selector.as_ref());
    let mut out = Vec::new();
    for pod in pods {
        if namespace_of(&pod.metadata) != svc.namespace {
            continue;
        }
        let labels = pod.metadata.labels.as_ref();
        let selected = selector.is_some_and(|sel| {
            sel.iter()
                .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        });
        if !selected || !should_be_in_endpoints(pod) {
            continue;
        }
        let node_name = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or_default();
        let node = nodes.get(node_name).copied();
        if node.is_none() && !svc.publish_not_ready {
            errors.push(ReconcileError::NodeNotFound {
                service: svc.key(),
                pod: pod_key(pod),
                node: node_name.to_owned(),
            });
            continue;
        }
        let ports = ports::endpoint_ports(service, pod);
        out.push(PodCandidate {
            pod,
            key: PortMapKey::new(&ports),
            ports,
            ips: pod_ips(svc, pod, errors),
            node,
        });
    }
    out
}

/// Terminal pods and pods without an IP are not endpoints; terminating pods
/// are (with `terminating: true`), so that consumers can drain them.
fn should_be_in_endpoints(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return false;
    }
    let has_ip = status.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty())
        || status.pod_ips.as_ref().is_some_and(|ips| !ips.is_empty());
    has_ip
}

/// The pod's IPs: `podIPs`, or `podIP` when that list is empty, as the API
/// server fills one from the other.
fn pod_ips(
    svc: &ServiceRef,
    pod: &Pod,
    errors: &mut Vec<ReconcileError>,
) -> Vec<IpAddr> {
    let Some(status) = &pod.status else {
        return Vec::new();
    };
    let listed: Vec<&str> = match &status.pod_ips {
        Some(ips) if !ips.is_empty() => {
            ips.iter().map(|p| p.ip.as_str()).collect()
        }
        _ => status.pod_ip.as_deref().into_iter().collect(),
    };
    let mut out = Vec::with_capacity(listed.len());
    for raw in listed {
        match raw.trim().parse::<IpAddr>() {
            Ok(ip) => out.push(canonical(ip)),
            Err(_) => errors.push(ReconcileError::InvalidPodIp {
                service: svc.key(),
                pod: pod_key(pod),
                ip: raw.to_owned(),
            }),
        }
    }
    out
}

/// IPv4-mapped IPv6 addresses are written as IPv4, as Go prints them.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        namespace_of(&pod.metadata),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

fn non_empty(s: Option<&str>) -> Option<String> {
    s.filter(|s| !s.is_empty()).map(str::to_owned)
}

impl PodCandidate<'_> {
    /// The pod's endpoint in slices of `family`, or `None` when it has no
    /// address of that family.
    pub(super) fn endpoint(
        &self,
        svc: &ServiceRef,
        family: AddressType,
    ) -> Option<Endpoint> {
        let addresses: Vec<String> = self
            .ips
            .iter()
            .filter(|ip| AddressType::of(**ip) == family)
            .map(ToString::to_string)
            .collect();
        if addresses.is_empty() {
            return None;
        }
        let pod = self.pod;
        let meta = &pod.metadata;
        let spec = pod.spec.as_ref();
        let serving = is_ready(pod);
        let terminating = meta.deletion_timestamp.is_some();
        // Consumers that predate the terminating condition only look at
        // `ready`, so a terminating pod is never ready unless the Service
        // asks for everything to be published.
        let ready = svc.publish_not_ready || (serving && !terminating);
        let hostname = spec
            .and_then(|s| s.hostname.as_deref())
            .filter(|h| !h.is_empty())
            .filter(|_| {
                spec.and_then(|s| s.subdomain.as_deref())
                    == Some(svc.name.as_str())
                    && namespace_of(meta) == svc.namespace
            });
        let zone = self
            .node
            .and_then(|n| n.metadata.labels.as_ref())
            .and_then(|l| l.get(LABEL_ZONE))
            .map(String::as_str);
        Some(Endpoint {
            addresses,
            conditions: Some(EndpointConditions {
                ready: Some(ready),
                serving: Some(serving),
                terminating: Some(terminating),
            }),
            hostname: hostname.map(str::to_owned),
            node_name: non_empty(spec.and_then(|s| s.node_name.as_deref())),
            zone: non_empty(zone),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".to_owned()),
                namespace: Some(namespace_of(meta).to_owned()),
                name: non_empty(meta.name.as_deref()),
                uid: non_empty(meta.uid.as_deref()),
                ..ObjectReference::default()
            }),
            ..Endpoint::default()
        })
    }
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// One address of an [`EndpointKey`]: parsed when it parses, so that
/// endpoints order numerically, else kept as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum AddressKey {
    Ip(IpAddr),
    Raw(String),
}

/// What makes an endpoint the same endpoint: its addresses (as a set),
/// hostname and target pod. Everything else (conditions, node, zone) may
/// change in place without moving the endpoint to another slice.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct EndpointKey {
    addresses: Vec<AddressKey>,
    hostname: String,
    namespace: String,
    name: String,
}

impl EndpointKey {
    pub(super) fn of(ep: &Endpoint) -> Self {
        let mut addresses: Vec<AddressKey> = ep
            .addresses
            .iter()
            .map(|a| match a.parse::<IpAddr>() {
                Ok(ip) => AddressKey::Ip(canonical(ip)),
                Err(_) => AddressKey::Raw(a.clone()),
            })
            .collect();
        addresses.sort();
        let target = ep.target_ref.as_ref();
        Self {
            addresses,
            hostname: ep.hostname.clone().unwrap_or_default(),
            namespace: target
                .and_then(|t| t.namespace.clone())
                .unwrap_or_default(),
            name: target.and_then(|t| t.name.clone()).unwrap_or_default(),
        }
    }
}

/// The desired endpoints of one port group, ordered by [`EndpointKey`] so
/// that the endpoints handed out to fill slices come in a stable order.
#[derive(Debug, Default)]
pub(super) struct EndpointSet(BTreeMap<EndpointKey, Endpoint>);

impl EndpointSet {
    pub(super) fn insert(&mut self, ep: Endpoint) {
        self.0.insert(EndpointKey::of(&ep), ep);
    }

    pub(super) fn take(&mut self, key: &EndpointKey) -> Option<Endpoint> {
        self.0.remove(key)
    }

    pub(super) fn pop_first(&mut self) -> Option<Endpoint> {
        self.0.pop_first().map(|(_, ep)| ep)
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Whether two endpoints with the same [`EndpointKey`] differ in anything the
/// controller writes. The target's resourceVersion is ignored so that pod
/// updates that do not touch the endpoint do not rewrite slices.
pub(super) fn same_beyond_key(a: &Endpoint, b: &Endpoint) -> bool {
    let conditions = |e: &Endpoint| {
        let c = e.conditions.clone().unwrap_or_default();
        (c.ready, c.serving, c.terminating)
    };
    let target = |e: &Endpoint| {
        e.target_ref.clone().map(|mut t| {
            t.resource_version = None;
            t
        })
    };
    a.node_name == b.node_name
        && a.zone == b.zone
        && conditions(a) == conditions(b)
        && target(a) == target(b)
}
