use std::{collections::HashMap, sync::Arc};

use pretty_assertions::assert_eq;

use crate::{
    desired::NodeContext,
    model::{
        fixtures::{ep, port_info},
        EndpointsMap, IpFamily, Protocol, ServicePortMap, ServicePortName,
    },
    server::no_local::{NoLocalEndpointsTracker, TrafficPolicy},
};

fn port(service: &str, name: &str) -> ServicePortName {
    ServicePortName::new("shop", service, name, Protocol::Tcp)
}

fn ctx() -> NodeContext {
    NodeContext {
        node_name: "node-a".to_owned(),
        ipv4: true,
        ..NodeContext::default()
    }
}

fn counts(t: &NoLocalEndpointsTracker) -> (usize, usize) {
    (
        t.count(IpFamily::V4, TrafficPolicy::Internal),
        t.count(IpFamily::V4, TrafficPolicy::External),
    )
}

#[test]
fn services_without_local_endpoints_are_counted_as_their_ports_change() {
    let itp_local = || Arc::new(port_info(|i| i.internal_policy_local = true));
    let mut services: ServicePortMap = HashMap::from([
        (port("web", "http"), itp_local()),
        (port("web", "https"), itp_local()),
        (
            port("lb", "http"),
            Arc::new(port_info(|i| {
                i.node_port = 30080;
                i.external_policy_local = true;
            })),
        ),
        (port("empty", "http"), itp_local()),
        (port("fine", "http"), itp_local()),
        (
            port("v6", "http"),
            Arc::new(port_info(|i| {
                i.internal_policy_local = true;
                i.cluster_ips = vec!["2001:db8::1".parse().expect("ip")];
            })),
        ),
    ]);
    let remote = || vec![ep("198.19.1.1", 80, |_| {})];
    let mut endpoints: EndpointsMap = HashMap::from([
        (port("web", "http"), remote()),
        (port("web", "https"), remote()),
        (port("lb", "http"), remote()),
        (
            port("fine", "http"),
            vec![ep("198.19.0.1", 80, |e| e.is_local = true)],
        ),
        (port("v6", "http"), vec![ep("2001:db8::5", 80, |_| {})]),
    ]);
    let mut tracker = NoLocalEndpointsTracker::default();
    let all: Vec<ServicePortName> = services.keys().cloned().collect();
    tracker.update(&all, &services, &endpoints, &ctx());
    // web counts once for its two ports; empty has no endpoint at
    // all; v6 is not proxied on an IPv4-only node.
    assert_eq!(counts(&tracker), (1, 1));

    // One port of web gets a local endpoint: the other still lacks.
    endpoints.insert(
        port("web", "http"),
        vec![ep("198.19.0.2", 80, |e| e.is_local = true)],
    );
    tracker.update([&port("web", "http")], &services, &endpoints, &ctx());
    assert_eq!(counts(&tracker), (1, 1));
    endpoints.insert(
        port("web", "https"),
        vec![ep("198.19.0.2", 443, |e| e.is_local = true)],
    );
    tracker.update([&port("web", "https")], &services, &endpoints, &ctx());
    assert_eq!(counts(&tracker), (0, 1));

    // The load balancer goes away.
    services.remove(&port("lb", "http"));
    endpoints.remove(&port("lb", "http"));
    tracker.update([&port("lb", "http")], &services, &endpoints, &ctx());
    assert_eq!(counts(&tracker), (0, 0));

    // The node turns dual-stack: every port is looked at again.
    let dual = NodeContext {
        ipv6: true,
        ..ctx()
    };
    tracker.update([], &services, &endpoints, &dual);
    assert_eq!(tracker.count(IpFamily::V6, TrafficPolicy::Internal), 1);
    let text = crate::telemetry::tests::render(|| tracker.emit());
    crate::telemetry::tests::assert_lines(
        &text,
        &[
            r#"kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="internal"} 0"#,
            r#"kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv6",traffic_policy="internal"} 1"#,
        ],
    );
}
