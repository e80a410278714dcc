//! The view alone; `proptests` holds it to a proxy's own sync.

mod proptests;

use std::{sync::Arc, time::Duration};

use pretty_assertions::assert_eq;

use super::*;
use crate::model::{
    fixtures::{ep, port_info},
    EndpointsMap, Protocol,
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
    views: Views,
}

impl Cluster {
    fn new() -> Self {
        Self::with_tombstones(super::views::TOMBSTONES)
    }

    fn with_tombstones(tombstones: usize) -> Self {
        Self {
            services: ServicePortMap::new(),
            endpoints: EndpointsMap::new(),
            views: Views::with_tombstones(tombstones),
        }
    }

    /// Brings the views up to date with `changed`, as a sync does.
    fn update(&mut self, changed: &[&ServicePortName]) {
        self.update_triggered(changed, &[]);
    }

    /// The same, the changes triggered at `times` (per service).
    fn update_triggered(
        &mut self,
        changed: &[&ServicePortName],
        times: &[(&str, SystemTime)],
    ) {
        let mut triggers: std::collections::HashMap<_, Vec<_>> =
            Default::default();
        for (service, time) in times {
            triggers
                .entry(NamespacedName::new("ns", *service))
                .or_default()
                .push(*time);
        }
        self.views.update(
            changed.iter().copied(),
            &self.services,
            &self.endpoints,
            &triggers,
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
        self.update(&[&name]);
        name
    }

    /// `node`, in `zone`, watches (or moves there).
    fn watch(&mut self, node: &str, zone: &str) {
        self.views.set_node(
            node,
            Some(node_info(node, zone)),
            &self.services,
            &self.endpoints,
        );
    }

    /// A sync in which `name`'s endpoints become `endpoints`: what the
    /// nodes it left alone lack.
    fn sync_endpoints(
        &mut self,
        name: &ServicePortName,
        endpoints: Vec<Arc<EndpointInfo>>,
    ) -> CatchUp<Update> {
        let begun = self.views.begin();
        self.endpoints.insert(name.clone(), endpoints);
        self.update(&[name]);
        self.views.catch_up(begun, 32)
    }

    fn since(&self, node: &str, revision: Option<u64>) -> Update {
        self.views.since(node, revision)
    }

    fn revision(&self, node: &str) -> u64 {
        self.views.revision(node)
    }

    /// The endpoints `node` gets for `name` in a full state.
    fn endpoints_of(
        &self,
        node: &str,
        name: &ServicePortName,
    ) -> NodeEndpoints {
        let mut received = Received::default();
        received.apply(self.views.full(node));
        received
            .endpoints
            .get(name)
            .map(|e| (**e).clone())
            .unwrap_or_default()
    }
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
    for node in ["node-a", "node-b", "node-c"] {
        cluster.watch(node, "");
    }
    let a = cluster.endpoints_of("node-a", &web);
    let b = cluster.endpoints_of("node-b", &web);
    let c = cluster.endpoints_of("node-c", &web);
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
    cluster.watch("node-c", "zone-a");
    let in_a = cluster.endpoints_of("node-c", &web);
    assert_eq!(ips(&in_a.ipv4.cluster), ["198.19.0.1"]);
    let before = cluster.revision("node-c");
    // Moving zones: everything the node holds may differ, so it starts
    // over from a full state.
    cluster.watch("node-c", "zone-b");
    let in_b = cluster.endpoints_of("node-c", &web);
    assert_eq!(ips(&in_b.ipv4.cluster), ["198.19.0.2"]);
    let update = cluster.since("node-c", Some(before));
    assert!(update.full, "{update:?}");
    // A node that stays in zone-a is not concerned.
    cluster.watch("node-d", "zone-a");
    let held = cluster.revision("node-d");
    cluster.watch("node-c", "zone-a");
    assert_eq!(cluster.revision("node-d"), held);
}

#[test]
fn a_key_changed_many_times_is_sent_once_in_its_latest_form() {
    let mut cluster = Cluster::new();
    let web = cluster.service("web", |_| {}, vec![on("node-b", "198.19.0.1")]);
    cluster.watch("node-a", "");
    let start = cluster.revision("node-a");
    for last in 2..=5 {
        let ip = format!("198.19.0.{last}");
        cluster
            .endpoints
            .insert(web.clone(), vec![on("node-b", &ip)]);
        cluster.update(&[&web]);
    }
    let update = cluster.since("node-a", Some(start));
    assert_eq!(update.changes.len(), 1, "{update:?}");
    let Change::Endpoints(_, eps) = &update.changes[0] else {
        panic!("{update:?}");
    };
    assert_eq!(ips(&eps.ipv4.cluster), ["198.19.0.5"]);
    assert_eq!(update.revision, cluster.revision("node-a"));
}

#[test]
fn a_change_the_node_does_not_receive_takes_no_revision() {
    let mut cluster = Cluster::new();
    let web = cluster.service(
        "web",
        |s| s.internal_policy_local = true,
        vec![on("node-b", "198.19.0.1")],
    );
    cluster.watch("node-a", "");
    let before = cluster.revision("node-a");
    // node-a uses only its own endpoints, and has none: another node's
    // endpoint moving is nothing to node-a.
    cluster
        .endpoints
        .insert(web.clone(), vec![on("node-b", "198.19.0.2")]);
    cluster.update(&[&web]);
    assert_eq!(cluster.revision("node-a"), before);
    assert_eq!(cluster.since("node-a", Some(before)).changes, []);
    // Its last endpoint anywhere gone is something: the port no longer
    // has endpoints (the no-local-endpoints metric reads it).
    cluster.endpoints.remove(&web);
    cluster.update(&[&web]);
    assert_eq!(cluster.revision("node-a"), before + 1);
}

#[test]
fn a_deletion_reaches_a_node_that_resumes() {
    let mut cluster = Cluster::new();
    let web = cluster.service("web", |_| {}, vec![on("node-b", "198.19.0.1")]);
    cluster.watch("node-a", "");
    let mut received = Received::default();
    received.apply(cluster.since("node-a", None));
    assert!(received.services.contains_key(&web));

    cluster.services.remove(&web);
    cluster.endpoints.remove(&web);
    cluster.update(&[&web]);
    let update = cluster.since("node-a", received.revision);
    assert!(!update.full);
    assert_eq!(
        update.changes,
        [
            Change::Delete(Key::Service(Arc::new(web.clone()))),
            Change::Delete(Key::Endpoints(Arc::new(web.clone())))
        ]
    );
    let applied = received.apply(update);
    assert_eq!(applied.changed_ports(), [web.clone()].into());
    assert!(received.services.is_empty() && received.endpoints.is_empty());
}

#[test]
fn a_node_behind_a_forgotten_deletion_starts_over_from_a_full_state() {
    // One deletion kept per layer (the services, the zone's endpoints).
    let mut cluster = Cluster::with_tombstones(1);
    let web = cluster.service("web", |_| {}, vec![on("node-b", "198.19.0.1")]);
    let api = cluster.service("api", |_| {}, vec![on("node-b", "198.19.0.2")]);
    cluster.watch("node-a", "");
    let mut received = Received::default();
    received.apply(cluster.since("node-a", None));

    // The deletions of web's service and endpoints are kept...
    cluster.services.remove(&web);
    cluster.update(&[&web]);
    let kept = cluster.since("node-a", received.revision);
    assert!(!kept.full);
    // ...api's push them out.
    cluster.services.remove(&api);
    cluster.update(&[&api]);
    let update = cluster.since("node-a", received.revision);
    assert!(update.full, "{update:?}");
    let applied = received.apply(update);
    assert_eq!(applied.changed_ports(), [web, api].into());
    assert!(received.services.is_empty());
    assert_eq!(received.node.as_deref(), Some(&node_info("node-a", "")));
    // A node ahead of the view (the API side restarted) starts over too.
    let ahead = cluster.revision("node-a") + 1;
    assert!(cluster.since("node-a", Some(ahead)).full);
}

#[test]
fn a_udp_port_carries_every_serving_address_and_a_tcp_port_none() {
    let mut cluster = Cluster::new();
    let dns = name("dns");
    let dns = ServicePortName {
        protocol: Protocol::Udp,
        ..dns
    };
    cluster.services.insert(
        dns.clone(),
        Arc::new(port_info(|s| s.protocol = Protocol::Udp)),
    );
    cluster.endpoints.insert(
        dns.clone(),
        vec![
            zoned("node-b", "198.19.0.1", "zone-a"),
            zoned("node-c", "198.19.0.2", "zone-b"),
        ],
    );
    cluster.update(&[&dns]);
    let web = cluster.service("web", |_| {}, vec![on("node-b", "198.19.0.3")]);
    cluster.watch("node-a", "zone-a");
    let udp = cluster.endpoints_of("node-a", &dns);
    assert_eq!(ips(&udp.ipv4.cluster), ["198.19.0.1"]);
    assert_eq!(
        udp.serving,
        [
            "198.19.0.1".parse::<std::net::IpAddr>().unwrap(),
            "198.19.0.2".parse().unwrap()
        ]
    );
    assert!(cluster.endpoints_of("node-a", &web).serving.is_empty());
}

#[test]
fn a_split_update_is_full_in_its_first_part_and_synced_in_its_last() {
    let mut cluster = Cluster::new();
    for service in ["a", "b", "c"] {
        cluster.service(service, |_| {}, vec![on("node-b", "198.19.0.1")]);
    }
    cluster.watch("node-a", "");
    let update = cluster.views.full("node-a");
    // The node, and a service and its endpoints for each of three.
    assert_eq!(update.changes.len(), 7);
    let parts = update.clone().split(3);
    let flags: Vec<(usize, bool, bool)> = parts
        .iter()
        .map(|p| (p.changes.len(), p.full, p.synced))
        .collect();
    assert_eq!(
        flags,
        [(3, true, false), (3, false, false), (1, false, true)]
    );
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
    whole.apply(update.clone());
    assert_eq!(received, whole);
    assert!(whole.revision.is_some());

    let empty = Update {
        full: false,
        changes: vec![],
        revision: 4,
        synced: true,
        trigger_times: TriggerTimes::new(),
    };
    assert_eq!(empty.clone().split(3), [empty]);

    // Trigger times count once the node holds what they are of: with
    // the last part.
    let mut times = TriggerTimes::new();
    times.insert(NamespacedName::new("ns", "a"), vec![SystemTime::UNIX_EPOCH]);
    let update = Update {
        full: false,
        trigger_times: times.clone(),
        ..update
    };
    let parts = update.split(3);
    assert!(parts[..parts.len() - 1]
        .iter()
        .all(|p| p.trigger_times.is_empty()));
    assert_eq!(parts.last().unwrap().trigger_times, times);
}

/// The trigger times of a change go to each node behind it, with the
/// port's endpoints, once; not to a node that has the change already,
/// and never in a full state.
#[test]
fn trigger_times_go_with_the_endpoints_to_the_nodes_behind_them() {
    let at = |secs| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
    let mut cluster = Cluster::new();
    let web = cluster.service("web", |_| {}, vec![on("node-b", "198.19.0.1")]);
    let db = cluster.service("db", |_| {}, vec![on("node-b", "198.19.1.1")]);
    cluster.watch("node-a", "");
    cluster.watch("node-b", "");
    let a0 = cluster.revision("node-a");
    let b0 = cluster.revision("node-b");

    // A new endpoint for web: node-a takes its zone's selection, node-b
    // its own (web's endpoints are on it). Both get the time.
    cluster.endpoints.insert(
        web.clone(),
        vec![on("node-b", "198.19.0.1"), on("node-c", "198.19.0.2")],
    );
    cluster.update_triggered(&[&web], &[("web", at(10))]);
    let times = |update: &Update| update.trigger_times.clone();
    let expected: TriggerTimes = [(web.service.clone(), vec![at(10)])].into();
    assert_eq!(times(&cluster.since("node-a", Some(a0))), expected);
    assert_eq!(times(&cluster.since("node-b", Some(b0))), expected);
    let a1 = cluster.revision("node-a");
    assert!(cluster.since("node-a", Some(a1)).trigger_times.is_empty());
    assert!(cluster.views.full("node-a").trigger_times.is_empty());

    // A change without times (the service's own) sends none, and a node
    // past web's change does not get web's times with db's.
    cluster
        .services
        .insert(db.clone(), Arc::new(port_info(|s| s.port = 81)));
    cluster.update(&[&db]);
    let update = cluster.since("node-a", Some(a1));
    assert!(
        update
            .changes
            .iter()
            .any(|c| matches!(c, Change::Service(name, _) if **name == db)),
        "{update:?}"
    );
    assert!(update.trigger_times.is_empty());

    // Changed twice while node-a was slow: sent once, with the later
    // change's time.
    let a2 = cluster.revision("node-a");
    for (i, secs) in [(3, 20), (4, 30)] {
        let eps = (1..=i).map(|n| on("node-c", &format!("198.19.0.{n}")));
        cluster.endpoints.insert(web.clone(), eps.collect());
        cluster.update_triggered(&[&web], &[("web", at(secs))]);
    }
    let update = cluster.since("node-a", Some(a2));
    assert_eq!(update.changes.len(), 1);
    assert_eq!(
        update.trigger_times,
        [(web.service.clone(), vec![at(30)])].into()
    );

    // A change that leaves node-a's selection as it was sends node-a
    // nothing, times included.
    let a3 = cluster.revision("node-a");
    cluster.update_triggered(&[&web], &[("web", at(40))]);
    assert_eq!(cluster.since("node-a", Some(a3)).changes, []);
    assert!(cluster.since("node-a", Some(a3)).trigger_times.is_empty());
}

/// (found by fuzzing: endpoints hinted for a node named "" made the
/// selection the API side shares among a zone's unnamed nodes prefer
/// them, while a node's own selection, as a proxy there makes it, did
/// not.)
#[test]
fn a_hint_for_the_empty_node_name_is_a_hint_for_no_node() {
    let mut cluster = Cluster::new();
    let hinted = |ip: &str, node: &str| {
        ep(ip, 8080, |e| e.node_hints = [node.to_owned()].into())
    };
    let endpoints =
        vec![hinted("198.19.0.1", "node-b"), hinted("198.19.0.2", "")];
    let web = cluster.service("web", |_| {}, endpoints.clone());
    cluster.watch("node-a", "zone-a");
    let sent = cluster.endpoints_of("node-a", &web);
    let svc = port_info(|_| {});
    let own = crate::selection::select(&svc, &endpoints, "node-a", "zone-a");
    assert_eq!(ips(&own.ipv4.cluster), ["198.19.0.1", "198.19.0.2"]);
    assert_eq!(ips(&sent.ipv4.cluster), ips(&own.ipv4.cluster));
}

#[test]
fn nodes_a_sync_leaves_alone_share_their_zone_catch_up() {
    let mut cluster = Cluster::new();
    let web = cluster.service("web", |_| {}, vec![on("node-b", "198.19.0.1")]);
    for node in ["node-a", "node-b", "node-c"] {
        cluster.watch(node, "zone-a");
    }
    cluster.watch("node-d", "zone-b");
    let _ = cluster.views.catch_up(cluster.views.begin(), 32);
    let held: Vec<u64> = ["node-a", "node-b", "node-c", "node-d"]
        .map(|node| cluster.revision(node))
        .into();
    // web's endpoint on node-b moves: node-b's own selection changes,
    // node-a and node-c take zone-a's, node-d zone-b's.
    let catch_up =
        cluster.sync_endpoints(&web, vec![on("node-b", "198.19.0.2")]);
    for (node, zone, held) in [
        ("node-a", "zone-a", held[0]),
        ("node-c", "zone-a", held[2]),
        ("node-d", "zone-b", held[3]),
    ] {
        let shared = catch_up.for_node(node, zone, held, catch_up.sync - 1);
        let shared = shared.flatten().unwrap_or_else(|| panic!("{node}"));
        assert_eq!(*shared, cluster.since(node, Some(held)), "{node}");
        let Change::Endpoints(_, eps) = &shared.changes[0] else {
            panic!("{shared:?}");
        };
        assert_eq!(ips(&eps.ipv4.cluster), ["198.19.0.2"]);
    }
    // node-b walks its own: its endpoint is local to it only.
    let seen = catch_up.sync - 1;
    assert_eq!(catch_up.for_node("node-b", "zone-a", held[1], seen), None);
    // A node that missed an earlier change walks too, and one that has
    // this sync's lacks nothing.
    assert_eq!(catch_up.for_node("node-a", "zone-a", 0, seen), None);
    assert_eq!(
        catch_up.for_node("node-a", "zone-a", catch_up.upto, seen),
        Some(None)
    );
    // So does one that missed a sync, which may have touched it.
    assert_eq!(
        catch_up.for_node("node-a", "zone-a", held[0], seen - 1),
        None
    );
    // A sync that changes nothing a zone reads has nothing to send it.
    let begun = cluster.views.begin();
    cluster.update(&[]);
    let quiet = cluster.views.catch_up(begun, 32);
    let held = cluster.revision("node-a");
    let seen = quiet.sync - 1;
    assert_eq!(quiet.for_node("node-a", "zone-a", held, seen), Some(None));
}

#[test]
fn a_node_that_walked_its_new_view_between_syncs_shares_the_next_catch_up() {
    let mut cluster = Cluster::new();
    let web = cluster.service("web", |_| {}, vec![on("node-b", "198.19.0.1")]);
    cluster.watch("node-b", "zone-a");
    let _ = cluster.views.catch_up(cluster.views.begin(), 32);
    // node-a's first watch comes between two syncs: its view is made,
    // and it walks it whole.
    cluster.watch("node-a", "zone-a");
    let held = cluster.since("node-a", None).revision;
    let seen = cluster.views.syncs();
    let catch_up =
        cluster.sync_endpoints(&web, vec![on("node-b", "198.19.0.2")]);
    let shared = catch_up.for_node("node-a", "zone-a", held, seen);
    let shared = shared.flatten().expect("zone-a's catch-up");
    assert_eq!(*shared, cluster.since("node-a", Some(held)));
    // Its Node changing later is its own to walk.
    let (held, seen) = (catch_up.upto, catch_up.sync);
    let begun = cluster.views.begin();
    let readdressed = NodeInfo {
        addresses: vec!["198.18.100.1".parse().unwrap()],
        ..node_info("node-a", "zone-a")
    };
    let (services, endpoints) = (&cluster.services, &cluster.endpoints);
    cluster
        .views
        .set_node("node-a", Some(readdressed), services, endpoints);
    let catch_up = cluster.views.catch_up(begun, 32);
    assert!(catch_up.touched.contains("node-a"));
    assert_eq!(catch_up.for_node("node-a", "zone-a", held, seen), None);
    assert_eq!(cluster.since("node-a", Some(held)).changes.len(), 1);
}

#[test]
fn a_catch_up_larger_than_a_message_is_walked_by_each_node() {
    let mut cluster = Cluster::new();
    let names: Vec<ServicePortName> = (0..3)
        .map(|i| {
            let ip = format!("198.19.0.{}", i + 1);
            cluster.service(
                &format!("web-{i}"),
                |_| {},
                vec![on("node-b", &ip)],
            )
        })
        .collect();
    cluster.watch("node-a", "zone-a");
    let _ = cluster.views.catch_up(cluster.views.begin(), 32);
    let held = cluster.revision("node-a");
    let begun = cluster.views.begin();
    for name in &names {
        cluster
            .endpoints
            .insert(name.clone(), vec![on("node-c", "198.19.1.1")]);
    }
    let changed: Vec<&ServicePortName> = names.iter().collect();
    cluster.update(&changed);
    // Three endpoint changes do not fit messages of two.
    let catch_up = cluster.views.catch_up(begun, 2);
    let seen = catch_up.sync - 1;
    assert_eq!(catch_up.for_node("node-a", "zone-a", held, seen), None);
}
