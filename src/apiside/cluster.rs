//! The API side's picture of the cluster: the trackers run once, for no
//! node; every Node by name; and the view of each node that watches.

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
    time::SystemTime,
};

use crate::{
    model::{EndpointsMap, NodeInfo, ServicePortMap, ServicePortName},
    nodeview::{NodeView, SharedParts},
    source::store::{Kept, RecordChange},
    tracker::{endpoints::EndpointsChangeTracker, services::ServiceChangeTracker},
};

/// Slices are converted for no node: no endpoint is anybody's local one
/// until a node's view marks its own.
pub const NO_NODE: &str = "";

#[derive(Debug)]
pub struct Cluster {
    services: ServiceChangeTracker,
    endpoints: EndpointsChangeTracker,
    service_map: ServicePortMap,
    endpoints_map: EndpointsMap,
    nodes: HashMap<String, NodeInfo>,
    /// Nodes whose Node object changed since the last sync.
    nodes_changed: BTreeSet<String>,
    views: HashMap<String, NodeView>,
    shared: SharedParts,
}

fn record<R>(kept: &Option<Arc<Kept<R>>>) -> Option<&R> {
    kept.as_ref().map(|k| &k.record)
}

impl Cluster {
    pub fn new(start_time: SystemTime) -> Self {
        Self {
            services: ServiceChangeTracker::new(),
            endpoints: EndpointsChangeTracker::new(start_time),
            service_map: ServicePortMap::new(),
            endpoints_map: EndpointsMap::new(),
            nodes: HashMap::new(),
            nodes_changed: BTreeSet::new(),
            views: HashMap::new(),
            shared: SharedParts::default(),
        }
    }

    /// Takes one object's change, as the stores hand it on. Returns
    /// whether a sync has something to do.
    pub fn apply(&mut self, change: &RecordChange) -> bool {
        match change {
            RecordChange::Service((previous, current)) => {
                let Some(name) = current
                    .as_ref()
                    .or(previous.as_ref())
                    .map(|k| &k.record.name)
                else {
                    return false;
                };
                self.services.update(
                    name,
                    record(previous).map(|r| &r.ports),
                    record(current).map(|r| &r.ports),
                )
            }
            RecordChange::EndpointSlice((previous, current)) => {
                match (record(previous), record(current)) {
                    (_, Some(slice)) => {
                        self.endpoints.endpoint_slice_update(slice, false)
                    }
                    (Some(slice), None) => {
                        self.endpoints.endpoint_slice_update(slice, true)
                    }
                    (None, None) => false,
                }
            }
            RecordChange::Node((previous, current)) => {
                let Some(name) = record(current)
                    .or(record(previous))
                    .map(|n| n.name.clone())
                else {
                    return false;
                };
                let moved = match record(current) {
                    Some(node) => {
                        self.nodes.insert(name.clone(), node.clone())
                            != Some(node.clone())
                    }
                    None => self.nodes.remove(&name).is_some(),
                };
                if moved {
                    self.nodes_changed.insert(name);
                }
                moved
            }
        }
    }

    /// Checks the trackers out and brings every view up to date with the
    /// service ports that changed: the cost is the change times the
    /// number of watched nodes, not the cluster's size.
    pub fn sync(&mut self) {
        let services = self.services.checkout(&mut self.service_map);
        let endpoints = self.endpoints.checkout(&mut self.endpoints_map);
        let changed: BTreeSet<&ServicePortName> = services
            .changed_ports
            .iter()
            .chain(&endpoints.changed_ports)
            .collect();
        self.shared
            .forget(changed.iter().copied(), &self.service_map);
        for (name, view) in &mut self.views {
            if self.nodes_changed.contains(name) {
                view.set_node(
                    self.nodes.get(name).cloned(),
                    &self.service_map,
                    &self.endpoints_map,
                    &mut self.shared,
                );
            }
            view.update(
                changed.iter().copied(),
                &self.service_map,
                &self.endpoints_map,
                &mut self.shared,
            );
        }
        self.nodes_changed.clear();
    }

    /// The view of `node`, made on its first watch from everything known
    /// (the one time a node costs the cluster's size).
    pub fn view(&mut self, node: &str) -> &NodeView {
        let Self {
            views,
            nodes,
            service_map,
            endpoints_map,
            shared,
            ..
        } = self;
        views.entry(node.to_owned()).or_insert_with(|| {
            let mut view = NodeView::new(node);
            let info = nodes.get(node).cloned();
            let known = info.is_some();
            // A known node's zone is new to the view: that selects every
            // port already.
            view.set_node(info, service_map, endpoints_map, shared);
            if !known {
                view.update(service_map.keys(), service_map, endpoints_map, shared);
            }
            view
        })
    }
}
