//! The view alone; `proptests` holds it to a proxy's own sync.

mod proptests;

use std::sync::Arc;

use pretty_assertions::assert_eq;

use super::*;
use crate::model::{
    fixtures::{ep, port_info},
    Protocol,
};

fn name(service: &str) -> ServicePortName {
    ServicePortName::new("ns", service, "http", Protocol::Tcp)
}

/// An endpoint on `node`, as the API side converts it (for no node).
fn on(node: &str, ip: &str) -> Arc<EndpointInfo> {
    ep(ip, 8080, |e| e.node_name = Some(node.into()))
}

fn zoned(node: &str, ip: &str, zone: &str) -> Arc<EndpointInfo> {
    ep(ip, 8080, |e| {
        e.node_name = Some(node.into());
        e.zone_hints = [zone.to_owned()].into();
    })
}

fn node_info(node: &str, zone: &str) -> NodeInfo {
    NodeInfo {
        name: node.to_owned(),
        zone: zone.to_owned(),
        eligible: true,
        ..NodeInfo::default()
    }
}

struct Cluster {
    services: ServicePortMap,
    endpoints: EndpointsMap,
    shared: SharedParts,
}

impl Cluster {
    fn new() -> Self {
        Self {
            services: ServicePortMap::new(),
            endpoints: EndpointsMap::new(),
            shared: SharedParts::default(),
        }
    }

    /// Brings `view` up to date with `changed`, as a sync does.
    fn update(&mut self, view: &mut NodeView, changed: &[&ServicePortName]) {
        self.shared
            .forget(changed.iter().copied(), &self.services);
        view.update(
            changed.iter().copied(),
            &self.services,
            &self.endpoints,
            &mut self.shared,
        );
    }

    fn set_node(&mut self, view: &mut NodeView, node: NodeInfo) {
        view.set_node(
            Some(node),
            &self.services,
            &self.endpoints,
            &mut self.shared,
        );
    }

    fn service(
        &mut self,
        service: &str,
        f: impl FnOnce(&mut ServicePortInfo),
        endpoints: Vec<Arc<EndpointInfo>>,
    ) -> ServicePortName {
        let name = name(service);
        self.services.insert(name.clone(), Arc::new(port_info(f)));
        self.endpoints.insert(name.clone(), endpoints);
        name
    }

    fn view(&mut self, node: &str, zone: &str) -> NodeView {
        let mut view = NodeView::new(node);
        self.set_node(&mut view, node_info(node, zone));
        view
    }
}

fn endpoints_of(view: &NodeView, name: &ServicePortName) -> NodeEndpoints {
    let mut received = Received::default();
    received.apply(view.full());
    received
        .endpoints
        .get(name)
        .map(|e| (**e).clone())
        .unwrap_or_default()
}

fn ips(list: &[Arc<EndpointInfo>]) -> Vec<String> {
    list.iter().map(|e| e.ip.to_string()).collect()
}

#[test]
fn each_node_gets_its_own_endpoints_as_local() {
    let mut cluster = Cluster::new();
    let web = cluster.service(
        "web",
        |s| s.internal_policy_local = true,
        vec![on("node-a", "198.19.0.1"), on("node-b", "198.19.0.2")],
    );
    let a = endpoints_of(&cluster.view("node-a", ""), &web);
    let b = endpoints_of(&cluster.view("node-b", ""), &web);
    let c = endpoints_of(&cluster.view("node-c", ""), &web);
    assert_eq!(ips(&a.ipv4.local), ["198.19.0.1"]);
    assert_eq!(ips(&a.local), ["198.19.0.1"]);
    assert!(a.local.iter().all(|e| e.is_local));
    assert_eq!(ips(&b.ipv4.local), ["198.19.0.2"]);
    // Internal traffic policy Local, nothing on node-c: no cluster set
    // either, and no endpoint is sent at all.
    assert_eq!((c.ipv4.local.len(), c.ipv4.cluster.len()), (0, 0));
    assert!(c.local.is_empty());
    assert!(c.ipv4.has_any_endpoints);
}

#[test]
fn topology_hints_are_matched_against_the_node_zone() {
    let mut cluster = Cluster::new();
    let web = cluster.service(
        "web",
        |_| {},
        vec![
            zoned("node-a", "198.19.0.1", "zone-a"),
            zoned("node-b", "198.19.0.2", "zone-b"),
        ],
    );
    let mut view = cluster.view("node-c", "zone-a");
    assert_eq!(ips(&endpoints_of(&view, &web).ipv4.cluster), ["198.19.0.1"]);
    let before = view.revision();
    cluster.set_node(&mut view, node_info("node-c", "zone-b"));
    assert_eq!(ips(&endpoints_of(&view, &web).ipv4.cluster), ["198.19.0.2"]);
    let update = view.since(Some(before));
    assert!(!update.full);
    // The node object and the port's endpoints; the service is the same.
    assert!(
        matches!(
            update.changes.as_slice(),
            [Change::Node(_), Change::Endpoints(name, _)] if **name == web
        ),
        "{update:?}"
    );
}

#[test]
fn a_key_changed_many_times_is_sent_once_in_its_latest_form() {
    let mut cluster = Cluster::new();
    let web = cluster.service("web", |_| {}, vec![on("node-b", "198.19.0.1")]);
    let mut view = cluster.view("node-a", "");
    let start = view.revision();
    for last in 2..=5 {
        let ip = format!("198.19.0.{last}");
        cluster.endpoints.insert(web.clone(), vec![on("node-b", &ip)]);
        cluster.update(&mut view, &[&web]);
    }
    let update = view.since(Some(start));
    assert_eq!(update.changes.len(), 1, "{update:?}");
    let Change::Endpoints(_, eps) = &update.changes[0] else {
        panic!("{update:?}");
    };
    assert_eq!(ips(&eps.ipv4.cluster), ["198.19.0.5"]);
    assert_eq!(update.revision, view.revision());
}

#[test]
fn a_change_the_node_does_not_receive_takes_no_revision() {
    let mut cluster = Cluster::new();
    let web = cluster.service(
        "web",
        |s| s.internal_policy_local = true,
        vec![on("node-b", "198.19.0.1")],
    );
    let mut view = cluster.view("node-a", "");
    let before = view.revision();
    // node-a uses only its own endpoints, and has none: another node's
    // endpoint moving is nothing to node-a.
    cluster
        .endpoints
        .insert(web.clone(), vec![on("node-b", "198.19.0.2")]);
    cluster.update(&mut view, &[&web]);
    assert_eq!(view.revision(), before);
    assert_eq!(view.since(Some(before)).changes, []);
    // Its last endpoint anywhere gone is something: the port no longer
    // has endpoints (the no-local-endpoints metric reads it).
    cluster.endpoints.remove(&web);
    cluster.update(&mut view, &[&web]);
    assert_eq!(view.revision(), before + 1);
}

#[test]
fn a_deletion_reaches_a_node_that_resumes() {
    let mut cluster = Cluster::new();
    let web = cluster.service("web", |_| {}, vec![on("node-b", "198.19.0.1")]);
    let mut view = cluster.view("node-a", "");
    let mut received = Received::default();
    received.apply(view.since(None));
    assert!(received.services.contains_key(&web));

    cluster.services.remove(&web);
    cluster.endpoints.remove(&web);
    cluster.update(&mut view, &[&web]);
    let update = view.since(received.revision);
    assert!(!update.full);
    assert_eq!(
        update.changes,
        [
            Change::Delete(Key::Service(Arc::new(web.clone()))),
            Change::Delete(Key::Endpoints(Arc::new(web.clone())))
        ]
    );
    let applied = received.apply(update);
    assert_eq!(applied.changed_ports, [web.clone()].into());
    assert!(received.services.is_empty() && received.endpoints.is_empty());
}

#[test]
fn a_node_behind_a_forgotten_deletion_starts_over_from_a_full_state() {
    let mut cluster = Cluster::new();
    let web = cluster.service("web", |_| {}, vec![on("node-b", "198.19.0.1")]);
    let api = cluster.service("api", |_| {}, vec![on("node-b", "198.19.0.2")]);
    let mut view = NodeView::with_tombstones("node-a", 2);
    cluster.set_node(&mut view, node_info("node-a", ""));
    let mut received = Received::default();
    received.apply(view.since(None));

    // Two deletions (service and endpoints of web) are kept...
    cluster.services.remove(&web);
    cluster.update(&mut view, &[&web]);
    let kept = view.since(received.revision);
    assert!(!kept.full);
    // ...the next two push them out.
    cluster.services.remove(&api);
    cluster.update(&mut view, &[&api]);
    let update = view.since(received.revision);
    assert!(update.full, "{update:?}");
    let applied = received.apply(update);
    assert_eq!(applied.changed_ports, [web, api].into());
    assert!(received.services.is_empty());
    assert_eq!(received.node.as_deref(), Some(&node_info("node-a", "")));
    // A node ahead of the view (the API side restarted) starts over too.
    assert!(view.since(Some(view.revision() + 1)).full);
}

#[test]
fn a_udp_port_carries_every_serving_address_and_a_tcp_port_none() {
    let mut cluster = Cluster::new();
    let dns = name("dns");
    let dns = ServicePortName {
        protocol: Protocol::Udp,
        ..dns
    };
    cluster
        .services
        .insert(dns.clone(), Arc::new(port_info(|s| s.protocol = Protocol::Udp)));
    cluster.endpoints.insert(
        dns.clone(),
        vec![
            zoned("node-b", "198.19.0.1", "zone-a"),
            zoned("node-c", "198.19.0.2", "zone-b"),
        ],
    );
    let web = cluster.service("web", |_| {}, vec![on("node-b", "198.19.0.3")]);
    let view = cluster.view("node-a", "zone-a");
    let udp = endpoints_of(&view, &dns);
    assert_eq!(ips(&udp.ipv4.cluster), ["198.19.0.1"]);
    assert_eq!(
        udp.serving,
        ["198.19.0.1".parse::<std::net::IpAddr>().unwrap(), "198.19.0.2".parse().unwrap()]
    );
    assert!(endpoints_of(&view, &web).serving.is_empty());
}

#[test]
fn a_split_update_is_full_in_its_first_part_and_synced_in_its_last() {
    let mut cluster = Cluster::new();
    for service in ["a", "b", "c"] {
        cluster.service(service, |_| {}, vec![on("node-b", "198.19.0.1")]);
    }
    let update = cluster.view("node-a", "").full();
    // The node, and a service and its endpoints for each of three.
    assert_eq!(update.changes.len(), 7);
    let parts = update.clone().split(3);
    let flags: Vec<(usize, bool, bool)> = parts
        .iter()
        .map(|p| (p.changes.len(), p.full, p.synced))
        .collect();
    assert_eq!(flags, [(3, true, false), (3, false, false), (1, false, true)]);
    assert!(parts.iter().all(|p| p.revision == update.revision));

    // A node that has the first part only holds no consistent revision,
    // and one part at a time reaches what the whole update gives.
    let mut received = Received::default();
    let mut parts = parts.into_iter();
    received.apply(parts.next().unwrap());
    assert_eq!(received.revision, None);
    for part in parts {
        received.apply(part);
    }
    let mut whole = Received::default();
    whole.apply(update);
    assert_eq!(received, whole);
    assert!(whole.revision.is_some());

    let empty = Update {
        full: false,
        changes: vec![],
        revision: 4,
        synced: true,
    };
    assert_eq!(empty.clone().split(3), [empty]);
}
