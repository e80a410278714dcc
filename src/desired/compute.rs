//! One service port in, its whole kernel contribution out.
//!
//! Upstream writes the "virtual server + affinity + real servers" sequence
//! four times (ClusterIP, ExternalIP, LoadBalancer, NodePort); here one
//! helper builds a virtual server for any address kind and the callers
//! differ only in which addresses, sets and traffic policy they use.

use std::{net::IpAddr, sync::Arc};

use super::{
    NodeContext, RealServer, ServiceState, SetEntry, SetKind, SetName,
    VirtualServer, VirtualServerKind,
};
use crate::{
    model::{
        EndpointInfo, Protocol, Scheduling, ServicePortInfo, ServicePortName,
    },
    selection::{ipvs_real_servers, NodeEndpoints},
};

/// Computes what one service port needs in the kernel, for every address
/// family the service has a cluster IP of and the node runs, from what the
/// node selected of its endpoints.
pub fn service_state(
    name: &ServicePortName,
    svc: &ServicePortInfo,
    endpoints: &NodeEndpoints,
    ctx: &NodeContext,
) -> ServiceState {
    let mut state = ServiceState::default();
    let (scheduling, refused) = ctx.schedulers.for_service(svc);
    state.refused_scheduler = refused;
    for &cluster_ip in &svc.cluster_ips {
        let ipv6 = cluster_ip.is_ipv6();
        if (ipv6 && !ctx.ipv6) || (!ipv6 && !ctx.ipv4) {
            continue;
        }
        // Each family is proxied on its own, as upstream runs one proxier
        // per family.
        Family {
            name,
            svc,
            ctx,
            scheduling: &scheduling,
            ipv6,
            endpoints,
            state: &mut state,
        }
        .compute(cluster_ip);
    }
    state.virtual_servers.shrink_to_fit();
    state.bound_addresses.shrink_to_fit();
    state.set_entries.shrink_to_fit();
    state
}

struct Family<'a> {
    name: &'a ServicePortName,
    svc: &'a ServicePortInfo,
    ctx: &'a NodeContext,
    scheduling: &'a Scheduling,
    ipv6: bool,
    endpoints: &'a NodeEndpoints,
    state: &'a mut ServiceState,
}

impl Family<'_> {
    fn compute(&mut self, cluster_ip: IpAddr) {
        let svc = self.svc;
        let categorized = self.endpoints.family(cluster_ip);
        let internal = real_servers(ipvs_real_servers(
            categorized,
            svc.internal_policy_local,
        ));
        let external = real_servers(ipvs_real_servers(
            categorized,
            svc.external_policy_local,
        ));
        let proto = svc.protocol;
        let port = svc.port;

        self.virtual_server(
            VirtualServerKind::ClusterIp,
            cluster_ip,
            port,
            &internal,
        );
        self.state.bound_addresses.insert(cluster_ip);
        self.entry(
            SetKind::ClusterIp,
            SetEntry::IpPort(cluster_ip, proto, port),
        );

        // Hairpin: a local endpoint reaching its own service must be
        // masqueraded, whatever its readiness.
        let ipv6 = self.ipv6;
        let local = self.endpoints.local.iter();
        for ep in local.filter(|e| e.ip.is_ipv6() == ipv6) {
            self.entry(
                SetKind::LoopBack,
                SetEntry::IpPortIp(ep.ip, proto, ep.port, ep.ip),
            );
        }

        let external_ips = match self.ctx.without_external_ips {
            false => svc.external_ips.as_slice(),
            true => &[],
        };
        for &ip in external_ips.iter().filter(|ip| ip.is_ipv6() == ipv6) {
            self.virtual_server(
                VirtualServerKind::ExternalIp,
                ip,
                port,
                &external,
            );
            self.bind_unless_local(ip);
            // One set or the other, as upstream: KUBE-EXTERNAL-IP's rules
            // masquerade, which would lose the client's address that
            // externalTrafficPolicy Local keeps.
            let kind = if svc.external_policy_local {
                SetKind::ExternalIpLocal
            } else {
                SetKind::ExternalIp
            };
            self.entry(kind, SetEntry::IpPort(ip, proto, port));
        }

        for &ip in svc
            .load_balancer_vips
            .iter()
            .filter(|ip| ip.is_ipv6() == ipv6)
        {
            self.load_balancer(ip, &external);
        }

        if svc.node_port != 0 {
            self.node_port(&external);
        }

        if svc.health_check_node_port != 0 {
            self.entry(
                SetKind::HealthCheckNodePort,
                SetEntry::Port(svc.health_check_node_port),
            );
        }
    }

    fn load_balancer(&mut self, ip: IpAddr, external: &[RealServer]) {
        let (proto, port) = (self.svc.protocol, self.svc.port);
        self.virtual_server(
            VirtualServerKind::LoadBalancer,
            ip,
            port,
            external,
        );
        self.bind_unless_local(ip);
        self.entry(SetKind::LoadBalancer, SetEntry::IpPort(ip, proto, port));
        if self.svc.external_policy_local {
            self.entry(
                SetKind::LoadBalancerLocal,
                SetEntry::IpPort(ip, proto, port),
            );
        }
        let ranges: Vec<_> = self
            .svc
            .load_balancer_source_ranges
            .iter()
            .filter(|net| net.addr().is_ipv6() == self.ipv6)
            .copied()
            .collect();
        // A zero-length range (0.0.0.0/0, ::/0) admits everyone of its
        // family, which upstream reads as no ranges at all for it.
        if ranges.is_empty() || ranges.iter().any(|net| net.prefix_len() == 0) {
            return;
        }
        self.entry(SetKind::LoadBalancerFw, SetEntry::IpPort(ip, proto, port));
        let mut allow_from_node = false;
        for net in ranges {
            self.entry(
                SetKind::LoadBalancerSourceCidr,
                SetEntry::IpPortNet(ip, proto, port, net),
            );
            allow_from_node |=
                self.ctx.primary_ips.iter().any(|node| net.contains(node));
        }
        // A VIP that the cloud routes back to this node arrives with the
        // VIP itself as source; admit it when the node may reach the LB.
        if allow_from_node {
            self.entry(
                SetKind::LoadBalancerSourceIp,
                SetEntry::IpPortIp(ip, proto, port, ip),
            );
        }
    }

    fn node_port(&mut self, external: &[RealServer]) {
        let (proto, node_port) = (self.svc.protocol, self.svc.node_port);
        let local = self.svc.external_policy_local;
        let addresses: Vec<IpAddr> = self
            .ctx
            .node_port_addresses
            .iter()
            .copied()
            .filter(|ip| ip.is_ipv6() == self.ipv6)
            .collect();
        // A family with no address to serve node ports on (nodePortAddresses
        // matching only loopback, as `[localhost]` does, or nothing) gets
        // none of its node port configuration, set members included, as
        // upstream skips it.
        if addresses.is_empty() {
            return;
        }
        for &ip in &addresses {
            self.virtual_server(
                VirtualServerKind::NodePort,
                ip,
                node_port,
                external,
            );
        }
        match proto {
            Protocol::Tcp | Protocol::Udp => {
                let (all, only_local) = if proto == Protocol::Tcp {
                    (SetKind::NodePortTcp, SetKind::NodePortLocalTcp)
                } else {
                    (SetKind::NodePortUdp, SetKind::NodePortLocalUdp)
                };
                self.entry(all, SetEntry::Port(node_port));
                if local {
                    self.entry(only_local, SetEntry::Port(node_port));
                }
            }
            // bitmap:port has no protocol, so SCTP node ports live in a
            // hash set keyed by node address.
            Protocol::Sctp => {
                for &ip in &addresses {
                    let entry = SetEntry::IpPort(ip, proto, node_port);
                    self.entry(SetKind::NodePortSctp, entry.clone());
                    if local {
                        self.entry(SetKind::NodePortLocalSctp, entry);
                    }
                }
            }
        }
    }

    fn virtual_server(
        &mut self,
        kind: VirtualServerKind,
        address: IpAddr,
        port: u16,
        real_servers: &[RealServer],
    ) {
        let timeout = self.svc.session_affinity_timeout;
        self.state.virtual_servers.push(VirtualServer {
            protocol: self.svc.protocol,
            address,
            port,
            scheduling: self.scheduling.clone(),
            persistent: timeout.is_some(),
            timeout: timeout.unwrap_or(0),
            service: self.name.clone(),
            real_servers: real_servers.to_vec(),
            kind,
        });
    }

    fn bind_unless_local(&mut self, ip: IpAddr) {
        if !self.ctx.local_addresses.contains(&ip) {
            self.state.bound_addresses.insert(ip);
        }
    }

    fn entry(&mut self, kind: SetKind, entry: SetEntry) {
        let set = SetName {
            kind,
            ipv6: self.ipv6,
        };
        self.state.set_entries.insert((set, entry));
    }
}

fn real_servers(endpoints: &[Arc<EndpointInfo>]) -> Vec<RealServer> {
    let mut servers: Vec<RealServer> = endpoints
        .iter()
        .map(|e| RealServer {
            address: e.ip,
            port: e.port,
            weight: 1,
        })
        .collect();
    servers.sort();
    servers.dedup();
    servers
}
