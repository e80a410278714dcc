//! Seeded random walks: valid change sequences over a small universe,
//! written as a scenario with steps (see [`crate::scenario`]).
//!
//! The universe: four Services (two selecting Pods, whose slices the real
//! EndpointSlice controller writes; two without selector, with slices
//! written here), six Pods on node-a (ours) or node-b, hand-written
//! slices over a pool of endpoints, and node-a's zone. Each step makes one
//! to three changes a user or a controller could make: a Service's type,
//! traffic policies, affinity, external IPs, load-balancer ingress and
//! source ranges, ports (added, removed, renamed, renumbered), IP families,
//! deletion and re-creation; a Pod's readiness, labels, deletion (it then
//! stays terminating: no kubelet confirms it) and removal; a slice's
//! endpoints, conditions, nodes, zones, hints and ports; the node's zone;
//! sometimes a restart of our proxy. Every address and port the API server
//! would otherwise pick is fixed, so the walk replays identically.
//!
//! The same seed always gives the same walk: the generator is a
//! splitmix64 sequence, nothing else is random.

use std::collections::BTreeSet;

use serde_json::{json, Value};

/// splitmix64: tiny, seedable, and good enough to pick changes.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const SERVICES: usize = 4;
/// Services below this index select Pods; the others have hand-written
/// slices.
const SELECTOR_SERVICES: usize = 2;
/// The Service whose primary family is IPv6.
const IPV6_PRIMARY: usize = 3;
const PODS: usize = 6;
const ENDPOINTS: usize = 5;
/// Hand-written slices per Service: two of the primary family (so that
/// one address can be in both), one of the secondary.
const SLICE_SUFFIXES: [&str; 3] = ["a", "b", "x"];
const NODES: [&str; 2] = ["node-a", "node-b"];
const ZONES: [&str; 2] = ["zone-a", "zone-b"];
const AFFINITY_TIMEOUTS: [u32; 3] = [10800, 60, 300];
const SOURCE_RANGES: [&str; 4] = [
    "198.18.200.0/24",
    // Holds node-a's address.
    "198.18.100.0/24",
    "2001:db8:200::/64",
    "::/0",
];

/// A port of a Service: which slot (protocol), and which of its two
/// names, numbers and target numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Port {
    slot: usize,
    name: usize,
    number: usize,
    target: usize,
}

struct Slot {
    protocol: &'static str,
    names: [&'static str; 2],
    numbers: [u16; 2],
    targets: [u16; 2],
}

const SLOTS: [Slot; 3] = [
    Slot {
        protocol: "TCP",
        names: ["http", "web"],
        numbers: [80, 81],
        targets: [8080, 8081],
    },
    Slot {
        protocol: "UDP",
        names: ["dns", "dns-alt"],
        numbers: [53, 54],
        targets: [5353, 5354],
    },
    Slot {
        protocol: "SCTP",
        names: ["sctp", "assoc"],
        numbers: [9000, 9001],
        targets: [9900, 9901],
    },
];

impl Port {
    fn slot(&self) -> &'static Slot {
        &SLOTS[self.slot]
    }
    fn name(&self) -> &'static str {
        self.slot().names[self.name]
    }
    fn target(&self) -> u16 {
        self.slot().targets[self.target]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServiceType {
    ClusterIp,
    NodePort,
    LoadBalancer,
}

impl ServiceType {
    const ALL: [ServiceType; 3] =
        [Self::ClusterIp, Self::NodePort, Self::LoadBalancer];
    fn as_str(self) -> &'static str {
        match self {
            Self::ClusterIp => "ClusterIP",
            Self::NodePort => "NodePort",
            Self::LoadBalancer => "LoadBalancer",
        }
    }
}

#[derive(Debug, Clone)]
struct Service {
    exists: bool,
    dual: bool,
    kind: ServiceType,
    ports: Vec<Port>,
    etp_local: bool,
    itp_local: bool,
    affinity: Option<u32>,
    external_ips: BTreeSet<usize>,
    /// Ingress entries: index into the pool, and whether its ipMode is
    /// Proxy.
    ingress: BTreeSet<(usize, bool)>,
    source_ranges: BTreeSet<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PodPhase {
    Absent,
    Running,
    Terminating,
}

#[derive(Debug, Clone)]
struct Pod {
    phase: PodPhase,
    ready: bool,
    /// The Service it is labelled for, if any.
    app: Option<usize>,
    node: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Condition {
    Ready,
    NotReady,
    /// Terminating and still serving (ready false).
    ServingTerminating,
    Terminating,
}

impl Condition {
    const ALL: [Condition; 4] = [
        Self::Ready,
        Self::NotReady,
        Self::ServingTerminating,
        Self::Terminating,
    ];
    fn flags(self) -> (bool, bool, bool) {
        match self {
            Self::Ready => (true, true, false),
            Self::NotReady => (false, false, false),
            Self::ServingTerminating => (false, true, true),
            Self::Terminating => (false, false, true),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Endpoint {
    condition: Condition,
    node: Option<usize>,
    zone: Option<usize>,
    hint: Option<usize>,
}

#[derive(Debug, Clone)]
struct Slice {
    exists: bool,
    endpoints: BTreeSet<usize>,
    /// The ports as last written, which may lag the Service's.
    ports: Vec<Port>,
}

/// The objects to write for one step.
#[derive(Debug, Default)]
struct Touched {
    services: BTreeSet<usize>,
    pods: BTreeSet<usize>,
    slices: BTreeSet<(usize, usize)>,
    node: bool,
    pod_deletes: Vec<usize>,
    pod_removals: Vec<usize>,
    service_deletes: Vec<usize>,
    slice_deletes: Vec<(usize, usize)>,
}

impl Touched {
    fn any(&self) -> bool {
        !self.services.is_empty()
            || !self.pods.is_empty()
            || !self.slices.is_empty()
            || self.node
    }
}

#[derive(Debug, Clone)]
struct World {
    services: Vec<Service>,
    pods: Vec<Pod>,
    /// Per hand-written Service (index - SELECTOR_SERVICES).
    endpoints: Vec<Vec<Endpoint>>,
    slices: Vec<Vec<Slice>>,
    node_zone: usize,
}

fn service_name(i: usize) -> String {
    format!("svc-{i}")
}

fn cluster_ips(i: usize) -> (String, String) {
    (
        format!("198.18.41.{}", 10 + i),
        format!("2001:db8:42::41{i}"),
    )
}

fn external_ip(i: usize, k: usize) -> String {
    match k {
        0 | 1 => format!("198.18.240.{}", 100 + 10 * i + k),
        _ => format!("2001:db8:240::{i}"),
    }
}

fn ingress_ip(i: usize, k: usize) -> String {
    match k {
        0 | 1 => format!("198.18.250.{}", 100 + 10 * i + k),
        _ => format!("2001:db8:250::1{i}"),
    }
}

fn pod_ips(k: usize) -> (String, String) {
    (
        format!("198.19.40.{}", 10 + k),
        format!("2001:db8:19:40::{}", 10 + k),
    )
}

fn endpoint_ip(service: usize, e: usize, v6: bool) -> String {
    if v6 {
        format!("2001:db8:19:4{service}::{}", 10 + e)
    } else {
        format!("198.19.4{service}.{}", 10 + e)
    }
}

impl World {
    fn new(rng: &mut Rng) -> Self {
        let mut world = World {
            services: Vec::new(),
            pods: Vec::new(),
            endpoints: Vec::new(),
            slices: Vec::new(),
            node_zone: 0,
        };
        for _ in 0..SERVICES {
            let mut ports = vec![Port {
                slot: 0,
                name: 0,
                number: 0,
                target: 0,
            }];
            if rng.one_in(2) {
                ports.push(Port {
                    slot: 1 + rng.below(2),
                    name: 0,
                    number: 0,
                    target: 0,
                });
            }
            world.services.push(Service {
                exists: true,
                dual: rng.one_in(3),
                kind: *rng.pick(&ServiceType::ALL),
                ports,
                etp_local: rng.one_in(3),
                itp_local: rng.one_in(5),
                affinity: None,
                external_ips: BTreeSet::new(),
                ingress: [(0, false)].into(),
                source_ranges: BTreeSet::new(),
            });
        }
        for k in 0..PODS {
            world.pods.push(Pod {
                phase: if k < 4 {
                    PodPhase::Running
                } else {
                    PodPhase::Absent
                },
                ready: !rng.one_in(4),
                app: Some(k % SELECTOR_SERVICES),
                node: rng.below(NODES.len()),
            });
        }
        for i in SELECTOR_SERVICES..SERVICES {
            let endpoints = (0..ENDPOINTS)
                .map(|_| Endpoint {
                    condition: if rng.one_in(4) {
                        *rng.pick(&Condition::ALL)
                    } else {
                        Condition::Ready
                    },
                    node: Some(rng.below(NODES.len())),
                    zone: None,
                    hint: None,
                })
                .collect();
            world.endpoints.push(endpoints);
            let ports = world.services[i].ports.clone();
            world.slices.push(
                SLICE_SUFFIXES
                    .iter()
                    .enumerate()
                    .map(|(s, _)| Slice {
                        exists: true,
                        endpoints: (0..ENDPOINTS)
                            .filter(|e| e % 3 == s || rng.one_in(4))
                            .collect(),
                        ports: ports.clone(),
                    })
                    .collect(),
            );
        }
        world
    }

    fn externally_accessible(s: &Service) -> bool {
        s.kind != ServiceType::ClusterIp || !s.external_ips.is_empty()
    }

    fn service_doc(&self, i: usize) -> Value {
        let s = &self.services[i];
        let (v4, v6) = cluster_ips(i);
        let v6_primary = i == IPV6_PRIMARY;
        let (primary, secondary, pf, sf) = if v6_primary {
            (v6, v4, "IPv6", "IPv4")
        } else {
            (v4, v6, "IPv4", "IPv6")
        };
        let (ips, families, policy) = if s.dual {
            (
                vec![primary.clone(), secondary],
                vec![pf, sf],
                "RequireDualStack",
            )
        } else {
            (vec![primary.clone()], vec![pf], "SingleStack")
        };
        let node_ports = s.kind != ServiceType::ClusterIp;
        let ports: Vec<Value> = s
            .ports
            .iter()
            .map(|p| {
                let mut port = json!({
                    "name": p.name(),
                    "protocol": p.slot().protocol,
                    "port": p.slot().numbers[p.number],
                    "targetPort": p.target(),
                });
                if node_ports {
                    port["nodePort"] = json!(30400 + 10 * i + p.slot);
                }
                port
            })
            .collect();
        let mut spec = json!({
            "type": s.kind.as_str(),
            "clusterIP": primary,
            "clusterIPs": ips,
            "ipFamilies": families,
            "ipFamilyPolicy": policy,
            "ports": ports,
            "internalTrafficPolicy": if s.itp_local { "Local" } else { "Cluster" },
            "sessionAffinity": if s.affinity.is_some() { "ClientIP" } else { "None" },
        });
        if i < SELECTOR_SERVICES {
            spec["selector"] = json!({"app": service_name(i)});
        }
        if Self::externally_accessible(s) {
            spec["externalTrafficPolicy"] =
                json!(if s.etp_local { "Local" } else { "Cluster" });
        }
        if s.kind == ServiceType::LoadBalancer && s.etp_local {
            spec["healthCheckNodePort"] = json!(31400 + i);
        }
        if let Some(timeout) = s.affinity {
            spec["sessionAffinityConfig"] =
                json!({"clientIP": {"timeoutSeconds": timeout}});
        }
        if !s.external_ips.is_empty() {
            spec["externalIPs"] = s
                .external_ips
                .iter()
                .map(|k| json!(external_ip(i, *k)))
                .collect();
        }
        let lb = s.kind == ServiceType::LoadBalancer;
        if lb && !s.source_ranges.is_empty() {
            spec["loadBalancerSourceRanges"] = s
                .source_ranges
                .iter()
                .map(|k| json!(SOURCE_RANGES[*k]))
                .collect();
        }
        let ingress: Vec<Value> = if lb {
            s.ingress
                .iter()
                .map(|(k, proxy)| {
                    let mut entry = json!({"ip": ingress_ip(i, *k)});
                    if *proxy {
                        entry["ipMode"] = json!("Proxy");
                    }
                    entry
                })
                .collect()
        } else {
            Vec::new()
        };
        let status = if ingress.is_empty() {
            json!({"loadBalancer": {}})
        } else {
            json!({"loadBalancer": {"ingress": ingress}})
        };
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": service_name(i)},
            "spec": spec,
            "status": status,
        })
    }

    fn pod_doc(&self, k: usize) -> Value {
        let p = &self.pods[k];
        let (v4, v6) = pod_ips(k);
        let app = p.app.map_or_else(|| "none".to_owned(), service_name);
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": format!("pod-{k}"), "labels": {"app": app}},
            "spec": {
                "nodeName": NODES[p.node],
                "containers": [{"name": "c", "image": "e2e.invalid/none"}],
            },
            "status": {
                "phase": "Running",
                "podIP": v4,
                "podIPs": [{"ip": v4}, {"ip": v6}],
                "conditions": [{"type": "Ready", "status": if p.ready { "True" } else { "False" }}],
            },
        })
    }

    fn slice_name(i: usize, s: usize) -> String {
        format!("{}-{}", service_name(i), SLICE_SUFFIXES[s])
    }

    fn slice_doc(&self, i: usize, s: usize) -> Value {
        let h = i - SELECTOR_SERVICES;
        let slice = &self.slices[h][s];
        let primary_v6 = i == IPV6_PRIMARY;
        // The third slice holds the secondary family.
        let v6 = if s == 2 { !primary_v6 } else { primary_v6 };
        let endpoints: Vec<Value> = slice
            .endpoints
            .iter()
            .map(|e| {
                let ep = &self.endpoints[h][*e];
                let (ready, serving, terminating) = ep.condition.flags();
                let mut doc = json!({
                    "addresses": [endpoint_ip(i, *e, v6)],
                    "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
                });
                if let Some(node) = ep.node {
                    doc["nodeName"] = json!(NODES[node]);
                }
                if let Some(zone) = ep.zone {
                    doc["zone"] = json!(ZONES[zone]);
                }
                if let Some(hint) = ep.hint {
                    doc["hints"] = json!({"forZones": [{"name": ZONES[hint]}]});
                }
                doc
            })
            .collect();
        let ports: Vec<Value> = slice
            .ports
            .iter()
            .map(|p| json!({"name": p.name(), "port": p.target(), "protocol": p.slot().protocol}))
            .collect();
        json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": Self::slice_name(i, s),
                "labels": {"kubernetes.io/service-name": service_name(i)},
            },
            "addressType": if v6 { "IPv6" } else { "IPv4" },
            "ports": ports,
            "endpoints": endpoints,
        })
    }

    fn initial_docs(&self) -> Vec<Value> {
        let mut docs = Vec::new();
        for i in 0..SERVICES {
            docs.push(self.service_doc(i));
        }
        for k in 0..PODS {
            if self.pods[k].phase == PodPhase::Running {
                docs.push(self.pod_doc(k));
            }
        }
        for i in SELECTOR_SERVICES..SERVICES {
            for s in 0..SLICE_SUFFIXES.len() {
                docs.push(self.slice_doc(i, s));
            }
        }
        docs
    }
}

/// A change to the world: what it did, or None if it did not apply.
type Move = fn(&mut World, &mut Rng, &mut Touched) -> Option<String>;

/// A Service that exists and was not touched yet in this step.
fn pick_service(
    w: &World,
    rng: &mut Rng,
    t: &Touched,
    range: std::ops::Range<usize>,
) -> Option<usize> {
    let i = range.start + rng.below(range.len());
    (w.services[i].exists
        && !t.services.contains(&i)
        && !t.service_deletes.contains(&i))
    .then_some(i)
}

fn any_service(w: &World, rng: &mut Rng, t: &Touched) -> Option<usize> {
    pick_service(w, rng, t, 0..SERVICES)
}

fn flip_type(w: &mut World, rng: &mut Rng, t: &mut Touched) -> Option<String> {
    let i = any_service(w, rng, t)?;
    let s = &mut w.services[i];
    let new = *rng.pick(&ServiceType::ALL);
    if new == s.kind {
        return None;
    }
    s.kind = new;
    t.services.insert(i);
    Some(format!("{}: type {}", service_name(i), new.as_str()))
}

fn flip_policies(
    w: &mut World,
    rng: &mut Rng,
    t: &mut Touched,
) -> Option<String> {
    let i = any_service(w, rng, t)?;
    let s = &mut w.services[i];
    t.services.insert(i);
    if rng.one_in(2) && World::externally_accessible(s) {
        s.etp_local = !s.etp_local;
        Some(format!(
            "{}: externalTrafficPolicy {}",
            service_name(i),
            if s.etp_local { "Local" } else { "Cluster" }
        ))
    } else {
        s.itp_local = !s.itp_local;
        Some(format!(
            "{}: internalTrafficPolicy {}",
            service_name(i),
            if s.itp_local { "Local" } else { "Cluster" }
        ))
    }
}

fn change_affinity(
    w: &mut World,
    rng: &mut Rng,
    t: &mut Touched,
) -> Option<String> {
    let i = any_service(w, rng, t)?;
    let s = &mut w.services[i];
    s.affinity = match s.affinity {
        Some(_) if rng.one_in(2) => None,
        _ => Some(*rng.pick(&AFFINITY_TIMEOUTS)),
    };
    t.services.insert(i);
    Some(match s.affinity {
        Some(timeout) => {
            format!("{}: ClientIP affinity, {timeout}s", service_name(i))
        }
        None => format!("{}: no affinity", service_name(i)),
    })
}

fn toggle<T: Ord + Copy>(set: &mut BTreeSet<T>, item: T) -> bool {
    if set.remove(&item) {
        false
    } else {
        set.insert(item);
        true
    }
}

fn change_external_ips(
    w: &mut World,
    rng: &mut Rng,
    t: &mut Touched,
) -> Option<String> {
    let i = any_service(w, rng, t)?;
    let k = rng.below(3);
    let added = toggle(&mut w.services[i].external_ips, k);
    t.services.insert(i);
    Some(format!(
        "{}: external IP {} {}",
        service_name(i),
        external_ip(i, k),
        if added { "added" } else { "removed" }
    ))
}

fn change_ingress(
    w: &mut World,
    rng: &mut Rng,
    t: &mut Touched,
) -> Option<String> {
    let i = any_service(w, rng, t)?;
    let s = &mut w.services[i];
    if s.kind != ServiceType::LoadBalancer {
        return None;
    }
    let k = rng.below(3);
    let existing = s.ingress.iter().find(|(ip, _)| *ip == k).copied();
    let what = match existing {
        Some(entry) if rng.one_in(3) => {
            s.ingress.remove(&entry);
            s.ingress.insert((k, !entry.1));
            format!("ipMode {}", if entry.1 { "VIP" } else { "Proxy" })
        }
        Some(entry) => {
            s.ingress.remove(&entry);
            "removed".to_owned()
        }
        None => {
            s.ingress.insert((k, false));
            "added".to_owned()
        }
    };
    t.services.insert(i);
    Some(format!(
        "{}: ingress {} {what}",
        service_name(i),
        ingress_ip(i, k)
    ))
}

fn change_source_ranges(
    w: &mut World,
    rng: &mut Rng,
    t: &mut Touched,
) -> Option<String> {
    let i = any_service(w, rng, t)?;
    let s = &mut w.services[i];
    if s.kind != ServiceType::LoadBalancer {
        return None;
    }
    let k = rng.below(SOURCE_RANGES.len());
    let added = toggle(&mut s.source_ranges, k);
    t.services.insert(i);
    Some(format!(
        "{}: source range {} {}",
        service_name(i),
        SOURCE_RANGES[k],
        if added { "added" } else { "removed" }
    ))
}

fn change_ports(
    w: &mut World,
    rng: &mut Rng,
    t: &mut Touched,
) -> Option<String> {
    let i = any_service(w, rng, t)?;
    let s = &mut w.services[i];
    let j = rng.below(s.ports.len());
    let what = match rng.below(5) {
        0 => {
            let used: Vec<usize> = s.ports.iter().map(|p| p.slot).collect();
            let free: Vec<usize> = (0..SLOTS.len())
                .filter(|slot| !used.contains(slot))
                .collect();
            let slot = *free.get(rng.below(free.len().max(1)))?;
            s.ports.push(Port {
                slot,
                name: 0,
                number: 0,
                target: 0,
            });
            format!("port {} added", SLOTS[slot].names[0])
        }
        1 if s.ports.len() > 1 => {
            let gone = s.ports.remove(j);
            format!("port {} removed", gone.name())
        }
        2 => {
            s.ports[j].name ^= 1;
            format!("port renamed {}", s.ports[j].name())
        }
        3 => {
            s.ports[j].number ^= 1;
            format!(
                "port {} renumbered {}",
                s.ports[j].name(),
                s.ports[j].slot().numbers[s.ports[j].number]
            )
        }
        _ => {
            s.ports[j].target ^= 1;
            format!(
                "port {} targets {}",
                s.ports[j].name(),
                s.ports[j].target()
            )
        }
    };
    t.services.insert(i);
    Some(format!("{}: {what}", service_name(i)))
}

fn flip_families(
    w: &mut World,
    rng: &mut Rng,
    t: &mut Touched,
) -> Option<String> {
    let i = any_service(w, rng, t)?;
    let s = &mut w.services[i];
    s.dual = !s.dual;
    t.services.insert(i);
    Some(format!(
        "{}: {}",
        service_name(i),
        if s.dual { "dual-stack" } else { "single-stack" }
    ))
}

fn delete_or_create_service(
    w: &mut World,
    rng: &mut Rng,
    t: &mut Touched,
) -> Option<String> {
    let i = rng.below(SERVICES);
    if t.services.contains(&i) || t.service_deletes.contains(&i) {
        return None;
    }
    let s = &mut w.services[i];
    if s.exists {
        s.exists = false;
        t.service_deletes.push(i);
        Some(format!("{}: deleted", service_name(i)))
    } else {
        s.exists = true;
        t.services.insert(i);
        Some(format!("{}: created again", service_name(i)))
    }
}

fn change_pod(w: &mut World, rng: &mut Rng, t: &mut Touched) -> Option<String> {
    let k = rng.below(PODS);
    if t.pods.contains(&k)
        || t.pod_deletes.contains(&k)
        || t.pod_removals.contains(&k)
    {
        return None;
    }
    let p = &mut w.pods[k];
    let name = format!("pod-{k}");
    let what = match (p.phase, rng.below(4)) {
        (PodPhase::Absent, _) => {
            p.phase = PodPhase::Running;
            p.ready = !rng.one_in(3);
            p.node = rng.below(NODES.len());
            p.app = (!rng.one_in(5)).then(|| rng.below(SELECTOR_SERVICES));
            t.pods.insert(k);
            format!(
                "created on {}{}",
                NODES[p.node],
                if p.ready { ", ready" } else { "" }
            )
        }
        (PodPhase::Running, 0) => {
            p.phase = PodPhase::Terminating;
            t.pod_deletes.push(k);
            "deleted (terminating)".to_owned()
        }
        (PodPhase::Terminating, 0) => {
            p.phase = PodPhase::Absent;
            t.pod_removals.push(k);
            "gone".to_owned()
        }
        (_, 1) => {
            p.app = match p.app {
                Some(a) if rng.one_in(3) => Some((a + 1) % SELECTOR_SERVICES),
                Some(_) => None,
                None => Some(rng.below(SELECTOR_SERVICES)),
            };
            t.pods.insert(k);
            format!(
                "labelled app={}",
                p.app.map_or_else(|| "none".to_owned(), service_name)
            )
        }
        _ => {
            p.ready = !p.ready;
            t.pods.insert(k);
            (if p.ready { "ready" } else { "not ready" }).to_owned()
        }
    };
    Some(format!("{name}: {what}"))
}

fn change_slice(
    w: &mut World,
    rng: &mut Rng,
    t: &mut Touched,
) -> Option<String> {
    let i = SELECTOR_SERVICES + rng.below(SERVICES - SELECTOR_SERVICES);
    let h = i - SELECTOR_SERVICES;
    let s = rng.below(SLICE_SUFFIXES.len());
    if t.slices.contains(&(i, s)) || t.slice_deletes.contains(&(i, s)) {
        return None;
    }
    let name = World::slice_name(i, s);
    let e = rng.below(ENDPOINTS);
    let what = {
        let service_ports = w.services[i].ports.clone();
        let slice = &mut w.slices[h][s];
        if !slice.exists {
            slice.exists = true;
            slice.ports = service_ports;
            "created again".to_owned()
        } else {
            match rng.below(7) {
                0 if rng.one_in(2) => {
                    slice.exists = false;
                    t.slice_deletes.push((i, s));
                    return Some(format!("{name}: deleted"));
                }
                0 | 1 => {
                    let added = toggle(&mut slice.endpoints, e);
                    format!(
                        "endpoint {} {}",
                        endpoint_ip(i, e, false),
                        if added { "added" } else { "removed" }
                    )
                }
                2 => {
                    slice.ports = service_ports;
                    "ports follow the Service".to_owned()
                }
                _ => {
                    // The endpoint's own state is shared by every slice that
                    // holds it: write them all.
                    let ep = &mut w.endpoints[h][e];
                    let what = match rng.below(4) {
                        0 => {
                            ep.condition = *rng.pick(&Condition::ALL);
                            format!("{:?}", ep.condition)
                        }
                        1 => {
                            ep.node = (!rng.one_in(4))
                                .then(|| rng.below(NODES.len()));
                            format!(
                                "node {}",
                                ep.node.map_or("none", |n| NODES[n])
                            )
                        }
                        2 => {
                            ep.zone = (!rng.one_in(3))
                                .then(|| rng.below(ZONES.len()));
                            format!(
                                "zone {}",
                                ep.zone.map_or("none", |z| ZONES[z])
                            )
                        }
                        _ => {
                            ep.hint = (!rng.one_in(3))
                                .then(|| rng.below(ZONES.len()));
                            format!(
                                "hint {}",
                                ep.hint.map_or("none", |z| ZONES[z])
                            )
                        }
                    };
                    for (other, slice) in w.slices[h].iter().enumerate() {
                        if slice.exists
                            && slice.endpoints.contains(&e)
                            && !t.slice_deletes.contains(&(i, other))
                        {
                            t.slices.insert((i, other));
                        }
                    }
                    format!("endpoint {e} {what}")
                }
            }
        }
    };
    t.slices.insert((i, s));
    Some(format!("{name}: {what}"))
}

fn flip_zone(w: &mut World, _rng: &mut Rng, t: &mut Touched) -> Option<String> {
    if t.node {
        return None;
    }
    w.node_zone ^= 1;
    t.node = true;
    Some(format!("node-a: zone {}", ZONES[w.node_zone]))
}

/// The changes and how often each is drawn.
const MOVES: &[(Move, usize)] = &[
    (flip_type, 3),
    (flip_policies, 2),
    (change_affinity, 1),
    (change_external_ips, 2),
    (change_ingress, 2),
    (change_source_ranges, 2),
    (change_ports, 3),
    (flip_families, 2),
    (delete_or_create_service, 1),
    (change_pod, 4),
    (change_slice, 4),
    (flip_zone, 1),
];

fn draw_move(rng: &mut Rng) -> Move {
    let total: usize = MOVES.iter().map(|(_, w)| w).sum();
    let mut n = rng.below(total);
    for (m, weight) in MOVES {
        if n < *weight {
            return *m;
        }
        n -= weight;
    }
    MOVES[0].0
}

/// How long after the start of ours' sync a kill aimed at it comes, at
/// most: a sync of the walk's few objects takes about ten milliseconds in
/// the emulated guest (more when iptables must be written).
const KILL_IN_SYNC_WITHIN_MS: u64 = 10;

/// What a walk includes beside the changes.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub steps: usize,
    /// Kill our proxy with SIGKILL after about half the steps, at a random
    /// moment up to this many milliseconds after the step's changes.
    pub kill_within_ms: Option<u64>,
}

fn step_doc(
    w: &World,
    rng: &mut Rng,
    t: &Touched,
    name: String,
    options: &Options,
) -> Vec<Value> {
    let mut step = json!({"kind": "Step", "name": name});
    let refs = |kind: &str, names: Vec<String>| -> Value {
        names
            .into_iter()
            .map(|n| json!(format!("{kind}/{n}")))
            .collect()
    };
    let mut delete: Vec<Value> = Vec::new();
    if let Value::Array(items) = refs(
        "service",
        t.service_deletes.iter().map(|i| service_name(*i)).collect(),
    ) {
        delete.extend(items);
    }
    if let Value::Array(items) = refs(
        "endpointslice",
        t.slice_deletes
            .iter()
            .map(|(i, s)| World::slice_name(*i, *s))
            .collect(),
    ) {
        delete.extend(items);
    }
    if let Value::Array(items) = refs(
        "pod",
        t.pod_deletes.iter().map(|k| format!("pod-{k}")).collect(),
    ) {
        delete.extend(items);
    }
    if !delete.is_empty() {
        step["delete"] = Value::Array(delete);
    }
    if !t.pod_removals.is_empty() {
        step["forceDelete"] = refs(
            "pod",
            t.pod_removals.iter().map(|k| format!("pod-{k}")).collect(),
        );
    }
    if t.node {
        step["patch"] = json!([{
            "kind": "node",
            "name": "node-a",
            "patch": {"metadata": {"labels": {"topology.kubernetes.io/zone": ZONES[w.node_zone]}}},
        }]);
    }
    match options.kill_within_ms {
        // Half the kills at any moment of the step, half just after ours
        // starts to sync it, where a sync is seldom caught otherwise.
        Some(within) if rng.one_in(2) => {
            if rng.one_in(2) {
                step["killAfterMs"] = json!(rng.next_u64() % (within + 1));
            } else {
                step["killAfterMs"] =
                    json!(rng.next_u64() % (KILL_IN_SYNC_WITHIN_MS + 1));
                step["killInSync"] = json!(true);
            }
        }
        None if rng.one_in(15) => {
            step["restart"] =
                json!(if rng.one_in(2) { "term" } else { "kill" });
        }
        _ => {}
    }
    let mut docs = vec![step];
    for i in &t.services {
        docs.push(w.service_doc(*i));
    }
    for k in &t.pods {
        docs.push(w.pod_doc(*k));
    }
    for (i, s) in &t.slices {
        docs.push(w.slice_doc(*i, *s));
    }
    docs
}

/// The walk for `seed`, as a scenario's documents (the configuration
/// first).
pub fn walk(seed: u64, options: &Options) -> Vec<Value> {
    let mut rng = Rng::new(seed);
    let mut world = World::new(&mut rng);
    let mut docs = vec![json!({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
    })];
    docs.extend(world.initial_docs());
    for _ in 0..options.steps {
        let wanted = 1 + rng.below(3);
        let mut touched = Touched::default();
        let mut names = Vec::new();
        let mut attempts = 0;
        while names.len() < wanted && attempts < 50 {
            attempts += 1;
            if let Some(name) =
                draw_move(&mut rng)(&mut world, &mut rng, &mut touched)
            {
                names.push(name);
            }
        }
        if !touched.any()
            && touched.service_deletes.is_empty()
            && touched.pod_deletes.is_empty()
            && touched.pod_removals.is_empty()
            && touched.slice_deletes.is_empty()
        {
            names.push("nothing".to_owned());
        }
        docs.extend(step_doc(
            &world,
            &mut rng,
            &touched,
            names.join("; "),
            options,
        ));
    }
    docs
}

/// The walk as YAML, with a header that says how to replay it.
pub fn walk_yaml(seed: u64, options: &Options) -> anyhow::Result<String> {
    let mut out = format!(
        "# Random walk, seed {seed}, {} steps{} (tests/conformance/tool, walk.rs).\n\
         # Replay: make conformance-random SEED={seed} {}\n",
        options.steps,
        if options.kill_within_ms.is_some() { ", SIGKILLs" } else { "" },
        if options.kill_within_ms.is_some() {
            format!("KILLS=1 KILL_STEPS={}", options.steps)
        } else {
            format!("STEPS={}", options.steps)
        },
    );
    for (n, doc) in walk(seed, options).iter().enumerate() {
        if n > 0 {
            out.push_str("---\n");
        }
        out.push_str(
            &serde_saphyr::to_string(doc)
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario;

    const OPTIONS: Options = Options {
        steps: 40,
        kill_within_ms: None,
    };

    #[test]
    fn the_same_seed_gives_the_same_walk() {
        assert_eq!(
            walk_yaml(7, &OPTIONS).unwrap(),
            walk_yaml(7, &OPTIONS).unwrap()
        );
        assert_ne!(
            walk_yaml(7, &OPTIONS).unwrap(),
            walk_yaml(8, &OPTIONS).unwrap()
        );
    }

    #[test]
    fn walks_parse_as_replayable_scenarios() {
        for seed in 0..30 {
            let text = walk_yaml(seed, &OPTIONS).unwrap();
            let s = scenario::parse(&text)
                .unwrap_or_else(|e| panic!("seed {seed}: {e:#}\n{text}"));
            assert_eq!(s.steps.len(), OPTIONS.steps, "seed {seed}");
        }
    }

    /// The API server's rules the walk must keep, checked on every object
    /// it writes: a failed apply would fail the run.
    #[test]
    fn services_stay_valid() {
        for seed in 0..50 {
            for doc in walk(seed, &OPTIONS) {
                if doc["kind"] != "Service" {
                    continue;
                }
                let spec = &doc["spec"];
                let kind = spec["type"].as_str().unwrap();
                let ports = spec["ports"].as_array().unwrap();
                assert!(!ports.is_empty(), "{doc}");
                let names: BTreeSet<&str> =
                    ports.iter().map(|p| p["name"].as_str().unwrap()).collect();
                assert_eq!(
                    names.len(),
                    ports.len(),
                    "port names unique: {doc}"
                );
                let accessible =
                    kind != "ClusterIP" || spec.get("externalIPs").is_some();
                assert_eq!(
                    spec.get("externalTrafficPolicy").is_some(),
                    accessible,
                    "{doc}"
                );
                assert_eq!(
                    spec.get("healthCheckNodePort").is_some(),
                    kind == "LoadBalancer"
                        && spec["externalTrafficPolicy"] == "Local",
                    "{doc}"
                );
                assert!(
                    spec.get("loadBalancerSourceRanges").is_none()
                        || kind == "LoadBalancer",
                    "{doc}"
                );
                assert_eq!(
                    spec.get("sessionAffinityConfig").is_some(),
                    spec["sessionAffinity"] == "ClientIP",
                    "{doc}"
                );
                for port in ports {
                    assert_eq!(
                        port.get("nodePort").is_some(),
                        kind != "ClusterIP",
                        "{doc}"
                    );
                }
                let families = spec["ipFamilies"].as_array().unwrap().len();
                assert_eq!(
                    spec["clusterIPs"].as_array().unwrap().len(),
                    families,
                    "{doc}"
                );
            }
        }
    }

    #[test]
    fn pods_are_never_touched_twice_in_a_step_and_never_recreated_while_terminating(
    ) {
        for seed in 0..50 {
            let s =
                scenario::parse(&walk_yaml(seed, &OPTIONS).unwrap()).unwrap();
            let mut terminating = BTreeSet::new();
            for step in &s.steps {
                let applied: BTreeSet<String> = step
                    .apply
                    .iter()
                    .filter(|d| d["kind"] == "Pod")
                    .map(|d| {
                        format!(
                            "pod/{}",
                            d["metadata"]["name"].as_str().unwrap()
                        )
                    })
                    .collect();
                for gone in &step.force_delete {
                    assert!(
                        terminating.remove(gone),
                        "seed {seed}: {gone} removed before its deletion"
                    );
                }
                for pod in &step.delete {
                    if pod.starts_with("pod/") {
                        assert!(
                            !applied.contains(pod),
                            "seed {seed}: {pod} applied and deleted at once"
                        );
                        terminating.insert(pod.clone());
                    }
                }
                for pod in &applied {
                    assert!(
                        !terminating.contains(pod)
                            || !step.force_delete.contains(pod),
                        "seed {seed}: {pod}"
                    );
                }
            }
        }
    }

    #[test]
    fn kill_walks_kill_about_half_the_steps() {
        let options = Options {
            steps: 60,
            kill_within_ms: Some(1500),
        };
        let s = scenario::parse(&walk_yaml(3, &options).unwrap()).unwrap();
        let kills: Vec<u64> =
            s.steps.iter().filter_map(|st| st.kill_after_ms).collect();
        let in_sync = s.steps.iter().filter(|st| st.kill_in_sync).count();
        assert!(
            in_sync > 0 && in_sync < kills.len(),
            "{in_sync} of {}",
            kills.len()
        );
        assert!((15..=45).contains(&kills.len()), "{} kills", kills.len());
        assert!(kills.iter().all(|ms| *ms <= 1500));
        assert!(s.steps.iter().all(|st| st.restart.is_none()));
    }
}
