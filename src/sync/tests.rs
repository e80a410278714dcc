use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    path::Path,
    sync::Arc,
};

use ipnet::IpNet;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use pretty_assertions::assert_eq;

use super::*;
use crate::{
    desired::Plan,
    source::{file, store::ObjectChange},
};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn example(name: &str) -> Snapshot {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name);
    file::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn plan_for(name: &str) -> Plan {
    let snapshot = example(name);
    // Files with several nodes are planned for node-a.
    let node =
        plan_node_name(&snapshot, None).unwrap_or_else(|| "node-a".into());
    plan(&snapshot, &node, &NodeSettings::default())
}

struct Case {
    file: &'static str,
    virtual_servers: &'static [&'static str],
    bound: &'static [&'static str],
    sets: &'static [(&'static str, &'static [&'static str])],
}

const CASES: &[Case] = &[
    // No port names anywhere: the API server's defaults make both sides
    // the unnamed port, so the service has its real servers.
    Case {
        file: "plan/hand-written.yaml",
        virtual_servers: &["TCP 198.18.0.20:80 -> 198.19.0.2:8080,198.19.0.3:8080"],
        bound: &["198.18.0.20"],
        sets: &[
            ("KUBE-CLUSTER-IP", &["198.18.0.20,tcp:80"]),
            ("KUBE-IPVS-IPS", &["198.18.0.20"]),
        ],
    },
    Case {
        file: "plan/clusterip-tcp-udp.yaml",
        virtual_servers: &[
            "TCP 198.18.0.53:53 -> 198.19.0.2:53,198.19.1.2:53",
            "UDP 198.18.0.53:53 -> 198.19.0.2:53,198.19.1.2:53",
        ],
        bound: &["198.18.0.53"],
        sets: &[
            ("KUBE-CLUSTER-IP", &["198.18.0.53,tcp:53", "198.18.0.53,udp:53"]),
            ("KUBE-IPVS-IPS", &["198.18.0.53"]),
            (
                "KUBE-LOOP-BACK",
                &["198.19.0.2,tcp:53,198.19.0.2", "198.19.0.2,udp:53,198.19.0.2"],
            ),
        ],
    },
    Case {
        file: "plan/named-ports.yaml",
        virtual_servers: &[
            "TCP 198.18.0.10:80 -> 198.19.0.2:8080,198.19.0.3:8080,198.19.1.4:9090",
        ],
        bound: &["198.18.0.10"],
        sets: &[
            ("KUBE-CLUSTER-IP", &["198.18.0.10,tcp:80"]),
            ("KUBE-IPVS-IPS", &["198.18.0.10"]),
            (
                "KUBE-LOOP-BACK",
                &[
                    "198.19.0.2,tcp:8080,198.19.0.2",
                    "198.19.0.3,tcp:8080,198.19.0.3",
                ],
            ),
        ],
    },
    // The same cluster written as Pods: the derived slices plan the same.
    Case {
        file: "plan/pods-named-ports.yaml",
        virtual_servers: &[
            "TCP 198.18.0.10:80 -> 198.19.0.2:8080,198.19.0.3:8080,198.19.1.4:9090",
        ],
        bound: &["198.18.0.10"],
        sets: &[
            ("KUBE-CLUSTER-IP", &["198.18.0.10,tcp:80"]),
            ("KUBE-IPVS-IPS", &["198.18.0.10"]),
            (
                "KUBE-LOOP-BACK",
                &[
                    "198.19.0.2,tcp:8080,198.19.0.2",
                    "198.19.0.3,tcp:8080,198.19.0.3",
                ],
            ),
        ],
    },
    Case {
        file: "plan/nodeport.yaml",
        virtual_servers: &[
            "TCP 198.18.0.10:80 -> 198.19.0.2:8080",
            "UDP 198.18.0.10:8125 -> 198.19.0.2:8125",
            "TCP 198.18.100.1:30080 -> 198.19.0.2:8080",
            "UDP 198.18.100.1:30125 -> 198.19.0.2:8125",
        ],
        bound: &["198.18.0.10"],
        sets: &[
            ("KUBE-CLUSTER-IP", &["198.18.0.10,tcp:80", "198.18.0.10,udp:8125"]),
            ("KUBE-IPVS-IPS", &["198.18.0.10"]),
            (
                "KUBE-LOOP-BACK",
                &[
                    "198.19.0.2,tcp:8080,198.19.0.2",
                    "198.19.0.2,udp:8125,198.19.0.2",
                ],
            ),
            ("KUBE-NODE-PORT-TCP", &["30080"]),
            ("KUBE-NODE-PORT-UDP", &["30125"]),
        ],
    },
    Case {
        file: "plan/loadbalancer-local.yaml",
        virtual_servers: &[
            "TCP 198.18.0.20:443 -> 198.19.0.5:8443,198.19.1.5:8443",
            "TCP 198.18.60.1:443 -> 198.19.0.5:8443",
            "TCP 198.18.100.1:30443 -> 198.19.0.5:8443",
        ],
        // 198.18.60.2 has ipMode Proxy: the LB delivers to the node, so
        // the proxy must not capture it.
        bound: &["198.18.0.20", "198.18.60.1"],
        sets: &[
            ("KUBE-CLUSTER-IP", &["198.18.0.20,tcp:443"]),
            ("KUBE-HEALTH-CHECK-NODE-PORT", &["32100"]),
            ("KUBE-IPVS-IPS", &["198.18.0.20", "198.18.60.1"]),
            ("KUBE-LOAD-BALANCER", &["198.18.60.1,tcp:443"]),
            ("KUBE-LOAD-BALANCER-FW", &["198.18.60.1,tcp:443"]),
            ("KUBE-LOAD-BALANCER-LOCAL", &["198.18.60.1,tcp:443"]),
            (
                "KUBE-LOAD-BALANCER-SOURCE-CIDR",
                &[
                    "198.18.60.1,tcp:443,198.18.100.0/24",
                    "198.18.60.1,tcp:443,198.18.200.0/24",
                ],
            ),
            // The node's own address is inside a source range.
            ("KUBE-LOAD-BALANCER-SOURCE-IP", &["198.18.60.1,tcp:443,198.18.60.1"]),
            ("KUBE-LOOP-BACK", &["198.19.0.5,tcp:8443,198.19.0.5"]),
            ("KUBE-NODE-PORT-LOCAL-TCP", &["30443"]),
            ("KUBE-NODE-PORT-TCP", &["30443"]),
        ],
    },
    // Annotations: ours with flags, kube-router's scheduler, none.
    Case {
        file: "plan/scheduler-annotations.yaml",
        virtual_servers: &[
            "TCP 198.18.0.80:80 mh (mh-fallback,mh-port) -> 198.19.0.21:8080",
            "TCP 198.18.0.81:80 lc -> 198.19.0.22:8080",
            "TCP 198.18.0.82:80 -> 198.19.0.23:8080",
        ],
        bound: &["198.18.0.80", "198.18.0.81", "198.18.0.82"],
        sets: &[
            (
                "KUBE-CLUSTER-IP",
                &["198.18.0.80,tcp:80", "198.18.0.81,tcp:80", "198.18.0.82,tcp:80"],
            ),
            ("KUBE-IPVS-IPS", &["198.18.0.80", "198.18.0.81", "198.18.0.82"]),
            (
                "KUBE-LOOP-BACK",
                &[
                    "198.19.0.21,tcp:8080,198.19.0.21",
                    "198.19.0.22,tcp:8080,198.19.0.22",
                    "198.19.0.23,tcp:8080,198.19.0.23",
                ],
            ),
        ],
    },
    Case {
        file: "plan/session-affinity.yaml",
        virtual_servers: &[
            "TCP 198.18.0.30:80 persistent 600 -> 198.19.0.6:8080,198.19.1.6:8080",
        ],
        bound: &["198.18.0.30"],
        sets: &[
            ("KUBE-CLUSTER-IP", &["198.18.0.30,tcp:80"]),
            ("KUBE-IPVS-IPS", &["198.18.0.30"]),
            ("KUBE-LOOP-BACK", &["198.19.0.6,tcp:8080,198.19.0.6"]),
        ],
    },
    Case {
        file: "plan/internal-traffic-local.yaml",
        virtual_servers: &["TCP 198.18.0.40:4317 -> 198.19.0.7:4317"],
        bound: &["198.18.0.40"],
        sets: &[
            ("KUBE-CLUSTER-IP", &["198.18.0.40,tcp:4317"]),
            ("KUBE-IPVS-IPS", &["198.18.0.40"]),
            ("KUBE-LOOP-BACK", &["198.19.0.7,tcp:4317,198.19.0.7"]),
        ],
    },
    Case {
        file: "plan/topology-hints.yaml",
        virtual_servers: &["TCP 198.18.0.50:80 -> 198.19.0.8:8080,198.19.2.8:8080"],
        bound: &["198.18.0.50"],
        sets: &[
            ("KUBE-CLUSTER-IP", &["198.18.0.50,tcp:80"]),
            ("KUBE-IPVS-IPS", &["198.18.0.50"]),
            ("KUBE-LOOP-BACK", &["198.19.0.8,tcp:8080,198.19.0.8"]),
        ],
    },
    Case {
        file: "plan/terminating.yaml",
        virtual_servers: &["TCP 198.18.0.60:80 -> 198.19.0.9:8080,198.19.1.9:8080"],
        bound: &["198.18.0.60"],
        sets: &[
            ("KUBE-CLUSTER-IP", &["198.18.0.60,tcp:80"]),
            ("KUBE-IPVS-IPS", &["198.18.0.60"]),
            ("KUBE-LOOP-BACK", &["198.19.0.9,tcp:8080,198.19.0.9"]),
        ],
    },
    // The terminating copy of a reused address is left out.
    Case {
        file: "plan/duplicate-endpoints.yaml",
        virtual_servers: &["TCP 198.18.0.90:80 -> 198.19.0.11:8080,198.19.1.12:8080"],
        bound: &["198.18.0.90"],
        sets: &[
            ("KUBE-CLUSTER-IP", &["198.18.0.90,tcp:80"]),
            ("KUBE-IPVS-IPS", &["198.18.0.90"]),
            ("KUBE-LOOP-BACK", &["198.19.0.11,tcp:8080,198.19.0.11"]),
        ],
    },
    Case {
        file: "plan/dual-stack.yaml",
        virtual_servers: &[
            "TCP 198.18.0.70:80 -> 198.19.0.10:8080",
            "TCP 198.18.100.1:30070 -> 198.19.0.10:8080",
            "TCP [2001:db8:18::70]:80 -> [2001:db8:19::10]:8080",
            "TCP [2001:db8:100::1]:30070 -> [2001:db8:19::10]:8080",
        ],
        bound: &["198.18.0.70", "2001:db8:18::70"],
        sets: &[
            ("KUBE-6-CLUSTER-IP", &["2001:db8:18::70,tcp:80"]),
            ("KUBE-6-IPVS-IPS", &["2001:db8:18::70"]),
            ("KUBE-6-LOOP-BACK", &["2001:db8:19::10,tcp:8080,2001:db8:19::10"]),
            ("KUBE-6-NODE-PORT-TCP", &["30070"]),
            ("KUBE-CLUSTER-IP", &["198.18.0.70,tcp:80"]),
            ("KUBE-IPVS-IPS", &["198.18.0.70"]),
            ("KUBE-LOOP-BACK", &["198.19.0.10,tcp:8080,198.19.0.10"]),
            ("KUBE-NODE-PORT-TCP", &["30070"]),
        ],
    },
];

#[test]
fn plans_of_the_example_files() {
    for case in CASES {
        let plan = plan_for(case.file);
        assert_eq!(
            plan.virtual_server_lines(),
            case.virtual_servers,
            "{}",
            case.file
        );
        let bound: Vec<IpAddr> = case.bound.iter().map(|s| ip(s)).collect();
        assert_eq!(plan.bound_addresses, bound, "{}", case.file);
        let non_empty: BTreeMap<&str, Vec<&str>> = plan
            .ipsets
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.as_str(), v.iter().map(String::as_str).collect()))
            .collect();
        let expected: BTreeMap<&str, Vec<&str>> =
            case.sets.iter().map(|(k, v)| (*k, v.to_vec())).collect();
        assert_eq!(non_empty, expected, "{}", case.file);
    }
}

/// The API/node split programs what a proxy does: every example planned
/// through the API side's view of its node equals its direct plan.
#[test]
fn every_example_plans_the_same_when_fed_by_the_api_side() {
    use crate::apiside::cluster::{Cluster, NO_NODE};
    for case in CASES {
        let snapshot = example(case.file);
        let node =
            plan_node_name(&snapshot, None).unwrap_or_else(|| "node-a".into());
        let settings = NodeSettings::default();
        let mut cluster = Cluster::new(SystemTime::now());
        for change in snapshot_changes(&snapshot, NO_NODE) {
            cluster.apply(&change);
        }
        let _ = cluster.sync(usize::MAX);
        let update = cluster.full(&node);
        let fed = plan_from_view(update, &node, &settings);
        assert!(!fed.virtual_servers.is_empty(), "{}", case.file);
        assert_eq!(fed, plan(&snapshot, &node, &settings), "{}", case.file);
    }
}

#[test]
fn every_example_file_is_covered_by_a_plan_case() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/plan");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| format!("plan/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    files.sort();
    let mut covered: Vec<String> =
        CASES.iter().map(|c| c.file.to_string()).collect();
    covered.sort();
    assert_eq!(files, covered);
}

#[test]
fn the_embedded_example_plans_every_service() {
    let plan = plan_for("cluster.yaml");
    // web: cluster IP + node port; dns: TCP + UDP; shop: cluster IP, LB
    // ingress and node port.
    assert_eq!(plan.virtual_servers.len(), 7);
    assert!(plan
        .virtual_servers
        .iter()
        .all(|vs| !vs.real_servers.is_empty()));
}

fn settings(addrs: &[NodePortAddress]) -> NodeSettings {
    NodeSettings {
        node_port_addresses: addrs.to_vec(),
        ..NodeSettings::default()
    }
}

fn node(addresses: &[&str]) -> NodeInfo {
    NodeInfo {
        name: "node-a".into(),
        addresses: addresses.iter().map(|a| ip(a)).collect(),
        eligible: true,
        ..NodeInfo::default()
    }
}

#[test]
fn node_port_addresses_follow_the_configured_rule() {
    let local = [
        ip("127.0.0.1"),
        ip("198.18.100.1"),
        ip("198.18.101.1"),
        ip("fe80::1"),
        ip("2001:db8:100::1"),
    ];
    let n = node(&["198.18.100.1", "2001:db8:100::1"]);
    let cidr = |s: &str| NodePortAddress::Cidr(s.parse::<IpNet>().unwrap());
    let cases: Vec<(&str, Vec<NodePortAddress>, Vec<&str>)> = vec![
        (
            "default: every local address but loopback and link-local",
            vec![],
            vec!["198.18.100.1", "198.18.101.1", "2001:db8:100::1"],
        ),
        (
            "primary: the node's first address of each family",
            vec![NodePortAddress::Primary],
            vec!["198.18.100.1", "2001:db8:100::1"],
        ),
        (
            "CIDRs pick matching local addresses; a family without one \
             gets them all, as upstream's proxier of that family does",
            vec![cidr("198.18.101.0/24")],
            vec!["198.18.101.1", "2001:db8:100::1"],
        ),
        (
            "never loopback, even when asked for (upstream skips it)",
            vec![cidr("127.0.0.0/8"), cidr("198.18.100.0/24")],
            vec!["198.18.100.1", "2001:db8:100::1"],
        ),
        (
            "a zero-length CIDR is every usable address of its family",
            vec![cidr("0.0.0.0/0"), cidr("2001:db8:100::/64")],
            vec!["198.18.100.1", "198.18.101.1", "2001:db8:100::1"],
        ),
    ];
    for (what, rule, expected) in cases {
        let ctx =
            node_context("node-a", Some(&n), &settings(&rule), Some(&local));
        let expected: Vec<IpAddr> = expected.iter().map(|s| ip(s)).collect();
        assert_eq!(ctx.node_port_addresses, expected, "{what}");
    }
}

#[test]
fn node_families_come_from_its_addresses() {
    let s = NodeSettings::default();
    let v4 = node_context("n", Some(&node(&["198.18.100.1"])), &s, None);
    assert!(v4.ipv4 && !v4.ipv6);
    let v6 = node_context("n", Some(&node(&["2001:db8::1"])), &s, None);
    assert!(!v6.ipv4 && v6.ipv6);
    let unknown = node_context("n", None, &s, None);
    assert!(unknown.ipv4 && !unknown.ipv6);
}

/// node-a with the default settings.
fn node_a() -> SyncState {
    SyncState::new("node-a", NodeSettings::default(), None, SystemTime::now())
}

/// node-a, fed by the API side from now on.
fn node_a_fed_by_view() -> SyncState {
    node_a().fed_by_view()
}

fn slice_change(
    previous: Option<&EndpointSlice>,
    current: Option<&EndpointSlice>,
) -> ObjectChange {
    ObjectChange::EndpointSlice {
        previous: previous.cloned().map(Arc::new),
        current: current.cloned().map(Arc::new),
    }
}

/// Two syncs taken as one (the first applied only with the second, as
/// the syncs computed while a list arrives are): each port once, from
/// the first's previous state to the second's current, and the
/// trackers' results of both, so that conntrack still hears of UDP
/// endpoints the second took away.
#[test]
fn two_syncs_then_one_keep_each_ports_ends_and_both_trackers_results() {
    let snapshot = example("cluster.yaml");
    let mut state = node_a();
    state.apply_snapshot(&snapshot);
    let first = state.sync();
    let dns = |s: &&EndpointSlice| {
        s.metadata.labels.as_ref().unwrap()["kubernetes.io/service-name"]
            == "dns"
            && s.metadata.namespace.as_deref() == Some("kube-system")
    };
    for slice in snapshot.endpoint_slices.iter().filter(dns) {
        state.apply_objects(&slice_change(Some(slice), None));
    }
    let second = state.sync();
    assert!(!second.endpoints.deleted_udp_endpoints.is_empty());
    let udp_active = first.endpoints.newly_active_udp_services.clone();
    assert!(!udp_active.is_empty());
    let deleted = second.endpoints.deleted_udp_endpoints.clone();
    let both = first.then(second);
    let names: BTreeSet<String> =
        both.deltas.iter().map(|d| d.service.to_string()).collect();
    assert_eq!(both.deltas.len(), 4, "{names:?}");
    for delta in &both.deltas {
        assert!(delta.previous.is_none(), "{}", delta.service);
        let dns = delta.service.to_string().starts_with("kube-system/dns:");
        let real_servers = (delta.current.as_ref().unwrap().virtual_servers)
            .iter()
            .map(|vs| vs.real_servers.len())
            .sum::<usize>();
        assert_eq!(real_servers == 0, dns, "{}", delta.service);
    }
    assert_eq!(both.endpoints.newly_active_udp_services, udp_active);
    assert_eq!(both.endpoints.deleted_udp_endpoints, deleted);
    assert!(both
        .endpoints
        .changed_ports
        .iter()
        .any(|p| p.to_string().starts_with("kube-system/dns:")));
}

#[test]
fn a_sync_recomputes_only_what_changed() {
    let snapshot = example("cluster.yaml");
    let mut state = node_a();
    assert_eq!(state.apply_snapshot(&snapshot), ChangeOutcome::NeedsSync);
    let first = state.sync();
    assert_eq!(first.deltas.len(), 4, "web, dns x2, shop");
    assert_eq!(state.pending(), 0);

    // Nothing pending: a sync does nothing.
    assert!(state.sync().deltas.is_empty());

    // Scale web down to one endpoint.
    let old = snapshot
        .endpoint_slices
        .iter()
        .find(|s| {
            s.metadata.labels.as_ref().unwrap()["kubernetes.io/service-name"]
                == "web"
        })
        .unwrap();
    let mut new = old.clone();
    new.endpoints.get_or_insert_default().truncate(1);
    assert_eq!(
        state.apply_objects(&slice_change(Some(old), Some(&new))),
        ChangeOutcome::NeedsSync
    );
    let outcome = state.sync();
    assert_eq!(outcome.deltas.len(), 1);
    assert_eq!(outcome.deltas[0].service.to_string(), "default/web:http");
    let current = outcome.deltas[0].current.as_ref().unwrap();
    assert!(current
        .virtual_servers
        .iter()
        .all(|vs| vs.real_servers.len() == 1));
}

#[test]
fn primary_node_port_addresses_of_a_single_stack_node() {
    let local = [
        ip("198.18.100.1"),
        ip("198.18.101.1"),
        ip("2001:db8:100::1"),
    ];
    let n = node(&["198.18.100.1"]);
    let ctx = node_context(
        "node-a",
        Some(&n),
        &settings(&[NodePortAddress::Primary]),
        Some(&local),
    );
    // The IPv6 side has no node IP but loopback, so no entry: every
    // address, as upstream's IPv6 proxier then defaults to ::/0.
    assert_eq!(
        ctx.node_port_addresses,
        [ip("198.18.100.1"), ip("2001:db8:100::1")]
    );
    // A primary IP that is not a local address serves nothing.
    let elsewhere = node(&["198.18.199.9"]);
    let ctx = node_context(
        "node-a",
        Some(&elsewhere),
        &settings(&[NodePortAddress::Primary]),
        Some(&local),
    );
    assert_eq!(ctx.node_port_addresses, [ip("2001:db8:100::1")]);
}

#[test]
fn primary_ips_loopback_without_an_address_and_bind_address_overrides() {
    let n = node(&["198.18.100.1"]);
    let plain = node_context("n", Some(&n), &NodeSettings::default(), None);
    assert_eq!(plain.primary_ips, [ip("198.18.100.1"), ip("::1")]);
    let bound = NodeSettings {
        primary_ip_override: Some(ip("198.18.100.7")),
        ..NodeSettings::default()
    };
    let ctx = node_context("n", Some(&n), &bound, None);
    assert_eq!(ctx.primary_ips, [ip("198.18.100.7"), ip("::1")]);
    let unknown = node_context("n", None, &NodeSettings::default(), None);
    assert_eq!(unknown.primary_ips, [ip("127.0.0.1"), ip("::1")]);
}

/// Fed by the API side, a sync reports what conntrack must forget as the
/// trackers would: a UDP service's cluster IP that went away.
#[test]
fn a_node_fed_by_its_view_reports_deleted_udp_cluster_ips() {
    use crate::{
        apiside::cluster::{Cluster, NO_NODE},
        model::fixtures::{add_port, service},
        source::store::Stores,
    };
    let dns = service("ns", "dns", |s| add_port(s, "dns", 53, "UDP"));
    let mut stores = Stores::new(NO_NODE);
    let mut cluster = Cluster::new(SystemTime::now());
    let mut events = vec![
        SourceEvent::Node(Event::Init),
        SourceEvent::Node(Event::InitDone),
        SourceEvent::Service(Event::Init),
        SourceEvent::Service(Event::InitApply(dns.clone())),
        SourceEvent::Service(Event::InitDone),
    ];
    for event in events.drain(..) {
        for change in stores.apply(event) {
            cluster.apply(&change);
        }
    }
    let _ = cluster.sync(usize::MAX);
    let mut state = node_a_fed_by_view();
    let first = cluster.update_for("node-a", None, true).unwrap();
    let held = first.revision;
    assert_eq!(state.apply_view(first), ChangeOutcome::NeedsSync);
    let first = state.sync();
    assert_eq!(first.deltas.len(), 1);
    assert!(first.endpoints.conntrack_cleanup_required);

    for change in stores.apply(SourceEvent::Service(Event::Delete(dns))) {
        cluster.apply(&change);
    }
    let _ = cluster.sync(usize::MAX);
    state.apply_view(cluster.update_for("node-a", Some(held), false).unwrap());
    let outcome = state.sync();
    assert_eq!(
        outcome.services.deleted_udp_cluster_ips,
        [ip("198.18.0.1")].into()
    );
    assert!(outcome.deltas[0].current.is_none());
    assert!(state.service_map().is_empty());
}

/// Fed by the API side, a node reports the trigger times of the slice
/// changes it programs, as a proxy watching the slices does: once each,
/// none from before its start, none from the full state it starts from.
#[test]
fn a_node_fed_by_its_view_reports_the_trigger_times_of_what_it_programs() {
    use std::time::Duration;

    use crate::{
        apiside::cluster::{Cluster, NO_NODE},
        model::{
            convert::ANNOTATION_LAST_CHANGE_TRIGGER_TIME,
            fixtures::{add_port, add_slice_port, endpoint, service, slice},
        },
        nodeview::wire,
        source::store::Stores,
    };
    // 2026-01-01T00:00:00Z: the API side starts; the node 100 s later.
    let api_start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    let node_start = api_start + Duration::from_secs(100);
    let at = |secs: u64| api_start + Duration::from_secs(secs);
    let web_slice = |ips: &[&str], trigger: &str| {
        slice("ns", "web-1", "web", |s| {
            add_slice_port(s, "http", 8080, "TCP");
            s.endpoints =
                Some(ips.iter().map(|ip| endpoint(ip, |_| {})).collect());
            s.metadata.annotations = Some(BTreeMap::from([(
                ANNOTATION_LAST_CHANGE_TRIGGER_TIME.to_owned(),
                trigger.to_owned(),
            )]));
        })
    };
    let mut stores = Stores::new(NO_NODE);
    let mut cluster = Cluster::new(api_start);
    let mut feed = |cluster: &mut Cluster, events: Vec<SourceEvent>| {
        for event in events {
            for change in stores.apply(event) {
                cluster.apply(&change);
            }
        }
        let _ = cluster.sync(usize::MAX);
    };
    feed(
        &mut cluster,
        vec![
            SourceEvent::Node(Event::Init),
            SourceEvent::Node(Event::InitDone),
            SourceEvent::Service(Event::Init),
            SourceEvent::Service(Event::InitApply(service("ns", "web", |s| {
                add_port(s, "http", 80, "TCP")
            }))),
            SourceEvent::Service(Event::InitDone),
            SourceEvent::EndpointSlice(Event::Init),
            SourceEvent::EndpointSlice(Event::InitApply(web_slice(
                &["198.19.0.1"],
                "2026-01-01T00:00:10Z",
            ))),
            SourceEvent::EndpointSlice(Event::InitDone),
        ],
    );
    let mut state =
        SyncState::new("node-a", NodeSettings::default(), None, node_start)
            .fed_by_view();
    // Through the wire, as a node receives it.
    let mut held = None;
    let mut next = |cluster: &mut Cluster, state: &mut SyncState| {
        let update = cluster.update_for("node-a", held, held.is_none());
        let update = update.expect("something to send");
        held = Some(update.revision);
        state.apply_view(wire::decode(wire::encode(&update, "i")).unwrap());
        state.sync()
    };
    let web = NamespacedName::new("ns", "web");

    // The full state it starts from: its times are the API side's, from
    // before the node started.
    let first = next(&mut cluster, &mut state);
    assert_eq!(first.deltas.len(), 1);
    assert!(first.endpoints.last_change_trigger_times.is_empty());

    // A change after the node's start reaches it with its time.
    feed(
        &mut cluster,
        vec![SourceEvent::EndpointSlice(Event::Apply(web_slice(
            &["198.19.0.1", "198.19.0.2"],
            "2026-01-01T00:03:20Z",
        )))],
    );
    let outcome = next(&mut cluster, &mut state);
    assert_eq!(outcome.endpoints.changed_ports.len(), 1);
    assert_eq!(
        outcome.endpoints.last_change_trigger_times,
        [(web.clone(), vec![at(200)])].into()
    );
    // Reported once: the next sync has nothing more.
    assert!(state.sync().endpoints.last_change_trigger_times.is_empty());

    // A slice whose trigger is from before the node started (after the
    // API side's start): programmed, its time not reported.
    feed(
        &mut cluster,
        vec![SourceEvent::EndpointSlice(Event::Apply(web_slice(
            &["198.19.0.2"],
            "2026-01-01T00:00:50Z",
        )))],
    );
    let outcome = next(&mut cluster, &mut state);
    assert_eq!(outcome.endpoints.changed_ports.len(), 1);
    assert!(outcome.endpoints.last_change_trigger_times.is_empty());

    // A full state is where the node starts over: times with it, should
    // a server send any, are not the node's to report.
    let mut full = cluster.update_for("node-a", None, true).unwrap();
    full.trigger_times.insert(web.clone(), vec![at(300)]);
    state.apply_view(full);
    assert!(state.sync().endpoints.last_change_trigger_times.is_empty());
}

/// Another Node's deletion (a state file carries every Node) leaves ours
/// and what was computed from it; found by fuzzing, where it turned an
/// IPv6-only node's state into IPv4's.
#[test]
fn another_nodes_deletion_leaves_ours() {
    use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeStatus};

    let node_object = |name: &str, address: &str| {
        let mut node = Node::default();
        node.metadata.name = Some(name.into());
        node.status = Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                address: address.into(),
                type_: "InternalIP".into(),
            }]),
            ..NodeStatus::default()
        });
        Arc::new(node)
    };
    let change = |previous: Option<&Arc<Node>>, current: Option<&Arc<Node>>| {
        ObjectChange::Node {
            previous: previous.cloned(),
            current: current.cloned(),
        }
    };
    let mut state = SyncState::new(
        "node-a",
        NodeSettings::default(),
        None,
        SystemTime::now(),
    );
    let ours = node_object("node-a", "2001:db8::a");
    let other = node_object("node-b", "198.18.0.2");
    state.apply_objects(&change(None, Some(&ours)));
    state.apply_objects(&change(None, Some(&other)));
    state.sync();
    let before = state.desired().snapshot();
    assert!(
        before.ipsets.keys().all(|set| set.starts_with("KUBE-6-")),
        "{:?}",
        before.ipsets.keys()
    );

    assert_eq!(
        state.apply_objects(&change(Some(&other), None)),
        ChangeOutcome::Unchanged
    );
    state.sync();
    assert_eq!(state.desired().snapshot(), before);

    // Our own deletion still counts.
    assert_eq!(
        state.apply_objects(&change(Some(&ours), None)),
        ChangeOutcome::NeedsSync
    );
}

/// A slice that turns into one kube-proxy cannot use (an FQDN slice) or
/// that now names another Service no longer holds its endpoints where
/// they were: the state is what a fresh start from the objects computes.
/// Found by fuzzing, where the old endpoints stayed.
#[test]
fn a_slice_that_becomes_unusable_or_moves_leaves_nothing_behind() {
    use crate::model::fixtures::{
        add_port, add_slice_port, endpoint, service, set_cluster_ips, slice,
    };
    let web = service("default", "web", |s| add_port(s, "http", 80, "TCP"));
    let api = service("default", "api", |s| {
        set_cluster_ips(s, &["198.18.0.2"]);
        add_port(s, "http", 80, "TCP");
    });
    let serving = |s: &mut EndpointSlice| {
        add_slice_port(s, "http", 8080, "TCP");
        s.endpoints
            .get_or_insert_default()
            .push(endpoint("198.19.0.5", |_| {}));
    };
    let good = slice("default", "web-1", "web", serving);
    let mut fqdn = good.clone();
    fqdn.address_type = "FQDN".to_owned();
    let moved = slice("default", "web-1", "api", serving);
    let real_servers = |plan: &Plan, address: &str| -> usize {
        plan.virtual_servers
            .iter()
            .filter(|vs| vs.address == ip(address))
            .map(|vs| vs.real_servers.len())
            .sum()
    };
    for later in [fqdn, moved] {
        let mut state = SyncState::new(
            "node-a",
            NodeSettings::default(),
            None,
            SystemTime::now(),
        );
        for svc in [&web, &api] {
            state.apply_objects(&ObjectChange::Service {
                previous: None,
                current: Some(Arc::new(svc.clone())),
            });
        }
        state.apply_objects(&slice_change(None, Some(&good)));
        state.sync();
        assert_eq!(real_servers(&state.desired().snapshot(), "198.18.0.1"), 1);

        state.apply_objects(&slice_change(Some(&good), Some(&later)));
        state.sync();
        let fresh = plan(
            &file::Snapshot {
                services: vec![web.clone(), api.clone()],
                endpoint_slices: vec![later.clone()],
                ..file::Snapshot::default()
            },
            "node-a",
            &NodeSettings::default(),
        );
        assert_eq!(state.desired().snapshot(), fresh, "{}", later.address_type);
        assert_eq!(real_servers(&fresh, "198.18.0.1"), 0);
    }
}

/// Fed by its view, a node takes the view's Node as its own whatever
/// name it bears, as a fresh start from the same view does; found by
/// fuzzing, where a renamed Node left the node dual-stack while a fresh
/// start from the view was IPv4-only.
#[test]
fn a_node_fed_by_its_view_takes_the_views_node_as_its_own() {
    use crate::nodeview::{Change, Update};

    let update = |revision: u64, full: bool, node: NodeInfo| Update {
        full,
        changes: vec![Change::Node(Arc::new(node))],
        revision,
        synced: true,
        trigger_times: Default::default(),
    };
    let mut state = node_a_fed_by_view();
    state.apply_view(update(1, true, node(&["2001:db8::a", "198.18.1.1"])));
    state.sync();
    let dual = state.desired().snapshot();
    assert!(dual.ipsets.keys().any(|set| set.starts_with("KUBE-6-")));

    let mut renamed = node(&[]);
    renamed.name = "another".to_owned();
    assert_eq!(
        state.apply_view(update(2, false, renamed.clone())),
        ChangeOutcome::NeedsSync
    );
    state.sync();
    let fresh = plan_from_view(
        update(2, true, renamed),
        "node-a",
        &NodeSettings::default(),
    );
    assert_eq!(state.desired().snapshot(), fresh);
    assert!(!fresh.ipsets.keys().any(|set| set.starts_with("KUBE-6-")));
}

/// One source feeds a state: fed by views, a Service object that reaches
/// it anyway is not taken, and a sync holds only what the view holds.
#[test]
fn a_node_fed_by_its_view_takes_no_objects_but_its_node() {
    use crate::{
        model::fixtures::{add_port, service},
        source::store::Stores,
    };
    let web = service("ns", "web", |s| add_port(s, "http", 80, "TCP"));
    let mut stores = Stores::new("node-a");
    let mut state = node_a_fed_by_view();
    let mut outcomes = Vec::new();
    for event in [
        SourceEvent::Service(Event::Init),
        SourceEvent::Service(Event::InitApply(web)),
        SourceEvent::Service(Event::InitDone),
    ] {
        for change in stores.apply(event) {
            outcomes.push(state.apply(&change));
        }
    }
    assert!(!outcomes.is_empty());
    assert!(outcomes.iter().all(|o| *o == ChangeOutcome::Unchanged));
    let synced = state.sync();
    assert!(synced.deltas.is_empty());
    assert!(state.service_map().is_empty());
    assert_eq!(state.pending(), 0);

    // The same objects, fed to a state fed by objects, are taken.
    let mut objects = SyncState::new(
        "node-a",
        NodeSettings::default(),
        None,
        SystemTime::now(),
    );
    let web = service("ns", "web", |s| add_port(s, "http", 80, "TCP"));
    let mut stores = Stores::new("node-a");
    for event in [
        SourceEvent::Service(Event::Init),
        SourceEvent::Service(Event::InitApply(web)),
        SourceEvent::Service(Event::InitDone),
    ] {
        for change in stores.apply(event) {
            objects.apply(&change);
        }
    }
    objects.sync();
    assert_eq!(objects.service_map().len(), 1);
}

/// Under `detectLocalMode: NodeCIDR` the local-traffic rules are built
/// from our Node's podCIDRs once: a change asks for a restart, naming the
/// node and both lists; another Node's change does not.
#[test]
fn a_pod_cidr_change_under_node_cidr_asks_for_a_restart_with_its_reason() {
    use crate::{model::fixtures, source::store::Stores};
    let with_cidr = |name: &str, cidr: &str| {
        let cidr = cidr.to_owned();
        fixtures::node(name, move |n| {
            n.spec.get_or_insert_with(Default::default).pod_cidrs =
                Some(vec![cidr]);
        })
    };
    let settings = NodeSettings {
        detect_local_node_cidr: true,
        ..NodeSettings::default()
    };
    let mut state = SyncState::new("node-a", settings, None, SystemTime::now());
    let mut stores = Stores::new("node-a");
    let mut outcomes = |event, state: &mut SyncState| {
        stores
            .apply(event)
            .iter()
            .map(|change| state.apply(change))
            .collect::<Vec<_>>()
    };
    outcomes(SourceEvent::Node(Event::Init), &mut state);
    outcomes(
        SourceEvent::Node(Event::InitApply(with_cidr(
            "node-a",
            "198.19.0.0/24",
        ))),
        &mut state,
    );
    outcomes(SourceEvent::Node(Event::InitDone), &mut state);
    let other = outcomes(
        SourceEvent::Node(Event::Apply(with_cidr("node-b", "198.19.9.0/24"))),
        &mut state,
    );
    assert!(other
        .iter()
        .all(|o| !matches!(o, ChangeOutcome::Restart(_))));
    let ours = outcomes(
        SourceEvent::Node(Event::Apply(with_cidr("node-a", "198.19.1.0/24"))),
        &mut state,
    );
    let want = RestartReason::PodCidrsChanged {
        node: "node-a".into(),
        old: vec!["198.19.0.0/24".parse().unwrap()],
        new: vec!["198.19.1.0/24".parse().unwrap()],
    };
    assert_eq!(ours, [ChangeOutcome::Restart(want.clone())]);
    assert!(want.to_string().contains("node node-a podCIDRs changed"));
}
