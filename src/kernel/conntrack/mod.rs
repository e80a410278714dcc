//! UDP conntrack cleanup.
//!
//! UDP has no connection teardown, so a client that keeps sending to a
//! service keeps its conntrack entry, and with it the real server IPVS
//! picked, after that endpoint is gone: its datagrams go nowhere until the
//! entry times out. The fix is to delete such entries.
//!
//! We follow upstream's current approach (pkg/proxy/conntrack/cleanup.go)
//! rather than its older one (delete by the cluster IPs and endpoints a
//! sync removed): dump the UDP flows and delete every flow whose original
//! destination is a UDP service frontend (cluster IP, external IP or
//! load-balancer IP with the service port, or any address with the node
//! port) but whose reply source is not one of that service's serving
//! endpoints. It needs no memory of what was removed, so a flow missed
//! once (a failed delete, a restart) is caught by the next cleanup. A
//! service without serving endpoints loses every flow to its addresses,
//! as since kube-proxy 1.37 (its node port's flows stay: they match by
//! port alone). The proxier runs it only after a sync that
//! changed UDP endpoints or removed a UDP service, which keeps the dump
//! off the steady-state path, and it keeps the serving endpoints per
//! service port, updated from the ports each sync changed. With `net/ipv4/vs/conntrack=1` IPVS writes
//! the real server into the entry's reply tuple, which is what makes the
//! reply source the endpoint.
//!
//! Seen in the guest (Linux 6.1): with `expire_nodest_conn=1`, IPVS since
//! 5.9 expires a deleted real server's connections by itself shortly
//! after, dropping their conntrack entries too, so the cleanup often finds
//! the flow already gone (counted as `already_gone`, not as an error). It
//! still matters on older kernels, for flows IPVS does not own, and when
//! the sysctl is off.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    fmt,
    future::Future,
    net::{IpAddr, SocketAddr},
};

use super::KernelError;
use crate::model::{Protocol, ServicePortInfo, ServicePortName};

/// Scenarios run against the model by the unit tests and against the
/// kernel by the guest tests (public for the latter).
#[cfg(any(test, feature = "test-support"))]
// Test support: a failed expectation is the calling test's failure.
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod contract;
#[cfg(any(test, feature = "test-support"))]
mod model;
pub(crate) mod real;
#[cfg(test)]
mod tests;

#[cfg(any(test, feature = "test-support"))]
pub use model::ConntrackModel;
pub use real::NetlinkConntrack;

/// One direction of a UDP flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowTuple {
    pub src: SocketAddr,
    pub dst: SocketAddr,
}

/// A UDP conntrack entry: what the client sent (`original`) and what the
/// answer looks like (`reply`, whose source is the real server).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Flow {
    pub original: FlowTuple,
    pub reply: FlowTuple,
}

impl fmt::Display for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "UDP flow {} -> {} (reply from {})",
            self.original.src, self.original.dst, self.reply.src
        )
    }
}

pub trait Conntrack {
    /// Every UDP entry, IPv4 and IPv6.
    fn dump_udp(
        &mut self,
    ) -> impl Future<Output = Result<Vec<Flow>, KernelError>> + Send;

    /// Deletes the entries by their original tuple, all in flight at
    /// once; one result per flow, NotFound (ENOENT) for one already gone.
    fn delete(
        &mut self,
        flows: &[Flow],
    ) -> impl Future<Output = Vec<Result<(), KernelError>>> + Send;
}

/// The UDP service frontends and their serving endpoints' addresses: what
/// a flow's reply source must be one of. Kept per service port and
/// updated with the ports a sync changed, so no sync walks every service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UdpServing {
    ports: HashMap<ServicePortName, UdpPort>,
    by_address: HashMap<SocketAddr, BTreeSet<ServicePortName>>,
    by_node_port: HashMap<u16, BTreeSet<ServicePortName>>,
}

/// One UDP service port with serving endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
struct UdpPort {
    frontends: Vec<SocketAddr>,
    node_port: u16,
    serving: HashSet<IpAddr>,
}

impl UdpServing {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every UDP service port of the maps, as upstream computes it on
    /// each cleanup.
    #[cfg(test)]
    pub fn from_maps(
        services: &crate::model::ServicePortMap,
        endpoints: &crate::model::EndpointsMap,
    ) -> Self {
        use crate::selection::EndpointsView;
        let mut serving = Self::new();
        for (name, info) in services {
            serving.update(
                name,
                Some(info),
                &endpoints.serving_addresses(name),
            );
        }
        serving
    }

    /// Sets one service port to `service` with the addresses of its
    /// serving endpoints, or forgets it (`None`). Only UDP ports are
    /// kept. Serving, not ready: a terminating
    /// endpoint still serving keeps its flows, as a TCP connection to it
    /// would keep going.
    pub fn update(
        &mut self,
        name: &ServicePortName,
        service: Option<&ServicePortInfo>,
        serving: &[IpAddr],
    ) {
        if let Some(old) = self.ports.remove(name) {
            for frontend in &old.frontends {
                forget(&mut self.by_address, frontend, name);
            }
            if old.node_port != 0 {
                forget(&mut self.by_node_port, &old.node_port, name);
            }
        }
        let Some(service) = service.filter(|s| s.protocol == Protocol::Udp)
        else {
            return;
        };
        let serving: HashSet<IpAddr> = serving.iter().copied().collect();
        // A port with no serving endpoint keeps its address frontends,
        // every flow to them stale (kube-proxy since 1.37): a one-way
        // sender refreshes its entry forever, towards an endpoint that is
        // gone. Not its node port, which matches any address, flows of
        // other hosts on the same port too, as upstream leaves it.
        let node_port = if serving.is_empty() {
            0
        } else {
            service.node_port
        };
        let frontends: Vec<SocketAddr> = service
            .cluster_ips
            .iter()
            .chain(&service.external_ips)
            .chain(&service.load_balancer_vips)
            .map(|ip| SocketAddr::new(*ip, service.port))
            .collect();
        for frontend in &frontends {
            self.by_address
                .entry(*frontend)
                .or_default()
                .insert(name.clone());
        }
        if node_port != 0 {
            self.by_node_port
                .entry(node_port)
                .or_default()
                .insert(name.clone());
        }
        self.ports.insert(
            name.clone(),
            UdpPort {
                frontends,
                node_port,
                serving,
            },
        );
    }

    /// Whether `flow` goes to a frontend here without being answered by
    /// one of its serving endpoints.
    pub fn is_stale(&self, flow: &Flow) -> bool {
        let replier = flow.reply.src.ip();
        let stale_in = |ports: Option<&BTreeSet<ServicePortName>>| {
            ports.is_some_and(|ports| {
                !ports.iter().any(|port| {
                    self.ports
                        .get(port)
                        .is_some_and(|p| p.serving.contains(&replier))
                })
            })
        };
        stale_in(self.by_address.get(&flow.original.dst))
            || stale_in(self.by_node_port.get(&flow.original.dst.port()))
    }

    /// The flows to delete, in the order given.
    pub fn stale_flows(&self, flows: &[Flow]) -> Vec<Flow> {
        flows.iter().filter(|f| self.is_stale(f)).copied().collect()
    }
}

fn forget<K: std::hash::Hash + Eq>(
    index: &mut HashMap<K, BTreeSet<ServicePortName>>,
    key: &K,
    name: &ServicePortName,
) {
    if let Some(names) = index.get_mut(key) {
        names.remove(name);
        if names.is_empty() {
            index.remove(key);
        }
    }
}

/// What one cleanup did.
#[derive(Debug, Default)]
pub struct CleanupReport {
    /// UDP flows the dump returned.
    pub dumped: usize,
    pub deleted: usize,
    /// Stale flows that were gone by the time of the delete.
    pub already_gone: usize,
    /// Failed deletes, flows already gone (NotFound) excluded: another
    /// cleanup or the timeout got there first, which is the goal.
    pub errors: Vec<KernelError>,
}

/// Dumps the UDP flows and deletes the stale ones.
pub async fn clean_stale_udp_flows<C: Conntrack>(
    conntrack: &mut C,
    serving: &UdpServing,
) -> Result<CleanupReport, KernelError> {
    let flows = conntrack.dump_udp().await?;
    let stale = serving.stale_flows(&flows);
    let mut report = CleanupReport {
        dumped: flows.len(),
        ..CleanupReport::default()
    };
    for result in conntrack.delete(&stale).await {
        match result {
            Ok(()) => report.deleted += 1,
            Err(e) if e.kind == super::ErrorKind::NotFound => {
                report.already_gone += 1
            }
            Err(e) => report.errors.push(e),
        }
    }
    Ok(report)
}
