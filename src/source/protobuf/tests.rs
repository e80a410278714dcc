//! The envelope, the frames and the conversions, on bytes encoded here
//! with the same declarations. Whether the declarations match the API
//! server's is for the host test against a real one (tests/api_protobuf.rs).

use k8s_openapi::{
    api::{
        core::v1::{Node, Service},
        discovery::v1::EndpointSlice,
    },
    apimachinery::pkg::util::intstr::IntOrString,
};
use pretty_assertions::assert_eq;
use prost::Message as _;

use super::{testing::enveloped, *};

fn service_message(name: &str) -> wire::Service {
    wire::Service {
        metadata: Some(wire::ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            resource_version: Some("7".into()),
            ..Default::default()
        }),
        spec: Some(wire::ServiceSpec {
            cluster_ip: Some("198.18.0.30".into()),
            cluster_ips: vec!["198.18.0.30".into()],
            ports: vec![
                wire::ServicePort {
                    name: Some("http".into()),
                    protocol: Some("TCP".into()),
                    port: Some(80),
                    target_port: Some(wire::IntOrString {
                        r#type: Some(1),
                        int_val: None,
                        str_val: Some("web".into()),
                    }),
                    ..Default::default()
                },
                wire::ServicePort {
                    port: Some(53),
                    target_port: Some(wire::IntOrString {
                        r#type: Some(0),
                        int_val: Some(5353),
                        str_val: None,
                    }),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }),
        status: None,
    }
}

#[test]
fn an_object_reads_out_of_its_envelope() {
    let svc: Service = object(&enveloped(&service_message("web"))).unwrap();
    assert_eq!(svc.metadata.name.as_deref(), Some("web"));
    assert_eq!(svc.metadata.resource_version.as_deref(), Some("7"));
    // Absent maps and lists are None, as the JSON decoder has them.
    assert_eq!(svc.metadata.labels, None);
    let spec = svc.spec.unwrap();
    assert_eq!(spec.external_ips, None);
    let ports = spec.ports.unwrap();
    assert_eq!(
        ports[0].target_port,
        Some(IntOrString::String("web".into()))
    );
    assert_eq!(ports[1].target_port, Some(IntOrString::Int(5353)));
    assert_eq!(ports[1].port, 53);
}

#[test]
fn an_envelope_that_is_not_one_is_an_error() {
    let bytes = enveloped(&service_message("web"));
    assert_eq!(object::<Service>(&bytes[1..]), Err(ProtobufError::NoMagic));
    assert!(matches!(
        object::<Service>(&bytes[..bytes.len() - 3]),
        Err(ProtobufError::Malformed { .. })
    ));
    let compressed = wire::Unknown {
        raw: Some(Vec::new()),
        content_encoding: Some("gzip".into()),
    };
    let bytes = [MAGIC, &compressed.encode_to_vec()].concat();
    assert!(matches!(
        object::<Service>(&bytes),
        Err(ProtobufError::Malformed {
            what: "runtime.Unknown",
            ..
        })
    ));
}

#[test]
fn a_list_page_gives_its_items_version_and_next_token() {
    let list = wire::ServiceList {
        metadata: Some(wire::ListMeta {
            resource_version: Some("100".into()),
            r#continue: Some("next".into()),
        }),
        items: vec![service_message("a"), service_message("b")],
    };
    let page = super::list::<Service>(&enveloped(&list)).unwrap();
    assert_eq!(page.resource_version.as_deref(), Some("100"));
    assert_eq!(page.continue_token.as_deref(), Some("next"));
    let names: Vec<_> = page
        .items
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    let last = wire::ServiceList {
        metadata: Some(wire::ListMeta {
            resource_version: Some("100".into()),
            r#continue: Some(String::new()),
        }),
        items: Vec::new(),
    };
    let page = super::list::<Service>(&enveloped(&last)).unwrap();
    assert_eq!(page.continue_token, None);
    assert!(page.items.is_empty());
}

#[test]
fn frames_come_whole_however_the_bytes_are_cut() {
    let stream = [
        testing::event("ADDED", enveloped(&service_message("a"))),
        testing::event("MODIFIED", enveloped(&service_message("b"))),
        testing::event("DELETED", enveloped(&service_message("c"))),
    ]
    .concat();
    for cut in [1, 3, 4, 5, 17, stream.len()] {
        let mut frames = Frames::default();
        let mut events = Vec::new();
        for chunk in stream.chunks(cut) {
            frames.push(chunk);
            while let Some(frame) = frames.next_frame().unwrap() {
                events.push(match watch_event::<Service>(frame).unwrap() {
                    WatchEvent::Added(s) => {
                        format!("added {}", s.metadata.name.unwrap())
                    }
                    WatchEvent::Modified(s) => {
                        format!("modified {}", s.metadata.name.unwrap())
                    }
                    WatchEvent::Deleted(s) => {
                        format!("deleted {}", s.metadata.name.unwrap())
                    }
                    other => format!("{other:?}"),
                });
            }
        }
        assert_eq!(events, ["added a", "modified b", "deleted c"], "cut {cut}");
        assert_eq!(frames.pending(), 0);
    }
}

#[test]
fn a_frame_longer_than_any_object_is_refused_before_it_is_read() {
    let mut frames = Frames::default();
    frames.push(&u32::MAX.to_be_bytes());
    assert_eq!(
        frames.next_frame(),
        Err(ProtobufError::FrameTooLarge(u32::MAX as usize))
    );
}

#[test]
fn bookmarks_and_errors_are_events_of_their_own() {
    let bookmark = wire::Service {
        metadata: Some(wire::ObjectMeta {
            resource_version: Some("4242".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let gone = wire::Status {
        status: Some("Failure".into()),
        message: Some("too old resource version: 1 (4242)".into()),
        reason: Some("Expired".into()),
        code: Some(410),
    };
    let stream = [
        testing::event("BOOKMARK", enveloped(&bookmark)),
        testing::event("ERROR", enveloped(&gone)),
        testing::event("SHRUG", enveloped(&bookmark)),
    ]
    .concat();
    let mut frames = Frames::default();
    frames.push(&stream);
    let first = frames.next_frame().unwrap().unwrap().to_vec();
    assert_eq!(
        watch_event::<Service>(&first),
        Ok(WatchEvent::Bookmark(Some("4242".into())))
    );
    let second = frames.next_frame().unwrap().unwrap().to_vec();
    assert_eq!(
        watch_event::<Service>(&second),
        Ok(WatchEvent::Error(Status {
            code: 410,
            reason: "Expired".into(),
            message: "too old resource version: 1 (4242)".into(),
        }))
    );
    let third = frames.next_frame().unwrap().unwrap().to_vec();
    assert!(matches!(
        watch_event::<Service>(&third),
        Err(ProtobufError::Malformed {
            what: "WatchEvent",
            ..
        })
    ));
}

#[test]
fn a_slice_and_a_node_convert_what_the_proxy_reads() {
    let slice = wire::EndpointSlice {
        metadata: Some(wire::ObjectMeta {
            name: Some("web-1".into()),
            labels: [("kubernetes.io/service-name".into(), "web".into())]
                .into(),
            ..Default::default()
        }),
        address_type: Some("IPv4".into()),
        endpoints: vec![wire::Endpoint {
            addresses: vec!["198.19.0.1".into()],
            conditions: Some(wire::EndpointConditions {
                ready: Some(false),
                serving: Some(true),
                terminating: Some(true),
            }),
            node_name: Some("node-a".into()),
            hints: Some(wire::EndpointHints {
                for_zones: vec![wire::Named {
                    name: Some("zone-a".into()),
                }],
                for_nodes: Vec::new(),
            }),
            ..Default::default()
        }],
        ports: vec![wire::EndpointPort {
            port: Some(8080),
            ..Default::default()
        }],
    };
    let slice: EndpointSlice = object(&enveloped(&slice)).unwrap();
    let endpoint = &slice.endpoints.as_ref().unwrap()[0];
    assert_eq!(endpoint.conditions.as_ref().unwrap().ready, Some(false));
    let hints = endpoint.hints.as_ref().unwrap();
    assert_eq!(hints.for_zones.as_ref().unwrap()[0].name, "zone-a");
    assert_eq!(hints.for_nodes, None);
    assert_eq!(slice.ports.unwrap()[0].port, Some(8080));

    let node = wire::Node {
        metadata: Some(wire::ObjectMeta {
            name: Some("node-a".into()),
            // Beyond what a timestamp holds: still a deletion.
            deletion_timestamp: Some(wire::Time {
                seconds: Some(i64::MAX),
                nanos: None,
            }),
            ..Default::default()
        }),
        spec: Some(wire::NodeSpec {
            pod_cidr: Some("198.19.0.0/24".into()),
            pod_cidrs: vec!["198.19.0.0/24".into()],
            taints: vec![wire::Taint {
                key: Some("k".into()),
                ..Default::default()
            }],
        }),
        status: Some(wire::NodeStatus {
            addresses: vec![wire::NodeAddress {
                r#type: Some("InternalIP".into()),
                address: Some("198.18.128.11".into()),
            }],
        }),
    };
    let node: Node = object(&enveloped(&node)).unwrap();
    assert!(node.metadata.deletion_timestamp.is_some());
    assert_eq!(node.spec.unwrap().taints.unwrap()[0].key, "k");
    assert_eq!(
        node.status.unwrap().addresses.unwrap()[0].address,
        "198.18.128.11"
    );
}

#[test]
fn empty_fields_that_json_omits_read_as_absent() {
    // Go writes these even when empty; its JSON leaves them out.
    let svc = wire::Service {
        metadata: Some(wire::ObjectMeta {
            name: Some("web".into()),
            namespace: Some(String::new()),
            ..Default::default()
        }),
        spec: Some(wire::ServiceSpec {
            cluster_ip: Some(String::new()),
            external_traffic_policy: Some(String::new()),
            health_check_node_port: Some(0),
            publish_not_ready_addresses: Some(false),
            ports: vec![wire::ServicePort {
                name: Some(String::new()),
                port: Some(80),
                node_port: Some(0),
                // A pointer in Go: an empty value is kept, as in JSON.
                app_protocol: Some(String::new()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let svc: Service = object(&enveloped(&svc)).unwrap();
    assert_eq!(svc.metadata.namespace, None);
    let spec = svc.spec.unwrap();
    assert_eq!(spec.cluster_ip, None);
    assert_eq!(spec.external_traffic_policy, None);
    assert_eq!(spec.health_check_node_port, None);
    assert_eq!(spec.publish_not_ready_addresses, None);
    let port = &spec.ports.unwrap()[0];
    assert_eq!((port.name.clone(), port.node_port), (None, None));
    assert_eq!(port.app_protocol.as_deref(), Some(""));
}
