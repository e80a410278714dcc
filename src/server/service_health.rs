//! Health check node ports for `externalTrafficPolicy: Local` load
//! balancers, as upstream's `ServiceHealthServer`: the cloud load
//! balancer probes each node on the service's `healthCheckNodePort` and
//! sends traffic only to nodes that answer 200, i.e. that have a local
//! endpoint (and a healthy proxy).
//!
//! As kube-proxy since 1.36, each IP family the node runs has its own
//! listener (`0.0.0.0:P` for IPv4 alone, `[::]:P` for IPv6 alone), which
//! counts that family's local endpoints: upstream runs one proxier, and
//! so one health check server, per family.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex, MutexGuard, OnceLock, PoisonError,
    },
};

use axum::{
    extract::State,
    http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Router,
};

use super::{health::ProxyHealth, listen_exactly, Server, ServerError};
use crate::{
    config::NodePortAddress,
    model::{IpFamily, NamespacedName, ServicePortMap, ServicePortName},
    selection::EndpointsView,
    source::recorder::EventSink,
    telemetry::events::{HealthCheckListenFailed, InternalEvent},
};

/// The header Google Cloud's weighted load balancing reads the node's
/// weight from; upstream sends the local endpoint count.
const ENDPOINT_WEIGHT: HeaderName =
    HeaderName::from_static("x-load-balancing-endpoint-weight");

/// A service's local ready endpoints, per family.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocalCounts {
    pub ipv4: usize,
    pub ipv6: usize,
}

impl LocalCounts {
    #[cfg(test)]
    fn add(&mut self, family: IpFamily) {
        match family {
            IpFamily::V4 => self.ipv4 += 1,
            IpFamily::V6 => self.ipv6 += 1,
        }
    }
}

/// One open health check: its port, its listeners and the endpoint
/// counts the handlers read, one per family.
#[derive(Debug)]
struct Instance {
    port: u16,
    ipv4: Arc<AtomicUsize>,
    ipv6: Arc<AtomicUsize>,
    /// Held for their `Drop`, which stops them with the instance.
    _servers: Vec<Server>,
}

impl Instance {
    fn store(&self, counts: LocalCounts) {
        self.ipv4.store(counts.ipv4, Ordering::SeqCst);
        self.ipv6.store(counts.ipv6, Ordering::SeqCst);
    }
}

#[derive(Debug, Default)]
struct Services {
    open: HashMap<NamespacedName, Instance>,
    /// The last counts given, so that a health check opened late (after
    /// a failed listen) starts from the right count.
    endpoints: HashMap<NamespacedName, LocalCounts>,
}

#[derive(Debug)]
struct Inner {
    addresses: Vec<IpAddr>,
    /// The families the node runs, each with its wildcard listener when
    /// no addresses are given.
    families: Vec<IpFamily>,
    health: Arc<ProxyHealth>,
    services: Mutex<Services>,
    retry_pending: AtomicBool,
    /// Where a port that cannot be opened is reported as upstream does.
    events: OnceLock<EventSink>,
}

/// Where the health check servers listen, decided once at start-up as
/// upstream does: the local addresses inside `nodePortAddresses`' ranges.
/// Empty, meaning every address, when the setting is unset, when it names
/// `primary` (the Node object, which says which address that is, is not
/// known yet at start-up), or when no local address matches (upstream
/// logs that and listens everywhere).
pub fn listen_addresses(
    wanted: &[NodePortAddress],
    local: &[IpAddr],
) -> Vec<IpAddr> {
    let mut chosen = Vec::new();
    for want in wanted {
        match want {
            NodePortAddress::Primary => return Vec::new(),
            NodePortAddress::Cidr(net) => {
                for ip in local.iter().filter(|ip| net.contains(*ip)) {
                    if !chosen.contains(ip) {
                        chosen.push(*ip);
                    }
                }
            }
        }
    }
    chosen
}

/// Cheap to clone. Listeners close when their service goes away or the
/// last clone is dropped.
#[derive(Debug, Clone)]
pub struct ServiceHealthServer {
    inner: Arc<Inner>,
}

impl ServiceHealthServer {
    /// `addresses` are where each health check listens (upstream: the
    /// node port addresses when `nodePortAddresses` is set); empty means
    /// every address of each of `families` (IPv4 alone when none).
    pub fn new(
        addresses: Vec<IpAddr>,
        families: Vec<IpFamily>,
        health: Arc<ProxyHealth>,
    ) -> Result<Self, ServerError> {
        // Its servers run on the servers' runtime, or on this one if that
        // cannot start.
        tokio::runtime::Handle::try_current()
            .map_err(|_| ServerError::NoRuntime("the service health server"))?;
        Ok(Self {
            inner: Arc::new(Inner {
                addresses,
                families,
                health,
                services: Mutex::new(Services::default()),
                retry_pending: AtomicBool::new(false),
                events: OnceLock::new(),
            }),
        })
    }

    /// Records a Warning Event on each Service whose health check port
    /// cannot be opened, as upstream does; the first sink given stays.
    pub fn record_events_to(&self, sink: EventSink) {
        let _ = self.inner.events.set(sink);
    }

    fn services(&self) -> MutexGuard<'_, Services> {
        // Each update leaves the map consistent.
        self.inner
            .services
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes the open health checks exactly `wanted` (service → port):
    /// closes those gone or moved, opens the new ones, leaves the rest
    /// alone. A port that cannot be opened is logged and counted, and
    /// tried again on the next call; the others still open. Returns how
    /// many failed.
    pub fn sync_services(
        &self,
        wanted: &HashMap<NamespacedName, u16>,
    ) -> usize {
        let mut services = self.services();
        services.open.retain(|name, instance| {
            let keep = wanted.get(name) == Some(&instance.port);
            if !keep {
                tracing::info!(
                    namespace = %name.namespace,
                    name = %name.name,
                    port = instance.port,
                    "closing health check"
                );
            }
            keep
        });
        let mut failed = 0;
        for (name, &port) in wanted {
            if services.open.contains_key(name) {
                continue;
            }
            let count = services.endpoints.get(name).copied();
            match self.open(name, port, count.unwrap_or_default()) {
                Ok(instance) => {
                    tracing::info!(
                        namespace = %name.namespace,
                        name = %name.name,
                        port,
                        "opened health check"
                    );
                    services.open.insert(name.clone(), instance);
                }
                Err((address, error)) => {
                    if let Some(events) = self.inner.events.get() {
                        events.health_check_failed(name, port, &error);
                    }
                    HealthCheckListenFailed {
                        service: name,
                        address,
                        error: &error,
                    }
                    .emit();
                    failed += 1;
                }
            }
        }
        self.inner.retry_pending.store(failed > 0, Ordering::SeqCst);
        failed
    }

    /// Sets each open health check's local endpoint counts; services
    /// missing from `counts` have none.
    pub fn sync_endpoints(
        &self,
        counts: &HashMap<NamespacedName, LocalCounts>,
    ) {
        let mut services = self.services();
        for (name, instance) in &services.open {
            instance.store(counts.get(name).copied().unwrap_or_default());
        }
        services.endpoints = counts.clone();
    }

    /// Whether the last [`Self::sync_services`] left a port unopened,
    /// so the next sync must call it again even without changes.
    pub fn retry_pending(&self) -> bool {
        self.inner.retry_pending.load(Ordering::SeqCst)
    }

    /// Where a service's health check listens; `None` when not open.
    #[cfg(test)]
    pub fn local_addrs(
        &self,
        service: &NamespacedName,
    ) -> Option<Vec<SocketAddr>> {
        self.services()
            .open
            .get(service)
            .map(|i| i._servers.iter().map(Server::local_addr).collect())
    }

    /// The services with an open health check and their ports.
    #[cfg(test)]
    pub(crate) fn open_services(&self) -> HashMap<NamespacedName, u16> {
        self.services()
            .open
            .iter()
            .map(|(name, i)| (name.clone(), i.port))
            .collect()
    }

    /// Opens every listener of one service, or none: a partial set would
    /// hold ports that a retry then finds taken by ourselves.
    fn open(
        &self,
        name: &NamespacedName,
        port: u16,
        counts: LocalCounts,
    ) -> Result<Instance, (SocketAddr, std::io::Error)> {
        let instance = Instance {
            port,
            ipv4: Arc::new(AtomicUsize::new(counts.ipv4)),
            ipv6: Arc::new(AtomicUsize::new(counts.ipv6)),
            _servers: Vec::new(),
        };
        let service = Arc::new(name.clone());
        let mut servers = Vec::new();
        for (family, listener) in self.listen(port)? {
            let address = listener.local_addr().unwrap_or_else(|_| {
                SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port)
            });
            let handler = Handler {
                service: Arc::clone(&service),
                local_endpoints: Arc::clone(match family {
                    IpFamily::V4 => &instance.ipv4,
                    IpFamily::V6 => &instance.ipv6,
                }),
                health: Arc::clone(&self.inner.health),
            };
            let router = Router::new().fallback(answer).with_state(handler);
            let server =
                Server::serve("health check", listener, router, address)
                    .map_err(|e| match e {
                        ServerError::Listen { source, .. } => (address, source),
                        other => {
                            (address, std::io::Error::other(other.to_string()))
                        }
                    })?;
            servers.push(server);
        }
        Ok(Instance {
            _servers: servers,
            ..instance
        })
    }

    /// One listener per family (its wildcard, IPv6 without IPv4) unless
    /// addresses are given, as upstream's `tcp4` and `tcp6` servers.
    fn listen(
        &self,
        port: u16,
    ) -> Result<
        Vec<(IpFamily, std::net::TcpListener)>,
        (SocketAddr, std::io::Error),
    > {
        let wildcards: Vec<IpAddr> = match self.inner.families.as_slice() {
            [] => vec![Ipv4Addr::UNSPECIFIED.into()],
            families => families
                .iter()
                .map(|family| match family {
                    IpFamily::V4 => Ipv4Addr::UNSPECIFIED.into(),
                    IpFamily::V6 => std::net::Ipv6Addr::UNSPECIFIED.into(),
                })
                .collect(),
        };
        let addresses = if self.inner.addresses.is_empty() {
            &wildcards[..]
        } else {
            &self.inner.addresses[..]
        };
        addresses
            .iter()
            .map(|ip| {
                let address = SocketAddr::new(*ip, port);
                listen_exactly(address, true)
                    .map(|l| (IpFamily::of(*ip), l))
                    .map_err(|e| (address, e))
            })
            .collect()
    }
}

#[derive(Debug, Clone)]
struct Handler {
    service: Arc<NamespacedName>,
    local_endpoints: Arc<AtomicUsize>,
    health: Arc<ProxyHealth>,
}

/// Every path answers, as upstream's handler serves the whole port.
async fn answer(State(h): State<Handler>) -> Response {
    let count = h.local_endpoints.load(Ordering::SeqCst);
    let proxy_healthy = h.health.is_healthy();
    let status = if count != 0 && proxy_healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(ENDPOINT_WEIGHT, HeaderValue::from(count));
    (status, headers, body(&h.service, count, proxy_healthy)).into_response()
}

/// Upstream's body, tab-indented as its template prints it, without a
/// trailing newline.
fn body(service: &NamespacedName, count: usize, proxy_healthy: bool) -> String {
    let quote = |s: &str| {
        serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""))
    };
    format!(
        "{{\n\t\"service\": {{\n\t\t\"namespace\": {},\n\t\t\"name\": {}\n\t}},\n\
         \t\"localEndpoints\": {count},\n\t\"serviceProxyHealthy\": {proxy_healthy}\n}}",
        quote(&service.namespace),
        quote(&service.name),
    )
}

/// Health check ports and local ready endpoint counts, kept from the ports
/// each sync changed so that keeping the health check servers current
/// never walks the whole cluster. The tests' `health_check_node_ports`
/// and `local_ready_endpoints` compute the same from scratch.
#[derive(Debug, Default)]
pub struct HealthCheckIndex {
    /// Per service port: its health check port, when it has one.
    port_of: HashMap<ServicePortName, u16>,
    /// Per service port: its distinct local ready endpoints.
    local_of: HashMap<ServicePortName, Vec<SocketAddr>>,
    /// Per service: how many of its ports name each health check port
    /// (all of them name the same one; counted so removal is exact).
    ports: HashMap<NamespacedName, HashMap<u16, usize>>,
    /// Per service: how many of its ports list each local endpoint, one
    /// map per family, so that a family's count is a map's length.
    local_v4: HashMap<NamespacedName, HashMap<SocketAddr, usize>>,
    local_v6: HashMap<NamespacedName, HashMap<SocketAddr, usize>>,
}

impl HealthCheckIndex {
    /// Recomputes the given service ports' contributions. Returns whether
    /// anything the health check servers show changed.
    pub fn update<'a>(
        &mut self,
        changed: impl IntoIterator<Item = &'a ServicePortName>,
        services: &ServicePortMap,
        endpoints: &(impl EndpointsView + ?Sized),
    ) -> bool {
        let mut moved = false;
        for name in changed {
            let port = services
                .get(name)
                .map(|info| info.health_check_node_port)
                .filter(|&p| p != 0);
            if self.port_of.get(name).copied() != port {
                moved = true;
                if let Some(old) = self.port_of.remove(name) {
                    release(&mut self.ports, &name.service, &old);
                }
                if let Some(new) = port {
                    self.port_of.insert(name.clone(), new);
                    acquire(&mut self.ports, &name.service, new);
                }
            }

            let mut local: Vec<SocketAddr> = endpoints
                .local_endpoints(name)
                .iter()
                .filter(|ep| ep.ready)
                .map(|ep| SocketAddr::new(ep.ip, ep.port))
                .collect();
            local.sort();
            local.dedup();
            let old = self.local_of.remove(name).unwrap_or_default();
            if old != local {
                moved = true;
            }
            for addr in &old {
                release(self.local_mut(addr), &name.service, addr);
            }
            for addr in &local {
                acquire(self.local_mut(addr), &name.service, *addr);
            }
            if !local.is_empty() {
                self.local_of.insert(name.clone(), local);
            }
        }
        moved
    }

    /// The health check port of every service that has one.
    pub fn wanted(&self) -> HashMap<NamespacedName, u16> {
        self.ports
            .iter()
            .filter_map(|(name, ports)| {
                ports.keys().next().map(|&p| (name.clone(), p))
            })
            .collect()
    }

    /// Local ready endpoints of the services that have a health check,
    /// per family: the only counts the servers show.
    pub fn local_counts(&self) -> HashMap<NamespacedName, LocalCounts> {
        self.ports
            .keys()
            .map(|name| {
                let count = |local: &HashMap<_, HashMap<_, _>>| {
                    local.get(name).map_or(0, HashMap::len)
                };
                let counts = LocalCounts {
                    ipv4: count(&self.local_v4),
                    ipv6: count(&self.local_v6),
                };
                (name.clone(), counts)
            })
            .collect()
    }

    fn local_mut(
        &mut self,
        addr: &SocketAddr,
    ) -> &mut HashMap<NamespacedName, HashMap<SocketAddr, usize>> {
        match IpFamily::of(addr.ip()) {
            IpFamily::V4 => &mut self.local_v4,
            IpFamily::V6 => &mut self.local_v6,
        }
    }
}

fn acquire<K: std::hash::Hash + Eq>(
    map: &mut HashMap<NamespacedName, HashMap<K, usize>>,
    service: &NamespacedName,
    key: K,
) {
    *map.entry(service.clone())
        .or_default()
        .entry(key)
        .or_default() += 1;
}

fn release<K: std::hash::Hash + Eq>(
    map: &mut HashMap<NamespacedName, HashMap<K, usize>>,
    service: &NamespacedName,
    key: &K,
) {
    let Some(keys) = map.get_mut(service) else {
        return;
    };
    if let Some(count) = keys.get_mut(key) {
        *count -= 1;
        if *count == 0 {
            keys.remove(key);
        }
    }
    if keys.is_empty() {
        map.remove(service);
    }
}

#[cfg(test)]
/// The health check port of every service that has one (upstream's
/// `ServicePortMap.HealthCheckNodePorts`): ETP=Local load balancers.
pub fn health_check_node_ports(
    services: &ServicePortMap,
) -> HashMap<NamespacedName, u16> {
    services
        .iter()
        .filter(|(_, info)| info.health_check_node_port != 0)
        .map(|(name, info)| (name.service.clone(), info.health_check_node_port))
        .collect()
}

#[cfg(test)]
/// Local ready endpoints per service (upstream's
/// `EndpointsMap.LocalReadyEndpoints`): distinct `ip:port` across the
/// service's ports.
pub fn local_ready_endpoints(
    endpoints: &crate::model::EndpointsMap,
) -> HashMap<NamespacedName, LocalCounts> {
    let mut seen: HashMap<
        &NamespacedName,
        std::collections::HashSet<SocketAddr>,
    > = HashMap::new();
    for (port, list) in endpoints {
        for ep in list.iter().filter(|ep| ep.is_local && ep.ready) {
            seen.entry(&port.service)
                .or_default()
                .insert(SocketAddr::new(ep.ip, ep.port));
        }
    }
    seen.into_iter()
        .map(|(name, eps)| {
            let mut counts = LocalCounts::default();
            for ep in eps {
                counts.add(IpFamily::of(ep.ip()));
            }
            (name.clone(), counts)
        })
        .collect()
}
