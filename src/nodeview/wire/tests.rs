use pretty_assertions::assert_eq;

use super::*;
use crate::model::fixtures::{ep, port_info};

#[test]
fn trigger_times_survive_the_wire_to_the_nanosecond() {
    let at = |nanos| SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos);
    let update = Update {
        full: false,
        changes: vec![],
        revision: 2,
        synced: true,
        trigger_times: [
            (
                NamespacedName::new("ns", "web"),
                vec![at(1_700_000_000_123_456_789), at(5)],
            ),
            (
                NamespacedName::new("ns", "db"),
                vec![at(1_700_000_000_000_000_001)],
            ),
        ]
        .into(),
    };
    assert_eq!(decode(encode(&update, "i")).unwrap(), update);
    // A time the wire cannot carry is left out, not wrapped around.
    let before_1970 = Update {
        trigger_times: [(
            NamespacedName::new("ns", "web"),
            vec![SystemTime::UNIX_EPOCH - Duration::from_secs(1), at(7)],
        )]
        .into(),
        ..update
    };
    assert_eq!(encode(&before_1970, "i").trigger_times[0].unix_nanos, [7]);
}

fn name() -> Arc<ServicePortName> {
    Arc::new(ServicePortName::new("ns", "web", "http", Protocol::Tcp))
}

#[test]
fn an_update_survives_the_wire_but_for_what_the_node_does_not_read() {
    let svc = port_info(|s| {
        s.cluster_ips = vec![
            "198.18.0.1".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
        ];
        s.session_affinity_timeout = Some(10800);
        s.load_balancer_source_ranges = vec!["198.18.0.0/15".parse().unwrap()];
        s.node_port = 30080;
        s.external_policy_local = true;
    });
    let local = ep("198.19.0.1", 8080, |e| {
        e.is_local = true;
        e.node_name = Some("node-a".into());
        e.zone_hints = ["zone-a".to_owned()].into();
    });
    let remote = ep("198.19.0.2", 8080, |e| e.terminating = true);
    let v6 = ep("2001:db8::2", 8080, |_| {});
    let selected = NodeEndpoints {
        ipv4: Categorized {
            cluster: vec![local.clone(), remote.clone()],
            local: vec![local.clone()],
            all_reachable: vec![local.clone(), remote.clone()],
            has_any_endpoints: true,
        },
        ipv6: Categorized {
            cluster: vec![v6.clone()],
            local: vec![],
            all_reachable: vec![v6.clone()],
            has_any_endpoints: true,
        },
        local: vec![local.clone()],
        serving: vec!["198.19.0.1".parse().unwrap()],
    };
    let node = NodeInfo {
        name: "node-a".to_owned(),
        pod_cidrs: vec!["198.18.64.0/24".parse().unwrap()],
        zone: "zone-a".to_owned(),
        addresses: vec!["198.18.100.1".parse().unwrap()],
        eligible: true,
    };
    let update = Update {
        full: true,
        changes: vec![
            Change::Node(Arc::new(node)),
            Change::Service(name(), Arc::new(svc)),
            Change::Endpoints(name(), Arc::new(selected.clone())),
            Change::Delete(Key::Endpoints(Arc::new(ServicePortName::new(
                "ns",
                "gone",
                "",
                Protocol::Sctp,
            )))),
        ],
        revision: 7,
        synced: true,
        trigger_times: [(
            NamespacedName::new("ns", "web"),
            vec![
                SystemTime::UNIX_EPOCH
                    + Duration::from_nanos(1_700_000_000_123_456_789),
                SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_001),
            ],
        )]
        .into(),
    };
    let message = encode(&update, "instance-1");
    assert_eq!(message.instance, "instance-1");
    let back = decode(message).unwrap();

    // Hints and node names select endpoints on the API side; the node
    // never reads them, so they are not sent.
    let strip = |e: &Arc<EndpointInfo>| {
        Arc::new(EndpointInfo {
            node_name: None,
            zone_hints: Default::default(),
            node_hints: Default::default(),
            ..EndpointInfo::clone(e)
        })
    };
    let strip_all = |list: &[Arc<EndpointInfo>]| -> Vec<_> {
        list.iter().map(strip).collect()
    };
    let strip_family = |c: &Categorized| Categorized {
        cluster: strip_all(&c.cluster),
        local: strip_all(&c.local),
        all_reachable: strip_all(&c.all_reachable),
        has_any_endpoints: c.has_any_endpoints,
    };
    let mut expected = update.clone();
    expected.changes[2] = Change::Endpoints(
        name(),
        Arc::new(NodeEndpoints {
            ipv4: strip_family(&selected.ipv4),
            ipv6: strip_family(&selected.ipv6),
            local: strip_all(&selected.local),
            serving: selected.serving.clone(),
        }),
    );
    assert_eq!(back, expected);
}

#[test]
fn each_endpoint_is_sent_once_however_many_lists_hold_it() {
    let local = ep("198.19.0.1", 8080, |e| e.is_local = true);
    let selected = NodeEndpoints {
        ipv4: Categorized {
            cluster: vec![local.clone()],
            local: vec![local.clone()],
            all_reachable: vec![local.clone()],
            has_any_endpoints: true,
        },
        local: vec![local],
        ..NodeEndpoints::default()
    };
    let message = encode_endpoints(&name(), &selected);
    assert_eq!(message.endpoints.len(), 1);
    assert_eq!(message.local, [0]);
}

/// A message from a bad or foreign server is refused with what is wrong
/// and where, never a panic.
#[test]
fn a_malformed_message_is_an_error_naming_the_entry_and_field() {
    let good = encode(
        &Update {
            full: false,
            changes: vec![Change::Service(name(), Arc::new(port_info(|_| {})))],
            revision: 1,
            synced: true,
            trigger_times: TriggerTimes::new(),
        },
        "i",
    );
    let service = |f: &dyn Fn(&mut v1::ServicePort)| {
        let mut message = good.clone();
        if let Some(v1::change::Change::Service(svc)) =
            &mut message.changes[0].change
        {
            f(svc);
        }
        decode(message).unwrap_err()
    };
    let err = service(&|s| s.cluster_ips = vec![vec![1, 2, 3]]);
    assert_eq!(
        (err.entry.as_str(), err.field),
        ("service ns/web:http", "cluster_ips")
    );
    assert_eq!(err.problem, "3 bytes");
    let err = service(&|s| s.port = 70_000);
    assert_eq!(err.field, "port");
    let err = service(&|s| s.protocol = 9);
    assert_eq!(err.field, "protocol");
    let err = service(&|s| s.load_balancer_source_ranges = vec!["x".into()]);
    assert_eq!(err.field, "load_balancer_source_ranges");
    let err = service(&|s| s.name = None);
    assert_eq!((err.entry.as_str(), err.field), ("change 0", "name"));

    let mut empty = good.clone();
    empty.changes[0].change = None;
    assert_eq!(decode(empty).unwrap_err().field, "change");

    let mut eps = encode_endpoints(&name(), &NodeEndpoints::default());
    eps.ipv4 = Some(v1::Selection {
        cluster: vec![3],
        ..Default::default()
    });
    let mut message = good.clone();
    message.changes[0].change = Some(v1::change::Change::Endpoints(eps));
    let err = decode(message).unwrap_err();
    assert_eq!(
        (err.entry.as_str(), err.field, err.problem.as_str()),
        ("endpoints ns/web:http", "ipv4", "no endpoint 3")
    );
    assert_eq!(
        err.to_string(),
        "update from the API side, endpoints ns/web:http: ipv4: no endpoint 3"
    );

    // (found by fuzzing: endpoints out of order, and an IPv6 one chosen
    // for IPv4, decoded into an update that encoded to another.)
    let endpoint = |ip: [u8; 4], port| v1::Endpoint {
        ip: ip.to_vec(),
        port,
        ready: true,
        serving: true,
        ..Default::default()
    };
    let endpoints_error = |endpoints, ipv4: Vec<u32>| {
        let mut eps = encode_endpoints(&name(), &NodeEndpoints::default());
        eps.endpoints = endpoints;
        eps.ipv4 = Some(v1::Selection {
            cluster: ipv4,
            has_any_endpoints: true,
            ..Default::default()
        });
        let mut message = good.clone();
        message.changes[0].change = Some(v1::change::Change::Endpoints(eps));
        decode(message)
            .map(|_| ())
            .map_err(|e| (e.field, e.problem))
    };
    let a = endpoint([198, 19, 0, 1], 80);
    let b = endpoint([198, 19, 0, 2], 80);
    let v6 = v1::Endpoint {
        ip: vec![0; 16],
        ..endpoint([0; 4], 80)
    };
    assert_eq!(
        endpoints_error(vec![a.clone(), b.clone()], vec![1, 0]),
        Ok(())
    );
    let out_of_order = Err((
        "endpoints",
        "endpoint 1 not after the one before".to_string(),
    ));
    assert_eq!(
        endpoints_error(vec![b.clone(), a.clone()], vec![0, 1]),
        out_of_order
    );
    assert_eq!(
        endpoints_error(vec![a.clone(), a.clone()], vec![0]),
        out_of_order
    );
    assert_eq!(
        endpoints_error(vec![a, v6], vec![0, 1]),
        Err(("ipv4", "endpoint :: of the other family".to_string()))
    );

    let mut message = good.clone();
    message.trigger_times = vec![v1::TriggerTimes {
        namespace: "ns".into(),
        name: "web".into(),
        unix_nanos: vec![1, -5],
    }];
    let err = decode(message).unwrap_err();
    assert_eq!(
        (err.entry.as_str(), err.field, err.problem.as_str()),
        ("trigger times of ns/web", "trigger_times.unix_nanos", "-5")
    );
    let mut message = good.clone();
    message.trigger_times = vec![v1::TriggerTimes {
        namespace: "ns".into(),
        ..Default::default()
    }];
    assert_eq!(decode(message).unwrap_err().field, "trigger_times");

    let mut message = good;
    message.changes[0].change = Some(v1::change::Change::Deleted(v1::Key {
        kind: 0,
        port: None,
    }));
    assert_eq!(decode(message).unwrap_err().field, "deleted.kind");
}

/// On the node, a malformed change is left out, logged and counted; the
/// message's other changes are taken.
#[test]
fn a_malformed_change_is_left_out_and_counted_the_rest_taken() {
    use crate::{
        model::fixtures::TestRecorder, telemetry::events::InternalEvent,
    };
    let mut message = encode(
        &Update {
            full: false,
            changes: vec![
                Change::Service(name(), Arc::new(port_info(|_| {}))),
                Change::Delete(Key::Node),
            ],
            revision: 3,
            synced: true,
            trigger_times: TriggerTimes::new(),
        },
        "i",
    );
    if let Some(v1::change::Change::Service(svc)) =
        &mut message.changes[0].change
    {
        svc.port = 70_000;
    }
    let (update, rejected) = decode_skipping(message);
    assert_eq!(update.changes, [Change::Delete(Key::Node)]);
    assert!(update.synced);
    assert_eq!(rejected.len(), 1);
    assert_eq!(
        (rejected[0].entry.as_str(), rejected[0].field),
        ("service ns/web:http", "port")
    );
    let recorder = TestRecorder::default();
    recorder.run(|| rejected[0].emit());
    assert_eq!(
        recorder
            .counter("kube_ipvs_proxy_invalid_view_changes_total{field=port}"),
        1
    );
}

/// A release from a foreign server becomes label values of every
/// scrape: an empty or outsized one is refused, naming the field.
#[test]
fn a_release_is_taken_only_within_bounds() {
    let version = |major: &str, git_version: String| v1::KubernetesVersion {
        major: major.into(),
        minor: "37".into(),
        git_version,
    };
    let taken = decode_kubernetes(version("1", "v1.37.2".into())).unwrap();
    assert_eq!((taken.major.as_str(), taken.minor.as_str()), ("1", "37"));
    assert_eq!(taken.git_version, "v1.37.2");
    let empty = decode_kubernetes(version("1", String::new())).unwrap_err();
    assert_eq!(
        (empty.entry.as_str(), empty.field),
        ("kubernetes", "git_version")
    );
    let long =
        decode_kubernetes(version(&"1".repeat(129), "v1".into())).unwrap_err();
    assert_eq!(long.field, "major", "{long}");
    assert!(decode_kubernetes(version(&"1".repeat(128), "v1".into())).is_ok());
}
