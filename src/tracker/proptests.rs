//! Property: whatever sequence of Service and EndpointSlice events
//! arrives, checked out at whatever points, the tracked maps end equal to
//! a from-scratch computation over the final objects, and every checkout
//! reports exactly what it changed.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    net::IpAddr,
    time::SystemTime,
};

use k8s_openapi::api::{
    core::v1::{
        LoadBalancerIngress, LoadBalancerStatus, Service, ServiceStatus,
    },
    discovery::v1::{EndpointHints, EndpointSlice, ForZone},
};
use proptest::prelude::*;

use super::{
    endpoints::{EndpointsChangeTracker, ServiceEndpoint},
    services::ServiceChangeTracker,
};
use crate::model::{
    endpoint_slice_info, fixtures::*, service_ports, EndpointInfo,
    EndpointsMap, NamespacedName, Protocol, ServicePortMap, ServicePortName,
};

pub(crate) const NODE: &str = "node-a";
const SERVICES: usize = 3;
/// Slice 2 of every service is an FQDN slice, which must be ignored.
/// (`addressType` is immutable, so a slice never changes type.)
const SLICES: usize = 3;

#[derive(Debug, Clone)]
pub(crate) struct PortSpec {
    name: &'static str,
    port: i32,
    udp: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct ServiceSpec {
    kind: u8,
    ip: u8,
    dual_stack: bool,
    ports: Vec<PortSpec>,
}

#[derive(Debug, Clone)]
pub(crate) struct EndpointSpec {
    ip: u8,
    ready: Option<bool>,
    serving: Option<bool>,
    terminating: Option<bool>,
    node: Option<&'static str>,
    zone_hint: Option<&'static str>,
}

#[derive(Debug, Clone)]
pub(crate) struct SliceSpec {
    ports: Vec<PortSpec>,
    endpoints: Vec<EndpointSpec>,
}

#[derive(Debug, Clone)]
pub(crate) enum Event {
    SetService(usize, ServiceSpec),
    DeleteService(usize),
    SetSlice(usize, usize, SliceSpec),
    DeleteSlice(usize, usize),
    Checkout,
}

fn port_spec(ports: &'static [i32]) -> impl Strategy<Value = PortSpec> {
    (
        prop::sample::select(&["a", "b", ""][..]),
        prop::sample::select(ports),
        any::<bool>(),
    )
        .prop_map(|(name, port, udp)| PortSpec { name, port, udp })
}

fn service_spec() -> impl Strategy<Value = ServiceSpec> {
    (
        0u8..6,
        1u8..4,
        any::<bool>(),
        prop::collection::vec(port_spec(&[53, 80, 70_000]), 0..4),
    )
        .prop_map(|(kind, ip, dual_stack, ports)| ServiceSpec {
            kind,
            ip,
            dual_stack,
            ports,
        })
}

fn endpoint_spec() -> impl Strategy<Value = EndpointSpec> {
    (
        1u8..5,
        prop::option::of(any::<bool>()),
        prop::option::of(any::<bool>()),
        prop::option::of(any::<bool>()),
        prop::option::of(prop::sample::select(&[NODE, "node-b"][..])),
        prop::option::of(prop::sample::select(&["zone-a", "zone-b"][..])),
    )
        .prop_map(|(ip, ready, serving, terminating, node, zone_hint)| {
            EndpointSpec {
                ip,
                ready,
                serving,
                terminating,
                node,
                zone_hint,
            }
        })
}

fn slice_spec() -> impl Strategy<Value = SliceSpec> {
    (
        prop::collection::vec(port_spec(&[8080, 8081]), 0..3),
        prop::collection::vec(endpoint_spec(), 0..5),
    )
        .prop_map(|(ports, endpoints)| SliceSpec { ports, endpoints })
}

pub(crate) fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => (0..SERVICES, service_spec())
            .prop_map(|(i, spec)| Event::SetService(i, spec)),
        1 => (0..SERVICES).prop_map(Event::DeleteService),
        4 => (0..SERVICES, 0..SLICES, slice_spec())
            .prop_map(|(i, j, spec)| Event::SetSlice(i, j, spec)),
        2 => (0..SERVICES, 0..SLICES)
            .prop_map(|(i, j)| Event::DeleteSlice(i, j)),
        1 => Just(Event::Checkout),
    ]
}

fn protocol(udp: bool) -> &'static str {
    if udp {
        "UDP"
    } else {
        "TCP"
    }
}

pub(crate) fn build_service(i: usize, spec: &ServiceSpec) -> Service {
    service("ns", &format!("svc-{i}"), |s| {
        let v4 = format!("198.18.0.{}", spec.ip);
        let v6 = format!("2001:db8::{}", spec.ip);
        if spec.dual_stack {
            set_cluster_ips(s, &[&v4, &v6]);
        } else {
            set_cluster_ips(s, &[&v4]);
        }
        for port in &spec.ports {
            add_port(s, port.name, port.port, protocol(port.udp));
        }
        match spec.kind {
            1 => set_cluster_ips(s, &["None"]),
            2 => spec_mut(s).type_ = Some("ExternalName".to_owned()),
            3 => {
                spec_mut(s).type_ = Some("NodePort".to_owned());
                spec_mut(s).external_traffic_policy = Some("Local".to_owned());
            }
            4 => {
                spec_mut(s).type_ = Some("LoadBalancer".to_owned());
                s.status = Some(ServiceStatus {
                    load_balancer: Some(LoadBalancerStatus {
                        ingress: Some(vec![LoadBalancerIngress {
                            ip: Some(format!("198.18.9.{}", spec.ip)),
                            ..LoadBalancerIngress::default()
                        }]),
                    }),
                    conditions: None,
                });
            }
            _ => {}
        }
    })
}

fn spec_mut(s: &mut Service) -> &mut k8s_openapi::api::core::v1::ServiceSpec {
    spec(s)
}

pub(crate) fn build_slice(
    i: usize,
    j: usize,
    spec: &SliceSpec,
) -> EndpointSlice {
    slice("ns", &format!("svc-{i}-{j}"), &format!("svc-{i}"), |s| {
        if j == 2 {
            s.address_type = "FQDN".to_owned();
        }
        for port in &spec.ports {
            add_slice_port(s, port.name, port.port, protocol(port.udp));
        }
        s.endpoints = Some(
            spec.endpoints
                .iter()
                .map(|e| {
                    let address = if j == 2 {
                        format!("pod-{}.example", e.ip)
                    } else {
                        format!("198.19.0.{}", e.ip)
                    };
                    endpoint(&address, |ep| {
                        ep.conditions =
                            conditions(e.ready, e.serving, e.terminating);
                        ep.node_name = e.node.map(str::to_owned);
                        ep.hints = e.zone_hint.map(|zone| EndpointHints {
                            for_zones: Some(vec![ForZone {
                                name: zone.to_owned(),
                            }]),
                            for_nodes: None,
                        });
                    })
                })
                .collect(),
        );
    })
}

/// The service map built directly from the final objects.
fn services_from_scratch<'a>(
    services: impl Iterator<Item = &'a Service>,
) -> HashMap<ServicePortName, crate::model::ServicePortInfo> {
    services.flat_map(|svc| service_ports(svc).value).collect()
}

/// The endpoints map built directly from the final slices, written
/// independently of the tracker's merge: slices in name order, an
/// `ip:port` seen again replaced unless the newcomer is terminating.
fn endpoints_from_scratch<'a>(
    slices: impl Iterator<Item = &'a EndpointSlice>,
) -> HashMap<ServicePortName, Vec<EndpointInfo>> {
    let mut by_name: Vec<_> = slices
        .filter_map(|slice| endpoint_slice_info(slice, NODE).value.ok())
        .collect();
    by_name.sort_by(|a, b| a.name.cmp(&b.name));
    let mut merged: HashMap<
        ServicePortName,
        BTreeMap<(IpAddr, u16), EndpointInfo>,
    > = HashMap::new();
    for info in &by_name {
        for (port, endpoints) in info.ports.iter().zip(&info.endpoints) {
            let key = ServicePortName::new(
                info.service.namespace.clone(),
                info.service.name.clone(),
                port.name.clone(),
                port.protocol,
            );
            for endpoint in endpoints {
                let endpoint = EndpointInfo::clone(endpoint);
                let set = merged.entry(key.clone()).or_default();
                let id = (endpoint.ip, endpoint.port);
                if !set.contains_key(&id) || !endpoint.terminating {
                    set.insert(id, endpoint);
                }
            }
        }
    }
    merged
        .into_iter()
        .filter(|(_, set)| !set.is_empty())
        .map(|(key, set)| (key, set.into_values().collect()))
        .collect()
}

fn plain_services(
    map: &ServicePortMap,
) -> HashMap<ServicePortName, crate::model::ServicePortInfo> {
    map.iter()
        .map(|(k, v)| (k.clone(), (**v).clone()))
        .collect()
}

fn plain_endpoints(
    map: &EndpointsMap,
) -> HashMap<ServicePortName, Vec<EndpointInfo>> {
    map.iter()
        .map(|(k, v)| (k.clone(), v.iter().map(|e| (**e).clone()).collect()))
        .collect()
}

/// Keys whose values differ between two maps.
fn diff_keys<V: PartialEq>(
    before: &HashMap<ServicePortName, V>,
    after: &HashMap<ServicePortName, V>,
) -> HashSet<ServicePortName> {
    before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .cloned()
        .collect()
}

fn serving(list: Option<&Vec<EndpointInfo>>) -> bool {
    list.is_some_and(|l| l.iter().any(|e| e.serving))
}

/// Checks out both trackers and checks that each result describes
/// exactly the change it made to its map.
fn checkout_and_verify(
    st: &mut ServiceChangeTracker,
    et: &mut EndpointsChangeTracker,
    svc_map: &mut ServicePortMap,
    ep_map: &mut EndpointsMap,
) -> Result<(), TestCaseError> {
    let svc_before = plain_services(svc_map);
    let result = st.checkout(svc_map);
    let svc_after = plain_services(svc_map);
    let changed = diff_keys(&svc_before, &svc_after);
    prop_assert_eq!(&result.changed_ports, &changed);
    for key in &changed {
        prop_assert!(result.updated_services.contains(&key.service));
    }
    let mut udp_gone: HashSet<IpAddr> = HashSet::new();
    for (key, old) in &svc_before {
        if key.protocol != Protocol::Udp {
            continue;
        }
        let kept = svc_after.get(key).map(|i| i.cluster_ips.clone());
        udp_gone.extend(
            old.cluster_ips
                .iter()
                .filter(|ip| !kept.as_ref().is_some_and(|k| k.contains(ip))),
        );
    }
    prop_assert_eq!(&result.deleted_udp_cluster_ips, &udp_gone);
    prop_assert_eq!(st.pending(), 0);

    let ep_before = plain_endpoints(ep_map);
    let result = et.checkout(ep_map);
    let ep_after = plain_endpoints(ep_map);
    let changed = diff_keys(&ep_before, &ep_after);
    prop_assert_eq!(&result.changed_ports, &changed);
    let services: HashSet<NamespacedName> =
        changed.iter().map(|k| k.service.clone()).collect();
    prop_assert_eq!(&result.updated_services, &services);
    for list in ep_map.values() {
        prop_assert!(!list.is_empty());
        prop_assert!(list
            .windows(2)
            .all(|w| (w[0].ip, w[0].port) < (w[1].ip, w[1].port)));
    }

    let mut stale: HashSet<(ServicePortName, EndpointInfo)> = HashSet::new();
    let mut active: HashSet<ServicePortName> = HashSet::new();
    for key in changed.iter().filter(|k| k.protocol == Protocol::Udp) {
        let old = ep_before.get(key);
        let new = ep_after.get(key);
        for ep in old.into_iter().flatten().filter(|e| e.serving) {
            if !new.is_some_and(|n| n.contains(ep)) {
                stale.insert((key.clone(), ep.clone()));
            }
        }
        if serving(new) && !serving(old) {
            active.insert(key.clone());
        }
    }
    let reported: HashSet<(ServicePortName, EndpointInfo)> = result
        .deleted_udp_endpoints
        .iter()
        .map(
            |ServiceEndpoint {
                 service_port,
                 endpoint,
             }| { (service_port.clone(), (**endpoint).clone()) },
        )
        .collect();
    prop_assert_eq!(reported, stale);
    prop_assert_eq!(&result.newly_active_udp_services, &active);
    let udp_service_changed = ep_before
        .keys()
        .chain(ep_after.keys())
        .any(|k| k.protocol == Protocol::Udp && services.contains(&k.service));
    prop_assert_eq!(result.conntrack_cleanup_required, udp_service_changed);
    prop_assert_eq!(et.pending(), 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn trackers_match_from_scratch(
        events in prop::collection::vec(event(), 0..60)
    ) {
        let mut services: BTreeMap<usize, Service> = BTreeMap::new();
        let mut slices: BTreeMap<(usize, usize), EndpointSlice> =
            BTreeMap::new();
        let mut st = ServiceChangeTracker::new();
        let mut et = EndpointsChangeTracker::new(SystemTime::now());
        let mut svc_map = ServicePortMap::new();
        let mut ep_map = EndpointsMap::new();

        for event in &events {
            match event {
                Event::SetService(i, spec) => {
                    let new = build_service(*i, spec);
                    let old = services.insert(*i, new.clone());
                    st.update_objects(old.as_ref(), Some(&new));
                }
                Event::DeleteService(i) => {
                    if let Some(old) = services.remove(i) {
                        st.update_objects(Some(&old), None);
                    }
                }
                Event::SetSlice(i, j, spec) => {
                    let new = build_slice(*i, *j, spec);
                    slices.insert((*i, *j), new.clone());
                    et.update_object(NODE, &new, false);
                }
                Event::DeleteSlice(i, j) => {
                    if let Some(old) = slices.remove(&(*i, *j)) {
                        et.update_object(NODE, &old, true);
                    }
                }
                Event::Checkout => checkout_and_verify(
                    &mut st, &mut et, &mut svc_map, &mut ep_map,
                )?,
            }
        }
        checkout_and_verify(&mut st, &mut et, &mut svc_map, &mut ep_map)?;

        prop_assert_eq!(
            plain_services(&svc_map),
            services_from_scratch(services.values())
        );
        prop_assert_eq!(
            plain_endpoints(&ep_map),
            endpoints_from_scratch(slices.values())
        );
        // Nothing pending means the next checkout changes nothing.
        let again = et.checkout(&mut ep_map);
        prop_assert!(again.changed_ports.is_empty());
        prop_assert!(st.checkout(&mut svc_map).changed_ports.is_empty());
    }
}
