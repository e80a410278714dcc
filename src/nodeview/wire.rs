//! A node's [`Update`]s to and from the protocol's messages
//! (`nodeview-protocol/proto/nodeview.proto`).
//!
//! Decoding is the node's guard against a bad or foreign server: every
//! malformed field is an error naming the entry and the field, never a
//! panic, and the node keeps what it holds.

use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    sync::Arc,
    time::{Duration, SystemTime},
};

use nodeview_protocol::v1;

use super::{Change, Key, TriggerTimes, Update};
use crate::{
    model::{
        EndpointInfo, NamespacedName, NodeInfo, Protocol, SchedulerFlags,
        ServicePortInfo, ServicePortName, ServiceScheduling,
    },
    selection::{Categorized, NodeEndpoints},
    telemetry::{events::InternalEvent, INVALID_VIEW_CHANGES_TOTAL},
    version::Kubernetes,
};

#[cfg(test)]
mod tests;

/// A message the node cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("update from the API side, {entry}: {field}: {problem}")]
pub struct WireError {
    /// The entry: `service ns/name:port`, `endpoints ns/name:port`,
    /// `node`, or `change N` when the entry itself is unknown.
    pub entry: String,
    pub field: &'static str,
    pub problem: String,
}

/// Logged and counted together, so that the line and the metric cannot
/// drift apart.
impl InternalEvent for &WireError {
    fn emit(self) {
        tracing::warn!(
            entry = %self.entry,
            field = self.field,
            problem = %self.problem,
            "{self}; skipped, the entry keeps what it held"
        );
        metrics::counter!(INVALID_VIEW_CHANGES_TOTAL, "field" => self.field)
            .increment(1);
    }
}

fn error(
    entry: impl Into<String>,
    field: &'static str,
    problem: impl Into<String>,
) -> WireError {
    WireError {
        entry: entry.into(),
        field,
        problem: problem.into(),
    }
}

// --- encoding: the API side ------------------------------------------

/// The message for one update, from the server `instance`.
pub fn encode(update: &Update, instance: &str) -> v1::ViewUpdate {
    v1::ViewUpdate {
        full: update.full,
        changes: update.changes.iter().map(encode_change).collect(),
        revision: update.revision,
        synced: update.synced,
        instance: instance.to_owned(),
        kubernetes: None,
        trigger_times: update
            .trigger_times
            .iter()
            .map(|(service, times)| v1::TriggerTimes {
                namespace: service.namespace.clone(),
                name: service.name.clone(),
                unix_nanos: times.iter().filter_map(unix_nanos).collect(),
            })
            .collect(),
    }
}

/// The release the API side behaves as, for a stream's first message.
pub fn encode_kubernetes(kubernetes: &Kubernetes) -> v1::KubernetesVersion {
    v1::KubernetesVersion {
        major: kubernetes.major.clone(),
        minor: kubernetes.minor.clone(),
        git_version: kubernetes.git_version.clone(),
    }
}

/// A time the wire can carry: none before 1970 or after 2262 is a trigger
/// time of anything (the API side's conversion drops those).
fn unix_nanos(time: &SystemTime) -> Option<i64> {
    let since = time.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    i64::try_from(since.as_nanos()).ok()
}

fn encode_change(change: &Change) -> v1::Change {
    use v1::change::Change as C;
    let change = match change {
        Change::Node(node) => C::Node(encode_node(node)),
        Change::Service(name, svc) => C::Service(encode_service(name, svc)),
        Change::Endpoints(name, eps) => {
            C::Endpoints(encode_endpoints(name, eps))
        }
        Change::Delete(key) => C::Deleted(encode_key(key)),
    };
    v1::Change {
        change: Some(change),
    }
}

fn encode_key(key: &Key) -> v1::Key {
    use v1::key::Kind;
    let (kind, port) = match key {
        Key::Node => (Kind::Node, None),
        Key::Service(name) => (Kind::Service, Some(encode_name(name))),
        Key::Endpoints(name) => (Kind::Endpoints, Some(encode_name(name))),
    };
    v1::Key {
        kind: kind as i32,
        port,
    }
}

fn encode_name(name: &ServicePortName) -> v1::PortName {
    v1::PortName {
        namespace: name.service.namespace.clone(),
        name: name.service.name.clone(),
        port: name.port.clone(),
        protocol: encode_protocol(name.protocol) as i32,
    }
}

fn encode_protocol(protocol: Protocol) -> v1::Protocol {
    match protocol {
        Protocol::Tcp => v1::Protocol::Tcp,
        Protocol::Udp => v1::Protocol::Udp,
        Protocol::Sctp => v1::Protocol::Sctp,
    }
}

fn ip_bytes(ip: &IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

fn encode_node(node: &NodeInfo) -> v1::Node {
    v1::Node {
        name: node.name.clone(),
        pod_cidrs: node.pod_cidrs.iter().map(ToString::to_string).collect(),
        zone: node.zone.clone(),
        addresses: node.addresses.iter().map(ip_bytes).collect(),
        eligible: node.eligible,
    }
}

fn encode_service(
    name: &ServicePortName,
    svc: &ServicePortInfo,
) -> v1::ServicePort {
    v1::ServicePort {
        name: Some(encode_name(name)),
        cluster_ips: svc.cluster_ips.iter().map(ip_bytes).collect(),
        port: svc.port.into(),
        protocol: encode_protocol(svc.protocol) as i32,
        node_port: svc.node_port.into(),
        session_affinity_timeout: svc.session_affinity_timeout,
        external_ips: svc.external_ips.iter().map(ip_bytes).collect(),
        load_balancer_vips: svc
            .load_balancer_vips
            .iter()
            .map(ip_bytes)
            .collect(),
        load_balancer_source_ranges: svc
            .load_balancer_source_ranges
            .iter()
            .map(ToString::to_string)
            .collect(),
        external_policy_local: svc.external_policy_local,
        internal_policy_local: svc.internal_policy_local,
        health_check_node_port: svc.health_check_node_port.into(),
        is_load_balancer: svc.is_load_balancer,
        scheduler: (svc.scheduling.as_ref())
            .and_then(|s| s.scheduler.as_deref())
            .map(str::to_owned),
        scheduler_flags: (svc.scheduling.as_ref())
            .and_then(|s| s.flags.as_ref())
            .map(|(written_for, flags)| v1::SchedulerFlags {
                written_for: written_for.to_string(),
                bits: flags.bits().into(),
            }),
    }
}

/// Every endpoint once, by address then port, each list as indices.
fn encode_endpoints(
    name: &ServicePortName,
    eps: &NodeEndpoints,
) -> v1::PortEndpoints {
    let mut index: BTreeMap<(IpAddr, u16), &EndpointInfo> = BTreeMap::new();
    for family in [&eps.ipv4, &eps.ipv6] {
        for ep in family.cluster.iter().chain(&family.local) {
            index.insert((ep.ip, ep.port), ep);
        }
    }
    for ep in &eps.local {
        index.insert((ep.ip, ep.port), ep);
    }
    let position: BTreeMap<(IpAddr, u16), u32> =
        index.keys().zip(0..).map(|(key, i)| (*key, i)).collect();
    let indices = |list: &[Arc<EndpointInfo>]| -> Vec<u32> {
        list.iter()
            .filter_map(|ep| position.get(&(ep.ip, ep.port)).copied())
            .collect()
    };
    let selection = |c: &Categorized| v1::Selection {
        cluster: indices(&c.cluster),
        local: indices(&c.local),
        has_any_endpoints: c.has_any_endpoints,
    };
    v1::PortEndpoints {
        name: Some(encode_name(name)),
        endpoints: index
            .values()
            .map(|ep| v1::Endpoint {
                ip: ip_bytes(&ep.ip),
                port: ep.port.into(),
                ready: ep.ready,
                serving: ep.serving,
                terminating: ep.terminating,
                is_local: ep.is_local,
            })
            .collect(),
        ipv4: Some(selection(&eps.ipv4)),
        ipv6: Some(selection(&eps.ipv6)),
        local: indices(&eps.local),
        serving: eps.serving.iter().map(ip_bytes).collect(),
    }
}

// --- decoding: the node ----------------------------------------------

/// The update a message carries.
/// The update a message carries; the first malformed change fails it.
#[cfg(any(test, feature = "test-support"))]
pub fn decode(message: v1::ViewUpdate) -> Result<Update, WireError> {
    let (update, mut rejected) = decode_skipping(message);
    match rejected.is_empty() {
        true => Ok(update),
        false => Err(rejected.swap_remove(0)),
    }
}

/// The update a message carries without its malformed changes, and why
/// each was left out: the node takes the rest and keeps what it held for
/// those entries, as a proxy skips a malformed object.
pub fn decode_skipping(message: v1::ViewUpdate) -> (Update, Vec<WireError>) {
    let mut rejected = Vec::new();
    let changes = message
        .changes
        .into_iter()
        .enumerate()
        .filter_map(|(i, change)| {
            decode_change(i, change).map_err(|e| rejected.push(e)).ok()
        })
        .collect();
    let mut trigger_times = TriggerTimes::new();
    for entry in message.trigger_times {
        match decode_trigger_times(entry) {
            Ok((service, times)) => {
                trigger_times.entry(service).or_default().extend(times)
            }
            Err(e) => rejected.push(e),
        }
    }
    let update = Update {
        full: message.full,
        changes,
        revision: message.revision,
        synced: message.synced,
        trigger_times,
    };
    (update, rejected)
}

/// The longest field of a release the node takes: `/version`'s are a few
/// dozen bytes, and each becomes a label value of every scrape.
const MAX_KUBERNETES_FIELD: usize = 128;

/// The release a stream's first message names, as the node reports it.
pub fn decode_kubernetes(
    version: v1::KubernetesVersion,
) -> Result<Kubernetes, WireError> {
    let v1::KubernetesVersion {
        major,
        minor,
        git_version,
    } = version;
    for (field, value) in [
        ("major", &major),
        ("minor", &minor),
        ("git_version", &git_version),
    ] {
        if value.len() > MAX_KUBERNETES_FIELD {
            return Err(error(
                "kubernetes",
                field,
                format!(
                    "{} bytes, more than {MAX_KUBERNETES_FIELD}",
                    value.len()
                ),
            ));
        }
    }
    if git_version.is_empty() {
        return Err(error("kubernetes", "git_version", "empty"));
    }
    Ok(Kubernetes {
        major,
        minor,
        git_version,
    })
}

fn decode_trigger_times(
    entry: v1::TriggerTimes,
) -> Result<(NamespacedName, Vec<SystemTime>), WireError> {
    let who = || format!("trigger times of {}/{}", entry.namespace, entry.name);
    if entry.namespace.is_empty() || entry.name.is_empty() {
        return Err(error(who(), "trigger_times", "no namespace or name"));
    }
    let times = entry
        .unix_nanos
        .iter()
        .map(|&nanos| {
            let nanos = u64::try_from(nanos).map_err(|_| {
                error(who(), "trigger_times.unix_nanos", format!("{nanos}"))
            })?;
            Ok(SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos))
        })
        .collect::<Result<_, _>>()?;
    Ok((NamespacedName::new(&entry.namespace, &entry.name), times))
}

fn decode_change(i: usize, change: v1::Change) -> Result<Change, WireError> {
    use v1::change::Change as C;
    match change.change {
        None => Err(error(format!("change {i}"), "change", "empty")),
        Some(C::Node(node)) => Ok(Change::Node(Arc::new(decode_node(node)?))),
        Some(C::Service(svc)) => {
            let name = decode_name(i, svc.name.as_ref())?;
            let info = decode_service(&name, svc)?;
            Ok(Change::Service(Arc::new(name), Arc::new(info)))
        }
        Some(C::Endpoints(eps)) => {
            let name = decode_name(i, eps.name.as_ref())?;
            let selected = decode_endpoints(&name, eps)?;
            Ok(Change::Endpoints(Arc::new(name), Arc::new(selected)))
        }
        Some(C::Deleted(key)) => decode_key(i, key).map(Change::Delete),
    }
}

fn decode_key(i: usize, key: v1::Key) -> Result<Key, WireError> {
    use v1::key::Kind;
    match Kind::try_from(key.kind) {
        Ok(Kind::Node) => Ok(Key::Node),
        Ok(Kind::Service) => {
            Ok(Key::Service(Arc::new(decode_name(i, key.port.as_ref())?)))
        }
        Ok(Kind::Endpoints) => {
            Ok(Key::Endpoints(Arc::new(decode_name(i, key.port.as_ref())?)))
        }
        Ok(Kind::Unspecified) | Err(_) => Err(error(
            format!("change {i}"),
            "deleted.kind",
            format!("unknown kind {}", key.kind),
        )),
    }
}

fn decode_name(
    i: usize,
    name: Option<&v1::PortName>,
) -> Result<ServicePortName, WireError> {
    let entry = || format!("change {i}");
    let name = name.ok_or_else(|| error(entry(), "name", "missing"))?;
    if name.namespace.is_empty() || name.name.is_empty() {
        return Err(error(entry(), "name", "no namespace or name"));
    }
    Ok(ServicePortName {
        service: NamespacedName::new(&name.namespace, &name.name),
        port: name.port.clone(),
        protocol: decode_protocol(name.protocol)
            .ok_or_else(|| error(entry(), "name.protocol", "unknown"))?,
    })
}

fn decode_protocol(value: i32) -> Option<Protocol> {
    match v1::Protocol::try_from(value).ok()? {
        v1::Protocol::Tcp => Some(Protocol::Tcp),
        v1::Protocol::Udp => Some(Protocol::Udp),
        v1::Protocol::Sctp => Some(Protocol::Sctp),
        v1::Protocol::Unspecified => None,
    }
}

fn decode_ip(bytes: &[u8]) -> Option<IpAddr> {
    if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
        return Some(IpAddr::V4(Ipv4Addr::from(v4)));
    }
    <[u8; 16]>::try_from(bytes)
        .ok()
        .map(|v6| IpAddr::V6(Ipv6Addr::from(v6)))
}

fn decode_ips(
    entry: &dyn Fn() -> String,
    field: &'static str,
    list: &[Vec<u8>],
) -> Result<Vec<IpAddr>, WireError> {
    list.iter()
        .map(|bytes| {
            decode_ip(bytes).ok_or_else(|| {
                error(entry(), field, format!("{} bytes", bytes.len()))
            })
        })
        .collect()
}

fn decode_port(
    entry: &dyn Fn() -> String,
    field: &'static str,
    value: u32,
) -> Result<u16, WireError> {
    u16::try_from(value)
        .map_err(|_| error(entry(), field, format!("{value} out of range")))
}

fn decode_node(node: v1::Node) -> Result<NodeInfo, WireError> {
    let entry = || "node".to_owned();
    let pod_cidrs = node
        .pod_cidrs
        .iter()
        .map(|cidr| {
            cidr.parse()
                .map_err(|_| error(entry(), "pod_cidrs", cidr.clone()))
        })
        .collect::<Result<_, _>>()?;
    Ok(NodeInfo {
        addresses: decode_ips(&entry, "addresses", &node.addresses)?,
        name: node.name,
        pod_cidrs,
        zone: node.zone,
        eligible: node.eligible,
    })
}

fn decode_service(
    name: &ServicePortName,
    svc: v1::ServicePort,
) -> Result<ServicePortInfo, WireError> {
    let entry = || format!("service {name}");
    let cluster_ips = decode_ips(&entry, "cluster_ips", &svc.cluster_ips)?;
    if cluster_ips.is_empty() {
        return Err(error(entry(), "cluster_ips", "none"));
    }
    let protocol = decode_protocol(svc.protocol)
        .ok_or_else(|| error(entry(), "protocol", "unknown"))?;
    let load_balancer_source_ranges = svc
        .load_balancer_source_ranges
        .iter()
        .map(|range| {
            range.parse().map_err(|_| {
                error(entry(), "load_balancer_source_ranges", range.clone())
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(ServicePortInfo {
        cluster_ips,
        port: decode_port(&entry, "port", svc.port)?,
        protocol,
        node_port: decode_port(&entry, "node_port", svc.node_port)?,
        session_affinity_timeout: svc.session_affinity_timeout,
        external_ips: decode_ips(&entry, "external_ips", &svc.external_ips)?,
        load_balancer_vips: decode_ips(
            &entry,
            "load_balancer_vips",
            &svc.load_balancer_vips,
        )?,
        load_balancer_source_ranges,
        external_policy_local: svc.external_policy_local,
        internal_policy_local: svc.internal_policy_local,
        health_check_node_port: decode_port(
            &entry,
            "health_check_node_port",
            svc.health_check_node_port,
        )?,
        is_load_balancer: svc.is_load_balancer,
        scheduling: decode_scheduling(svc.scheduler, svc.scheduler_flags),
    })
}

/// What the API side read from the Service's annotations; it checked
/// them, and the node checks the scheduler against its own list.
fn decode_scheduling(
    scheduler: Option<String>,
    flags: Option<v1::SchedulerFlags>,
) -> Option<ServiceScheduling> {
    if scheduler.is_none() && flags.is_none() {
        return None;
    }
    Some(ServiceScheduling {
        scheduler: scheduler.map(Arc::from),
        flags: flags.map(|f| {
            (Arc::from(f.written_for), SchedulerFlags::from_bits(f.bits))
        }),
    })
}

fn decode_endpoints(
    name: &ServicePortName,
    eps: v1::PortEndpoints,
) -> Result<NodeEndpoints, WireError> {
    let entry = || format!("endpoints {name}");
    let endpoints: Vec<Arc<EndpointInfo>> = eps
        .endpoints
        .iter()
        .map(|ep| {
            Ok(Arc::new(EndpointInfo {
                ip: decode_ip(&ep.ip).ok_or_else(|| {
                    error(
                        entry(),
                        "endpoints.ip",
                        format!("{} bytes", ep.ip.len()),
                    )
                })?,
                port: decode_port(&entry, "endpoints.port", ep.port)?,
                is_local: ep.is_local,
                node_name: None,
                ready: ep.ready,
                serving: ep.serving,
                terminating: ep.terminating,
                zone_hints: Default::default(),
                node_hints: Default::default(),
            }))
        })
        .collect::<Result<_, WireError>>()?;
    // The API side lists each endpoint once, in order: all_reachable
    // follows that order, and a list out of order or with an endpoint
    // twice is no state the API side could have sent.
    if let Some(i) = endpoints
        .windows(2)
        .position(|w| (w[0].ip, w[0].port) >= (w[1].ip, w[1].port))
    {
        return Err(error(
            entry(),
            "endpoints",
            format!("endpoint {} not after the one before", i + 1),
        ));
    }
    let pick = |field: &'static str, indices: &[u32]| {
        indices
            .iter()
            .map(|&i| {
                usize::try_from(i)
                    .ok()
                    .and_then(|i| endpoints.get(i))
                    .cloned()
                    .ok_or_else(|| {
                        error(entry(), field, format!("no endpoint {i}"))
                    })
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let selection = |field: &'static str,
                     ipv4: bool,
                     s: Option<&v1::Selection>|
     -> Result<Categorized, WireError> {
        let Some(s) = s else {
            return Ok(Categorized::default());
        };
        let cluster = pick(field, &s.cluster)?;
        let local = pick(field, &s.local)?;
        // A family's virtual servers take only that family's endpoints.
        if let Some(ep) = cluster
            .iter()
            .chain(&local)
            .find(|ep| ep.ip.is_ipv4() != ipv4)
        {
            return Err(error(
                entry(),
                field,
                format!("endpoint {} of the other family", ep.ip),
            ));
        }
        // What the node may send to, in the endpoints' order, as the
        // proxy's own selection lists it.
        let mut reachable: Vec<u32> =
            s.cluster.iter().chain(&s.local).copied().collect();
        reachable.sort_unstable();
        reachable.dedup();
        Ok(Categorized {
            all_reachable: pick(field, &reachable)?,
            cluster,
            local,
            has_any_endpoints: s.has_any_endpoints,
        })
    };
    Ok(NodeEndpoints {
        ipv4: selection("ipv4", true, eps.ipv4.as_ref())?,
        ipv6: selection("ipv6", false, eps.ipv6.as_ref())?,
        local: pick("local", &eps.local)?,
        serving: decode_ips(&entry, "serving", &eps.serving)?,
    })
}
