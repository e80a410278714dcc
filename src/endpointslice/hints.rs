//! Topology hints on endpoints, from the Service's `trafficDistribution`:
//! with `PreferClose`/`PreferSameZone` each ready endpoint is hinted for its
//! own zone, with `PreferSameNode` also for its own node; otherwise no
//! endpoint carries hints.
//!
//! The older `service.kubernetes.io/topology-mode: Auto` annotation makes
//! upstream allocate hints from the nodes' CPU capacity per zone; that
//! heuristic is not modelled here, and such Services get no hints, which is
//! also where upstream lands whenever the allocation is not possible.

use k8s_openapi::api::{
    core::v1::Service,
    discovery::v1::{Endpoint, EndpointHints, EndpointSlice, ForNode, ForZone},
};

use super::endpoints;

const ANNOTATION_TOPOLOGY_MODE: &str = "service.kubernetes.io/topology-mode";
const ANNOTATION_TOPOLOGY_AWARE_HINTS: &str =
    "service.kubernetes.io/topology-aware-hints";

/// What the hints of written endpoints should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HintPolicy {
    /// No endpoint carries hints; slices that do are rewritten.
    None,
    /// Ready endpoints are hinted for their zone (and node), and slices
    /// whose hints are missing or stale are rewritten.
    PreferClose { nodes: bool },
}

impl HintPolicy {
    /// The policy for `service`, with the `PreferSameTrafficDistribution`
    /// feature on, as it is by default from Kubernetes 1.34.
    pub(super) fn for_service(service: &Service) -> Self {
        if topology_annotation_enabled(service) {
            return Self::None;
        }
        let distribution = service
            .spec
            .as_ref()
            .and_then(|s| s.traffic_distribution.as_deref());
        match distribution {
            Some("PreferClose" | "PreferSameZone") => {
                Self::PreferClose { nodes: false }
            }
            Some("PreferSameNode") => Self::PreferClose { nodes: true },
            _ => Self::None,
        }
    }

    /// Whether an otherwise untouched slice must be rewritten for its hints.
    pub(super) fn needs_update(self, slice: &EndpointSlice) -> bool {
        match self {
            Self::None => endpoints(slice).iter().any(|e| e.hints.is_some()),
            Self::PreferClose { nodes } => {
                endpoints(slice).iter().filter(|e| is_ready(e)).any(|e| {
                    names(e.hints.as_ref()) != names(wanted(e, nodes).as_ref())
                })
            }
        }
    }

    /// Sets the hints of a slice that is being written.
    pub(super) fn apply(self, slice: &mut EndpointSlice) {
        for ep in slice.endpoints.iter_mut().flatten() {
            match self {
                Self::None => ep.hints = None,
                // Not-ready endpoints receive no traffic; upstream leaves
                // whatever they carry.
                Self::PreferClose { .. } if !is_ready(ep) => {}
                Self::PreferClose { nodes } => ep.hints = wanted(ep, nodes),
            }
        }
    }
}

/// The hints a ready endpoint should carry.
fn wanted(ep: &Endpoint, nodes: bool) -> Option<EndpointHints> {
    let for_zones = ep.zone.clone().map(|name| vec![ForZone { name }]);
    let for_nodes = ep
        .node_name
        .clone()
        .filter(|_| nodes)
        .map(|name| vec![ForNode { name }]);
    if for_zones.is_none() && for_nodes.is_none() {
        return None;
    }
    Some(EndpointHints {
        for_nodes,
        for_zones,
    })
}

/// The zone and node names of some hints; empty lists count as none, so
/// that an API round trip (which drops them) does not look stale.
fn names(hints: Option<&EndpointHints>) -> (Vec<&str>, Vec<&str>) {
    let zones = hints
        .and_then(|h| h.for_zones.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|z| z.name.as_str())
        .collect();
    let nodes = hints
        .and_then(|h| h.for_nodes.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    (zones, nodes)
}

fn is_ready(ep: &Endpoint) -> bool {
    ep.conditions.as_ref().and_then(|c| c.ready) == Some(true)
}

fn topology_annotation_enabled(service: &Service) -> bool {
    let annotations = service.metadata.annotations.as_ref();
    let value = annotations.and_then(|a| {
        a.get(ANNOTATION_TOPOLOGY_AWARE_HINTS)
            .or_else(|| a.get(ANNOTATION_TOPOLOGY_MODE))
    });
    matches!(value.map(String::as_str), Some("Auto" | "auto"))
}
