use std::{
    collections::BTreeMap,
    time::{Duration, SystemTime},
};

use k8s_openapi::api::{
    core::v1::{
        ClientIPConfig, LoadBalancerIngress, LoadBalancerStatus, NodeAddress,
        NodeStatus, Service, ServiceStatus, SessionAffinityConfig, Taint,
    },
    discovery::v1::{EndpointHints, ForNode, ForZone},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use pretty_assertions::assert_eq;

use super::*;
use crate::model::{
    fixtures::*, ANNOTATION_SCHEDULER, ANNOTATION_SCHEDULER_FLAGS,
};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

/// The port info `service()` + `add_port(.., 80, "TCP")` yields.
fn info(f: impl FnOnce(&mut ServicePortInfo)) -> ServicePortInfo {
    let mut info = ServicePortInfo {
        cluster_ips: vec![ip("198.18.0.1")],
        port: 80,
        protocol: Protocol::Tcp,
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
    f(&mut info);
    info
}

fn key(port: &str, protocol: Protocol) -> ServicePortName {
    ServicePortName::new("ns", "svc", port, protocol)
}

fn ingress(ip: &str, mode: Option<&str>) -> LoadBalancerIngress {
    LoadBalancerIngress {
        ip: (!ip.is_empty()).then(|| ip.to_owned()),
        ip_mode: mode.map(str::to_owned),
        hostname: ip.is_empty().then(|| "lb.example".to_owned()),
        ports: None,
    }
}

fn set_ingress(svc: &mut Service, ingress: Vec<LoadBalancerIngress>) {
    svc.status = Some(ServiceStatus {
        load_balancer: Some(LoadBalancerStatus {
            ingress: Some(ingress),
        }),
        conditions: None,
    });
}

fn affinity(svc: &mut Service, timeout: Option<i32>) {
    let spec = spec(svc);
    spec.session_affinity = Some("ClientIP".to_owned());
    spec.session_affinity_config = Some(SessionAffinityConfig {
        client_ip: Some(ClientIPConfig {
            timeout_seconds: timeout,
        }),
    });
}

struct ServiceCase {
    name: &'static str,
    svc: Service,
    ports: Vec<(ServicePortName, ServicePortInfo)>,
    problems: Vec<&'static str>,
}

#[test]
fn service_ports_table() {
    let http = |s: &mut Service| add_port(s, "http", 80, "TCP");
    let cases = vec![
        ServiceCase {
            name: "ExternalName is not proxied",
            svc: service("ns", "svc", |s| {
                http(s);
                spec(s).type_ = Some("ExternalName".to_owned());
            }),
            ports: vec![],
            problems: vec![],
        },
        ServiceCase {
            name: "headless is not proxied",
            svc: service("ns", "svc", |s| {
                http(s);
                set_cluster_ips(s, &["None"]);
            }),
            ports: vec![],
            problems: vec![],
        },
        ServiceCase {
            name: "unallocated cluster IP is not proxied",
            svc: service("ns", "svc", |s| {
                http(s);
                spec(s).cluster_ip = None;
                spec(s).cluster_ips = None;
            }),
            ports: vec![],
            problems: vec![],
        },
        ServiceCase {
            name: "TCP and UDP under one name are two keys",
            svc: service("ns", "svc", |s| {
                add_port(s, "dns", 53, "TCP");
                add_port(s, "dns", 53, "UDP");
            }),
            ports: vec![
                (key("dns", Protocol::Tcp), info(|i| i.port = 53)),
                (
                    key("dns", Protocol::Udp),
                    info(|i| {
                        i.port = 53;
                        i.protocol = Protocol::Udp;
                    }),
                ),
            ],
            problems: vec![],
        },
        ServiceCase {
            name: "absent protocol means TCP, absent name is empty",
            svc: service("ns", "svc", |s| {
                add_port(s, "", 80, "TCP");
                spec(s).ports.as_mut().unwrap()[0].protocol = None;
            }),
            ports: vec![(key("", Protocol::Tcp), info(|_| {}))],
            problems: vec![],
        },
        ServiceCase {
            name: "dual-stack cluster IPs, primary first",
            svc: service("ns", "svc", |s| {
                http(s);
                set_cluster_ips(s, &["2001:db8::1", "198.18.0.1"]);
            }),
            ports: vec![(
                key("http", Protocol::Tcp),
                info(|i| {
                    i.cluster_ips = vec![ip("2001:db8::1"), ip("198.18.0.1")]
                }),
            )],
            problems: vec![],
        },
        ServiceCase {
            name: "only clusterIP set (no clusterIPs list)",
            svc: service("ns", "svc", |s| {
                http(s);
                spec(s).cluster_ips = None;
            }),
            ports: vec![(key("http", Protocol::Tcp), info(|_| {}))],
            problems: vec![],
        },
        ServiceCase {
            name: "bad secondary cluster IP drops that family only",
            svc: service("ns", "svc", |s| {
                http(s);
                set_cluster_ips(s, &["198.18.0.1", "2001:db8::zz"]);
            }),
            ports: vec![(key("http", Protocol::Tcp), info(|_| {}))],
            problems: vec!["invalid_ip"],
        },
        ServiceCase {
            name: "no parsable cluster IP skips the service",
            svc: service("ns", "svc", |s| {
                http(s);
                set_cluster_ips(s, &["198.18.0.300"]);
            }),
            ports: vec![],
            problems: vec!["invalid_ip", "no_cluster_ip"],
        },
        ServiceCase {
            name: "load balancer: only VIP-mode ingress IPs",
            svc: service("ns", "svc", |s| {
                http(s);
                spec(s).type_ = Some("LoadBalancer".to_owned());
                spec(s).ports.as_mut().unwrap()[0].node_port = Some(30080);
                set_ingress(
                    s,
                    vec![
                        ingress("198.18.9.1", None),
                        ingress("198.18.9.2", Some("VIP")),
                        ingress("198.18.9.3", Some("Proxy")),
                        ingress("", None),
                        ingress("bogus", None),
                    ],
                );
            }),
            ports: vec![(
                key("http", Protocol::Tcp),
                info(|i| {
                    i.node_port = 30080;
                    i.is_load_balancer = true;
                    i.load_balancer_vips =
                        vec![ip("198.18.9.1"), ip("198.18.9.2")];
                }),
            )],
            problems: vec!["invalid_ip"],
        },
        ServiceCase {
            name: "source ranges are trimmed and masked; bad ones skipped",
            svc: service("ns", "svc", |s| {
                http(s);
                spec(s).type_ = Some("LoadBalancer".to_owned());
                spec(s).load_balancer_source_ranges = Some(vec![
                    " 198.18.5.0/24 ".to_owned(),
                    "198.18.6.7/24".to_owned(),
                    "not-a-cidr".to_owned(),
                ]);
            }),
            ports: vec![(
                key("http", Protocol::Tcp),
                info(|i| {
                    i.is_load_balancer = true;
                    i.load_balancer_source_ranges =
                        vec![net("198.18.5.0/24"), net("198.18.6.0/24")];
                }),
            )],
            problems: vec!["invalid_cidr"],
        },
        ServiceCase {
            name:
                "ETP=Local ignored on a ClusterIP service without externalIPs",
            svc: service("ns", "svc", |s| {
                http(s);
                spec(s).external_traffic_policy = Some("Local".to_owned());
            }),
            ports: vec![(key("http", Protocol::Tcp), info(|_| {}))],
            problems: vec![],
        },
        ServiceCase {
            name: "ETP=Local applies to a ClusterIP service with externalIPs",
            svc: service("ns", "svc", |s| {
                http(s);
                spec(s).external_traffic_policy = Some("Local".to_owned());
                spec(s).external_ips =
                    Some(vec!["198.18.7.1".to_owned(), "nope".to_owned()]);
            }),
            ports: vec![(
                key("http", Protocol::Tcp),
                info(|i| {
                    i.external_ips = vec![ip("198.18.7.1")];
                    i.external_policy_local = true;
                }),
            )],
            problems: vec!["invalid_ip"],
        },
        ServiceCase {
            name: "ETP=Local NodePort: no health check node port",
            svc: service("ns", "svc", |s| {
                http(s);
                spec(s).type_ = Some("NodePort".to_owned());
                spec(s).external_traffic_policy = Some("Local".to_owned());
                spec(s).health_check_node_port = Some(31000);
                spec(s).ports.as_mut().unwrap()[0].node_port = Some(30080);
            }),
            ports: vec![(
                key("http", Protocol::Tcp),
                info(|i| {
                    i.node_port = 30080;
                    i.external_policy_local = true;
                }),
            )],
            problems: vec![],
        },
        ServiceCase {
            name: "ETP=Local load balancer has its health check node port",
            svc: service("ns", "svc", |s| {
                http(s);
                spec(s).type_ = Some("LoadBalancer".to_owned());
                spec(s).external_traffic_policy = Some("Local".to_owned());
                spec(s).health_check_node_port = Some(31000);
            }),
            ports: vec![(
                key("http", Protocol::Tcp),
                info(|i| {
                    i.is_load_balancer = true;
                    i.external_policy_local = true;
                    i.health_check_node_port = 31000;
                }),
            )],
            problems: vec![],
        },
        ServiceCase {
            name: "ITP=Local",
            svc: service("ns", "svc", |s| {
                http(s);
                spec(s).internal_traffic_policy = Some("Local".to_owned());
            }),
            ports: vec![(
                key("http", Protocol::Tcp),
                info(|i| i.internal_policy_local = true),
            )],
            problems: vec![],
        },
        ServiceCase {
            name: "ClientIP affinity without timeout uses the default",
            svc: service("ns", "svc", |s| {
                http(s);
                affinity(s, None);
            }),
            ports: vec![(
                key("http", Protocol::Tcp),
                info(|i| i.session_affinity_timeout = Some(10_800)),
            )],
            problems: vec![],
        },
        ServiceCase {
            name: "ClientIP affinity with a timeout",
            svc: service("ns", "svc", |s| {
                http(s);
                affinity(s, Some(300));
            }),
            ports: vec![(
                key("http", Protocol::Tcp),
                info(|i| i.session_affinity_timeout = Some(300)),
            )],
            problems: vec![],
        },
        ServiceCase {
            name: "out-of-range affinity timeout falls back to the default",
            svc: service("ns", "svc", |s| {
                http(s);
                affinity(s, Some(0));
            }),
            ports: vec![(
                key("http", Protocol::Tcp),
                info(|i| i.session_affinity_timeout = Some(10_800)),
            )],
            problems: vec!["invalid_affinity_timeout"],
        },
        ServiceCase {
            name: "bad port, node port and protocol skip only that port",
            svc: service("ns", "svc", |s| {
                http(s);
                add_port(s, "big", 70_000, "TCP");
                add_port(s, "zero", 0, "TCP");
                add_port(s, "icmp", 1, "ICMP");
                add_port(s, "np", 81, "TCP");
                spec(s).ports.as_mut().unwrap()[4].node_port = Some(-1);
            }),
            ports: vec![(key("http", Protocol::Tcp), info(|_| {}))],
            problems: vec![
                "invalid_port",
                "invalid_port",
                "unknown_protocol",
                "invalid_port",
            ],
        },
        ServiceCase {
            name: "scheduling annotations, a bad one left out and named",
            svc: service("ns", "svc", |s| {
                http(s);
                s.metadata.annotations = Some(BTreeMap::from([
                    (ANNOTATION_SCHEDULER.to_owned(), "mh".to_owned()),
                    (
                        ANNOTATION_SCHEDULER_FLAGS.to_owned(),
                        "mh-fallback,sh-port".to_owned(),
                    ),
                ]));
            }),
            ports: vec![(
                key("http", Protocol::Tcp),
                info(|i| {
                    i.scheduling = Some(ServiceScheduling {
                        scheduler: Some("mh".into()),
                        flags: None,
                    })
                }),
            )],
            problems: vec!["invalid_scheduling_annotation"],
        },
    ];
    for case in cases {
        let converted = service_ports(&case.svc);
        assert_eq!(converted.value, case.ports, "{}", case.name);
        let labels: Vec<_> = converted
            .problems
            .iter()
            .map(|p| p.reason.metric_label())
            .collect();
        assert_eq!(labels, case.problems, "{}", case.name);
        for problem in &converted.problems {
            assert_eq!(problem.kind, ObjectKind::Service, "{}", case.name);
            assert_eq!(
                problem.object,
                NamespacedName::new("ns", "svc"),
                "{}",
                case.name
            );
        }
    }
}

#[test]
fn problem_message_names_object_field_and_value() {
    let svc = service("ns", "svc", |s| add_port(s, "big", 70_000, "TCP"));
    let problems = service_ports(&svc).problems;
    assert_eq!(
        problems.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        ["Service ns/svc: spec.ports[0].port: 70000 is not a valid port number"]
    );
}

/// An endpoint as the slices' port 8080 carries it.
fn slice_endpoint(
    ip: &str,
    f: impl FnOnce(&mut EndpointInfo),
) -> std::sync::Arc<EndpointInfo> {
    let mut info = EndpointInfo {
        ip: ip.parse().unwrap(),
        port: 8080,
        is_local: false,
        node_name: None,
        ready: true,
        serving: true,
        terminating: false,
        zone_hints: Default::default(),
        node_hints: Default::default(),
    };
    f(&mut info);
    std::sync::Arc::new(info)
}

#[test]
fn endpoint_slice_conditions_locality_and_hints() {
    let slice = slice("ns", "svc-abc", "svc", |s| {
        add_slice_port(s, "http", 8080, "TCP");
        s.endpoints = Some(vec![
            endpoint("198.19.0.1", |_| {}),
            endpoint("198.19.0.2", |e| {
                e.conditions = conditions(Some(false), None, None);
                e.node_name = Some("node-a".to_owned());
            }),
            endpoint("198.19.0.3", |e| {
                e.conditions = conditions(Some(false), Some(true), Some(true));
                e.node_name = Some("node-b".to_owned());
                e.hints = Some(EndpointHints {
                    for_zones: Some(vec![ForZone {
                        name: "zone-a".to_owned(),
                    }]),
                    for_nodes: Some(vec![ForNode {
                        name: "node-b".to_owned(),
                    }]),
                });
            }),
            endpoint("198.19.0.4", |e| {
                e.addresses.push("198.19.0.44".to_owned());
            }),
        ]);
    });
    let converted = endpoint_slice_info(&slice, "node-a");
    assert_eq!(converted.problems, vec![]);
    let info = converted.value.unwrap();
    assert_eq!(info.service, NamespacedName::new("ns", "svc"));
    assert_eq!(info.name, "svc-abc");
    assert_eq!(
        info.ports,
        vec![SlicePort {
            name: "http".to_owned(),
            protocol: Protocol::Tcp,
            port: 8080
        }]
    );
    assert_eq!(
        info.endpoints,
        vec![vec![
            slice_endpoint("198.19.0.1", |_| {}),
            // nil serving counts as true even when not ready, as upstream.
            slice_endpoint("198.19.0.2", |e| {
                e.ready = false;
                e.is_local = true;
                e.node_name = Some("node-a".into());
            }),
            slice_endpoint("198.19.0.3", |e| {
                e.ready = false;
                e.terminating = true;
                e.node_name = Some("node-b".into());
                e.zone_hints = ["zone-a".to_owned()].into();
                e.node_hints = ["node-b".to_owned()].into();
            }),
            slice_endpoint("198.19.0.4", |_| {}),
        ]]
    );
}

#[test]
fn endpoint_slice_problems_skip_smallest_unit() {
    let slice = slice("ns", "svc-abc", "svc", |s| {
        add_slice_port(s, "http", 8080, "TCP");
        add_slice_port(s, "big", 65_536, "TCP");
        add_slice_port(s, "zero", 0, "TCP");
        add_slice_port(s, "raw", 1, "ICMP");
        s.ports.as_mut().unwrap().push(Default::default());
        s.endpoints = Some(vec![
            endpoint("198.19.0.1", |_| {}),
            endpoint("198.19.0.x", |_| {}),
            endpoint("198.19.0.2", |e| e.addresses.clear()),
            // Upstream ignores an endpoint of the other family (found by
            // fuzzing: the API side and a direct proxy disagreed on one).
            endpoint("2001:db8::1", |_| {}),
        ]);
    });
    let converted = endpoint_slice_info(&slice, "node-a");
    let labels: Vec<_> = converted
        .problems
        .iter()
        .map(|p| p.reason.metric_label())
        .collect();
    assert_eq!(
        labels,
        [
            "invalid_port",
            "invalid_port",
            "unknown_protocol",
            "unnamed_port",
            "invalid_ip",
            "no_address",
            "address_family"
        ]
    );
    assert_eq!(
        converted.problems[6].to_string(),
        "EndpointSlice ns/svc-abc: endpoints[3].addresses[0]: 2001:db8::1 is \
         not of the slice's addressType IPv4, skipped"
    );
    let info = converted.value.unwrap();
    assert_eq!(info.ports.len(), 1);
    assert_eq!(
        info.endpoints,
        vec![vec![slice_endpoint("198.19.0.1", |_| {})]]
    );
}

#[test]
fn endpoint_slice_ignored_wholesale() {
    let fqdn = slice("ns", "s", "svc", |s| s.address_type = "FQDN".to_owned());
    let converted = endpoint_slice_info(&fqdn, "n");
    assert_eq!(
        converted.value,
        Err(SliceIgnored::UnsupportedAddressType("FQDN".to_owned()))
    );
    assert_eq!(converted.problems, vec![]);

    let unlabelled = slice("ns", "s", "svc", |s| s.metadata.labels = None);
    let converted = endpoint_slice_info(&unlabelled, "n");
    assert_eq!(converted.value, Err(SliceIgnored::NoService));
    assert_eq!(converted.problems.len(), 1);
    assert_eq!(
        converted.problems[0].reason,
        InvalidReason::MissingServiceName
    );
}

#[test]
fn endpoint_not_local_when_node_name_unknown() {
    let slice = slice("ns", "s", "svc", |s| {
        add_slice_port(s, "http", 8080, "TCP");
        s.endpoints = Some(vec![endpoint("198.19.0.1", |e| {
            e.node_name = Some(String::new())
        })]);
    });
    let info = endpoint_slice_info(&slice, "").value.unwrap();
    assert!(!info.endpoints[0][0].is_local);
}

#[test]
fn trigger_time_parsing() {
    let with = |value: &str| {
        slice("ns", "s", "svc", |s| {
            s.metadata.annotations = Some(BTreeMap::from([(
                ANNOTATION_LAST_CHANGE_TRIGGER_TIME.to_owned(),
                value.to_owned(),
            )]))
        })
    };
    let parsed = last_change_trigger_time(&with("2026-01-02T03:04:05.5Z"));
    assert_eq!(
        parsed.value,
        Some(
            SystemTime::UNIX_EPOCH
                + Duration::from_secs(1_767_323_045)
                + Duration::from_millis(500)
        )
    );
    assert!(parsed.problems.is_empty());
    let bad = last_change_trigger_time(&with("yesterday"));
    assert_eq!(bad.value, None);
    assert_eq!(
        bad.problems[0].reason.metric_label(),
        "invalid_trigger_time"
    );
    let none = last_change_trigger_time(&slice("ns", "s", "svc", |_| {}));
    assert_eq!(
        none,
        Converted {
            value: None,
            problems: vec![]
        }
    );
}

fn address(kind: &str, ip: &str) -> NodeAddress {
    NodeAddress {
        type_: kind.to_owned(),
        address: ip.to_owned(),
    }
}

#[test]
fn node_info_table() {
    struct Case {
        name: &'static str,
        node: k8s_openapi::api::core::v1::Node,
        expected: NodeInfo,
        problems: usize,
    }
    let expected = |f: fn(&mut NodeInfo)| {
        let mut info = NodeInfo {
            name: "node-a".to_owned(),
            pod_cidrs: vec![],
            zone: String::new(),
            addresses: vec![],
            eligible: true,
        };
        f(&mut info);
        info
    };
    let cases = vec![
        Case {
            name: "bare node",
            node: node("node-a", |_| {}),
            expected: expected(|_| {}),
            problems: 0,
        },
        Case {
            name: "pod CIDRs, zone, InternalIP before ExternalIP",
            node: node("node-a", |n| {
                let spec = n.spec.as_mut().unwrap();
                spec.pod_cidrs = Some(vec![
                    "198.19.1.0/24".to_owned(),
                    "2001:db8:1::/64".to_owned(),
                ]);
                spec.pod_cidr = Some("198.19.1.0/24".to_owned());
                n.metadata.labels = Some(BTreeMap::from([(
                    LABEL_TOPOLOGY_ZONE.to_owned(),
                    "zone-a".to_owned(),
                )]));
                n.status = Some(NodeStatus {
                    addresses: Some(vec![
                        address("Hostname", "node-a"),
                        address("ExternalIP", "198.18.100.1"),
                        address("InternalIP", "198.18.200.1"),
                        address("InternalIP", "not-an-ip"),
                    ]),
                    ..NodeStatus::default()
                });
            }),
            expected: expected(|i| {
                i.pod_cidrs =
                    vec![net("198.19.1.0/24"), net("2001:db8:1::/64")];
                i.zone = "zone-a".to_owned();
                i.addresses = vec![ip("198.18.200.1"), ip("198.18.100.1")];
            }),
            problems: 1,
        },
        Case {
            name: "legacy podCIDR only",
            node: node("node-a", |n| {
                n.spec.as_mut().unwrap().pod_cidr =
                    Some("198.19.2.0/24".to_owned());
            }),
            expected: expected(|i| i.pod_cidrs = vec![net("198.19.2.0/24")]),
            problems: 0,
        },
        Case {
            name: "being deleted is not eligible",
            node: node("node-a", |n| {
                n.metadata.deletion_timestamp =
                    Some(Time("2026-01-01T00:00:00Z".parse().unwrap()));
            }),
            expected: expected(|i| i.eligible = false),
            problems: 0,
        },
        Case {
            name: "autoscaler taint is not eligible",
            node: node("node-a", |n| {
                n.spec.as_mut().unwrap().taints = Some(vec![Taint {
                    key: TAINT_TO_BE_DELETED.to_owned(),
                    effect: "NoSchedule".to_owned(),
                    ..Taint::default()
                }]);
            }),
            expected: expected(|i| i.eligible = false),
            problems: 0,
        },
    ];
    for case in cases {
        let converted = node_info(&case.node);
        assert_eq!(converted.value, case.expected, "{}", case.name);
        assert_eq!(converted.problems.len(), case.problems, "{}", case.name);
    }
}

fn reasons(problems: &[InvalidObject]) -> Vec<&InvalidReason> {
    problems.iter().map(|p| &p.reason).collect()
}

/// A Service named without a namespace (found by fuzzing: the direct
/// proxy programmed it, the node-view stream refused it) is skipped as a
/// slice is.
#[test]
fn service_without_namespace_or_name_is_ignored() {
    for (namespace, name) in [("", "svc"), ("ns", "")] {
        let svc = service(namespace, name, |s| add_port(s, "dns", 53, "UDP"));
        let converted = service_ports(&svc);
        assert_eq!(converted.value, Vec::new());
        assert_eq!(reasons(&converted.problems), [&InvalidReason::MissingName]);
    }
    let named = service("ns", "svc", |s| add_port(s, "dns", 53, "UDP"));
    assert_eq!(service_ports(&named).value.len(), 1);
}

#[test]
fn endpoint_slice_without_namespace_or_name_is_ignored() {
    for (namespace, name) in [("", "s"), ("ns", "")] {
        let slice = slice(namespace, name, "svc", |_| {});
        let converted = endpoint_slice_info(&slice, "n");
        assert_eq!(converted.value, Err(SliceIgnored::NoService));
        assert_eq!(reasons(&converted.problems), [&InvalidReason::MissingName]);
    }
}
