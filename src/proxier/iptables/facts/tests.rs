use std::{net::IpAddr, sync::Arc};

use ipnet::IpNet;
use pretty_assertions::assert_eq;

use super::*;
use crate::model::{NamespacedName, Protocol, ServicePortName};

fn ip(s: &str) -> IpAddr {
    s.parse().expect("test address")
}

fn state(entries: &[(SetKind, SetEntry)]) -> ServiceState {
    ServiceState {
        set_entries: entries
            .iter()
            .map(|(kind, e)| (SetName::for_addr(*kind, entry_ip(e)), e.clone()))
            .collect(),
        ..ServiceState::default()
    }
}

fn entry_ip(e: &SetEntry) -> IpAddr {
    match e {
        SetEntry::Ip(ip)
        | SetEntry::IpPort(ip, ..)
        | SetEntry::IpPortIp(ip, ..)
        | SetEntry::IpPortNet(ip, ..) => *ip,
        SetEntry::Port(_) => ip("198.18.0.0"),
    }
}

fn cluster_ip(addr: &str, port: u16) -> (SetKind, SetEntry) {
    (
        SetKind::ClusterIp,
        SetEntry::IpPort(ip(addr), Protocol::Tcp, port),
    )
}

fn sets(input: &RulesInput, family: IpFamily) -> Vec<SetKind> {
    input
        .families
        .iter()
        .filter(|f| f.family == family)
        .flat_map(|f| f.non_empty_sets.iter().copied())
        .collect()
}

const V4: [(IpFamily, LocalDetector); 1] =
    [(IpFamily::V4, LocalDetector::NoOp)];

#[test]
fn a_set_stays_non_empty_while_any_service_uses_it() {
    let a = state(&[cluster_ip("198.18.0.10", 80)]);
    let b = state(&[cluster_ip("198.18.0.11", 80)]);
    let mut facts = RulesFacts::new();
    facts.add(&a);
    facts.add(&b);
    facts.remove(&a);
    let input = facts.input(false, 14, true, &V4);
    assert_eq!(sets(&input, IpFamily::V4), vec![SetKind::ClusterIp]);
    facts.remove(&b);
    assert_eq!(facts, RulesFacts::new());
}

#[test]
fn a_shared_entry_is_counted_per_service() {
    let pod = ip("198.19.0.5");
    let loopback = (
        SetKind::LoopBack,
        SetEntry::IpPortIp(pod, Protocol::Tcp, 8080, pod),
    );
    let a = state(&[loopback]);
    let mut facts = RulesFacts::new();
    facts.add(&a);
    facts.add(&a.clone());
    facts.remove(&a);
    let input = facts.input(false, 14, true, &V4);
    assert_eq!(sets(&input, IpFamily::V4), vec![SetKind::LoopBack]);
}

#[test]
fn sets_outside_any_conditional_rule_do_not_count() {
    let mut facts = RulesFacts::new();
    facts.add(&state(&[(
        SetKind::HealthCheckNodePort,
        SetEntry::Port(30000),
    )]));
    assert_eq!(facts.input(false, 14, true, &V4), {
        RulesFacts::new().input(false, 14, true, &V4)
    });
}

#[test]
fn families_see_only_their_sets_and_load_balancers() {
    let mut facts = RulesFacts::new();
    facts.add(&state(&[cluster_ip("2001:db8::10", 80)]));
    let lb = ip("2001:db8::1:1");
    facts.add(&state(&[(
        SetKind::LoadBalancerFw,
        SetEntry::IpPort(lb, Protocol::Udp, 53),
    )]));
    let both = [
        (IpFamily::V4, LocalDetector::NoOp),
        (IpFamily::V6, LocalDetector::NoOp),
    ];
    let input = facts.input(false, 14, true, &both);
    assert_eq!(sets(&input, IpFamily::V4), vec![]);
    assert_eq!(
        sets(&input, IpFamily::V6),
        vec![SetKind::ClusterIp, SetKind::LoadBalancerFw]
    );
    let closed: Vec<&NoNodeAccess> = input
        .families
        .iter()
        .flat_map(|f| &f.lb_no_node_access)
        .collect();
    assert_eq!(
        closed,
        vec![&NoNodeAccess {
            address: lb,
            protocol: Protocol::Udp,
            port: 53
        }]
    );
}

#[test]
fn a_load_balancer_admitting_the_node_is_not_closed() {
    let lb = ip("198.18.1.1");
    let fw = (
        SetKind::LoadBalancerFw,
        SetEntry::IpPort(lb, Protocol::Tcp, 443),
    );
    let range: IpNet = "198.18.0.0/15".parse().expect("range");
    let cidr = (
        SetKind::LoadBalancerSourceCidr,
        SetEntry::IpPortNet(lb, Protocol::Tcp, 443, range),
    );
    let admitted = (
        SetKind::LoadBalancerSourceIp,
        SetEntry::IpPortIp(lb, Protocol::Tcp, 443, lb),
    );
    let cases = [
        ("ranges exclude the node", vec![fw.clone(), cidr.clone()], 1),
        ("ranges include the node", vec![fw, cidr, admitted], 0),
    ];
    for (name, entries, want) in cases {
        let mut facts = RulesFacts::new();
        facts.add(&state(&entries));
        let input = facts.input(false, 14, true, &V4);
        let closed: usize = input
            .families
            .iter()
            .map(|f| f.lb_no_node_access.len())
            .sum();
        assert_eq!(closed, want, "{name}");
    }
}

#[test]
fn deltas_replace_the_previous_state() {
    let name = ServicePortName {
        service: NamespacedName {
            namespace: "default".into(),
            name: "web".into(),
        },
        port: "http".into(),
        protocol: Protocol::Tcp,
    };
    let before = Arc::new(state(&[cluster_ip("198.18.0.10", 80)]));
    let after = Arc::new(state(&[(
        SetKind::ExternalIp,
        SetEntry::IpPort(ip("198.18.5.5"), Protocol::Tcp, 80),
    )]));
    let mut facts = RulesFacts::new();
    facts.apply(&ServiceDelta {
        service: name.clone(),
        previous: None,
        current: Some(before.clone()),
    });
    facts.apply(&ServiceDelta {
        service: name,
        previous: Some(before),
        current: Some(after),
    });
    let input = facts.input(false, 14, true, &V4);
    assert_eq!(sets(&input, IpFamily::V4), vec![SetKind::ExternalIp]);
}
