use std::{net::IpAddr, sync::Arc};

use super::{
    clean_stale_udp_flows, contract, contract::nat_flow, ConntrackModel,
    UdpServing,
};
use crate::model::{EndpointInfo, Protocol, ServicePortInfo, ServicePortName};

#[tokio::test]
async fn model_passes_the_contract() {
    let mut m = ConntrackModel::new(contract::seeded_flows());
    contract::dump_and_delete(&mut m).await;
    assert!(m.flows.is_empty());
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn service(
    protocol: Protocol,
    f: impl FnOnce(&mut ServicePortInfo),
) -> ServicePortInfo {
    let mut s = ServicePortInfo {
        cluster_ips: vec![ip("198.18.0.10")],
        port: 53,
        protocol,
        node_port: 0,
        session_affinity_timeout: None,
        external_ips: vec![],
        load_balancer_vips: vec![],
        load_balancer_source_ranges: vec![],
        external_policy_local: false,
        internal_policy_local: false,
        health_check_node_port: 0,
        is_load_balancer: false,
        scheduling: None,
    };
    f(&mut s);
    s
}

fn endpoint(addr: &str, serving: bool) -> EndpointInfo {
    EndpointInfo {
        ip: ip(addr),
        port: 5353,
        is_local: false,
        node_name: None,
        ready: serving,
        serving,
        terminating: false,
        zone_hints: Default::default(),
        node_hints: Default::default(),
    }
}

/// The addresses a node's endpoints view gives the cleanup for `eps`.
fn serving(eps: &[EndpointInfo]) -> Vec<IpAddr> {
    use crate::selection::EndpointsView;
    let name = port_name("any");
    let map: crate::model::EndpointsMap =
        [(name.clone(), eps.iter().cloned().map(Arc::new).collect())].into();
    map.serving_addresses(&name).into_owned()
}

#[test]
fn stale_flows_follow_upstream() {
    let dns = service(Protocol::Udp, |s| {
        s.external_ips = vec![ip("198.18.1.1")];
        s.load_balancer_vips = vec![ip("198.18.2.1")];
        s.node_port = 30053;
    });
    let eps = [
        endpoint("198.19.0.1", true),
        // Terminating but still serving: its flows stay.
        EndpointInfo {
            ready: false,
            terminating: true,
            ..endpoint("198.19.0.2", true)
        },
        endpoint("198.19.0.3", false),
    ];
    let mut serving = UdpServing::new();
    serving.update(&port_name("dns"), Some(&dns), &self::serving(&eps));
    // Same addresses over TCP: no flow of it is stale. A UDP service
    // without serving endpoints: every flow to its addresses is, none to
    // its node port (kube-proxy since 1.37).
    serving.update(
        &port_name("web"),
        Some(&service(Protocol::Tcp, |s| s.port = 80)),
        &[],
    );
    serving.update(
        &port_name("idle"),
        Some(&service(Protocol::Udp, |s| {
            s.cluster_ips = vec![ip("198.18.0.11")];
            s.external_ips = vec![ip("198.18.1.11")];
            s.node_port = 30054;
        })),
        &self::serving(&[endpoint("198.19.0.9", false)]),
    );

    let c = "198.18.5.5:40000";
    let cases = [
        (
            "cluster IP, serving endpoint",
            nat_flow(c, "198.18.0.10:53", "198.19.0.1:5353"),
            false,
        ),
        (
            "cluster IP, terminating serving",
            nat_flow(c, "198.18.0.10:53", "198.19.0.2:5353"),
            false,
        ),
        (
            "cluster IP, not serving",
            nat_flow(c, "198.18.0.10:53", "198.19.0.3:5353"),
            true,
        ),
        (
            "cluster IP, gone",
            nat_flow(c, "198.18.0.10:53", "198.19.0.7:5353"),
            true,
        ),
        (
            "external IP, gone",
            nat_flow(c, "198.18.1.1:53", "198.19.0.7:5353"),
            true,
        ),
        (
            "LB IP, gone",
            nat_flow(c, "198.18.2.1:53", "198.19.0.7:5353"),
            true,
        ),
        (
            "node port on any address, gone",
            nat_flow(c, "198.18.7.7:30053", "198.19.0.7:5353"),
            true,
        ),
        (
            "node port, serving",
            nat_flow(c, "198.18.7.7:30053", "198.19.0.1:5353"),
            false,
        ),
        (
            "other port of the cluster IP",
            nat_flow(c, "198.18.0.10:54", "198.19.0.7:5353"),
            false,
        ),
        (
            "service without serving endpoints, its cluster IP",
            nat_flow(c, "198.18.0.11:53", "198.19.0.9:5353"),
            true,
        ),
        (
            "service without serving endpoints, its external IP",
            nat_flow(c, "198.18.1.11:53", "198.19.0.9:5353"),
            true,
        ),
        (
            "service without serving endpoints, its node port",
            nat_flow(c, "198.18.7.7:30054", "198.19.0.9:5353"),
            false,
        ),
        (
            "not a service at all",
            nat_flow(c, "198.18.9.9:53", "198.18.9.9:53"),
            false,
        ),
    ];
    for (name, flow, stale) in cases {
        assert_eq!(serving.is_stale(&flow), stale, "{name}");
    }
}

fn port_name(name: &str) -> ServicePortName {
    ServicePortName::new("ns", name, "dns", Protocol::Udp)
}

/// A port updated to other endpoints, or forgotten, leaves nothing of
/// its old state behind.
#[test]
fn updates_replace_a_port_and_forget_it() {
    let dns = service(Protocol::Udp, |_| {});
    let mut serving = UdpServing::new();
    serving.update(
        &port_name("dns"),
        Some(&dns),
        &self::serving(&[endpoint("198.19.0.1", true)]),
    );
    serving.update(
        &port_name("dns"),
        Some(&dns),
        &self::serving(&[endpoint("198.19.0.2", true)]),
    );
    let c = "198.18.5.5:40000";
    assert!(serving.is_stale(&nat_flow(
        c,
        "198.18.0.10:53",
        "198.19.0.1:5353"
    )));
    assert!(!serving.is_stale(&nat_flow(
        c,
        "198.18.0.10:53",
        "198.19.0.2:5353"
    )));
    serving.update(&port_name("dns"), None, &[]);
    assert_eq!(serving, UdpServing::new());
}

#[test]
fn from_maps_takes_every_udp_service_port() {
    let name = ServicePortName::new("ns", "dns", "dns", Protocol::Udp);
    let services =
        [(name.clone(), Arc::new(service(Protocol::Udp, |_| {})))].into();
    let endpoints =
        [(name, vec![Arc::new(endpoint("198.19.0.1", true))])].into();
    let serving = UdpServing::from_maps(&services, &endpoints);
    let c = "198.18.5.5:40000";
    assert!(serving.is_stale(&nat_flow(
        c,
        "198.18.0.10:53",
        "198.19.0.2:5353"
    )));
    assert!(!serving.is_stale(&nat_flow(
        c,
        "198.18.0.10:53",
        "198.19.0.1:5353"
    )));
}

#[tokio::test]
async fn cleanup_deletes_only_stale_flows() {
    let keep =
        nat_flow("198.18.5.5:40000", "198.18.0.10:53", "198.19.0.1:5353");
    let drop =
        nat_flow("198.18.5.5:40001", "198.18.0.10:53", "198.19.0.3:5353");
    let mut m = ConntrackModel::new([keep, drop]);
    let mut serving = UdpServing::new();
    serving.update(
        &port_name("dns"),
        Some(&service(Protocol::Udp, |_| {})),
        &self::serving(&[endpoint("198.19.0.1", true)]),
    );

    let report = clean_stale_udp_flows(&mut m, &serving).await.unwrap();
    assert_eq!((report.deleted, report.errors.len()), (1, 0));
    assert_eq!(m.flows.into_iter().collect::<Vec<_>>(), [keep]);
}

/// The socket parses only conntrack's subsystem: an nftables message
/// with an attribute shorter than its own header (found by fuzzing) used
/// to reach the netfilter crate's nftables parser, which panics on it.
#[test]
fn another_subsystems_message_is_left_unread() {
    use netlink_packet_core::{NetlinkMessage, NetlinkPayload};

    use super::real::{entry, udp_flow, Ctnetlink};

    let read =
        |bytes: &[u8]| match NetlinkMessage::<Ctnetlink>::deserialize(bytes)
            .unwrap()
            .payload
        {
            NetlinkPayload::InnerMessage(m) => m,
            other => panic!("not a message: {other:?}"),
        };
    let nftables = include_bytes!(
        "../../../fuzz/corpus/conntrack_reply/regression-nftables-short-attribute"
    );
    // nfnetlink subsystem 10 (nftables) in the type's high byte.
    assert_eq!(read(nftables), Ctnetlink::Foreign(0x0a0a));

    let conntrack =
        include_bytes!("../../../fuzz/corpus/conntrack_reply/seed-udp-v4");
    let m = read(conntrack);
    assert!(matches!(m, Ctnetlink::Conntrack(_)), "{m:?}");
    assert!(entry(&m).and_then(udp_flow).is_some(), "{m:?}");
}
