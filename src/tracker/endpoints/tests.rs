use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use pretty_assertions::assert_eq;

use super::*;
use crate::model::{convert::ANNOTATION_LAST_CHANGE_TRIGGER_TIME, fixtures::*};

const NODE: &str = "node-a";

/// A slice of service `ns/web` with port `http` → 8080/TCP.
fn web(name: &str, endpoints: Vec<Endpoint>) -> EndpointSlice {
    slice("ns", name, "web", |s| {
        add_slice_port(s, "http", 8080, "TCP");
        s.endpoints = Some(endpoints);
    })
}

/// A slice of service `ns/dns` with port `dns` → 53/UDP.
fn dns(name: &str, endpoints: Vec<Endpoint>) -> EndpointSlice {
    slice("ns", name, "dns", |s| {
        add_slice_port(s, "dns", 53, "UDP");
        s.endpoints = Some(endpoints);
    })
}

fn ready(ip: &str) -> Endpoint {
    endpoint(ip, |_| {})
}

fn terminating(ip: &str) -> Endpoint {
    endpoint(ip, |e| {
        e.conditions = conditions(Some(false), Some(true), Some(true))
    })
}

fn not_serving(ip: &str) -> Endpoint {
    endpoint(ip, |e| {
        e.conditions = conditions(Some(false), Some(false), Some(false))
    })
}

fn local(ip: &str) -> Endpoint {
    endpoint(ip, |e| e.node_name = Some(NODE.to_owned()))
}

enum Step {
    Update(EndpointSlice),
    Delete(EndpointSlice),
}
use Step::{Delete, Update};

struct Case {
    name: &'static str,
    initial: Vec<EndpointSlice>,
    steps: Vec<Step>,
    /// What each step returned.
    returns: Vec<bool>,
    pending: usize,
    updated: Vec<&'static str>,
    changed: Vec<&'static str>,
    /// Port label → endpoints as `ip:port` with flags: `L` local,
    /// `T` terminating, `-` not ready.
    map: Vec<(&'static str, Vec<&'static str>)>,
    deleted_udp: Vec<&'static str>,
    newly_active: Vec<&'static str>,
}

fn port_label(key: &ServicePortName) -> String {
    format!("{}:{}/{}", key.service.name, key.port, key.protocol)
}

fn ep_label(ep: &EndpointInfo) -> String {
    let mut label = ep.endpoint_string();
    if ep.is_local {
        label.push_str(" L");
    }
    if ep.terminating {
        label.push_str(" T");
    }
    if !ep.ready {
        label.push_str(" -");
    }
    label
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

fn map_labels(map: &EndpointsMap) -> BTreeMap<String, Vec<String>> {
    map.iter()
        .map(|(key, eps)| {
            (port_label(key), eps.iter().map(|ep| ep_label(ep)).collect())
        })
        .collect()
}

#[test]
fn endpoints_change_tracker_table() {
    let cases = vec![
        Case {
            name: "add sorts endpoints",
            initial: vec![],
            steps: vec![Update(web(
                "web-1",
                vec![ready("198.19.0.2"), local("198.19.0.1")],
            ))],
            returns: vec![true],
            pending: 1,
            updated: vec!["web"],
            changed: vec!["web:http/TCP"],
            map: vec![(
                "web:http/TCP",
                vec!["198.19.0.1:8080 L", "198.19.0.2:8080"],
            )],
            deleted_udp: vec![],
            newly_active: vec![],
        },
        Case {
            name: "slices of one service are merged",
            initial: vec![web("web-1", vec![ready("198.19.0.3")])],
            steps: vec![Update(web("web-2", vec![ready("198.19.0.1")]))],
            returns: vec![true],
            pending: 1,
            updated: vec!["web"],
            changed: vec!["web:http/TCP"],
            map: vec![(
                "web:http/TCP",
                vec!["198.19.0.1:8080", "198.19.0.3:8080"],
            )],
            deleted_udp: vec![],
            newly_active: vec![],
        },
        Case {
            name: "named port mapped to different numbers by two slices",
            initial: vec![],
            steps: vec![
                Update(web("web-1", vec![ready("198.19.0.1")])),
                Update(slice("ns", "web-2", "web", |s| {
                    add_slice_port(s, "http", 8081, "TCP");
                    s.endpoints = Some(vec![ready("198.19.0.1")]);
                })),
            ],
            returns: vec![true, true],
            pending: 1,
            updated: vec!["web"],
            changed: vec!["web:http/TCP"],
            map: vec![(
                "web:http/TCP",
                vec!["198.19.0.1:8080", "198.19.0.1:8081"],
            )],
            deleted_udp: vec![],
            newly_active: vec![],
        },
        Case {
            name: "same IP twice: the non-terminating copy wins (it is later)",
            initial: vec![],
            steps: vec![
                Update(web("web-1", vec![terminating("198.19.0.1")])),
                Update(web("web-2", vec![ready("198.19.0.1")])),
            ],
            returns: vec![true, true],
            pending: 1,
            updated: vec!["web"],
            changed: vec!["web:http/TCP"],
            map: vec![("web:http/TCP", vec!["198.19.0.1:8080"])],
            deleted_udp: vec![],
            newly_active: vec![],
        },
        Case {
            name:
                "same IP twice: the non-terminating copy wins (it is earlier)",
            initial: vec![],
            steps: vec![
                Update(web("web-1", vec![ready("198.19.0.1")])),
                Update(web("web-2", vec![terminating("198.19.0.1")])),
            ],
            returns: vec![true, true],
            pending: 1,
            updated: vec!["web"],
            changed: vec!["web:http/TCP"],
            map: vec![("web:http/TCP", vec!["198.19.0.1:8080"])],
            deleted_udp: vec![],
            newly_active: vec![],
        },
        Case {
            name: "same IP twice, both running: the later slice by name wins",
            initial: vec![],
            steps: vec![
                Update(web("web-2", vec![local("198.19.0.1")])),
                Update(web("web-1", vec![ready("198.19.0.1")])),
            ],
            returns: vec![true, true],
            pending: 1,
            updated: vec!["web"],
            changed: vec!["web:http/TCP"],
            map: vec![("web:http/TCP", vec!["198.19.0.1:8080 L"])],
            deleted_udp: vec![],
            newly_active: vec![],
        },
        Case {
            name: "FQDN slices are ignored",
            initial: vec![],
            steps: vec![Update(slice("ns", "ext", "web", |s| {
                s.address_type = "FQDN".to_owned();
                add_slice_port(s, "http", 80, "TCP");
                s.endpoints = Some(vec![ready("example.com")]);
            }))],
            returns: vec![false],
            pending: 0,
            updated: vec![],
            changed: vec![],
            map: vec![],
            deleted_udp: vec![],
            newly_active: vec![],
        },
        Case {
            name: "slices without service name are ignored",
            initial: vec![],
            steps: vec![Update(slice("ns", "orphan", "web", |s| {
                s.metadata.labels = None;
                add_slice_port(s, "http", 80, "TCP");
                s.endpoints = Some(vec![ready("198.19.0.1")]);
            }))],
            returns: vec![false],
            pending: 0,
            updated: vec![],
            changed: vec![],
            map: vec![],
            deleted_udp: vec![],
            newly_active: vec![],
        },
        Case {
            name: "resending the applied slice is no change",
            initial: vec![web("web-1", vec![ready("198.19.0.1")])],
            steps: vec![Update(web("web-1", vec![ready("198.19.0.1")]))],
            returns: vec![false],
            pending: 0,
            updated: vec![],
            changed: vec![],
            map: vec![("web:http/TCP", vec!["198.19.0.1:8080"])],
            deleted_udp: vec![],
            newly_active: vec![],
        },
        Case {
            name: "deleting an unknown slice is no change",
            initial: vec![],
            steps: vec![Delete(web("web-1", vec![]))],
            returns: vec![false],
            pending: 0,
            updated: vec![],
            changed: vec![],
            map: vec![],
            deleted_udp: vec![],
            newly_active: vec![],
        },
        Case {
            name: "an update undone before the sync reports nothing",
            initial: vec![web("web-1", vec![ready("198.19.0.1")])],
            steps: vec![
                Update(web("web-1", vec![ready("198.19.0.2")])),
                Update(web("web-1", vec![ready("198.19.0.1")])),
            ],
            returns: vec![true, true],
            pending: 1,
            updated: vec![],
            changed: vec![],
            map: vec![("web:http/TCP", vec!["198.19.0.1:8080"])],
            deleted_udp: vec![],
            newly_active: vec![],
        },
        Case {
            name: "an endpoint moving between slices is no change",
            initial: vec![web("web-1", vec![ready("198.19.0.1")])],
            steps: vec![
                Update(web("web-2", vec![ready("198.19.0.1")])),
                Update(web("web-1", vec![])),
            ],
            returns: vec![true, true],
            pending: 1,
            updated: vec![],
            changed: vec![],
            map: vec![("web:http/TCP", vec!["198.19.0.1:8080"])],
            deleted_udp: vec![],
            newly_active: vec![],
        },
        Case {
            name: "deleting the last slice removes the port",
            initial: vec![
                web("web-1", vec![ready("198.19.0.1")]),
                dns("dns-1", vec![ready("198.19.0.53")]),
            ],
            steps: vec![Delete(web("web-1", vec![]))],
            returns: vec![true],
            pending: 1,
            updated: vec!["web"],
            changed: vec!["web:http/TCP"],
            map: vec![("dns:dns/UDP", vec!["198.19.0.53:53"])],
            deleted_udp: vec![],
            newly_active: vec![],
        },
        Case {
            name: "a slice's port renamed: old key removed, new key added",
            initial: vec![web("web-1", vec![ready("198.19.0.1")])],
            steps: vec![Update(slice("ns", "web-1", "web", |s| {
                add_slice_port(s, "web", 8080, "TCP");
                s.endpoints = Some(vec![ready("198.19.0.1")]);
            }))],
            returns: vec![true],
            pending: 1,
            updated: vec!["web"],
            changed: vec!["web:http/TCP", "web:web/TCP"],
            map: vec![("web:web/TCP", vec!["198.19.0.1:8080"])],
            deleted_udp: vec![],
            newly_active: vec![],
        },
        Case {
            name: "UDP: deleted and no-longer-serving endpoints are stale, \
                   a not-serving one is not",
            initial: vec![dns(
                "dns-1",
                vec![
                    ready("198.19.0.1"),
                    ready("198.19.0.2"),
                    not_serving("198.19.0.3"),
                    ready("198.19.0.4"),
                ],
            )],
            steps: vec![Update(dns(
                "dns-1",
                vec![not_serving("198.19.0.2"), ready("198.19.0.4")],
            ))],
            returns: vec![true],
            pending: 1,
            updated: vec!["dns"],
            changed: vec!["dns:dns/UDP"],
            map: vec![(
                "dns:dns/UDP",
                vec!["198.19.0.2:53 -", "198.19.0.4:53"],
            )],
            deleted_udp: vec![
                "dns:dns/UDP 198.19.0.1:53",
                "dns:dns/UDP 198.19.0.2:53",
            ],
            newly_active: vec![],
        },
        Case {
            name: "UDP: from no serving endpoint to one is newly active",
            initial: vec![dns("dns-1", vec![not_serving("198.19.0.1")])],
            steps: vec![
                Update(dns("dns-1", vec![ready("198.19.0.1")])),
                Update(dns("dns-2", vec![terminating("198.19.0.2")])),
            ],
            returns: vec![true, true],
            pending: 1,
            updated: vec!["dns"],
            changed: vec!["dns:dns/UDP"],
            map: vec![(
                "dns:dns/UDP",
                vec!["198.19.0.1:53", "198.19.0.2:53 T -"],
            )],
            deleted_udp: vec![],
            newly_active: vec!["dns:dns/UDP"],
        },
        Case {
            name: "UDP: a new service with endpoints is newly active",
            initial: vec![],
            steps: vec![Update(dns("dns-1", vec![ready("198.19.0.1")]))],
            returns: vec![true],
            pending: 1,
            updated: vec!["dns"],
            changed: vec!["dns:dns/UDP"],
            map: vec![("dns:dns/UDP", vec!["198.19.0.1:53"])],
            deleted_udp: vec![],
            newly_active: vec!["dns:dns/UDP"],
        },
        Case {
            name: "TCP endpoints are never stale for conntrack",
            initial: vec![web("web-1", vec![ready("198.19.0.1")])],
            steps: vec![Update(web("web-1", vec![]))],
            returns: vec![true],
            pending: 1,
            updated: vec!["web"],
            changed: vec!["web:http/TCP"],
            map: vec![],
            deleted_udp: vec![],
            newly_active: vec![],
        },
    ];

    for case in cases {
        let mut tracker = EndpointsChangeTracker::new(SystemTime::now());
        let mut map = EndpointsMap::new();
        for slice in &case.initial {
            tracker.update_object(NODE, slice, false);
        }
        tracker.checkout(&mut map);
        assert_eq!(tracker.pending(), 0, "{}", case.name);

        let returns: Vec<bool> = case
            .steps
            .iter()
            .map(|step| match step {
                Update(slice) => tracker.update_object(NODE, slice, false),
                Delete(slice) => tracker.update_object(NODE, slice, true),
            })
            .collect();
        assert_eq!(returns, case.returns, "{}", case.name);
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
        let expected_map: BTreeMap<String, Vec<String>> = case
            .map
            .iter()
            .map(|(port, eps)| {
                (
                    (*port).to_owned(),
                    eps.iter().map(|e| (*e).to_owned()).collect(),
                )
            })
            .collect();
        assert_eq!(map_labels(&map), expected_map, "{}", case.name);
        assert_eq!(
            sorted(result.deleted_udp_endpoints.iter().map(|stale| format!(
                "{} {}",
                port_label(&stale.service_port),
                stale.endpoint.endpoint_string()
            ))),
            strings(&case.deleted_udp),
            "{}",
            case.name
        );
        assert_eq!(
            sorted(result.newly_active_udp_services.iter().map(port_label)),
            strings(&case.newly_active),
            "{}",
            case.name
        );
    }
}

fn with_trigger(mut slice: EndpointSlice, time: &str) -> EndpointSlice {
    slice.metadata.annotations = Some(BTreeMap::from([(
        ANNOTATION_LAST_CHANGE_TRIGGER_TIME.to_owned(),
        time.to_owned(),
    )]));
    slice
}

#[test]
fn trigger_times_after_start_are_recorded_and_dropped_on_delete() {
    // 2026-01-01T00:00:00Z
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    let at = |secs: u64| start + Duration::from_secs(secs);
    let web_svc = NamespacedName::new("ns", "web");
    let dns_svc = NamespacedName::new("ns", "dns");
    let mut tracker = EndpointsChangeTracker::new(start);
    let mut map = EndpointsMap::new();

    // Before the tracker started: not ours to measure.
    tracker.update_object(
        NODE,
        &with_trigger(web("web-1", vec![]), "2025-12-31T23:59:59Z"),
        false,
    );
    tracker.update_object(
        NODE,
        &with_trigger(
            web("web-1", vec![ready("198.19.0.1")]),
            "2026-01-01T00:00:10Z",
        ),
        false,
    );
    tracker.update_object(
        NODE,
        &with_trigger(
            web("web-2", vec![ready("198.19.0.2")]),
            "2026-01-01T00:00:20Z",
        ),
        false,
    );
    // No change, so its time is not a programming trigger.
    tracker.update_object(
        NODE,
        &with_trigger(
            web("web-2", vec![ready("198.19.0.2")]),
            "2026-01-01T00:00:30Z",
        ),
        false,
    );
    tracker.update_object(
        NODE,
        &with_trigger(
            dns("dns-1", vec![ready("198.19.0.53")]),
            "2026-01-01T00:00:40Z",
        ),
        false,
    );
    let result = tracker.checkout(&mut map);
    assert_eq!(
        result.last_change_trigger_times,
        HashMap::from([
            (web_svc.clone(), vec![at(10), at(20)]),
            (dns_svc.clone(), vec![at(40)]),
        ])
    );

    // Checked out times are not reported again.
    tracker.update_object(
        NODE,
        &with_trigger(
            web("web-1", vec![ready("198.19.0.3")]),
            "2026-01-01T00:01:00Z",
        ),
        false,
    );
    tracker.update_object(
        NODE,
        &with_trigger(web("web-2", vec![]), "2026-01-01T00:01:00Z"),
        true,
    );
    let result = tracker.checkout(&mut map);
    assert_eq!(result.last_change_trigger_times, HashMap::new());
}

#[test]
fn pending_gauge_counts_services_not_slices() {
    let mut tracker = EndpointsChangeTracker::new(SystemTime::now());
    tracker.update_object(
        NODE,
        &web("web-1", vec![ready("198.19.0.1")]),
        false,
    );
    tracker.update_object(
        NODE,
        &web("web-2", vec![ready("198.19.0.2")]),
        false,
    );
    tracker.update_object(
        NODE,
        &dns("dns-1", vec![ready("198.19.0.3")]),
        false,
    );
    assert_eq!(tracker.pending(), 2);
}

/// The copies the merge left out, labelled, by port label.
fn dropped(
    tracker: &EndpointsChangeTracker,
    service: &str,
) -> BTreeMap<String, Vec<String>> {
    let service = NamespacedName::new("ns", service);
    tracker
        .dropped_copies(&service)
        .iter()
        .map(|(key, eps)| {
            (port_label(key), sorted(eps.iter().map(|ep| ep_label(ep))))
        })
        .collect()
}

#[test]
fn the_copies_a_merge_leaves_out_are_those_it_does_not_keep() {
    let mut tracker = EndpointsChangeTracker::new(SystemTime::now());
    let mut map = EndpointsMap::new();
    for slice in [
        web("web-1", vec![ready("198.19.0.1"), ready("198.19.0.2")]),
        // A terminating copy loses whichever slice comes first.
        web("web-0", vec![terminating("198.19.0.1")]),
        // Of two running copies the later slice's is kept, the earlier
        // one's left out.
        web("web-2", vec![not_serving("198.19.0.2")]),
        dns("dns-1", vec![ready("198.19.0.3")]),
    ] {
        tracker.update_object(NODE, &slice, false);
    }
    // Pending slices are not merged yet: nothing is left out.
    assert_eq!(dropped(&tracker, "web"), BTreeMap::new());
    tracker.checkout(&mut map);
    assert_eq!(
        map_labels(&map)["web:http/TCP"],
        ["198.19.0.1:8080", "198.19.0.2:8080 -"]
    );
    assert_eq!(
        dropped(&tracker, "web"),
        BTreeMap::from([(
            "web:http/TCP".to_owned(),
            strings(&["198.19.0.1:8080 T -", "198.19.0.2:8080"])
        )])
    );
    assert_eq!(dropped(&tracker, "dns"), BTreeMap::new());
    assert_eq!(dropped(&tracker, "nosuch"), BTreeMap::new());

    tracker.update_object(NODE, &web("web-0", vec![]), true);
    tracker.checkout(&mut map);
    assert_eq!(
        dropped(&tracker, "web"),
        BTreeMap::from([(
            "web:http/TCP".to_owned(),
            strings(&["198.19.0.2:8080"])
        )])
    );
}

#[test]
fn checkout_touches_only_changed_ports() {
    let mut tracker = EndpointsChangeTracker::new(SystemTime::now());
    let mut map = EndpointsMap::new();
    tracker.update_object(
        NODE,
        &web("web-1", vec![ready("198.19.0.1")]),
        false,
    );
    tracker.update_object(
        NODE,
        &dns("dns-1", vec![ready("198.19.0.2")]),
        false,
    );
    tracker.checkout(&mut map);
    let dns_key = ServicePortName::new("ns", "dns", "dns", Protocol::Udp);
    let before = map.get(&dns_key).cloned().unwrap_or_default();

    tracker.update_object(
        NODE,
        &web("web-1", vec![ready("198.19.0.9")]),
        false,
    );
    tracker.checkout(&mut map);
    let after = map.get(&dns_key).cloned().unwrap_or_default();
    // The untouched service keeps the very same allocation.
    assert_eq!(before.len(), 1);
    assert!(Arc::ptr_eq(&before[0], &after[0]));
}

#[test]
fn change_metrics_follow_upstream() {
    let recorder = TestRecorder::default();
    recorder.run(|| {
        let mut tracker = EndpointsChangeTracker::new(SystemTime::now());
        let mut map = EndpointsMap::new();
        let one = web("web-1", vec![ready("198.19.0.1")]);
        assert!(tracker.update_object(NODE, &one, false));
        assert!(!tracker.update_object(NODE, &one, false));
        assert!(tracker.update_object(
            NODE,
            &web("web-2", vec![ready("198.19.0.2")]),
            false
        ));
        // Ignored slices are not changes at all.
        let mut fqdn = web("web-3", vec![]);
        fqdn.address_type = "FQDN".to_owned();
        assert!(!tracker.update_object(NODE, &fqdn, false));
        assert_eq!(recorder.gauge(names::ENDPOINT_CHANGES_PENDING), 2.0);
        assert_eq!(recorder.counter(names::ENDPOINT_CHANGES_TOTAL), 3);
        tracker.checkout(&mut map);
        assert_eq!(recorder.gauge(names::ENDPOINT_CHANGES_PENDING), 0.0);
    });
}

#[test]
fn invalid_slices_are_counted() {
    let recorder = TestRecorder::default();
    recorder.run(|| {
        let mut tracker = EndpointsChangeTracker::new(SystemTime::now());
        let mut orphan = web("orphan", vec![ready("198.19.0.1")]);
        orphan.metadata.labels = None;
        assert!(!tracker.update_object(NODE, &orphan, false));
        let bad_ip = web("web-1", vec![ready("198.19.0.1"), ready("nope")]);
        assert!(tracker.update_object(NODE, &bad_ip, false));
    });
    assert_eq!(
        recorder.counter(
            "kube_ipvs_proxy_invalid_objects_total\
             {kind=EndpointSlice,reason=missing_service_name}"
        ),
        1
    );
    assert_eq!(
        recorder.counter(
            "kube_ipvs_proxy_invalid_objects_total\
             {kind=EndpointSlice,reason=invalid_ip}"
        ),
        1
    );
}
