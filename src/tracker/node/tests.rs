use crate::telemetry::events::ReportProblems as _;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use pretty_assertions::assert_eq;

use super::*;
use crate::model::{convert::LABEL_TOPOLOGY_ZONE, fixtures::node};

fn ours(cidrs: &[&str], zone: &str) -> Node {
    node("node-a", |n| {
        if let Some(spec) = n.spec.as_mut() {
            spec.pod_cidrs =
                Some(cidrs.iter().map(|c| (*c).to_owned()).collect());
        }
        if !zone.is_empty() {
            n.metadata.labels = Some(BTreeMap::from([(
                LABEL_TOPOLOGY_ZONE.to_owned(),
                zone.to_owned(),
            )]));
        }
    })
}

fn info(cidrs: &[&str], zone: &str) -> NodeInfo {
    NodeInfo {
        name: "node-a".to_owned(),
        pod_cidrs: cidrs.iter().map(|c| c.parse().unwrap()).collect(),
        zone: zone.to_owned(),
        addresses: vec![],
        eligible: true,
    }
}

fn nets(cidrs: &[&str]) -> Vec<IpNet> {
    cidrs.iter().map(|c| c.parse().unwrap()).collect()
}

struct Case {
    name: &'static str,
    detect_local_node_cidr: bool,
    /// Changes fed in order, and what each returns.
    steps: Vec<(Step, NodeUpdate)>,
}

/// A change as a store hands it on: the object put, or the name deleted.
enum Step {
    Put(Box<Node>),
    Delete(&'static str),
}
use Step::Delete;

fn put(node: Node) -> Step {
    Step::Put(Box::new(node))
}

#[test]
fn node_tracker_table() {
    const A: &str = "198.19.1.0/24";
    const B: &str = "198.19.2.0/24";
    let cases = vec![
        Case {
            name: "first sight, repeat, zone change",
            detect_local_node_cidr: false,
            steps: vec![
                (put(ours(&[A], "")), NodeUpdate::Changed(info(&[A], ""))),
                (put(ours(&[A], "")), NodeUpdate::Unchanged),
                (
                    put(ours(&[A], "zone-a")),
                    NodeUpdate::Changed(info(&[A], "zone-a")),
                ),
            ],
        },
        Case {
            name: "other nodes are ignored",
            detect_local_node_cidr: true,
            steps: vec![
                (put(node("node-b", |_| {})), NodeUpdate::Unchanged),
                (Delete("node-b"), NodeUpdate::Unchanged),
            ],
        },
        Case {
            name: "another node's deletion leaves ours",
            detect_local_node_cidr: false,
            steps: vec![
                (put(ours(&[A], "")), NodeUpdate::Changed(info(&[A], ""))),
                (put(node("node-b", |_| {})), NodeUpdate::Unchanged),
                (Delete("node-b"), NodeUpdate::Unchanged),
                (put(ours(&[A], "")), NodeUpdate::Unchanged),
            ],
        },
        Case {
            name: "pod CIDR change is a plain change without NodeCIDR mode",
            detect_local_node_cidr: false,
            steps: vec![
                (put(ours(&[A], "")), NodeUpdate::Changed(info(&[A], ""))),
                (put(ours(&[B], "")), NodeUpdate::Changed(info(&[B], ""))),
            ],
        },
        Case {
            name: "NodeCIDR: first non-empty CIDRs adopted, change is fatal",
            detect_local_node_cidr: true,
            steps: vec![
                (put(ours(&[], "")), NodeUpdate::Changed(info(&[], ""))),
                (put(ours(&[A], "")), NodeUpdate::Changed(info(&[A], ""))),
                (
                    put(ours(&[A], "zone-a")),
                    NodeUpdate::Changed(info(&[A], "zone-a")),
                ),
                (
                    put(ours(&[B], "zone-a")),
                    NodeUpdate::PodCidrsChanged {
                        old: nets(&[A]),
                        new: nets(&[B]),
                    },
                ),
            ],
        },
        Case {
            name: "NodeCIDR: losing the CIDRs is a change too",
            detect_local_node_cidr: true,
            steps: vec![
                (put(ours(&[A], "")), NodeUpdate::Changed(info(&[A], ""))),
                (
                    put(ours(&[], "")),
                    NodeUpdate::PodCidrsChanged {
                        old: nets(&[A]),
                        new: vec![],
                    },
                ),
            ],
        },
        Case {
            name: "deletion, then a new node object",
            detect_local_node_cidr: false,
            steps: vec![
                (put(ours(&[A], "")), NodeUpdate::Changed(info(&[A], ""))),
                (Delete("node-a"), NodeUpdate::Deleted),
                (Delete("node-a"), NodeUpdate::Unchanged),
                (put(ours(&[A], "")), NodeUpdate::Changed(info(&[A], ""))),
            ],
        },
    ];
    for case in cases {
        let mut tracker =
            NodeTracker::new("node-a", case.detect_local_node_cidr);
        let mut store: BTreeMap<String, NodeInfo> = BTreeMap::new();
        for (i, (step, expected)) in case.steps.into_iter().enumerate() {
            let (previous, current) = match step {
                Step::Put(node) => {
                    let info = crate::model::node_info(&node).report();
                    (store.insert(info.name.clone(), info.clone()), Some(info))
                }
                Delete(name) => (store.remove(name), None),
            };
            assert_eq!(
                tracker.change(previous.as_ref(), current.as_ref()),
                expected,
                "{} (step {i})",
                case.name
            );
        }
    }
}

#[test]
fn accessors_follow_updates() {
    let mut tracker = NodeTracker::new("node-a", true);
    assert_eq!(tracker.node(), None);
    assert_eq!(tracker.pod_cidrs(), None);
    tracker.update(Some(
        &crate::model::node_info(&ours(&["198.19.1.0/24"], "zone-a")).report(),
    ));
    assert_eq!(tracker.node(), Some(&info(&["198.19.1.0/24"], "zone-a")));
    assert_eq!(tracker.pod_cidrs(), Some(&nets(&["198.19.1.0/24"])[..]));
}
