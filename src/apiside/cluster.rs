//! The API side's picture of the cluster: the trackers run once, for no
//! node; every Node by name; and the view of each node that watches.

use std::{
    collections::{BTreeSet, HashMap},
    time::SystemTime,
};

use crate::{
    model::{EndpointsMap, NodeInfo, ServicePortMap, ServicePortName},
    nodeview::{CatchUp, Position, Update, Views},
    source::store::{record, RecordChange},
    tracker::{
        self, endpoints::EndpointsChangeTracker, services::ServiceChangeTracker,
    },
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
    views: Views,
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
            views: Views::default(),
        }
    }

    /// Takes one object's change, as the stores hand it on. Returns
    /// whether a sync has something to do.
    pub fn apply(&mut self, change: &RecordChange) -> bool {
        let RecordChange::Node((previous, current)) = change else {
            return tracker::track(
                &mut self.services,
                &mut self.endpoints,
                change,
            );
        };
        let Some(name) =
            record(current).or(record(previous)).map(|n| n.name.clone())
        else {
            return false;
        };
        let moved = match record(current) {
            Some(node) if self.nodes.get(&name) == Some(node) => false,
            Some(node) => {
                self.nodes.insert(name.clone(), node.clone());
                true
            }
            None => self.nodes.remove(&name).is_some(),
        };
        if moved {
            self.nodes_changed.insert(name);
        }
        moved
    }

    /// Checks the trackers out and brings the views up to date with the
    /// service ports that changed: a change costs an update per zone and
    /// per node it concerns, not per node of the cluster. Returns what
    /// the nodes it left alone lack, per zone, when that fits a message
    /// of `max` changes.
    pub fn sync(&mut self, max: usize) -> CatchUp<Update> {
        let begun = self.views.begin();
        let services = self.services.checkout(&mut self.service_map);
        let endpoints = self.endpoints.checkout(&mut self.endpoints_map);
        for name in std::mem::take(&mut self.nodes_changed) {
            if self.views.has(&name) {
                self.views.set_node(
                    &name,
                    self.nodes.get(&name).cloned(),
                    &self.service_map,
                    &self.endpoints_map,
                );
            }
        }
        let changed: BTreeSet<&ServicePortName> = services
            .changed_ports
            .iter()
            .chain(&endpoints.changed_ports)
            .collect();
        self.views.update(
            changed,
            &self.service_map,
            &self.endpoints_map,
            &endpoints.last_change_trigger_times,
        );
        self.views.catch_up(begun, max)
    }

    /// How many syncs there were.
    pub fn syncs(&self) -> u64 {
        self.views.syncs()
    }

    /// The zone `node`'s view is made for, once it has one.
    pub fn zone_of(&self, node: &str) -> Option<&str> {
        self.views.zone_of(node)
    }

    /// The views' revision: a node synced at it or later holds every
    /// change made so far.
    pub fn revision(&self) -> u64 {
        self.views.current()
    }

    /// How many nodes have a view.
    pub fn views(&self) -> usize {
        self.views.nodes()
    }

    /// What `node`, holding `revision` (none: starting), lacks, whole;
    /// `None` when it lacks nothing, unless `always`. Its view is made on
    /// its first watch (the one time a node costs the cluster's size).
    #[cfg(any(test, feature = "test-support"))]
    pub fn update_for(
        &mut self,
        node: &str,
        revision: Option<u64>,
        always: bool,
    ) -> Option<Update> {
        // One part as large as it needs: the walk a watch makes, whole.
        let position = Position::Held(revision);
        self.next_for(node, position, always, usize::MAX)
            .map(|(update, _)| update)
    }

    /// The next part of what `node`, standing at `position`, lacks, at
    /// most about `max` changes ([`Views::next`]); its view is made on
    /// its first watch.
    pub fn next_for(
        &mut self,
        node: &str,
        position: Position,
        always: bool,
        max: usize,
    ) -> Option<(Update, Position)> {
        self.watched(node);
        self.views.next(node, position, always, max)
    }

    /// Makes `node`'s view if it has none.
    fn watched(&mut self, node: &str) {
        if !self.views.has(node) {
            self.views.set_node(
                node,
                self.nodes.get(node).cloned(),
                &self.service_map,
                &self.endpoints_map,
            );
        }
    }

    /// Everything `node` programs now, its view made if needed.
    #[cfg(any(test, feature = "test-support"))]
    pub fn full(&mut self, node: &str) -> Update {
        let _ = self.update_for(node, None, true);
        self.views.full(node)
    }
}
