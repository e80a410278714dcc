use std::{net::IpAddr, sync::Arc};

use pretty_assertions::assert_eq;

use super::*;
use crate::model::{
    fixtures::{self, port_info},
    EndpointInfo, EndpointsMap, FlagChoice, Protocol, SchedulerFlags,
    ServicePortInfo, ServicePortMap, ServicePortName, ServiceScheduling,
};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Service ports here default to cluster IP 198.18.0.10.
fn svc(f: impl FnOnce(&mut ServicePortInfo)) -> ServicePortInfo {
    port_info(|s| {
        s.cluster_ips = vec![ip("198.18.0.10")];
        f(s)
    })
}

fn ep(addr: &str, f: impl FnOnce(&mut EndpointInfo)) -> Arc<EndpointInfo> {
    fixtures::ep(addr, 8080, f)
}

fn ctx(f: impl FnOnce(&mut NodeContext)) -> NodeContext {
    let mut c = NodeContext {
        node_name: "node-a".into(),
        zone: String::new(),
        node_port_addresses: vec![ip("198.18.100.1")],
        primary_ips: vec![ip("198.18.100.1")],
        local_addresses: [ip("198.18.100.1")].into(),
        schedulers: SchedulerPolicy::default(),
        ipv4: true,
        ipv6: false,
        pod_cidrs: vec![],
        without_external_ips: false,
    };
    f(&mut c);
    c
}

fn name(n: &str) -> ServicePortName {
    ServicePortName::new("ns", n, "http", Protocol::Tcp)
}

fn plan_of(
    context: NodeContext,
    services: &[(&str, ServicePortInfo, Vec<Arc<EndpointInfo>>)],
) -> Plan {
    let mut svcs = ServicePortMap::new();
    let mut eps = EndpointsMap::new();
    for (n, s, e) in services {
        svcs.insert(name(n), Arc::new(s.clone()));
        eps.insert(name(n), e.clone());
    }
    let mut state = DesiredState::new(context);
    let keys: Vec<_> = svcs.keys().cloned().collect();
    state.update(&svcs, &eps, &keys);
    state.snapshot()
}

fn vs_lines(plan: &Plan) -> Vec<String> {
    plan.virtual_server_lines()
}

/// Only the non-empty sets, to keep expectations short.
fn sets(plan: &Plan) -> Vec<(String, Vec<String>)> {
    plan.ipsets
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn set(name: &str, entries: &[&str]) -> (String, Vec<String>) {
    (
        name.to_string(),
        entries.iter().map(|e| e.to_string()).collect(),
    )
}

#[test]
fn cluster_ip_gets_a_bound_virtual_server_and_set_entries() {
    let plan = plan_of(
        ctx(|_| {}),
        &[(
            "web",
            svc(|_| {}),
            vec![
                ep("198.19.0.6", |_| {}),
                ep("198.19.0.5", |e| e.is_local = true),
                ep("198.19.0.7", |e| e.ready = false),
            ],
        )],
    );
    assert_eq!(
        vs_lines(&plan),
        ["TCP 198.18.0.10:80 -> 198.19.0.5:8080,198.19.0.6:8080"]
    );
    assert_eq!(plan.bound_addresses, [ip("198.18.0.10")]);
    assert_eq!(
        sets(&plan),
        [
            set("KUBE-CLUSTER-IP", &["198.18.0.10,tcp:80"]),
            set("KUBE-IPVS-IPS", &["198.18.0.10"]),
            // Hairpin masquerade covers local endpoints only.
            set("KUBE-LOOP-BACK", &["198.19.0.5,tcp:8080,198.19.0.5"]),
        ]
    );
    // Every set exists in the plan, empty or not, for one family.
    assert_eq!(plan.ipsets.len(), SetKind::ALL.len());
    assert_eq!(plan.virtual_servers[0].service.to_string(), "ns/web:http");
}

#[test]
fn client_ip_affinity_becomes_persistence_with_its_timeout() {
    let plan = plan_of(
        ctx(|_| {}),
        &[(
            "sticky",
            svc(|s| s.session_affinity_timeout = Some(600)),
            vec![ep("198.19.0.5", |_| {})],
        )],
    );
    assert_eq!(
        vs_lines(&plan),
        ["TCP 198.18.0.10:80 persistent 600 -> 198.19.0.5:8080"]
    );
}

#[test]
fn external_ips_are_bound_unless_already_local() {
    let plan = plan_of(
        ctx(|_| {}),
        &[(
            "ext",
            svc(|s| {
                s.external_ips = vec![ip("198.18.50.1"), ip("198.18.100.1")];
            }),
            vec![ep("198.19.0.5", |_| {})],
        )],
    );
    assert_eq!(
        vs_lines(&plan),
        [
            "TCP 198.18.0.10:80 -> 198.19.0.5:8080",
            "TCP 198.18.50.1:80 -> 198.19.0.5:8080",
            "TCP 198.18.100.1:80 -> 198.19.0.5:8080",
        ]
    );
    assert_eq!(plan.bound_addresses, [ip("198.18.0.10"), ip("198.18.50.1")]);
    assert_eq!(
        sets(&plan)[1],
        set(
            "KUBE-EXTERNAL-IP",
            &["198.18.50.1,tcp:80", "198.18.100.1,tcp:80"]
        )
    );
}

#[test]
fn allow_service_external_ips_off_serves_none_and_keeps_their_policy() {
    let service = svc(|s| {
        s.external_ips = vec![ip("198.18.50.1")];
        s.load_balancer_vips = vec![ip("198.18.60.1")];
        // Set from the external IP, as upstream counts it whatever the
        // gate: the load balancer keeps the local policy.
        s.external_policy_local = true;
    });
    let endpoints = vec![
        ep("198.19.0.5", |e| e.is_local = true),
        ep("198.19.0.6", |_| {}),
    ];
    let plan = plan_of(
        ctx(|c| c.without_external_ips = true),
        &[("ext", service, endpoints)],
    );
    assert_eq!(
        vs_lines(&plan),
        [
            "TCP 198.18.0.10:80 -> 198.19.0.5:8080,198.19.0.6:8080",
            "TCP 198.18.60.1:80 -> 198.19.0.5:8080",
        ]
    );
    assert!(!plan.bound_addresses.contains(&ip("198.18.50.1")));
    let names: Vec<String> = sets(&plan).into_iter().map(|(n, _)| n).collect();
    assert!(
        !names.iter().any(|n| n.starts_with("KUBE-EXTERNAL-IP")),
        "{names:?}"
    );
}

#[test]
fn load_balancer_source_ranges_fill_the_firewall_sets() {
    let lb = |ranges: &[&str]| {
        let ranges = ranges.iter().map(|r| r.parse().unwrap()).collect();
        svc(move |s| {
            s.is_load_balancer = true;
            s.load_balancer_vips = vec![ip("198.18.60.1")];
            s.load_balancer_source_ranges = ranges;
        })
    };
    struct Case {
        name: &'static str,
        ranges: &'static [&'static str],
        expected: Vec<(String, Vec<String>)>,
    }
    let cases = [
        Case {
            name: "no ranges: plain LB entry only",
            ranges: &[],
            expected: vec![set("KUBE-LOAD-BALANCER", &["198.18.60.1,tcp:80"])],
        },
        Case {
            name: "ranges without the node: FW and CIDR entries",
            ranges: &["198.18.200.0/24", "198.18.201.7/32"],
            expected: vec![
                set("KUBE-LOAD-BALANCER", &["198.18.60.1,tcp:80"]),
                set("KUBE-LOAD-BALANCER-FW", &["198.18.60.1,tcp:80"]),
                set(
                    "KUBE-LOAD-BALANCER-SOURCE-CIDR",
                    &[
                        "198.18.60.1,tcp:80,198.18.200.0/24",
                        "198.18.60.1,tcp:80,198.18.201.7",
                    ],
                ),
            ],
        },
        Case {
            name:
                "a zero-length range admits everyone: no firewall, as upstream",
            ranges: &["198.18.200.0/24", "0.0.0.0/0"],
            expected: vec![set("KUBE-LOAD-BALANCER", &["198.18.60.1,tcp:80"])],
        },
        Case {
            name: "only the other family's zero range: this family filters",
            ranges: &["198.18.200.0/24", "::/0"],
            expected: vec![
                set("KUBE-LOAD-BALANCER", &["198.18.60.1,tcp:80"]),
                set("KUBE-LOAD-BALANCER-FW", &["198.18.60.1,tcp:80"]),
                set(
                    "KUBE-LOAD-BALANCER-SOURCE-CIDR",
                    &["198.18.60.1,tcp:80,198.18.200.0/24"],
                ),
            ],
        },
        Case {
            name: "a range admitting the node admits the VIP as source",
            ranges: &["198.18.100.0/24"],
            expected: vec![
                set("KUBE-LOAD-BALANCER", &["198.18.60.1,tcp:80"]),
                set("KUBE-LOAD-BALANCER-FW", &["198.18.60.1,tcp:80"]),
                set(
                    "KUBE-LOAD-BALANCER-SOURCE-CIDR",
                    &["198.18.60.1,tcp:80,198.18.100.0/24"],
                ),
                set(
                    "KUBE-LOAD-BALANCER-SOURCE-IP",
                    &["198.18.60.1,tcp:80,198.18.60.1"],
                ),
            ],
        },
    ];
    for case in cases {
        let plan = plan_of(ctx(|_| {}), &[("lb", lb(case.ranges), vec![])]);
        let lb_sets: Vec<_> = sets(&plan)
            .into_iter()
            .filter(|(n, _)| n.starts_with("KUBE-LOAD-BALANCER"))
            .collect();
        assert_eq!(lb_sets, case.expected, "{}", case.name);
        assert!(
            plan.bound_addresses.contains(&ip("198.18.60.1")),
            "{}",
            case.name
        );
    }
}

#[test]
fn external_policy_local_uses_local_endpoints_and_local_sets() {
    let plan = plan_of(
        ctx(|_| {}),
        &[(
            "etp",
            svc(|s| {
                s.node_port = 30080;
                s.is_load_balancer = true;
                s.load_balancer_vips = vec![ip("198.18.60.1")];
                s.external_policy_local = true;
                s.health_check_node_port = 32000;
            }),
            vec![
                ep("198.19.0.5", |e| e.is_local = true),
                ep("198.19.1.5", |_| {}),
            ],
        )],
    );
    assert_eq!(
        vs_lines(&plan),
        [
            // Internal traffic still goes to every endpoint.
            "TCP 198.18.0.10:80 -> 198.19.0.5:8080,198.19.1.5:8080",
            "TCP 198.18.60.1:80 -> 198.19.0.5:8080",
            "TCP 198.18.100.1:30080 -> 198.19.0.5:8080",
        ]
    );
    let s = sets(&plan);
    assert!(s.contains(&set("KUBE-NODE-PORT-TCP", &["30080"])));
    assert!(s.contains(&set("KUBE-NODE-PORT-LOCAL-TCP", &["30080"])));
    assert!(s.contains(&set("KUBE-HEALTH-CHECK-NODE-PORT", &["32000"])));
    assert!(
        s.contains(&set("KUBE-LOAD-BALANCER-LOCAL", &["198.18.60.1,tcp:80"]))
    );
}

#[test]
fn external_ips_go_in_one_set_by_external_policy() {
    for (local, expected) in [
        (false, set("KUBE-EXTERNAL-IP", &["198.18.240.1,tcp:80"])),
        (
            true,
            set("KUBE-EXTERNAL-IP-LOCAL", &["198.18.240.1,tcp:80"]),
        ),
    ] {
        let plan = plan_of(
            ctx(|_| {}),
            &[(
                "ext",
                svc(|s| {
                    s.external_ips = vec![ip("198.18.240.1")];
                    s.external_policy_local = local;
                }),
                vec![ep("198.19.0.5", |e| e.is_local = true)],
            )],
        );
        let external: Vec<_> = sets(&plan)
            .into_iter()
            .filter(|(name, _)| name.starts_with("KUBE-EXTERNAL-IP"))
            .collect();
        assert_eq!(external, [expected], "local policy: {local}");
    }
}

#[test]
fn node_ports_per_protocol_use_the_matching_set() {
    for (proto, expected) in [
        (Protocol::Tcp, set("KUBE-NODE-PORT-TCP", &["30080"])),
        (Protocol::Udp, set("KUBE-NODE-PORT-UDP", &["30080"])),
        (
            Protocol::Sctp,
            set(
                "KUBE-NODE-PORT-SCTP-HASH",
                &["198.18.100.1,sctp:30080", "198.18.100.2,sctp:30080"],
            ),
        ),
    ] {
        let plan = plan_of(
            ctx(|c| {
                c.node_port_addresses = vec![
                    ip("198.18.100.1"),
                    ip("198.18.100.2"),
                    ip("2001:db8::1"),
                ];
            }),
            &[(
                "np",
                svc(|s| {
                    s.protocol = proto;
                    s.node_port = 30080;
                }),
                vec![],
            )],
        );
        let s = sets(&plan);
        assert!(s.contains(&expected), "{proto}: {s:?}");
        // One virtual server per node address of the service's family.
        let nodeport_vs = plan
            .virtual_servers
            .iter()
            .filter(|vs| vs.port == 30080)
            .count();
        assert_eq!(nodeport_vs, 2, "{proto}");
    }
}

#[test]
fn no_node_port_address_means_no_node_port_at_all() {
    for proto in [Protocol::Tcp, Protocol::Udp, Protocol::Sctp] {
        for local in [false, true] {
            let plan = plan_of(
                ctx(|c| c.node_port_addresses = vec![]),
                &[(
                    "np",
                    svc(|s| {
                        s.protocol = proto;
                        s.node_port = 30080;
                        s.external_policy_local = local;
                    }),
                    vec![ep("198.19.0.1", |_| {})],
                )],
            );
            let node_port_sets: Vec<_> = sets(&plan)
                .into_iter()
                .filter(|(name, _)| name.starts_with("KUBE-NODE-PORT"))
                .collect();
            assert_eq!(node_port_sets, [], "{proto}, local {local}");
            assert!(
                plan.virtual_servers.iter().all(|vs| vs.port != 30080),
                "{proto}: {:?}",
                plan.virtual_servers
            );
            // The cluster IP is served all the same.
            assert!(!plan.virtual_servers.is_empty(), "{proto}");
        }
    }
}

#[test]
fn dual_stack_service_uses_kube_6_sets_with_kernel_length_names() {
    let plan = plan_of(
        ctx(|c| {
            c.ipv6 = true;
            c.node_port_addresses = vec![ip("198.18.100.1"), ip("2001:db8::1")];
        }),
        &[(
            "dual",
            svc(|s| {
                s.cluster_ips = vec![ip("198.18.0.10"), ip("2001:db8:1::10")];
                s.is_load_balancer = true;
                s.load_balancer_vips = vec![ip("2001:db8:2::1")];
                s.load_balancer_source_ranges =
                    vec!["2001:db8:3::/48".parse().unwrap()];
            }),
            vec![ep("198.19.0.5", |_| {}), ep("2001:db8:4::5", |_| {})],
        )],
    );
    assert_eq!(
        vs_lines(&plan),
        [
            "TCP 198.18.0.10:80 -> 198.19.0.5:8080",
            "TCP [2001:db8:1::10]:80 -> [2001:db8:4::5]:8080",
            "TCP [2001:db8:2::1]:80 -> [2001:db8:4::5]:8080",
        ]
    );
    assert_eq!(plan.ipsets.len(), 2 * SetKind::ALL.len());
    let s = sets(&plan);
    assert!(s.contains(&set("KUBE-6-CLUSTER-IP", &["2001:db8:1::10,tcp:80"])));
    assert!(s.contains(&set(
        "KUBE-6-LOAD-BALANCER-SOURCE-CID",
        &["2001:db8:2::1,tcp:80,2001:db8:3::/48"]
    )));
    assert!(plan.ipsets.contains_key("KUBE-6-NODE-PORT-LOCAL-SCTP-HAS"));
}

#[test]
fn update_reports_only_changed_service_ports() {
    let mut svcs = ServicePortMap::new();
    let mut eps = EndpointsMap::new();
    svcs.insert(name("a"), Arc::new(svc(|_| {})));
    svcs.insert(
        name("b"),
        Arc::new(svc(|s| s.cluster_ips = vec![ip("198.18.0.11")])),
    );
    let mut state = DesiredState::new(ctx(|_| {}));
    let all: Vec<_> = svcs.keys().cloned().collect();
    assert_eq!(state.update(&svcs, &eps, &all).len(), 2);

    // Asking again with nothing changed produces no work.
    assert!(state.update(&svcs, &eps, &all).is_empty());

    // An endpoint for "a" changes "a" alone.
    eps.insert(name("a"), vec![ep("198.19.0.5", |_| {})]);
    let deltas = state.update(&svcs, &eps, &[name("a")]);
    assert_eq!(deltas.len(), 1);
    let d = &deltas[0];
    assert_eq!(d.service, name("a"));
    assert!(d.previous.as_ref().unwrap().virtual_servers[0]
        .real_servers
        .is_empty());
    assert_eq!(
        d.current.as_ref().unwrap().virtual_servers[0]
            .real_servers
            .len(),
        1
    );

    // A removed service yields its old state and nothing current.
    svcs.remove(&name("b"));
    let deltas = state.update(&svcs, &eps, &[name("b")]);
    assert_eq!(deltas.len(), 1);
    assert!(deltas[0].current.is_none() && deltas[0].previous.is_some());
    assert_eq!(state.len(), 1);
}

#[test]
fn a_context_change_recomputes_every_service() {
    let mut svcs = ServicePortMap::new();
    let eps = EndpointsMap::new();
    for n in ["a", "b"] {
        svcs.insert(name(n), Arc::new(svc(|s| s.node_port = 30000)));
    }
    let mut state = DesiredState::new(ctx(|_| {}));
    let all: Vec<_> = svcs.keys().cloned().collect();
    state.update(&svcs, &eps, &all);
    let same = state.context().clone();
    assert!(state.set_context(same, &svcs, &eps).is_empty());
    let moved = ctx(|c| c.node_port_addresses = vec![ip("198.18.100.9")]);
    assert_eq!(state.set_context(moved, &svcs, &eps).len(), 2);
}

#[test]
fn two_services_claiming_one_address_resolve_deterministically() {
    let shared = |n: u16| {
        svc(move |s| {
            s.cluster_ips = vec![ip(&format!("198.18.0.{n}"))];
            s.external_ips = vec![ip("198.18.50.1")];
        })
    };
    let plan = plan_of(
        ctx(|_| {}),
        &[
            ("zz", shared(2), vec![ep("198.19.0.2", |_| {})]),
            ("aa", shared(1), vec![ep("198.19.0.1", |_| {})]),
        ],
    );
    let ext: Vec<_> = plan
        .virtual_servers
        .iter()
        .filter(|v| v.address == ip("198.18.50.1"))
        .collect();
    assert_eq!(ext.len(), 1);
    assert_eq!(ext[0].service, name("aa"));
}

#[test]
fn plan_json_has_the_documented_shape() {
    let plan = plan_of(
        ctx(|_| {}),
        &[("web", svc(|_| {}), vec![ep("198.19.0.5", |_| {})])],
    );
    let json = serde_json::to_value(&plan).unwrap();
    assert_eq!(
        json["virtualServers"][0],
        serde_json::json!({
            "protocol": "TCP", "address": "198.18.0.10", "port": 80,
            "scheduler": "rr", "flags": [], "persistent": false, "timeout": 0,
            "service": "ns/web:http",
            "realServers": [{"address": "198.19.0.5", "port": 8080, "weight": 1}]
        })
    );
    // The scheduler's flags by ipvsadm's names: upstream's with mh.
    let maglev = plan_of(
        ctx(|c| c.schedulers.scheduler = "mh".into()),
        &[("web", svc(|_| {}), vec![ep("198.19.0.5", |_| {})])],
    );
    let json = serde_json::to_value(&maglev).unwrap();
    assert_eq!(json["virtualServers"][0]["scheduler"], "mh");
    assert_eq!(
        json["virtualServers"][0]["flags"],
        serde_json::json!(["mh-port"])
    );
    assert_eq!(json["boundAddresses"], serde_json::json!(["198.18.0.10"]));
    assert_eq!(
        json["ipsets"]["KUBE-CLUSTER-IP"],
        serde_json::json!(["198.18.0.10,tcp:80"])
    );
    assert_eq!(json["ipsets"]["KUBE-EXTERNAL-IP"], serde_json::json!([]));
}

#[test]
fn ipv6_set_names_follow_the_kernel_limit() {
    for kind in SetKind::ALL {
        let v6 = SetName { kind, ipv6: true }.name();
        assert!(v6.starts_with("KUBE-6-"), "{v6}");
        assert!(v6.len() <= 31, "{v6}");
        assert_eq!(SetName::v4(kind).name(), kind.base_name());
    }
}

/// Every set of ours is found by the name the kernel knows it by, of
/// either family (IPv6 names cut at the kernel's limit included), and no
/// other set is.
#[test]
fn a_set_of_ours_is_found_by_its_kernel_name() {
    for kind in SetKind::ALL {
        for ipv6 in [false, true] {
            let set = SetName { kind, ipv6 };
            assert_eq!(SetName::from_kernel_name(&set.name()), Some(set));
        }
    }
    assert_eq!(SetName::from_kernel_name("KUBE-SOMEONE-ELSE"), None);
    assert_eq!(SetName::from_kernel_name(""), None);
}

#[test]
fn a_services_annotated_scheduler_runs_when_the_operator_allows_it() {
    let annotated = |scheduler: &str, flags: Option<(&str, SchedulerFlags)>| {
        let scheduling = ServiceScheduling {
            scheduler: Some(scheduler.into()),
            flags: flags.map(|(for_, f)| (for_.into(), f)),
        };
        svc(move |s| s.scheduling = Some(scheduling))
    };
    let first_vs = |ctx: NodeContext, svc: ServicePortInfo| {
        let mut svcs = ServicePortMap::new();
        svcs.insert(name("web"), Arc::new(svc));
        let mut state = DesiredState::new(ctx);
        state.update(&svcs, &EndpointsMap::new(), &[name("web")]);
        let service = state.service(&name("web")).expect("computed");
        let vs = &service.virtual_servers[0];
        (vs.scheduling.to_string(), service.refused_scheduler.clone())
    };
    assert_eq!(
        first_vs(ctx(|_| {}), annotated("mh", None)),
        ("mh (mh-port)".to_owned(), None)
    );
    assert_eq!(
        first_vs(
            ctx(|_| {}),
            annotated("mh", Some(("mh", SchedulerFlags::FALLBACK)))
        ),
        ("mh (mh-fallback)".to_owned(), None)
    );
    // Outside the operator's list: the node's scheduler, said why.
    let only_rr = |c: &mut NodeContext| {
        c.schedulers.allowed = ["rr".into()].into();
    };
    let (scheduling, refused) = first_vs(ctx(only_rr), annotated("sh", None));
    assert_eq!(scheduling, "rr");
    assert_eq!(
        refused,
        Some(RefusedScheduler {
            scheduler: "sh".into(),
            why: Refusal::NotAllowed
        })
    );
    // The node's own scheduler is always allowed; one the kernel lacks is
    // refused.
    let mh_node = |c: &mut NodeContext| {
        c.schedulers.scheduler = "mh".into();
        c.schedulers.allowed.clear();
        c.schedulers.missing = ["twos".into()].into();
    };
    assert_eq!(first_vs(ctx(mh_node), annotated("mh", None)).1, None);
    let (scheduling, refused) = first_vs(
        ctx(|c| c.schedulers.missing = ["twos".into()].into()),
        annotated("twos", None),
    );
    assert_eq!(scheduling, "rr");
    assert_eq!(refused.map(|r| r.why), Some(Refusal::NotInKernel));
    // Without annotations: the node's, flags as chosen.
    let chosen = |c: &mut NodeContext| {
        c.schedulers.scheduler = "mh".into();
        c.schedulers.flags = FlagChoice::parse("mh-fallback,mh-port").unwrap();
    };
    assert_eq!(
        first_vs(ctx(chosen), svc(|_| {})),
        ("mh (mh-fallback,mh-port)".to_owned(), None)
    );
}
