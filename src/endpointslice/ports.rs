//! A pod's endpoint ports: each Service port's targetPort resolved against
//! the pod, and the key that groups pods whose ports resolve alike.

use k8s_openapi::{
    api::{
        core::v1::{Container, Pod, Service, ServicePort},
        discovery::v1::EndpointPort,
    },
    apimachinery::pkg::util::intstr::IntOrString,
};

const DEFAULT_PROTOCOL: &str = "TCP";

/// The endpoint ports of `pod` for `service`, in the Service's port order.
/// A port whose named targetPort the pod does not declare (with the same
/// protocol) is left out for that pod, as upstream does: the pod still
/// serves the other ports.
pub(super) fn endpoint_ports(
    service: &Service,
    pod: &Pod,
) -> Vec<EndpointPort> {
    let service_ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    let mut out = Vec::with_capacity(service_ports.len());
    for sp in service_ports {
        let Some(port) = target_port(pod, sp) else {
            tracing::debug!(
                pod = pod.metadata.name.as_deref().unwrap_or_default(),
                port = sp.name.as_deref().unwrap_or_default(),
                "pod declares no container port for the named targetPort",
            );
            continue;
        };
        out.push(EndpointPort {
            name: Some(sp.name.clone().unwrap_or_default()),
            port: Some(port),
            protocol: Some(protocol(sp.protocol.as_deref()).to_owned()),
            app_protocol: sp.app_protocol.clone(),
        });
    }
    out
}

/// The port number `sp` targets on `pod`. An unset, zero or empty targetPort
/// is the Service port, as the API server defaults it. A name is looked up
/// in the containers' ports, then in those of sidecars (init containers that
/// restart always), matching the protocol too.
fn target_port(pod: &Pod, sp: &ServicePort) -> Option<i32> {
    let name = match &sp.target_port {
        None => return Some(sp.port),
        Some(IntOrString::Int(0)) => return Some(sp.port),
        Some(IntOrString::Int(n)) => return Some(*n),
        Some(IntOrString::String(s)) if s.is_empty() => return Some(sp.port),
        Some(IntOrString::String(s)) => s,
    };
    let spec = pod.spec.as_ref()?;
    let wanted = protocol(sp.protocol.as_deref());
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers
        .iter()
        .chain(sidecars)
        .flat_map(|c: &Container| c.ports.iter().flatten())
        .find(|p| {
            p.name.as_deref() == Some(name.as_str())
                && protocol(p.protocol.as_deref()) == wanted
        })
        .map(|p| p.container_port)
}

fn protocol(p: Option<&str>) -> &str {
    match p {
        None | Some("") => DEFAULT_PROTOCOL,
        Some(p) => p,
    }
}

/// One port of a [`PortMapKey`], with the API server's defaults applied so
/// that a slice read back from a file keys like the one computed here.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct PortKey {
    name: String,
    port: Option<i32>,
    protocol: String,
    app_protocol: Option<String>,
}

/// Identifies a set of endpoint ports regardless of order: pods (and
/// existing slices) with equal keys share slices. Upstream hashes the sorted
/// ports; the sorted ports themselves serve as the key here, which cannot
/// collide.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortMapKey(Vec<PortKey>);

impl PortMapKey {
    pub fn new(ports: &[EndpointPort]) -> Self {
        let mut keys: Vec<PortKey> = ports
            .iter()
            .map(|p| PortKey {
                name: p.name.clone().unwrap_or_default(),
                port: p.port,
                protocol: protocol(p.protocol.as_deref()).to_owned(),
                app_protocol: p.app_protocol.clone(),
            })
            .collect();
        keys.sort();
        Self(keys)
    }

    /// A stable 64-bit FNV-1a digest, for names that must not change
    /// between runs or builds.
    pub fn digest(&self) -> u64 {
        let mut h = Fnv1a::default();
        for p in &self.0 {
            h.write(p.name.as_bytes());
            h.write(b"\0");
            h.write(&p.port.unwrap_or(-1).to_be_bytes());
            h.write(p.protocol.as_bytes());
            h.write(b"\0");
            h.write(p.app_protocol.as_deref().unwrap_or("\u{1}").as_bytes());
            h.write(b"\0");
        }
        h.finish()
    }
}

/// FNV-1a, 64 bits: `std`'s hashers are not stable across releases.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    pub(super) fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    pub(super) fn finish(self) -> u64 {
        self.0
    }
}
