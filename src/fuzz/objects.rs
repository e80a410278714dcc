//! The API server's objects: Services, EndpointSlices and Nodes as any
//! client with write access could make them, through the stores, the
//! trackers and the desired state, change by change.

use std::{collections::BTreeMap, time::SystemTime};

use k8s_openapi::{
    api::{
        core::v1::{
            ClientIPConfig, LoadBalancerIngress, LoadBalancerStatus, Node,
            NodeAddress, NodeSpec, NodeStatus, Service, ServicePort,
            ServiceSpec, ServiceStatus, SessionAffinityConfig,
        },
        discovery::v1::{
            Endpoint, EndpointConditions, EndpointHints, EndpointPort,
            EndpointSlice, ForNode, ForZone,
        },
    },
    apimachinery::pkg::{
        apis::meta::v1::ObjectMeta, util::intstr::IntOrString,
    },
};
use kube::runtime::watcher::Event;

use super::input::Input;
use crate::{
    model::{convert::object_name, NamespacedName},
    source::{file::Snapshot, store::Stores, SourceEvent},
    sync::{plan, ChangeOutcome, NodeSettings, SyncState},
};

/// The node the proxy under test runs on.
pub(super) const NODE: &str = "node-a";

const NAMESPACES: &[&str] = &["default", "kube-system", ""];
const SERVICE_NAMES: &[&str] = &["svc-a", "svc-b", "svc-c", ""];
const SLICE_NAMES: &[&str] = &["svc-a-1", "svc-a-2", "svc-b-1", "other", ""];
const NODE_NAMES: &[&str] = &["node-a", "node-b", ""];
const ZONES: &[&str] = &["zone-a", "zone-b", ""];
pub(super) const SERVICE_IPS: &[&str] = &[
    "198.18.0.10",
    "198.18.0.11",
    "198.18.0.12",
    "None",
    "",
    "2001:db8::a",
    "198.18.0.010",
    "not-an-ip",
    "::ffff:198.18.0.1",
    "0.0.0.0",
    "198.18.0.10 ",
];
pub(super) const POD_IPS: &[&str] = &[
    "198.19.0.1",
    "198.19.0.2",
    "198.19.1.1",
    "2001:db8:1::1",
    "198.19.0.1/32",
    "",
    "fe80::1",
    "198.19.0.256",
    "127.0.0.1",
    "0.0.0.0",
];
const EXTERNAL_IPS: &[&str] = &[
    "198.18.1.1",
    "198.18.128.11",
    "198.19.0.1",
    "2001:db8:2::1",
    "bogus",
    "",
];
pub(super) const CIDRS: &[&str] = &[
    "198.18.0.0/15",
    "198.19.0.0/24",
    "198.19.1.0/24",
    "2001:db8:1::/64",
    "198.19.0.1/24",
    "0.0.0.0/0",
    "10.0.0.0/33",
    "bogus",
    "",
];
const PROTOCOLS: &[&str] = &["TCP", "UDP", "SCTP", "tcp", "ICMP", ""];
const PORT_NAMES: &[&str] = &["", "http", "dns", "Bad_Name"];
const PORTS: &[i32] = &[80, 53, 443, 8080, 0, -1, 65535, 65536, 30080];

fn meta(input: &mut Input<'_>, names: &[&str], version: u64) -> ObjectMeta {
    ObjectMeta {
        namespace: input.maybe(|i| i.pick_str(NAMESPACES)),
        name: Some(input.pick_str(names)),
        resource_version: Some(version.to_string()),
        ..ObjectMeta::default()
    }
}

fn labels(
    input: &mut Input<'_>,
    choices: &[(&str, &[&str])],
) -> Option<BTreeMap<String, String>> {
    input.maybe(|i| {
        let mut labels = BTreeMap::new();
        for (key, values) in choices {
            if i.bool() {
                labels.insert((*key).to_owned(), i.pick_str(values));
            }
        }
        labels
    })
}

fn port(input: &mut Input<'_>) -> i32 {
    match input.one_in(8) {
        true => input.i32(),
        false => input.pick(PORTS),
    }
}

fn strings(
    input: &mut Input<'_>,
    max: usize,
    choices: &[&str],
) -> Option<Vec<String>> {
    input.maybe(|i| i.list(max, |i| i.pick_str(choices)))
}

pub(super) fn service(input: &mut Input<'_>, version: u64) -> Service {
    let mut metadata = meta(input, SERVICE_NAMES, version);
    metadata.labels = labels(
        input,
        &[
            ("service.kubernetes.io/service-proxy-name", &["", "other"]),
            ("service.kubernetes.io/headless", &[""]),
        ],
    );
    let ports = input.maybe(|i| {
        i.list(3, |i| ServicePort {
            name: i.maybe(|i| i.pick_str(PORT_NAMES)),
            port: port(i),
            node_port: i.maybe(port),
            protocol: i.maybe(|i| i.pick_str(PROTOCOLS)),
            target_port: i.maybe(|i| match i.bool() {
                true => IntOrString::Int(port(i)),
                false => IntOrString::String(i.pick_str(PORT_NAMES)),
            }),
            ..ServicePort::default()
        })
    });
    let spec = input.maybe(|i| ServiceSpec {
        type_: i.maybe(|i| {
            i.pick_str(&[
                "ClusterIP",
                "NodePort",
                "LoadBalancer",
                "ExternalName",
                "Bogus",
            ])
        }),
        cluster_ip: i.maybe(|i| i.pick_str(SERVICE_IPS)),
        cluster_ips: strings(i, 3, SERVICE_IPS),
        ip_families: strings(i, 2, &["IPv4", "IPv6", "IPv5"]),
        ports,
        external_ips: strings(i, 2, EXTERNAL_IPS),
        load_balancer_ip: i.maybe(|i| i.pick_str(EXTERNAL_IPS)),
        load_balancer_source_ranges: strings(i, 2, CIDRS),
        external_traffic_policy: i
            .maybe(|i| i.pick_str(&["Local", "Cluster", "bogus"])),
        internal_traffic_policy: i
            .maybe(|i| i.pick_str(&["Local", "Cluster", "bogus"])),
        health_check_node_port: i.maybe(port),
        session_affinity: i.maybe(|i| i.pick_str(&["None", "ClientIP", "x"])),
        session_affinity_config: i.maybe(|i| SessionAffinityConfig {
            client_ip: i.maybe(|i| ClientIPConfig {
                timeout_seconds: i.maybe(|i| match i.bool() {
                    true => i.i32(),
                    false => i.pick(&[0, 1, 10800, 86400, 86401]),
                }),
            }),
        }),
        traffic_distribution: i.maybe(|i| {
            i.pick_str(&[
                "PreferClose",
                "PreferSameZone",
                "PreferSameNode",
                "x",
            ])
        }),
        ..ServiceSpec::default()
    });
    let status = input.maybe(|i| ServiceStatus {
        load_balancer: Some(LoadBalancerStatus {
            ingress: i.maybe(|i| {
                i.list(2, |i| LoadBalancerIngress {
                    ip: i.maybe(|i| i.pick_str(EXTERNAL_IPS)),
                    ip_mode: i.maybe(|i| i.pick_str(&["VIP", "Proxy", "x"])),
                    ..LoadBalancerIngress::default()
                })
            }),
        }),
        ..ServiceStatus::default()
    });
    Service {
        metadata,
        spec,
        status,
    }
}

pub(super) fn endpoint_slice(
    input: &mut Input<'_>,
    version: u64,
) -> EndpointSlice {
    let mut metadata = meta(input, SLICE_NAMES, version);
    metadata.labels = labels(
        input,
        &[
            ("kubernetes.io/service-name", SERVICE_NAMES),
            (
                "endpointslice.kubernetes.io/managed-by",
                &["endpointslice-controller.k8s.io", "other"],
            ),
        ],
    );
    let endpoints = input.list(4, |i| Endpoint {
        addresses: i.list(2, |i| i.pick_str(POD_IPS)),
        conditions: i.maybe(|i| EndpointConditions {
            ready: i.maybe(Input::bool),
            serving: i.maybe(Input::bool),
            terminating: i.maybe(Input::bool),
        }),
        node_name: i.maybe(|i| i.pick_str(NODE_NAMES)),
        zone: i.maybe(|i| i.pick_str(ZONES)),
        hints: i.maybe(|i| EndpointHints {
            for_zones: i.maybe(|i| {
                i.list(2, |i| ForZone {
                    name: i.pick_str(ZONES),
                })
            }),
            for_nodes: i.maybe(|i| {
                i.list(2, |i| ForNode {
                    name: i.pick_str(NODE_NAMES),
                })
            }),
        }),
        ..Endpoint::default()
    });
    EndpointSlice {
        metadata,
        address_type: input.pick_str(&["IPv4", "IPv6", "FQDN", "bogus"]),
        endpoints: Some(endpoints),
        ports: input.maybe(|i| {
            i.list(3, |i| EndpointPort {
                name: i.maybe(|i| i.pick_str(PORT_NAMES)),
                port: i.maybe(port),
                protocol: i.maybe(|i| i.pick_str(PROTOCOLS)),
                ..EndpointPort::default()
            })
        }),
    }
}

pub(super) fn node(input: &mut Input<'_>, version: u64) -> Node {
    let mut metadata = ObjectMeta {
        name: Some(input.pick_str(NODE_NAMES)),
        resource_version: Some(version.to_string()),
        ..ObjectMeta::default()
    };
    metadata.labels = labels(input, &[("topology.kubernetes.io/zone", ZONES)]);
    Node {
        metadata,
        spec: input.maybe(|i| NodeSpec {
            pod_cidr: i.maybe(|i| i.pick_str(CIDRS)),
            pod_cidrs: strings(i, 2, CIDRS),
            ..NodeSpec::default()
        }),
        status: input.maybe(|i| NodeStatus {
            addresses: i.maybe(|i| {
                i.list(3, |i| NodeAddress {
                    address: i.pick_str(EXTERNAL_IPS),
                    type_: i.pick_str(&[
                        "InternalIP",
                        "ExternalIP",
                        "Hostname",
                    ]),
                })
            }),
            ..NodeStatus::default()
        }),
    }
}

/// The node's settings: detecting local traffic by its podCIDRs or not
/// (a podCIDR change then restarts the proxy).
pub(super) fn settings(input: &mut Input<'_>) -> NodeSettings {
    NodeSettings {
        detect_local_node_cidr: input.bool(),
        ..NodeSettings::default()
    }
}

/// The objects that exist, by kind and key, as the API server holds
/// them.
#[derive(Debug, Default)]
pub(super) struct Objects {
    services: BTreeMap<NamespacedName, Service>,
    slices: BTreeMap<NamespacedName, EndpointSlice>,
    nodes: BTreeMap<NamespacedName, Node>,
}

impl Objects {
    pub fn put_service(&mut self, svc: Service) -> Service {
        self.services
            .insert(object_name(&svc.metadata), svc.clone());
        svc
    }

    pub fn put_slice(&mut self, slice: EndpointSlice) -> EndpointSlice {
        self.slices
            .insert(object_name(&slice.metadata), slice.clone());
        slice
    }

    pub fn put_node(&mut self, node: Node) -> Node {
        self.nodes.insert(object_name(&node.metadata), node.clone());
        node
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            services: self.services.values().cloned().collect(),
            endpoint_slices: self.slices.values().cloned().collect(),
            nodes: self.nodes.values().cloned().collect(),
            others: Vec::new(),
        }
    }
}

/// A proxy fed by watchers: the stores, the sync state, and how it
/// restarts when the sync state asks to.
pub(super) struct Proxy {
    settings: NodeSettings,
    stores: Stores,
    state: SyncState,
}

impl Proxy {
    pub fn new(settings: NodeSettings) -> Self {
        Self {
            stores: Stores::new(NODE),
            state: SyncState::new(
                NODE,
                settings.clone(),
                None,
                SystemTime::UNIX_EPOCH,
            ),
            settings,
        }
    }

    /// A watcher's event; `current` is what exists once it happened, for
    /// a restart to list.
    /// `true` when it restarted the proxy: the watches that fed it are
    /// gone then, and the rest of a relist with them.
    pub fn event(&mut self, event: SourceEvent, current: &Snapshot) -> bool {
        for change in self.stores.apply(event) {
            if let ChangeOutcome::Restart(_) = self.state.apply(&change) {
                self.restart(current);
                return true;
            }
        }
        false
    }

    /// A restarted process: fresh stores and state, every kind listed.
    fn restart(&mut self, current: &Snapshot) {
        *self = Proxy::new(self.settings.clone());
        for event in current.relist() {
            for change in self.stores.apply(event) {
                // A restart's first listing has nothing to conflict with.
                let _ = self.state.apply(&change);
            }
        }
    }

    pub fn sync(&mut self) {
        if self.stores.ready() {
            self.state.sync();
        }
    }

    /// What the proxy programs, synced now, against what a proxy that
    /// started now from `current` would.
    pub fn assert_as_fresh(&mut self, current: &Snapshot) {
        self.sync();
        let fresh = plan(current, NODE, &self.settings);
        let held = self.state.desired().snapshot();
        assert_eq!(
            held, fresh,
            "the state reached change by change is not a fresh start's"
        );
    }
}

fn relist<K: Clone>(
    objects: &BTreeMap<NamespacedName, K>,
    wrap: fn(Event<K>) -> SourceEvent,
) -> Vec<SourceEvent> {
    std::iter::once(wrap(Event::Init))
        .chain(objects.values().cloned().map(Event::InitApply).map(wrap))
        .chain(std::iter::once(wrap(Event::InitDone)))
        .collect()
}

/// Up to 48 object writes, deletions, relists and syncs; at the end the
/// desired state must be the one a fresh start from the objects that
/// exist then computes.
pub fn api_objects(data: &[u8]) {
    let mut input = Input::new(data);
    let mut proxy = Proxy::new(settings(&mut input));
    let mut objects = Objects::default();
    let empty = objects.snapshot();
    for event in empty.relist() {
        let _ = proxy.event(event, &empty);
    }
    let mut version = 0;
    for _ in 0..48 {
        if input.is_empty() {
            break;
        }
        version += 1;
        let event = match input.below(10) {
            0..=2 => SourceEvent::Service(Event::Apply(
                objects.put_service(service(&mut input, version)),
            )),
            3..=5 => SourceEvent::EndpointSlice(Event::Apply(
                objects.put_slice(endpoint_slice(&mut input, version)),
            )),
            6 => SourceEvent::Node(Event::Apply(
                objects.put_node(node(&mut input, version)),
            )),
            7 => {
                let Some(event) = delete(&mut input, &mut objects) else {
                    continue;
                };
                event
            }
            8 => {
                let current = objects.snapshot();
                let events = match input.below(3) {
                    0 => relist(&objects.services, SourceEvent::Service),
                    1 => relist(&objects.slices, SourceEvent::EndpointSlice),
                    _ => relist(&objects.nodes, SourceEvent::Node),
                };
                for event in events {
                    if proxy.event(event, &current) {
                        break;
                    }
                }
                continue;
            }
            _ => {
                proxy.sync();
                continue;
            }
        };
        let _ = proxy.event(event, &objects.snapshot());
    }
    proxy.assert_as_fresh(&objects.snapshot());
}

fn delete(input: &mut Input<'_>, objects: &mut Objects) -> Option<SourceEvent> {
    fn take<K>(
        input: &mut Input<'_>,
        map: &mut BTreeMap<NamespacedName, K>,
    ) -> Option<K> {
        let key = map.keys().nth(input.below(map.len()))?.clone();
        map.remove(&key)
    }
    Some(match input.below(3) {
        0 => SourceEvent::Service(Event::Delete(take(
            input,
            &mut objects.services,
        )?)),
        1 => SourceEvent::EndpointSlice(Event::Delete(take(
            input,
            &mut objects.slices,
        )?)),
        _ => SourceEvent::Node(Event::Delete(take(input, &mut objects.nodes)?)),
    })
}
