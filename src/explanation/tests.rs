use std::path::Path;

use pretty_assertions::assert_eq;

use super::*;
use crate::{
    selection::reasons::Unused,
    source::file,
    sync::{self, NodeSettings},
};

/// An endpoint's address and why it is not used (`None`: used).
type Use = (String, Option<Unused>);

/// `explain` of `service` in the example `name` (examples/plan), as
/// node-a: each frontend's endpoints.
fn reasons(name: &str, service: &str) -> Vec<(String, Vec<Use>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/plan")
        .join(name);
    let snapshot = file::load(&path).unwrap();
    let state =
        sync::synced(&snapshot, "node-a", &NodeSettings::default(), None);
    let (namespace, name) = service.split_once('/').unwrap();
    let explained = explain(&state, &NamespacedName::new(namespace, name))
        .unwrap_or_else(|| panic!("{service} not found"));
    assert!(explained.all_endpoints_known);
    explained
        .ports
        .iter()
        .flat_map(|p| &p.frontends)
        .map(|f| {
            (
                format!("{} {}:{}", f.kind, f.address, f.port),
                f.endpoints
                    .iter()
                    .map(|e| (e.address.to_string(), e.reason))
                    .collect(),
            )
        })
        .collect()
}

fn used(address: &str) -> Use {
    (address.to_owned(), None)
}

fn not(address: &str, why: Unused) -> Use {
    (address.to_owned(), Some(why))
}

#[test]
fn a_local_policy_leaves_out_the_other_nodes() {
    assert_eq!(
        reasons("internal-traffic-local.yaml", "monitoring/agent"),
        [(
            "clusterIP 198.18.0.40:4317".to_owned(),
            vec![used("198.19.0.7"), not("198.19.1.7", Unused::NotLocal)]
        )]
    );
}

#[test]
fn zone_hints_leave_out_the_other_zone() {
    assert_eq!(
        reasons("topology-hints.yaml", "default/api"),
        [(
            "clusterIP 198.18.0.50:80".to_owned(),
            vec![
                used("198.19.0.8"),
                not("198.19.1.8", Unused::OtherZone),
                used("198.19.2.8"),
            ]
        )]
    );
}

#[test]
fn with_nothing_ready_the_serving_terminating_are_used() {
    assert_eq!(
        reasons("terminating.yaml", "default/drain"),
        [(
            "clusterIP 198.18.0.60:80".to_owned(),
            vec![
                used("198.19.0.9"),
                used("198.19.1.9"),
                not("198.19.2.9", Unused::Terminating),
            ]
        )]
    );
}

#[test]
fn a_copy_left_out_of_the_merge_is_a_duplicate() {
    assert_eq!(
        reasons("duplicate-endpoints.yaml", "default/reused"),
        [(
            "clusterIP 198.18.0.90:80".to_owned(),
            vec![
                used("198.19.0.11"),
                used("198.19.1.12"),
                not("198.19.0.11", Unused::Duplicate),
            ]
        )]
    );
}

#[test]
fn a_service_the_state_lacks_is_not_found() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/plan/nodeport.yaml");
    let snapshot = file::load(&path).unwrap();
    let state =
        sync::synced(&snapshot, "node-a", &NodeSettings::default(), None);
    assert_eq!(
        explain(&state, &NamespacedName::new("default", "nosuch")),
        None
    );
}
