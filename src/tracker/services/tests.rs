use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Service;
use pretty_assertions::assert_eq;

use super::*;
use crate::model::fixtures::*;

fn web(f: impl FnOnce(&mut Service)) -> Service {
    service("ns", "web", |s| {
        add_port(s, "http", 80, "TCP");
        f(s);
    })
}

fn dns(f: impl FnOnce(&mut Service)) -> Service {
    service("ns", "dns", |s| {
        set_cluster_ips(s, &["198.18.0.53"]);
        add_port(s, "dns", 53, "UDP");
        add_port(s, "dns-tcp", 53, "TCP");
        f(s);
    })
}

/// One source event: the object before and after.
type Event = (Option<Service>, Option<Service>);

fn add(svc: Service) -> Event {
    (None, Some(svc))
}

fn change(from: Service, to: Service) -> Event {
    (Some(from), Some(to))
}

fn delete(svc: Service) -> Event {
    (Some(svc), None)
}

struct Case {
    name: &'static str,
    /// Services added and checked out before the steps.
    initial: Vec<Service>,
    steps: Vec<Event>,
    /// The return value of the last update.
    needs_sync: bool,
    pending: usize,
    updated: Vec<&'static str>,
    /// `name:port/PROTO` of the changed ports.
    changed: Vec<&'static str>,
    deleted_udp: Vec<&'static str>,
    /// `name:port/PROTO` of the ports in the map after checkout.
    map: Vec<&'static str>,
}

fn port_label(key: &ServicePortName) -> String {
    format!("{}:{}/{}", key.service.name, key.port, key.protocol)
}

fn sorted(labels: impl IntoIterator<Item = String>) -> Vec<String> {
    labels
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn strings(labels: &[&str]) -> Vec<String> {
    sorted(labels.iter().map(|s| (*s).to_owned()))
}

#[test]
fn service_change_tracker_table() {
    let cases = vec![
        Case {
            name: "add",
            initial: vec![],
            steps: vec![add(web(|_| {}))],
            needs_sync: true,
            pending: 1,
            updated: vec!["web"],
            changed: vec!["web:http/TCP"],
            deleted_udp: vec![],
            map: vec!["web:http/TCP"],
        },
        Case {
            name: "add then delete before a sync cancels out",
            initial: vec![],
            steps: vec![add(web(|_| {})), delete(web(|_| {}))],
            needs_sync: false,
            pending: 0,
            updated: vec![],
            changed: vec![],
            deleted_udp: vec![],
            map: vec![],
        },
        Case {
            name: "change then change back cancels out",
            initial: vec![web(|_| {})],
            steps: vec![
                change(web(|_| {}), web(|s| add_port(s, "https", 443, "TCP"))),
                change(web(|s| add_port(s, "https", 443, "TCP")), web(|_| {})),
            ],
            needs_sync: false,
            pending: 0,
            updated: vec![],
            changed: vec![],
            deleted_udp: vec![],
            map: vec!["web:http/TCP"],
        },
        Case {
            name: "change that kube-proxy does not read is no change",
            initial: vec![web(|_| {})],
            steps: vec![change(
                web(|_| {}),
                web(|s| {
                    s.metadata.labels =
                        Some(BTreeMap::from([("a".into(), "b".into())]));
                    spec(s).selector =
                        Some(BTreeMap::from([("app".into(), "web".into())]));
                }),
            )],
            needs_sync: false,
            pending: 0,
            updated: vec![],
            changed: vec![],
            deleted_udp: vec![],
            map: vec!["web:http/TCP"],
        },
        Case {
            name: "a cancelled change still reports other pending ones",
            initial: vec![],
            steps: vec![
                add(dns(|_| {})),
                add(web(|_| {})),
                delete(web(|_| {})),
            ],
            needs_sync: true,
            pending: 1,
            updated: vec!["dns"],
            changed: vec!["dns:dns/UDP", "dns:dns-tcp/TCP"],
            deleted_udp: vec![],
            map: vec!["dns:dns/UDP", "dns:dns-tcp/TCP"],
        },
        Case {
            name: "modified port is changed, untouched port is not",
            initial: vec![dns(|_| {})],
            steps: vec![change(
                dns(|_| {}),
                dns(|s| spec(s).ports.as_mut().unwrap()[1].port = 5353),
            )],
            needs_sync: true,
            pending: 1,
            updated: vec!["dns"],
            changed: vec!["dns:dns-tcp/TCP"],
            deleted_udp: vec![],
            map: vec!["dns:dns/UDP", "dns:dns-tcp/TCP"],
        },
        Case {
            name: "deleting a UDP service flushes its cluster IP",
            initial: vec![dns(|_| {}), web(|_| {})],
            steps: vec![delete(dns(|_| {}))],
            needs_sync: true,
            pending: 1,
            updated: vec!["dns"],
            changed: vec!["dns:dns/UDP", "dns:dns-tcp/TCP"],
            deleted_udp: vec!["198.18.0.53"],
            map: vec!["web:http/TCP"],
        },
        Case {
            name: "removing only the TCP port flushes nothing",
            initial: vec![dns(|_| {})],
            steps: vec![change(
                dns(|_| {}),
                dns(|s| {
                    spec(s).ports.as_mut().unwrap().pop();
                }),
            )],
            needs_sync: true,
            pending: 1,
            updated: vec!["dns"],
            changed: vec!["dns:dns-tcp/TCP"],
            deleted_udp: vec![],
            map: vec!["dns:dns/UDP"],
        },
        Case {
            name: "UDP port dropping the IPv6 family flushes that IP",
            initial: vec![dns(|s| {
                set_cluster_ips(s, &["198.18.0.53", "2001:db8::53"])
            })],
            steps: vec![change(
                dns(|s| set_cluster_ips(s, &["198.18.0.53", "2001:db8::53"])),
                dns(|_| {}),
            )],
            needs_sync: true,
            pending: 1,
            updated: vec!["dns"],
            changed: vec!["dns:dns/UDP", "dns:dns-tcp/TCP"],
            deleted_udp: vec!["2001:db8::53"],
            map: vec!["dns:dns/UDP", "dns:dns-tcp/TCP"],
        },
        Case {
            name: "service turned headless loses its ports",
            initial: vec![dns(|_| {})],
            steps: vec![change(
                dns(|_| {}),
                dns(|s| set_cluster_ips(s, &["None"])),
            )],
            needs_sync: true,
            pending: 1,
            updated: vec!["dns"],
            changed: vec!["dns:dns/UDP", "dns:dns-tcp/TCP"],
            deleted_udp: vec!["198.18.0.53"],
            map: vec![],
        },
        Case {
            name: "ExternalName service is tracked as nothing",
            initial: vec![],
            steps: vec![add(web(|s| {
                spec(s).type_ = Some("ExternalName".to_owned())
            }))],
            needs_sync: false,
            pending: 0,
            updated: vec![],
            changed: vec![],
            deleted_udp: vec![],
            map: vec![],
        },
    ];

    for case in cases {
        let mut tracker = ServiceChangeTracker::new();
        let mut map = ServicePortMap::new();
        for svc in &case.initial {
            tracker.update_objects(None, Some(svc));
        }
        tracker.checkout(&mut map);
        assert_eq!(tracker.pending(), 0, "{}", case.name);

        let mut needs_sync = false;
        for (previous, current) in &case.steps {
            needs_sync =
                tracker.update_objects(previous.as_ref(), current.as_ref());
        }
        assert_eq!(needs_sync, case.needs_sync, "{}", case.name);
        assert_eq!(tracker.pending(), case.pending, "{}", case.name);

        let result = tracker.checkout(&mut map);
        assert_eq!(tracker.pending(), 0, "{}", case.name);
        assert_eq!(
            sorted(result.updated_services.iter().map(|n| n.name.clone())),
            strings(&case.updated),
            "{}",
            case.name
        );
        assert_eq!(
            sorted(result.changed_ports.iter().map(port_label)),
            strings(&case.changed),
            "{}",
            case.name
        );
        assert_eq!(
            sorted(
                result
                    .deleted_udp_cluster_ips
                    .iter()
                    .map(|ip| ip.to_string())
            ),
            strings(&case.deleted_udp),
            "{}",
            case.name
        );
        assert_eq!(
            sorted(map.keys().map(port_label)),
            strings(&case.map),
            "{}",
            case.name
        );
    }
}

#[test]
fn map_holds_the_latest_port_info() {
    let mut tracker = ServiceChangeTracker::new();
    let mut map = ServicePortMap::new();
    tracker.update_objects(None, Some(&web(|_| {})));
    tracker.checkout(&mut map);
    tracker.update_objects(
        Some(&web(|_| {})),
        Some(&web(|s| spec(s).ports.as_mut().unwrap()[0].port = 8080)),
    );
    tracker.checkout(&mut map);
    let key = ServicePortName::new("ns", "web", "http", Protocol::Tcp);
    assert_eq!(map.get(&key).map(|info| info.port), Some(8080));
}

#[test]
fn checkout_without_changes_is_empty() {
    let mut tracker = ServiceChangeTracker::new();
    let mut map = ServicePortMap::new();
    assert_eq!(tracker.checkout(&mut map), ServiceUpdateResult::default());
    assert!(!tracker.update_objects(None, None));
}

#[test]
fn change_metrics_follow_upstream() {
    let recorder = TestRecorder::default();
    recorder.run(|| {
        let mut tracker = ServiceChangeTracker::new();
        let mut map = ServicePortMap::new();
        tracker.update_objects(None, Some(&web(|_| {})));
        tracker.update_objects(None, Some(&dns(|_| {})));
        assert_eq!(recorder.gauge(names::SERVICE_CHANGES_PENDING), 2.0);
        // Cancelled out: still counted as a change, no longer pending.
        tracker.update_objects(Some(&web(|_| {})), None);
        assert_eq!(recorder.gauge(names::SERVICE_CHANGES_PENDING), 1.0);
        tracker.checkout(&mut map);
        assert_eq!(recorder.gauge(names::SERVICE_CHANGES_PENDING), 0.0);
        assert_eq!(recorder.counter(names::SERVICE_CHANGES_TOTAL), 3);
    });
}

#[test]
fn invalid_service_fields_are_counted_once_per_update() {
    let recorder = TestRecorder::default();
    let bad = web(|s| add_port(s, "big", 70_000, "TCP"));
    recorder.run(|| {
        let mut tracker = ServiceChangeTracker::new();
        tracker.update_objects(None, Some(&bad));
        // The previous object's problems were reported when it came in.
        tracker.update_objects(Some(&bad), None);
    });
    assert_eq!(
        recorder.counter(
            "kube_ipvs_proxy_invalid_objects_total\
             {kind=Service,reason=invalid_port}"
        ),
        1
    );
}
