use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{
    api::{
        core::v1::{
            Container, ContainerPort, Node, ObjectReference, Pod, PodCondition,
            PodIP, PodSpec, PodStatus, Service, ServicePort, ServiceSpec,
        },
        discovery::v1::{
            Endpoint, EndpointConditions, EndpointPort, EndpointSlice,
        },
    },
    apimachinery::pkg::{
        apis::meta::v1::{ObjectMeta, OwnerReference, Time},
        util::intstr::IntOrString,
    },
    jiff::Timestamp,
};
use pretty_assertions::assert_eq;

use super::*;

// ---- builders ----

type PodTweak = Box<dyn Fn(&mut Pod)>;
type SpecTweak = Box<dyn Fn(&mut ServiceSpec)>;
type PortTweak = Box<dyn Fn(&mut ServicePort)>;
type SliceTweak = Box<dyn Fn(&mut EndpointSlice)>;
/// (port name, port number) pairs of a slice.
type Ports = Vec<(String, i32)>;

fn labels(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

fn service_port(name: &str, port: i32, target: IntOrString) -> ServicePort {
    ServicePort {
        name: Some(name.to_owned()),
        port,
        protocol: Some("TCP".to_owned()),
        target_port: Some(target),
        ..ServicePort::default()
    }
}

/// `ns/web`, selecting `app=web`, IPv4, port `http` 80 → named `http`.
fn service(f: impl FnOnce(&mut Service)) -> Service {
    let mut s = Service {
        metadata: ObjectMeta {
            namespace: Some("ns".to_owned()),
            name: Some("web".to_owned()),
            uid: Some("svc-uid".to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            selector: labels(&[("app", "web")]),
            cluster_ip: Some("198.18.0.10".to_owned()),
            cluster_ips: Some(vec!["198.18.0.10".to_owned()]),
            ip_families: Some(vec!["IPv4".to_owned()]),
            ports: Some(vec![service_port(
                "http",
                80,
                IntOrString::String("http".to_owned()),
            )]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    f(&mut s);
    s
}

fn spec(s: &mut Service) -> &mut ServiceSpec {
    s.spec.get_or_insert_with(ServiceSpec::default)
}

fn container_port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_owned()),
        container_port: port,
        protocol: Some("TCP".to_owned()),
        ..ContainerPort::default()
    }
}

/// A ready, running `ns/<name>` pod labelled `app=web` on `node-a`, with a
/// container port `http` 8080.
fn pod(name: &str, ips: &[&str], f: impl FnOnce(&mut Pod)) -> Pod {
    let mut p = Pod {
        metadata: ObjectMeta {
            namespace: Some("ns".to_owned()),
            name: Some(name.to_owned()),
            uid: Some(format!("uid-{name}")),
            labels: labels(&[("app", "web")]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some("node-a".to_owned()),
            containers: vec![Container {
                name: "app".to_owned(),
                ports: Some(vec![container_port("http", 8080)]),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".to_owned()),
            pod_ip: ips.first().map(|ip| (*ip).to_owned()),
            pod_ips: Some(
                ips.iter()
                    .map(|ip| PodIP {
                        ip: (*ip).to_owned(),
                    })
                    .collect(),
            ),
            conditions: Some(vec![PodCondition {
                type_: "Ready".to_owned(),
                status: "True".to_owned(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        }),
    };
    f(&mut p);
    p
}

fn pod_spec(p: &mut Pod) -> &mut PodSpec {
    p.spec.get_or_insert_with(PodSpec::default)
}

fn pod_status(p: &mut Pod) -> &mut PodStatus {
    p.status.get_or_insert_with(PodStatus::default)
}

fn set_ready(p: &mut Pod, ready: bool) {
    let status = if ready { "True" } else { "False" };
    pod_status(p).conditions = Some(vec![PodCondition {
        type_: "Ready".to_owned(),
        status: status.to_owned(),
        ..PodCondition::default()
    }]);
}

fn set_terminating(p: &mut Pod) {
    p.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
}

/// `count` ready pods `pod-<i>` with IPs 198.19.x.y.
fn many_pods(count: usize) -> Vec<Pod> {
    (0..count)
        .map(|i| {
            let ip = format!("198.19.{}.{}", i / 250, i % 250 + 1);
            pod(&format!("pod-{i:03}"), &[ip.as_str()], |_| {})
        })
        .collect()
}

fn node(name: &str, zone: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: labels(&[("topology.kubernetes.io/zone", zone)]),
            ..ObjectMeta::default()
        },
        ..Node::default()
    }
}

fn nodes() -> Vec<Node> {
    vec![node("node-a", "zone-a"), node("node-b", "zone-b")]
}

fn config(max: usize) -> ReconcileConfig {
    ReconcileConfig {
        max_endpoints_per_slice: max,
    }
}

fn run(svc: &Service, pods: &[Pod], existing: &[EndpointSlice]) -> Reconciled {
    reconcile(svc, pods, &nodes(), existing, &ReconcileConfig::default())
}

fn desired(svc: &Service, pods: &[Pod]) -> Vec<EndpointSlice> {
    let (slices, errors) =
        desired_slices(svc, pods, &nodes(), &[], &ReconcileConfig::default());
    assert_eq!(errors, vec![]);
    slices
}

fn name_of(s: &EndpointSlice) -> &str {
    s.metadata.name.as_deref().unwrap_or_default()
}

/// Every address of the slice, in slice order.
fn addresses(s: &EndpointSlice) -> Vec<&str> {
    s.endpoints
        .iter()
        .flatten()
        .flat_map(|e| e.addresses.iter().map(String::as_str))
        .collect()
}

fn port_numbers(s: &EndpointSlice) -> Ports {
    s.ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap_or_default(), p.port.unwrap_or(-1)))
        .collect()
}

fn conditions(e: &Endpoint) -> (bool, bool, bool) {
    let c = e.conditions.clone().unwrap_or_default();
    (
        c.ready.unwrap_or(false),
        c.serving.unwrap_or(false),
        c.terminating.unwrap_or(false),
    )
}

/// The only endpoint of the only slice created.
fn only_endpoint(r: &Reconciled) -> Endpoint {
    assert_eq!(r.to_create.len(), 1, "{r:#?}");
    let eps = endpoints(&r.to_create[0]);
    assert_eq!(eps.len(), 1, "{eps:#?}");
    eps[0].clone()
}

// ---- pod → endpoint ----

#[test]
fn ready_pod_becomes_endpoint_with_node_zone_and_target_ref() {
    let r = run(&service(|_| {}), &[pod("a", &["198.19.0.1"], |_| {})], &[]);
    assert_eq!(r.errors, vec![]);
    assert_eq!(
        only_endpoint(&r),
        Endpoint {
            addresses: vec!["198.19.0.1".to_owned()],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                serving: Some(true),
                terminating: Some(false),
            }),
            node_name: Some("node-a".to_owned()),
            zone: Some("zone-a".to_owned()),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".to_owned()),
                namespace: Some("ns".to_owned()),
                name: Some("a".to_owned()),
                uid: Some("uid-a".to_owned()),
                ..ObjectReference::default()
            }),
            ..Endpoint::default()
        }
    );
}

#[test]
fn created_slice_carries_labels_owner_ports_and_address_type() {
    let r = run(
        &service(|s| {
            s.metadata.labels = labels(&[
                ("team", "blue"),
                // Reserved: the controller's own value wins.
                (LABEL_SERVICE_NAME, "spoofed"),
            ]);
        }),
        &[pod("a", &["198.19.0.1"], |_| {})],
        &[],
    );
    let slice = &r.to_create[0];
    assert_eq!(slice.address_type, "IPv4");
    assert_eq!(slice.metadata.namespace.as_deref(), Some("ns"));
    assert!(name_of(slice).starts_with("web-"), "{}", name_of(slice));
    assert_eq!(name_of(slice).len(), "web-".len() + 5);
    assert_eq!(
        slice.metadata.labels,
        labels(&[
            ("team", "blue"),
            (LABEL_SERVICE_NAME, "web"),
            (LABEL_MANAGED_BY, CONTROLLER_NAME),
        ])
    );
    assert_eq!(
        slice.metadata.owner_references,
        Some(vec![OwnerReference {
            api_version: "v1".to_owned(),
            kind: "Service".to_owned(),
            name: "web".to_owned(),
            uid: "svc-uid".to_owned(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }])
    );
    assert_eq!(
        slice.ports,
        Some(vec![EndpointPort {
            name: Some("http".to_owned()),
            port: Some(8080),
            protocol: Some("TCP".to_owned()),
            app_protocol: None,
        }])
    );
}

#[test]
fn service_without_uid_gets_slices_without_owner_reference() {
    let svc = service(|s| s.metadata.uid = None);
    let r = run(&svc, &[pod("a", &["198.19.0.1"], |_| {})], &[]);
    assert_eq!(r.to_create[0].metadata.owner_references, None);
    // And the slices it gets are still recognised as its own next time.
    let again = run(&svc, &[pod("a", &["198.19.0.1"], |_| {})], &r.to_create);
    assert!(again.is_noop(), "{again:#?}");
}

#[test]
fn headless_service_slices_carry_the_headless_label() {
    let svc = service(|s| {
        spec(s).cluster_ip = Some("None".to_owned());
        spec(s).cluster_ips = Some(vec!["None".to_owned()]);
    });
    let r = run(&svc, &[pod("a", &["198.19.0.1"], |_| {})], &[]);
    let labels = r.to_create[0].metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(LABEL_HEADLESS).map(String::as_str), Some(""));
}

#[test]
fn not_ready_pod_is_published_with_ready_false() {
    let r = run(
        &service(|_| {}),
        &[pod("a", &["198.19.0.1"], |p| set_ready(p, false))],
        &[],
    );
    assert_eq!(conditions(&only_endpoint(&r)), (false, false, false));
}

#[test]
fn publish_not_ready_addresses_marks_not_ready_pods_ready() {
    let svc = service(|s| spec(s).publish_not_ready_addresses = Some(true));
    let r = run(
        &svc,
        &[pod("a", &["198.19.0.1"], |p| set_ready(p, false))],
        &[],
    );
    assert_eq!(conditions(&only_endpoint(&r)), (true, false, false));
}

#[test]
fn terminating_pod_is_kept_with_terminating_true_and_serving_from_readiness() {
    // (pod ready, publishNotReadyAddresses) → (ready, serving, terminating)
    let cases = [
        ((true, false), (false, true, true)),
        ((false, false), (false, false, true)),
        ((true, true), (true, true, true)),
        ((false, true), (true, false, true)),
    ];
    for ((ready, publish), want) in cases {
        let svc =
            service(|s| spec(s).publish_not_ready_addresses = Some(publish));
        let p = pod("a", &["198.19.0.1"], |p| {
            set_ready(p, ready);
            set_terminating(p);
        });
        let r = run(&svc, &[p], &[]);
        assert_eq!(
            conditions(&only_endpoint(&r)),
            want,
            "ready={ready} publish={publish}"
        );
    }
}

#[test]
fn pods_that_should_not_be_endpoints_are_left_out() {
    let cases: Vec<(&str, PodTweak)> = vec![
        (
            "succeeded",
            Box::new(|p| pod_status(p).phase = Some("Succeeded".into())),
        ),
        (
            "failed",
            Box::new(|p| pod_status(p).phase = Some("Failed".into())),
        ),
        (
            "no ip yet",
            Box::new(|p| {
                pod_status(p).pod_ip = None;
                pod_status(p).pod_ips = None;
            }),
        ),
        ("no status", Box::new(|p| p.status = None)),
        (
            "not selected",
            Box::new(|p| p.metadata.labels = labels(&[("app", "db")])),
        ),
        ("no labels", Box::new(|p| p.metadata.labels = None)),
        (
            "other namespace",
            Box::new(|p| p.metadata.namespace = Some("other".into())),
        ),
    ];
    for (case, f) in cases {
        let kept = pod("kept", &["198.19.0.1"], |_| {});
        let left_out = pod("left-out", &["198.19.0.2"], |p| f(p));
        let r = run(&service(|_| {}), &[kept, left_out], &[]);
        assert_eq!(r.to_create.len(), 1, "{case}");
        assert_eq!(addresses(&r.to_create[0]), vec!["198.19.0.1"], "{case}");
        assert_eq!(r.errors, vec![], "{case}");
    }
}

#[test]
fn pod_ip_stands_in_for_missing_pod_ips() {
    let p = pod("a", &["198.19.0.1"], |p| pod_status(p).pod_ips = None);
    let r = run(&service(|_| {}), &[p], &[]);
    assert_eq!(addresses(&r.to_create[0]), vec!["198.19.0.1"]);
}

#[test]
fn invalid_pod_ip_is_reported_and_the_pod_left_out() {
    let bad = pod("bad", &["198.19.0.300"], |_| {});
    let good = pod("good", &["198.19.0.2"], |_| {});
    let r = run(&service(|_| {}), &[bad, good], &[]);
    assert_eq!(addresses(&r.to_create[0]), vec!["198.19.0.2"]);
    assert_eq!(
        r.errors,
        vec![ReconcileError::InvalidPodIp {
            service: "ns/web".to_owned(),
            pod: "ns/bad".to_owned(),
            ip: "198.19.0.300".to_owned(),
        }]
    );
    assert_eq!(r.errors[0].metric_label(), "invalid_pod_ip");
}

#[test]
fn hostname_is_set_only_when_subdomain_names_the_service() {
    // (hostname, subdomain) → endpoint hostname
    let cases = [
        (Some("db-0"), Some("web"), Some("db-0")),
        (Some("db-0"), Some("other"), None),
        (Some("db-0"), None, None),
        (None, Some("web"), None),
        (Some(""), Some("web"), None),
    ];
    for (hostname, subdomain, want) in cases {
        let p = pod("a", &["198.19.0.1"], |p| {
            pod_spec(p).hostname = hostname.map(str::to_owned);
            pod_spec(p).subdomain = subdomain.map(str::to_owned);
        });
        let r = run(&service(|_| {}), &[p], &[]);
        assert_eq!(
            only_endpoint(&r).hostname.as_deref(),
            want,
            "{hostname:?} {subdomain:?}"
        );
    }
}

#[test]
fn node_without_zone_label_gives_no_zone() {
    let bare = Node {
        metadata: ObjectMeta {
            name: Some("node-a".to_owned()),
            ..ObjectMeta::default()
        },
        ..Node::default()
    };
    let r = reconcile(
        &service(|_| {}),
        &[pod("a", &["198.19.0.1"], |_| {})],
        &[bare],
        &[],
        &ReconcileConfig::default(),
    );
    let ep = only_endpoint(&r);
    assert_eq!(ep.zone, None);
    assert_eq!(ep.node_name.as_deref(), Some("node-a"));
}

#[test]
fn pod_on_missing_node_is_skipped_with_error_and_others_are_kept() {
    let lost = pod("lost", &["198.19.0.1"], |p| {
        pod_spec(p).node_name = Some("node-gone".to_owned());
    });
    let kept = pod("kept", &["198.19.0.2"], |_| {});
    let r = run(&service(|_| {}), &[lost, kept], &[]);
    assert_eq!(r.to_create.len(), 1);
    assert_eq!(addresses(&r.to_create[0]), vec!["198.19.0.2"]);
    assert_eq!(
        r.errors,
        vec![ReconcileError::NodeNotFound {
            service: "ns/web".to_owned(),
            pod: "ns/lost".to_owned(),
            node: "node-gone".to_owned(),
        }]
    );
    assert_eq!(
        r.errors[0].to_string(),
        "skipping Pod ns/lost for Service ns/web: Node \"node-gone\" not found"
    );
}

#[test]
fn pod_on_missing_node_is_published_when_service_publishes_not_ready() {
    let svc = service(|s| spec(s).publish_not_ready_addresses = Some(true));
    let lost = pod("lost", &["198.19.0.1"], |p| {
        pod_spec(p).node_name = Some("node-gone".to_owned());
    });
    let r = run(&svc, &[lost], &[]);
    assert_eq!(r.errors, vec![]);
    let ep = only_endpoint(&r);
    assert_eq!(ep.node_name.as_deref(), Some("node-gone"));
    assert_eq!(ep.zone, None);
}

#[test]
fn dual_stack_pod_on_missing_node_is_reported_once() {
    let svc = service(|s| {
        spec(s).ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
    });
    let lost = pod("lost", &["198.19.0.1", "2001:db8::1"], |p| {
        pod_spec(p).node_name = Some("node-gone".to_owned());
    });
    assert_eq!(run(&svc, &[lost], &[]).errors.len(), 1);
}

// ---- ports ----

#[test]
fn named_target_port_resolves_per_pod_and_splits_slices() {
    let on_9090 = |p: &mut Pod| {
        pod_spec(p).containers[0].ports =
            Some(vec![container_port("http", 9090)]);
    };
    let pods = [
        pod("a", &["198.19.0.1"], |_| {}),
        pod("b", &["198.19.0.2"], on_9090),
        pod("c", &["198.19.0.3"], |_| {}),
    ];
    let slices = desired(&service(|_| {}), &pods);
    let mut by_port: Vec<(Ports, Vec<&str>)> = slices
        .iter()
        .map(|s| (port_numbers(s), addresses(s)))
        .collect();
    by_port.sort();
    assert_eq!(
        by_port,
        vec![
            (
                vec![("http".into(), 8080)],
                vec!["198.19.0.1", "198.19.0.3"]
            ),
            (vec![("http".into(), 9090)], vec!["198.19.0.2"]),
        ]
    );
}

#[test]
fn unresolvable_named_port_is_omitted_for_that_pod_only() {
    let svc = service(|s| {
        spec(s).ports = Some(vec![
            service_port("http", 80, IntOrString::String("http".into())),
            service_port("metrics", 9100, IntOrString::Int(9100)),
        ]);
    });
    let pods = [
        pod("a", &["198.19.0.1"], |_| {}),
        pod("b", &["198.19.0.2"], |p| {
            pod_spec(p).containers[0].ports = None
        }),
    ];
    let mut got: Vec<_> = desired(&svc, &pods)
        .iter()
        .map(|s| (port_numbers(s), addresses(s).join(",")))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (
                vec![("http".into(), 8080), ("metrics".into(), 9100)],
                "198.19.0.1".to_owned()
            ),
            (vec![("metrics".into(), 9100)], "198.19.0.2".to_owned()),
        ]
    );
}

#[test]
fn target_port_resolution_follows_the_api_defaults() {
    let udp = |p: &mut ServicePort| p.protocol = Some("UDP".to_owned());
    // (service port tweak, container ports, resolved port)
    let cases: Vec<(&str, PortTweak, Option<i32>)> = vec![
        (
            "number",
            Box::new(|p| p.target_port = Some(IntOrString::Int(7000))),
            Some(7000),
        ),
        (
            "unset is the port",
            Box::new(|p| p.target_port = None),
            Some(80),
        ),
        (
            "zero is the port",
            Box::new(|p| p.target_port = Some(IntOrString::Int(0))),
            Some(80),
        ),
        (
            "empty name is the port",
            Box::new(|p| {
                p.target_port = Some(IntOrString::String(String::new()))
            }),
            Some(80),
        ),
        ("name", Box::new(|_| {}), Some(8080)),
        ("name with another protocol", Box::new(udp), None),
        (
            "unset protocol is TCP",
            Box::new(|p| p.protocol = None),
            Some(8080),
        ),
    ];
    for (case, tweak, want) in cases {
        let svc = service(|s| {
            let mut port =
                service_port("http", 80, IntOrString::String("http".into()));
            tweak(&mut port);
            spec(s).ports = Some(vec![port]);
        });
        let p = pod("a", &["198.19.0.1"], |p| {
            // The container port's protocol is left to its default.
            pod_spec(p).containers[0].ports = Some(vec![ContainerPort {
                protocol: None,
                ..container_port("http", 8080)
            }]);
        });
        let slices = desired(&svc, &[p]);
        let got: Vec<i32> = slices
            .iter()
            .flat_map(port_numbers)
            .map(|(_, n)| n)
            .collect();
        assert_eq!(got, want.into_iter().collect::<Vec<_>>(), "{case}");
    }
}

#[test]
fn named_port_resolves_on_sidecar_but_not_on_plain_init_container() {
    for (restart, want) in [(Some("Always"), vec![8443]), (None, vec![])] {
        let svc = service(|s| {
            spec(s).ports = Some(vec![service_port(
                "tls",
                443,
                IntOrString::String("tls".into()),
            )]);
        });
        let p = pod("a", &["198.19.0.1"], |p| {
            pod_spec(p).init_containers = Some(vec![Container {
                name: "proxy".to_owned(),
                restart_policy: restart.map(str::to_owned),
                ports: Some(vec![container_port("tls", 8443)]),
                ..Container::default()
            }]);
        });
        let got: Vec<i32> = desired(&svc, &[p])
            .iter()
            .flat_map(port_numbers)
            .map(|(_, n)| n)
            .collect();
        assert_eq!(got, want, "{restart:?}");
    }
}

#[test]
fn port_map_key_ignores_order_and_api_defaults() {
    let port = |name: Option<&str>, n, proto: Option<&str>| EndpointPort {
        name: name.map(str::to_owned),
        port: Some(n),
        protocol: proto.map(str::to_owned),
        app_protocol: None,
    };
    let a = PortMapKey::new(&[
        port(Some("a"), 1, Some("TCP")),
        port(Some(""), 2, Some("UDP")),
    ]);
    let b = PortMapKey::new(&[
        port(None, 2, Some("UDP")),
        port(Some("a"), 1, None),
    ]);
    assert_eq!(a, b);
    assert_eq!(a.digest(), b.digest());
    let c = PortMapKey::new(&[port(Some("a"), 1, Some("TCP"))]);
    assert_ne!(a, c);
    assert_ne!(a.digest(), c.digest());
}

// ---- address types ----

#[test]
fn address_types_come_from_families_then_cluster_ips() {
    let cases: Vec<(&str, SpecTweak, Vec<AddressType>)> = vec![
        (
            "ipFamilies",
            Box::new(|s| s.ip_families = Some(vec!["IPv6".into()])),
            vec![AddressType::IPv6],
        ),
        (
            "dual-stack ipFamilies",
            Box::new(|s| {
                s.ip_families = Some(vec!["IPv6".into(), "IPv4".into()])
            }),
            vec![AddressType::IPv4, AddressType::IPv6],
        ),
        (
            "IPv6 clusterIP",
            Box::new(|s| {
                s.ip_families = None;
                s.cluster_ips = None;
                s.cluster_ip = Some("2001:db8::10".into());
            }),
            vec![AddressType::IPv6],
        ),
        (
            "dual-stack clusterIPs",
            Box::new(|s| {
                s.ip_families = None;
                s.cluster_ips =
                    Some(vec!["198.18.0.10".into(), "2001:db8::10".into()]);
            }),
            vec![AddressType::IPv4, AddressType::IPv6],
        ),
        (
            "headless without families",
            Box::new(|s| {
                s.ip_families = None;
                s.cluster_ips = None;
                s.cluster_ip = Some("None".into());
            }),
            vec![AddressType::IPv4, AddressType::IPv6],
        ),
        (
            "nothing at all",
            Box::new(|s| {
                s.ip_families = None;
                s.cluster_ips = None;
                s.cluster_ip = None;
            }),
            vec![AddressType::IPv4],
        ),
    ];
    for (case, f, want) in cases {
        let svc = service(|s| f(spec(s)));
        let got: Vec<AddressType> =
            address::for_service(&svc).into_iter().collect();
        assert_eq!(got, want, "{case}");
    }
}

#[test]
fn dual_stack_service_gets_one_slice_per_family() {
    let svc = service(|s| {
        spec(s).ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
    });
    let pods = [
        pod("a", &["198.19.0.1", "2001:db8::1"], |_| {}),
        pod("b", &["198.19.0.2", "2001:db8::2"], |_| {}),
    ];
    let slices = desired(&svc, &pods);
    let got: Vec<(&str, Vec<&str>)> = {
        let mut v: Vec<_> = slices
            .iter()
            .map(|s| (s.address_type.as_str(), addresses(s)))
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        got,
        vec![
            ("IPv4", vec!["198.19.0.1", "198.19.0.2"]),
            ("IPv6", vec!["2001:db8::1", "2001:db8::2"]),
        ]
    );
}

#[test]
fn removed_family_slices_are_deleted() {
    let dual = service(|s| {
        spec(s).ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
    });
    let pods = [pod("a", &["198.19.0.1", "2001:db8::1"], |_| {})];
    let mut existing = desired(&dual, &pods);
    let fqdn = EndpointSlice {
        metadata: ObjectMeta {
            name: Some("web-fqdn".to_owned()),
            ..ObjectMeta::default()
        },
        address_type: "FQDN".to_owned(),
        ..EndpointSlice::default()
    };
    existing.push(fqdn);

    let r = run(&service(|_| {}), &pods, &existing);
    let mut deleted: Vec<&str> = r
        .to_delete
        .iter()
        .map(|s| s.address_type.as_str())
        .collect();
    deleted.sort();
    assert_eq!(deleted, vec!["FQDN", "IPv6"]);
    assert_eq!((r.to_create.len(), r.to_update.len()), (0, 0), "{r:#?}");
}

// ---- placement ----

#[test]
fn more_than_100_pods_fill_slices_of_100() {
    let pods = many_pods(250);
    let slices = desired(&service(|_| {}), &pods);
    let mut sizes: Vec<usize> =
        slices.iter().map(|s| endpoints(s).len()).collect();
    sizes.sort();
    assert_eq!(sizes, vec![50, 100, 100]);
    let all: BTreeSet<&str> = slices.iter().flat_map(addresses).collect();
    assert_eq!(all.len(), 250, "every pod exactly once");
    let names: BTreeSet<&str> = slices.iter().map(name_of).collect();
    assert_eq!(names.len(), 3, "distinct names");
}

#[test]
fn max_endpoints_per_slice_is_configurable() {
    let pods = many_pods(7);
    let (slices, _) =
        desired_slices(&service(|_| {}), &pods, &nodes(), &[], &config(3));
    let mut sizes: Vec<usize> =
        slices.iter().map(|s| endpoints(s).len()).collect();
    sizes.sort();
    assert_eq!(sizes, vec![1, 3, 3]);
    // Zero cannot hold anything; it is treated as one rather than looping.
    let (slices, _) =
        desired_slices(&service(|_| {}), &pods[..2], &nodes(), &[], &config(0));
    assert_eq!(slices.len(), 2);
}

#[test]
fn unchanged_input_produces_no_writes() {
    let svc = service(|s| {
        spec(s).ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
    });
    let mut pods = many_pods(230);
    pods.push(pod("odd-port", &["198.19.9.1", "2001:db8::9:1"], |p| {
        pod_spec(p).containers[0].ports =
            Some(vec![container_port("http", 9090)]);
    }));
    pods.push(pod("draining", &["198.19.9.2"], set_terminating));
    pods.push(pod("not-ready", &["198.19.9.3"], |p| set_ready(p, false)));
    let existing = desired(&svc, &pods);
    let r = run(&svc, &pods, &existing);
    assert!(r.is_noop(), "{r:#?}");

    let (again, _) = desired_slices(
        &svc,
        &pods,
        &nodes(),
        &existing,
        &ReconcileConfig::default(),
    );
    assert_eq!(again, existing);
}

#[test]
fn existing_slice_is_updated_not_replaced() {
    let svc = service(|_| {});
    let pods = [
        pod("a", &["198.19.0.1"], |_| {}),
        pod("b", &["198.19.0.2"], |_| {}),
        pod("c", &["198.19.0.3"], |_| {}),
    ];
    let existing = desired(&svc, &pods);
    let name = name_of(&existing[0]).to_owned();

    let changed = [
        pod("a", &["198.19.0.1"], |_| {}),
        pod("b", &["198.19.0.2"], |p| set_ready(p, false)),
        pod("d", &["198.19.0.4"], |_| {}),
    ];
    let r = run(&svc, &changed, &existing);
    assert_eq!((r.to_create.len(), r.to_delete.len()), (0, 0), "{r:#?}");
    assert_eq!(r.to_update.len(), 1);
    let updated = &r.to_update[0];
    assert_eq!(name_of(updated), name);
    // Kept endpoints keep their places; the new one is appended.
    assert_eq!(
        addresses(updated),
        vec!["198.19.0.1", "198.19.0.2", "198.19.0.4"]
    );
    let b = &endpoints(updated)[1];
    assert_eq!(conditions(b), (false, false, false));
}

#[test]
fn endpoints_stay_in_their_slices_and_new_ones_fill_the_written_slice() {
    let svc = service(|_| {});
    let pods = many_pods(8);
    let (existing, _) = desired_slices(&svc, &pods, &nodes(), &[], &config(4));
    assert_eq!(existing.len(), 2);
    let holder_of = |ip: &str| {
        existing
            .iter()
            .find(|s| addresses(s).contains(&ip))
            .map(|s| name_of(s).to_owned())
            .unwrap_or_default()
    };
    let first_ip = addresses(&existing[0])[0].to_owned();
    let touched = holder_of(&first_ip);

    // Remove one pod of one slice and add a new pod: the new pod goes where
    // the hole is, and the other slice is not written.
    let mut changed: Vec<Pod> = pods
        .into_iter()
        .filter(|p| {
            p.status.as_ref().and_then(|s| s.pod_ip.as_deref())
                != Some(first_ip.as_str())
        })
        .collect();
    changed.push(pod("new", &["198.19.5.5"], |_| {}));
    let r = reconcile(&svc, &changed, &nodes(), &existing, &config(4));
    assert_eq!((r.to_create.len(), r.to_delete.len()), (0, 0), "{r:#?}");
    assert_eq!(r.to_update.len(), 1);
    assert_eq!(name_of(&r.to_update[0]), touched);
    assert_eq!(endpoints(&r.to_update[0]).len(), 4);
    assert!(addresses(&r.to_update[0]).contains(&"198.19.5.5"));
}

#[test]
fn leftover_endpoints_go_to_the_untouched_slice_closest_to_full() {
    let svc = service(|_| {});
    let slice_of = |name: &str, pods: &[Pod]| {
        let (mut s, _) = desired_slices(&svc, pods, &nodes(), &[], &config(10));
        let mut s = s.remove(0);
        s.metadata.name = Some(name.to_owned());
        s
    };
    let all = many_pods(20);
    let half = slice_of("web-half", &all[..5]);
    let most = slice_of("web-most", &all[5..13]);

    // 2 new endpoints fit in the 8-endpoint slice, making it the fullest.
    let r = reconcile(
        &svc,
        &all[..15],
        &nodes(),
        &[half.clone(), most.clone()],
        &config(10),
    );
    assert_eq!(
        r.to_update.iter().map(name_of).collect::<Vec<_>>(),
        vec!["web-most"]
    );
    assert!(r.to_create.is_empty() && r.to_delete.is_empty(), "{r:#?}");

    // 4 do not fit there, but fit in the 5-endpoint one.
    let r = reconcile(&svc, &all[..17], &nodes(), &[half, most], &config(10));
    assert_eq!(
        r.to_update.iter().map(name_of).collect::<Vec<_>>(),
        vec!["web-half"]
    );
    assert_eq!(endpoints(&r.to_update[0]).len(), 9);
}

#[test]
fn slice_whose_pods_all_left_is_deleted() {
    let svc = service(|_| {});
    let pods = many_pods(6);
    let (existing, _) = desired_slices(&svc, &pods, &nodes(), &[], &config(3));
    assert_eq!(existing.len(), 2);
    // The pods of one slice go away; the other slice is untouched.
    let gone: BTreeSet<&str> = addresses(&existing[0]).into_iter().collect();
    let remaining: Vec<Pod> = pods
        .iter()
        .filter(|p| {
            let ip = p.status.as_ref().and_then(|s| s.pod_ip.as_deref());
            !ip.is_some_and(|ip| gone.contains(ip))
        })
        .cloned()
        .collect();
    let r = reconcile(&svc, &remaining, &nodes(), &existing, &config(3));
    assert_eq!(
        r.to_delete.iter().map(name_of).collect::<Vec<_>>(),
        vec![name_of(&existing[0])]
    );
    assert!(r.to_create.is_empty() && r.to_update.is_empty(), "{r:#?}");
}

#[test]
fn changed_target_port_rewrites_the_slice_under_its_old_name() {
    let svc = service(|_| {});
    let pods = [pod("a", &["198.19.0.1"], |_| {})];
    let existing = desired(&svc, &pods);
    let moved = [pod("a", &["198.19.0.1"], |p| {
        pod_spec(p).containers[0].ports =
            Some(vec![container_port("http", 9090)]);
    })];
    let r = run(&svc, &moved, &existing);
    assert!(r.to_create.is_empty() && r.to_delete.is_empty(), "{r:#?}");
    assert_eq!(name_of(&r.to_update[0]), name_of(&existing[0]));
    assert_eq!(port_numbers(&r.to_update[0]), vec![("http".into(), 9090)]);
}

#[test]
fn slices_of_an_older_service_with_the_same_name_are_replaced() {
    let svc = service(|_| {});
    let pods = [pod("a", &["198.19.0.1"], |_| {})];
    let mut stale =
        desired(&service(|s| s.metadata.uid = Some("old".into())), &pods);
    stale[0].metadata.name = Some("web-stale".to_owned());
    let r = run(&svc, &pods, &stale);
    // Another owner's slice is never rewritten in place.
    assert_eq!(
        r.to_delete.iter().map(name_of).collect::<Vec<_>>(),
        vec!["web-stale"]
    );
    assert_eq!(r.to_create.len(), 1);
    assert!(r.to_update.is_empty());
}

#[test]
fn duplicate_endpoint_across_slices_is_kept_once() {
    let svc = service(|_| {});
    let pods = [
        pod("a", &["198.19.0.1"], |_| {}),
        pod("b", &["198.19.0.2"], |_| {}),
    ];
    let mut first = desired(&svc, &pods).remove(0);
    first.metadata.name = Some("web-aaaaa".to_owned());
    let mut second = first.clone();
    second.metadata.name = Some("web-bbbbb".to_owned());
    let r = run(&svc, &pods, &[first, second]);
    assert_eq!(
        r.to_delete.iter().map(name_of).collect::<Vec<_>>(),
        vec!["web-bbbbb"]
    );
    assert!(r.to_create.is_empty() && r.to_update.is_empty(), "{r:#?}");
}

#[test]
fn existing_endpoint_matches_despite_address_order_and_resource_version() {
    let svc = service(|s| {
        spec(s).ip_families = Some(vec!["IPv6".into()]);
    });
    let pods = [pod("a", &["2001:db8::1", "2001:db8::2"], |_| {})];
    let mut existing = desired(&svc, &pods);
    let ep = &mut existing[0].endpoints.get_or_insert_default()[0];
    ep.addresses.reverse();
    if let Some(t) = ep.target_ref.as_mut() {
        t.resource_version = Some("42".to_owned());
    }
    assert!(run(&svc, &pods, &existing).is_noop());
}

#[test]
fn service_label_change_updates_slices_in_place() {
    let pods = [pod("a", &["198.19.0.1"], |_| {})];
    let existing = desired(&service(|_| {}), &pods);
    let relabelled =
        service(|s| s.metadata.labels = labels(&[("tier", "front")]));
    let r = run(&relabelled, &pods, &existing);
    assert!(r.to_create.is_empty() && r.to_delete.is_empty(), "{r:#?}");
    let labels = r.to_update[0].metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("tier").map(String::as_str), Some("front"));
    assert_eq!(r.to_update[0].endpoints, existing[0].endpoints);
}

// ---- topology hints ----

fn hint_names(e: &Endpoint) -> (Vec<String>, Vec<String>) {
    let h = e.hints.clone().unwrap_or_default();
    (
        h.for_zones.into_iter().flatten().map(|z| z.name).collect(),
        h.for_nodes.into_iter().flatten().map(|n| n.name).collect(),
    )
}

fn with_distribution(d: &str) -> Service {
    service(|s| spec(s).traffic_distribution = Some(d.to_owned()))
}

#[test]
fn traffic_distribution_hints_ready_endpoints_for_their_zone_and_node() {
    let zone_a = || (vec!["zone-a".to_owned()], vec![]);
    let none = (vec![], vec![]);
    // distribution → hints of the ready endpoint
    let cases = [
        ("PreferClose", zone_a()),
        ("PreferSameZone", zone_a()),
        (
            "PreferSameNode",
            (vec!["zone-a".to_owned()], vec!["node-a".to_owned()]),
        ),
        ("SomethingElse", none.clone()),
    ];
    for (distribution, want) in cases {
        let pods = [
            pod("a", &["198.19.0.1"], |_| {}),
            pod("b", &["198.19.0.2"], |p| set_ready(p, false)),
        ];
        let slices = desired(&with_distribution(distribution), &pods);
        let eps = endpoints(&slices[0]);
        assert_eq!(hint_names(&eps[0]), want, "{distribution}");
        assert_eq!(hint_names(&eps[1]), none, "{distribution}: not ready");
    }
}

#[test]
fn topology_annotation_disables_traffic_distribution_hints() {
    let svc = service(|s| {
        spec(s).traffic_distribution = Some("PreferClose".to_owned());
        s.metadata.annotations =
            labels(&[("service.kubernetes.io/topology-mode", "Auto")]);
    });
    let slices = desired(&svc, &[pod("a", &["198.19.0.1"], |_| {})]);
    assert_eq!(endpoints(&slices[0])[0].hints, None);
}

#[test]
fn untouched_slices_get_hints_when_traffic_distribution_is_set() {
    let pods = [pod("a", &["198.19.0.1"], |_| {})];
    let existing = desired(&service(|_| {}), &pods);
    let svc = with_distribution("PreferClose");
    let r = run(&svc, &pods, &existing);
    assert!(r.to_create.is_empty() && r.to_delete.is_empty(), "{r:#?}");
    assert_eq!(name_of(&r.to_update[0]), name_of(&existing[0]));
    assert_eq!(
        hint_names(&endpoints(&r.to_update[0])[0]),
        (vec!["zone-a".to_owned()], vec![])
    );
    assert!(run(&svc, &pods, &r.to_update).is_noop());
}

#[test]
fn hints_are_removed_when_traffic_distribution_is_unset() {
    let pods = [pod("a", &["198.19.0.1"], |_| {})];
    let hinted = desired(&with_distribution("PreferClose"), &pods);
    assert!(endpoints(&hinted[0])[0].hints.is_some());
    let plain = service(|_| {});
    let r = run(&plain, &pods, &hinted);
    assert!(r.to_create.is_empty() && r.to_delete.is_empty(), "{r:#?}");
    assert_eq!(name_of(&r.to_update[0]), name_of(&hinted[0]));
    assert_eq!(endpoints(&r.to_update[0])[0].hints, None);
    assert!(run(&plain, &pods, &r.to_update).is_noop());
}

// ---- placeholder, lifecycle ----

#[test]
fn service_without_pods_gets_one_empty_placeholder_per_family() {
    let svc = service(|_| {});
    let r = run(&svc, &[], &[]);
    assert_eq!(r.to_create.len(), 1);
    let placeholder = &r.to_create[0];
    assert_eq!(placeholder.endpoints, Some(vec![]));
    assert_eq!(placeholder.ports, Some(vec![]));
    // It is stable: the next run leaves it alone.
    assert!(run(&svc, &[], &r.to_create).is_noop());
    // So it is when the API server gives it back with a null list.
    let mut read_back = placeholder.clone();
    read_back.endpoints = None;
    assert!(run(&svc, &[], &[read_back]).is_noop());
}

#[test]
fn last_pod_leaving_turns_its_slice_into_the_placeholder() {
    let svc = service(|_| {});
    let existing = desired(&svc, &[pod("a", &["198.19.0.1"], |_| {})]);
    let r = run(&svc, &[], &existing);
    assert!(r.to_create.is_empty() && r.to_delete.is_empty(), "{r:#?}");
    assert_eq!(name_of(&r.to_update[0]), name_of(&existing[0]));
    assert_eq!(r.to_update[0].endpoints, Some(vec![]));
    assert_eq!(r.to_update[0].ports, Some(vec![]));
}

#[test]
fn services_the_controller_does_not_manage_are_left_alone() {
    let pods = [pod("a", &["198.19.0.1"], |_| {})];
    let manual = EndpointSlice {
        metadata: ObjectMeta {
            name: Some("web-manual".to_owned()),
            ..ObjectMeta::default()
        },
        address_type: "IPv4".to_owned(),
        ..EndpointSlice::default()
    };
    let cases = [
        ("no selector", service(|s| spec(s).selector = None)),
        (
            "empty selector",
            service(|s| spec(s).selector = Some(BTreeMap::new())),
        ),
        (
            "ExternalName",
            service(|s| spec(s).type_ = Some("ExternalName".into())),
        ),
        ("no spec", service(|s| s.spec = None)),
    ];
    for (case, svc) in cases {
        let r = run(&svc, &pods, std::slice::from_ref(&manual));
        assert_eq!(r, Reconciled::default(), "{case}");
        let (slices, errors) = desired_slices(
            &svc,
            &pods,
            &nodes(),
            std::slice::from_ref(&manual),
            &ReconcileConfig::default(),
        );
        assert_eq!((slices, errors), (vec![manual.clone()], vec![]), "{case}");
    }
}

#[test]
fn slices_pending_deletion_are_ignored() {
    let svc = service(|_| {});
    let pods = [pod("a", &["198.19.0.1"], |_| {})];
    let mut existing = desired(&svc, &pods);
    existing[0].metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    let r = run(&svc, &pods, &existing);
    assert!(r.to_update.is_empty() && r.to_delete.is_empty(), "{r:#?}");
    assert_eq!(r.to_create.len(), 1);
    assert_ne!(name_of(&r.to_create[0]), name_of(&existing[0]));
}

#[test]
fn unnamed_existing_slice_is_reported_and_ignored() {
    let svc = service(|_| {});
    let pods = [pod("a", &["198.19.0.1"], |_| {})];
    let mut existing = desired(&svc, &pods);
    existing[0].metadata.name = None;
    let r = run(&svc, &pods, &existing);
    assert_eq!(
        r.errors,
        vec![ReconcileError::UnnamedSlice {
            service: "ns/web".to_owned()
        }]
    );
    assert_eq!(r.to_create.len(), 1);
}

#[test]
fn service_being_deleted_gets_no_new_slices() {
    let svc = service(|s| {
        s.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    });
    let r = run(&svc, &[pod("a", &["198.19.0.1"], |_| {})], &[]);
    assert!(r.to_create.is_empty(), "{r:#?}");
}

#[test]
fn output_does_not_depend_on_pod_order() {
    let svc = service(|_| {});
    let pods = many_pods(150);
    let mut reversed = pods.clone();
    reversed.reverse();
    assert_eq!(run(&svc, &pods, &[]), run(&svc, &reversed, &[]));
    let slices = desired(&svc, &pods);
    // Endpoints are handed out in address order.
    let first = addresses(&slices[0]);
    let mut sorted = first.clone();
    sorted.sort_by_key(|a| a.parse::<std::net::IpAddr>().ok());
    assert_eq!(first, sorted);
}

#[test]
fn desired_slices_keeps_untouched_slices_and_applies_writes() {
    let svc = service(|_| {});
    let pods = many_pods(5);
    let (existing, _) = desired_slices(&svc, &pods, &nodes(), &[], &config(2));
    assert_eq!(existing.len(), 3);
    let fewer: Vec<Pod> = pods[..3].to_vec();
    let r = reconcile(&svc, &fewer, &nodes(), &existing, &config(2));
    let (after, _) =
        desired_slices(&svc, &fewer, &nodes(), &existing, &config(2));
    let untouched = existing.iter().filter(|s| {
        !r.to_update
            .iter()
            .chain(&r.to_delete)
            .any(|w| name_of(w) == name_of(s))
    });
    let mut want: Vec<EndpointSlice> = untouched
        .cloned()
        .chain(r.to_update.clone())
        .chain(r.to_create.clone())
        .collect();
    want.sort_by(|a, b| name_of(a).cmp(name_of(b)));
    assert_eq!(after, want);
    let all: BTreeSet<&str> = after.iter().flat_map(addresses).collect();
    assert_eq!(all.len(), 3);
}

#[test]
fn controller_slices_are_recognised_by_namespace_and_labels() {
    let svc = service(|_| {});
    let ours = desired(&svc, &[pod("a", &["198.19.0.1"], |_| {})]).remove(0);
    assert!(is_controller_slice_of(&svc, &ours));
    let cases: Vec<(&str, SliceTweak)> = vec![
        (
            "other namespace",
            Box::new(|s| s.metadata.namespace = Some("other".into())),
        ),
        (
            "other service",
            Box::new(|s| {
                if let Some(l) = s.metadata.labels.as_mut() {
                    l.insert(LABEL_SERVICE_NAME.into(), "db".into());
                }
            }),
        ),
        (
            "managed by someone else",
            Box::new(|s| {
                if let Some(l) = s.metadata.labels.as_mut() {
                    l.insert(LABEL_MANAGED_BY.into(), "mirroring".into());
                }
            }),
        ),
        ("no labels", Box::new(|s| s.metadata.labels = None)),
    ];
    for (case, f) in cases {
        let mut other = ours.clone();
        f(&mut other);
        assert!(!is_controller_slice_of(&svc, &other), "{case}");
    }
}

// ---- invariants over random histories ----

mod props {
    use proptest::prelude::*;

    use super::*;

    /// Pods `pod-<i>` for the given indexes; odd indexes use the other
    /// target port, multiples of 7 are not ready.
    fn pods_for(indexes: &BTreeSet<u16>) -> Vec<Pod> {
        indexes
            .iter()
            .map(|i| {
                let ip = format!("198.19.{}.{}", i / 200, i % 200 + 1);
                pod(&format!("pod-{i}"), &[ip.as_str()], |p| {
                    if i % 2 == 1 {
                        pod_spec(p).containers[0].ports =
                            Some(vec![container_port("http", 9090)]);
                    }
                    if i % 7 == 0 {
                        set_ready(p, false);
                    }
                })
            })
            .collect()
    }

    proptest! {
        #[test]
        fn every_pod_lands_in_exactly_one_slice_within_the_limit(
            before in proptest::collection::btree_set(0u16..600, 0..300),
            after in proptest::collection::btree_set(0u16..600, 0..300),
            max in 1usize..40,
        ) {
            // Half the runs also carry topology hints.
            let svc = if max % 2 == 0 {
                with_distribution("PreferSameNode")
            } else {
                service(|_| {})
            };
            let cfg = config(max);
            let (first, errors) =
                desired_slices(&svc, &pods_for(&before), &nodes(), &[], &cfg);
            prop_assert!(errors.is_empty());

            let pods = pods_for(&after);
            let (slices, _) =
                desired_slices(&svc, &pods, &nodes(), &first, &cfg);
            let mut seen: Vec<&str> =
                slices.iter().flat_map(addresses).collect();
            seen.sort();
            let mut want: Vec<String> = pods
                .iter()
                .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
                .collect();
            want.sort();
            prop_assert_eq!(seen, want);
            for s in &slices {
                prop_assert!(endpoints(s).len() <= max);
                let port = if endpoints(s).is_empty() {
                    None
                } else {
                    port_numbers(s).first().map(|(_, n)| *n)
                };
                for ep in s.endpoints.iter().flatten() {
                    let i: u16 = ep
                        .target_ref
                        .as_ref()
                        .and_then(|t| t.name.as_deref())
                        .and_then(|n| n.strip_prefix("pod-"))
                        .and_then(|n| n.parse().ok())
                        .unwrap_or_default();
                    let expected = if i % 2 == 1 { 9090 } else { 8080 };
                    prop_assert_eq!(port, Some(expected));
                }
            }
            let names: BTreeSet<&str> = slices.iter().map(name_of).collect();
            prop_assert_eq!(names.len(), slices.len());

            let again = reconcile(&svc, &pods, &nodes(), &slices, &cfg);
            prop_assert!(again.is_noop(), "{:#?}", again);
        }
    }
}
