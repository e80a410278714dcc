//! State files may list Pods instead of EndpointSlices: the slices are then
//! derived as kube-controller-manager's EndpointSlice controller would
//! write them, so that an example or a benchmark can be written in terms
//! of pods and still exercise real slice layouts (port groups, 100 per
//! slice, several slices per service).

use std::collections::HashMap;

use k8s_openapi::api::{
    core::v1::{Pod, Service},
    discovery::v1::EndpointSlice,
};

use super::Snapshot;
use crate::{
    endpointslice::{
        desired_slices, is_controller_slice_of, ReconcileConfig,
        CONTROLLER_NAME, LABEL_MANAGED_BY, LABEL_SERVICE_NAME,
    },
    model::NamespacedName,
    telemetry::INVALID_OBJECTS_TOTAL,
};

#[cfg(test)]
mod tests;

/// Replaces the controller-managed slices of every Service with the ones
/// derived from the file's Pods. `previous` is this function's output for
/// the last version of the file: passing it back keeps slice names and
/// layout stable across edits, as the controller minimises churn. A file
/// without Pods is left as it is.
pub fn derive_endpoint_slices(
    snapshot: &mut Snapshot,
    previous: &[EndpointSlice],
) {
    let pods = typed_pods(&snapshot.others);
    if pods.is_empty() {
        return;
    }
    let pods = PodIndex::new(&pods);
    let config = ReconcileConfig::default();

    let (mut in_file, mut kept) =
        group_controller_slices(std::mem::take(&mut snapshot.endpoint_slices));
    let (mut from_before, _) = group_controller_slices(previous.to_vec());

    for service in &snapshot.services {
        let key = service_key(service);
        // Slices written in the file are what the controller wrote last;
        // failing those, what we derived last time.
        let existing: Vec<EndpointSlice> = in_file
            .remove(&key)
            .or_else(|| from_before.remove(&key))
            .unwrap_or_default()
            .into_iter()
            .filter(|s| is_controller_slice_of(service, s))
            .collect();
        let candidates = pods.candidates(service);
        let (slices, errors) = desired_slices(
            service,
            &candidates,
            &snapshot.nodes,
            &existing,
            &config,
        );
        for error in errors {
            tracing::warn!("state file: {error}");
            metrics::counter!(
                INVALID_OBJECTS_TOTAL,
                "kind" => "Pod",
                "reason" => error.metric_label()
            )
            .increment(1);
        }
        kept.extend(slices);
    }
    // Controller slices of services the file no longer has are gone, as
    // the controller garbage-collects them with their owner.
    snapshot.endpoint_slices = kept;
}

fn service_key(service: &Service) -> NamespacedName {
    NamespacedName::new(
        service.metadata.namespace.clone().unwrap_or_default(),
        service.metadata.name.clone().unwrap_or_default(),
    )
}

/// Splits slices into the controller's, by service, and all others.
fn group_controller_slices(
    slices: Vec<EndpointSlice>,
) -> (
    HashMap<NamespacedName, Vec<EndpointSlice>>,
    Vec<EndpointSlice>,
) {
    let mut grouped: HashMap<NamespacedName, Vec<EndpointSlice>> =
        HashMap::new();
    let mut others = Vec::new();
    for slice in slices {
        let labels = slice.metadata.labels.as_ref();
        let managed = labels
            .and_then(|l| l.get(LABEL_MANAGED_BY))
            .is_some_and(|m| m == CONTROLLER_NAME);
        match labels.and_then(|l| l.get(LABEL_SERVICE_NAME)) {
            Some(name) if managed => {
                let key = NamespacedName::new(
                    slice.metadata.namespace.clone().unwrap_or_default(),
                    name.clone(),
                );
                grouped.entry(key).or_default().push(slice);
            }
            _ => others.push(slice),
        }
    }
    (grouped, others)
}

/// The file's Pods; a malformed one is reported by name and skipped.
fn typed_pods(others: &[serde_json::Value]) -> Vec<Pod> {
    others
        .iter()
        .filter(|v| v.get("kind").and_then(|k| k.as_str()) == Some("Pod"))
        .filter_map(|v| match serde_json::from_value::<Pod>(v.clone()) {
            Ok(mut pod) => {
                pod.metadata
                    .namespace
                    .get_or_insert_with(|| "default".into());
                Some(pod)
            }
            Err(e) => {
                let meta = v.get("metadata");
                let field = |f: &str| {
                    meta.and_then(|m| m.get(f))
                        .and_then(|n| n.as_str())
                        .unwrap_or("?")
                        .to_string()
                };
                tracing::warn!(
                    "state file: skipping Pod {}/{}: {e}",
                    field("namespace"),
                    field("name")
                );
                metrics::counter!(
                    INVALID_OBJECTS_TOTAL,
                    "kind" => "Pod",
                    "reason" => "malformed"
                )
                .increment(1);
                None
            }
        })
        .collect()
}

/// Pods by namespace and label, so that each service looks only at pods
/// carrying one of its selector's labels instead of every pod in the file.
struct PodIndex<'a> {
    by_label: HashMap<(&'a str, &'a str, &'a str), Vec<&'a Pod>>,
}

impl<'a> PodIndex<'a> {
    fn new(pods: &'a [Pod]) -> Self {
        let mut by_label: HashMap<_, Vec<&Pod>> = HashMap::new();
        for pod in pods {
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            for (k, v) in pod.metadata.labels.iter().flatten() {
                by_label
                    .entry((ns, k.as_str(), v.as_str()))
                    .or_default()
                    .push(pod);
            }
        }
        Self { by_label }
    }

    /// A superset of the service's pods (those with its first selector
    /// label); the reconciler applies the whole selector.
    fn candidates(&self, service: &Service) -> Vec<Pod> {
        let ns = service.metadata.namespace.as_deref().unwrap_or_default();
        let first = service
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .and_then(|s| s.iter().next());
        match first {
            Some((k, v)) => self
                .by_label
                .get(&(ns, k.as_str(), v.as_str()))
                .map(|pods| pods.iter().map(|p| (*p).clone()).collect())
                .unwrap_or_default(),
            None => Vec::new(),
        }
    }
}
