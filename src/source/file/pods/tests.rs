use std::path::Path;

use pretty_assertions::assert_eq;

use super::*;
use crate::source::file::{self, parse};

fn example(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/plan")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

/// `(slice name, endpoint addresses, port)` per slice, sorted.
fn layout(snapshot: &Snapshot) -> Vec<(String, Vec<String>, Option<i32>)> {
    let mut out: Vec<_> = snapshot
        .endpoint_slices
        .iter()
        .map(|s| {
            let mut addrs: Vec<String> = s
                .endpoints
                .iter()
                .flatten()
                .flat_map(|e| e.addresses.clone())
                .collect();
            addrs.sort();
            let port = s
                .ports
                .as_ref()
                .and_then(|p| p.first())
                .and_then(|p| p.port);
            (s.metadata.name.clone().unwrap_or_default(), addrs, port)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn pods_become_slices_grouped_by_their_resolved_ports() {
    let mut snapshot = parse(&example("pods-named-ports.yaml")).unwrap();
    assert!(snapshot.endpoint_slices.is_empty());
    derive_endpoint_slices(&mut snapshot, &[]);
    let got: Vec<(Vec<String>, Option<i32>)> = layout(&snapshot)
        .into_iter()
        .map(|(_, a, p)| (a, p))
        .collect();
    assert_eq!(
        got,
        [
            (
                vec!["198.19.0.2".to_string(), "198.19.0.3".to_string()],
                Some(8080)
            ),
            (vec!["198.19.1.4".to_string()], Some(9090)),
        ]
    );
    for slice in &snapshot.endpoint_slices {
        let labels = slice.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_SERVICE_NAME], "web");
        assert_eq!(labels[LABEL_MANAGED_BY], CONTROLLER_NAME);
    }
}

#[test]
fn feeding_back_the_last_output_keeps_slices_stable_across_edits() {
    let text = example("pods-named-ports.yaml");
    let mut first = parse(&text).unwrap();
    derive_endpoint_slices(&mut first, &[]);

    // Delete pod web-b: its endpoint leaves, the slices keep their names.
    let start = text.find("  name: web-b").unwrap();
    let doc_start = text[..start].rfind("---").unwrap();
    let doc_end = start + text[start..].find("---").unwrap();
    let edited = format!("{}{}", &text[..doc_start], &text[doc_end..]);
    let mut second = parse(&edited).unwrap();
    derive_endpoint_slices(&mut second, &first.endpoint_slices);

    let names = |s: &Snapshot| -> Vec<String> {
        layout(s).into_iter().map(|(n, _, _)| n).collect()
    };
    assert_eq!(names(&first), names(&second));
    let after: Vec<Vec<String>> =
        layout(&second).into_iter().map(|(_, a, _)| a).collect();
    assert!(after.contains(&vec!["198.19.0.2".to_string()]), "{after:?}");
}

#[test]
fn a_file_without_pods_keeps_its_slices_as_written() {
    let mut snapshot = parse(&example("named-ports.yaml")).unwrap();
    let before = snapshot.clone();
    derive_endpoint_slices(&mut snapshot, &[]);
    assert_eq!(snapshot, before);
}

#[test]
fn a_malformed_pod_is_skipped_and_the_others_still_count() {
    let text = example("pods-named-ports.yaml").replace(
        "  name: web-c\n",
        "  name: web-c\n  generation: not-a-number\n",
    );
    let mut snapshot = parse(&text).unwrap();
    derive_endpoint_slices(&mut snapshot, &[]);
    let addrs: Vec<Vec<String>> =
        layout(&snapshot).into_iter().map(|(_, a, _)| a).collect();
    assert_eq!(
        addrs,
        [vec!["198.19.0.2".to_string(), "198.19.0.3".to_string()]]
    );
}

#[test]
fn load_derives_slices_for_plan() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/plan/pods-named-ports.yaml");
    let snapshot = file::load(&path).unwrap();
    assert_eq!(snapshot.endpoint_slices.len(), 2);
}

/// The API server lists Pods as a `PodList` whose items say neither kind
/// nor apiVersion: they are Pods all the same. (Found by fuzzing: an item
/// of a typed list of another kind was kept without its kind, and did not
/// read back once printed.)
#[test]
fn pods_in_a_pod_list_count_though_their_items_leave_out_their_kind() {
    let written = parse(&example("pods-named-ports.yaml")).unwrap();
    let mut documents: Vec<String> = written
        .services
        .iter()
        .map(|svc| serde_json::to_string(svc).unwrap())
        .chain(
            written
                .nodes
                .iter()
                .map(|n| serde_json::to_string(n).unwrap()),
        )
        .collect();
    let items: Vec<serde_json::Value> = written
        .others
        .iter()
        .filter(|o| o["kind"] == "Pod")
        .map(|pod| {
            let mut pod = pod.clone();
            let fields = pod.as_object_mut().unwrap();
            fields.remove("kind");
            fields.remove("apiVersion");
            pod
        })
        .collect();
    assert_eq!(items.len(), 3);
    documents.push(
        serde_json::json!({"apiVersion": "v1", "kind": "PodList", "items": items})
            .to_string(),
    );
    let mut listed = parse(&documents.join("\n---\n")).unwrap();
    assert!(listed
        .others
        .iter()
        .all(|o| o["kind"] == "Pod" && o["apiVersion"] == "v1"));
    let mut written = written;
    derive_endpoint_slices(&mut written, &[]);
    derive_endpoint_slices(&mut listed, &[]);
    assert!(!written.endpoint_slices.is_empty());
    // Slice names are generated: compare what they hold.
    let held = |s: &Snapshot| {
        layout(s)
            .into_iter()
            .map(|(_, a, p)| (a, p))
            .collect::<Vec<_>>()
    };
    assert_eq!(held(&listed), held(&written));
}
