//! `explain`'s answer for one Service: each port and frontend the node's
//! state has, with its virtual server and every endpoint the node knows
//! of, used or not and why. Computed from the synced state alone (pure),
//! so that it says what the proxy programs, not a second opinion of it;
//! the kernel's side is compared apart, where the kernel can be read.

use std::{net::IpAddr, sync::Arc};

use serde::Serialize;

use crate::{
    desired::{ServiceState, VirtualServer, VirtualServerKind},
    model::{EndpointInfo, NamespacedName, ServicePortInfo, ServicePortName},
    selection::{
        categorize_endpoints,
        reasons::{why_unused, Unused},
    },
    sync::SyncState,
};

#[cfg(test)]
mod tests;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `NAMESPACE/NAME`.
    pub service: String,
    pub node: String,
    /// The node's `topology.kubernetes.io/zone`; empty without one.
    pub zone: String,
    /// Whether every endpoint of the Service's slices is known here
    /// (false on a node fed by the API side, which sees only the
    /// endpoints its view selects for it).
    pub all_endpoints_known: bool,
    pub ports: Vec<PortExplanation>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PortExplanation {
    /// The port's name (`""` for an unnamed one).
    pub name: String,
    pub protocol: String,
    pub port: u16,
    pub frontends: Vec<Frontend>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Frontend {
    /// `clusterIP`, `nodePort`, `loadBalancer` or `externalIP`.
    pub kind: &'static str,
    /// `IPv4` or `IPv6`.
    pub family: &'static str,
    pub address: IpAddr,
    pub port: u16,
    /// The traffic policy that applies to this frontend: `Cluster` or
    /// `Local`.
    pub policy: &'static str,
    pub scheduler: String,
    pub flags: Vec<&'static str>,
    /// ClientIP affinity's timeout in seconds, when the Service has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistent: Option<u32>,
    pub endpoints: Vec<EndpointUse>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointUse {
    pub address: IpAddr,
    pub port: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// A real server of the frontend's virtual server.
    pub used: bool,
    /// Its weight there, when used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Why not, when not used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Unused>,
}

/// What the node's synced `state` does with `service`; `None` when the
/// state has no port of it (no such Service, or one the proxy does not
/// serve: headless, another proxy's).
pub fn explain(
    state: &SyncState,
    service: &NamespacedName,
) -> Option<Explanation> {
    let mut ports: Vec<(&ServicePortName, &Arc<ServicePortInfo>)> = state
        .service_map()
        .iter()
        .filter(|(name, _)| &name.service == service)
        .collect();
    if ports.is_empty() {
        return None;
    }
    ports.sort_by(|a, b| a.0.cmp(b.0));
    let context = state.desired().context();
    let node = (context.node_name.as_str(), context.zone.as_str());
    let mut all_known = true;
    let dropped = state.dropped_endpoint_copies(service);
    let ports = ports
        .into_iter()
        .map(|(name, info)| {
            let (known, whole) = state.endpoints().known_endpoints(name);
            all_known &= whole;
            let copies = dropped.get(name).map_or(&[][..], Vec::as_slice);
            let desired = state.desired().service(name);
            PortExplanation {
                name: name.port.clone(),
                protocol: info.protocol.as_str().to_owned(),
                port: info.port,
                frontends: frontends(desired, info, &known, copies, node),
            }
        })
        .collect();
    Some(Explanation {
        service: service.to_string(),
        node: context.node_name.clone(),
        zone: context.zone.clone(),
        all_endpoints_known: all_known,
        ports,
    })
}

impl EndpointUse {
    /// Used (with its real server's weight) when there is no reason not
    /// to be.
    fn new(
        ep: &EndpointInfo,
        weight: Option<u32>,
        reason: Option<Unused>,
    ) -> Self {
        Self {
            address: ep.ip,
            port: ep.port,
            node: ep.node_name.as_deref().map(str::to_owned),
            ready: ep.ready,
            serving: ep.serving,
            terminating: ep.terminating,
            used: reason.is_none(),
            weight,
            reason,
        }
    }
}

fn frontends(
    desired: Option<&ServiceState>,
    info: &ServicePortInfo,
    known: &[Arc<EndpointInfo>],
    copies: &[Arc<EndpointInfo>],
    node: (&str, &str),
) -> Vec<Frontend> {
    let Some(desired) = desired else {
        return Vec::new();
    };
    let mut virtual_servers: Vec<&VirtualServer> =
        desired.virtual_servers.iter().collect();
    virtual_servers.sort_by_key(|vs| (vs.kind, vs.address, vs.port));
    virtual_servers
        .into_iter()
        .map(|vs| frontend(vs, info, known, copies, node))
        .collect()
}

/// `copies`: the endpoints' copies the slices' merge left out, each
/// reported after the endpoints as a duplicate.
fn frontend(
    vs: &VirtualServer,
    info: &ServicePortInfo,
    known: &[Arc<EndpointInfo>],
    copies: &[Arc<EndpointInfo>],
    node: (&str, &str),
) -> Frontend {
    let only_local = match vs.kind {
        VirtualServerKind::ClusterIp => info.internal_policy_local,
        _ => info.external_policy_local,
    };
    let ipv6 = vs.address.is_ipv6();
    let family: Vec<Arc<EndpointInfo>> = known
        .iter()
        .filter(|ep| ep.ip.is_ipv6() == ipv6)
        .cloned()
        .collect();
    let categorized = categorize_endpoints(&family, info, node.0, node.1);
    let endpoints = known
        .iter()
        .map(|ep| {
            let real = (vs.real_servers.iter())
                .find(|rs| rs.address == ep.ip && rs.port == ep.port);
            let reason = real.is_none().then(|| {
                if ep.ip.is_ipv6() != ipv6 {
                    Unused::OtherFamily
                } else {
                    why_unused(
                        ep,
                        &family,
                        &categorized,
                        info,
                        only_local,
                        node,
                    )
                }
            });
            EndpointUse::new(ep, real.map(|rs| rs.weight), reason)
        })
        .chain(
            (copies.iter())
                .map(|ep| EndpointUse::new(ep, None, Some(Unused::Duplicate))),
        )
        .collect();
    Frontend {
        kind: vs.kind.as_str(),
        family: if ipv6 { "IPv6" } else { "IPv4" },
        address: vs.address,
        port: vs.port,
        policy: if only_local { "Local" } else { "Cluster" },
        scheduler: vs.scheduling.scheduler.to_string(),
        flags: vs.scheduling.flags.names(&vs.scheduling.scheduler),
        persistent: vs.persistent.then_some(vs.timeout),
        endpoints,
    }
}
