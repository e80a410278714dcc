//! The API server's defaults, for objects written by hand into a state
//! file as for `kubectl apply`: what the API would have stored is what the
//! proxy reads. Upstream v1.34's sources for each:
//!
//! Service (`pkg/apis/core/v1/defaults.go` `SetDefaults_Service`, the
//! generated `SetObjectDefaults_Service`, and the registry's
//! `normalizeClusterIPs` in `pkg/registry/core/service/storage`):
//! - `spec.sessionAffinity` empty: `None`;
//! - `sessionAffinity: None`: `spec.sessionAffinityConfig` dropped;
//! - `sessionAffinity: ClientIP` without a timeout:
//!   `sessionAffinityConfig.clientIP.timeoutSeconds` 10800;
//! - `spec.type` empty: `ClusterIP`;
//! - `spec.ports[].protocol` empty: `TCP`;
//! - `spec.ports[].targetPort` 0 or empty: the port;
//! - `spec.externalTrafficPolicy` empty on an externally accessible
//!   Service (NodePort, LoadBalancer, or external IPs): `Cluster`;
//! - `spec.internalTrafficPolicy` unset on ClusterIP, NodePort and
//!   LoadBalancer Services: `Cluster`;
//! - `spec.allocateLoadBalancerNodePorts` unset on a LoadBalancer: true;
//! - `status.loadBalancer.ingress[].ipMode` unset where an `ip` is set:
//!   `VIP` (the LoadBalancerIPMode gate, on since 1.32);
//! - `spec.clusterIPs` empty with `spec.clusterIP` set: `[clusterIP]`.
//!
//! EndpointSlice (`pkg/apis/discovery/v1/defaults.go`):
//! - `ports[].name` unset: `""`, the unnamed port;
//! - `ports[].protocol` unset: `TCP`.
//!
//! What the API server allocates has no default a file could copy. A
//! Service without `spec.clusterIP` (other than an ExternalName one) is an
//! error naming the object: without it the proxy has nothing to program.
//! Node ports and the health check node port stay unset when the file
//! leaves them out, and the Service is programmed without them (the
//! conversion warns about a missing health check port). An EndpointSlice
//! without `addressType` is an error too: it has no default and the API
//! server requires it. Endpoint conditions have no default either: an
//! unset `ready` means ready to every consumer, as the conversion reads
//! it.

use k8s_openapi::{
    api::{
        core::v1::{ClientIPConfig, Service, SessionAffinityConfig},
        discovery::v1::EndpointSlice,
    },
    apimachinery::pkg::util::intstr::IntOrString,
};

#[cfg(test)]
mod tests;

/// `v1.DefaultClientIPServiceAffinitySeconds`: three hours.
pub const DEFAULT_CLIENT_IP_AFFINITY_SECONDS: i32 = 10_800;

const TCP: &str = "TCP";

/// Applies the defaults to a Service; the error says what a file must
/// name because the API server would have allocated it.
pub fn service(svc: &mut Service) -> Result<(), String> {
    let spec = svc.spec.get_or_insert_with(Default::default);

    if spec.session_affinity.as_deref().unwrap_or("").is_empty() {
        spec.session_affinity = Some("None".to_owned());
    }
    match spec.session_affinity.as_deref() {
        Some("None") => spec.session_affinity_config = None,
        Some("ClientIP") => {
            let timeout = spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds);
            if timeout.is_none() {
                spec.session_affinity_config = Some(SessionAffinityConfig {
                    client_ip: Some(ClientIPConfig {
                        timeout_seconds: Some(
                            DEFAULT_CLIENT_IP_AFFINITY_SECONDS,
                        ),
                    }),
                });
            }
        }
        _ => {}
    }

    if spec.type_.as_deref().unwrap_or("").is_empty() {
        spec.type_ = Some("ClusterIP".to_owned());
    }
    let service_type = spec.type_.clone().unwrap_or_default();

    for port in spec.ports.iter_mut().flatten() {
        if port.protocol.as_deref().unwrap_or("").is_empty() {
            port.protocol = Some(TCP.to_owned());
        }
        let unset = match &port.target_port {
            None => true,
            Some(IntOrString::Int(n)) => *n == 0,
            Some(IntOrString::String(s)) => s.is_empty(),
        };
        if unset {
            port.target_port = Some(IntOrString::Int(port.port));
        }
    }

    let has_external_ips = spec
        .external_ips
        .as_ref()
        .is_some_and(|ips| !ips.is_empty());
    let externally_accessible =
        matches!(service_type.as_str(), "LoadBalancer" | "NodePort")
            || (service_type == "ClusterIP" && has_external_ips);
    if externally_accessible
        && spec
            .external_traffic_policy
            .as_deref()
            .unwrap_or("")
            .is_empty()
    {
        spec.external_traffic_policy = Some("Cluster".to_owned());
    }
    if spec.internal_traffic_policy.is_none()
        && matches!(
            service_type.as_str(),
            "ClusterIP" | "NodePort" | "LoadBalancer"
        )
    {
        spec.internal_traffic_policy = Some("Cluster".to_owned());
    }
    let load_balancer = service_type == "LoadBalancer";
    if load_balancer && spec.allocate_load_balancer_node_ports.is_none() {
        spec.allocate_load_balancer_node_ports = Some(true);
    }

    let cluster_ip = spec.cluster_ip.clone().unwrap_or_default();
    let cluster_ips = spec.cluster_ips.clone().unwrap_or_default();
    if service_type != "ExternalName" {
        if cluster_ip.is_empty() {
            return Err(
                "spec.clusterIP is required: the API server allocates one, \
                 a state file must name it (or \"None\" for a headless \
                 Service)"
                    .to_owned(),
            );
        }
        match cluster_ips.first() {
            None => spec.cluster_ips = Some(vec![cluster_ip.clone()]),
            Some(first) if *first != cluster_ip => {
                return Err(format!(
                    "spec.clusterIPs[0] ({first}) must be spec.clusterIP \
                     ({cluster_ip})"
                ))
            }
            Some(_) => {}
        }
    }

    if load_balancer {
        let ingresses = svc
            .status
            .as_mut()
            .and_then(|s| s.load_balancer.as_mut())
            .and_then(|lb| lb.ingress.as_mut());
        for ingress in ingresses.into_iter().flatten() {
            let has_ip = ingress.ip.as_deref().is_some_and(|ip| !ip.is_empty());
            if has_ip && ingress.ip_mode.is_none() {
                ingress.ip_mode = Some("VIP".to_owned());
            }
        }
    }
    Ok(())
}

/// Applies the defaults to an EndpointSlice; the error says what is
/// missing that the API server requires.
pub fn endpoint_slice(slice: &mut EndpointSlice) -> Result<(), String> {
    if slice.address_type.is_empty() {
        return Err("addressType is required (IPv4, IPv6 or FQDN); the API \
                    server has no default for it"
            .to_owned());
    }
    for port in slice.ports.iter_mut().flatten() {
        if port.name.is_none() {
            port.name = Some(String::new());
        }
        if port.protocol.is_none() {
            port.protocol = Some(TCP.to_owned());
        }
    }
    Ok(())
}
