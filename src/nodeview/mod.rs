//! The API side's view of one node: what that node programs, kept with a
//! revision per entry so that a node is sent only what changed since the
//! revision it has.
//!
//! Every entry remembers the revision of its last change, deletions
//! included (as tombstones, forgotten after a while). What a node lacks
//! is then "every entry changed after its revision": a key changed ten
//! times while the node was slow is sent once, in its latest form, so a
//! slow node costs at most the size of its view, never a queue of
//! changes. A node that reconnects resumes from its revision as long as
//! the tombstones it may have missed are still kept, and starts from a
//! full state otherwise.

use std::{
    borrow::Cow,
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::Arc,
};

use crate::{
    model::{
        EndpointInfo, EndpointsMap, NodeInfo, ServicePortInfo,
        ServicePortMap, ServicePortName,
    },
    selection::{select, NodeEndpoints, NodeEndpointsMap},
};

pub mod wire;

#[cfg(test)]
mod tests;

/// One entry of a node's view.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// The node's own Node object, which the node no longer watches.
    Node,
    Service(Arc<ServicePortName>),
    Endpoints(Arc<ServicePortName>),
}

/// What a node is told about one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Node(Arc<NodeInfo>),
    Service(Arc<ServicePortName>, Arc<ServicePortInfo>),
    Endpoints(Arc<ServicePortName>, Arc<NodeEndpoints>),
    Delete(Key),
}

/// What a node is sent to catch up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// Replace everything held with `changes` (none of them a deletion).
    pub full: bool,
    pub changes: Vec<Change>,
    /// The revision the node has once it applied `changes`.
    pub revision: u64,
    /// The last part of what the node lacked: it now holds a consistent
    /// state at `revision`. An update split for the wire is synced in
    /// its last part only.
    pub synced: bool,
}

impl Update {
    /// Splits the update into parts of at most `max_changes` changes (at
    /// least one part), the first one full if the update is, the last one
    /// synced if the update is.
    pub fn split(self, max_changes: usize) -> Vec<Update> {
        let Update {
            full,
            mut changes,
            revision,
            synced,
        } = self;
        let max = max_changes.max(1);
        let mut parts = Vec::with_capacity(changes.len() / max + 1);
        loop {
            let rest = changes.split_off(changes.len().min(max));
            parts.push(Update {
                full: full && parts.is_empty(),
                changes,
                revision,
                synced: false,
            });
            if rest.is_empty() {
                break;
            }
            changes = rest;
        }
        if let Some(last) = parts.last_mut() {
            last.synced = synced;
        }
        parts
    }
}

#[derive(Debug)]
struct Entry<T> {
    revision: u64,
    /// `None`: deleted at `revision`, kept so that a node resuming from
    /// an earlier revision hears of the deletion.
    value: Option<Arc<T>>,
}

impl<T> Entry<T> {
    fn live(&self) -> Option<Arc<T>> {
        self.value.clone()
    }
}

/// How many deletions a view remembers, by default, beyond which a node
/// resuming from before the oldest of them gets a full state.
pub const TOMBSTONES: usize = 4096;

/// One node's view.
#[derive(Debug)]
pub struct NodeView {
    node_name: String,
    revision: u64,
    node: Option<Entry<NodeInfo>>,
    services: HashMap<Arc<ServicePortName>, Entry<ServicePortInfo>>,
    endpoints: HashMap<Arc<ServicePortName>, Entry<NodeEndpoints>>,
    /// Every entry's key by its revision (one key per revision: each
    /// change takes a new one).
    by_revision: BTreeMap<u64, Key>,
    /// The deleted entries' keys by revision, the oldest forgotten first.
    tombstones: BTreeMap<u64, Key>,
    max_tombstones: usize,
    /// A node whose revision is below this may have missed a deletion
    /// that is forgotten: it must start again from a full state.
    horizon: u64,
}

impl NodeView {
    pub fn new(node_name: impl Into<String>) -> Self {
        Self::with_tombstones(node_name, TOMBSTONES)
    }

    pub fn with_tombstones(
        node_name: impl Into<String>,
        max_tombstones: usize,
    ) -> Self {
        Self {
            node_name: node_name.into(),
            revision: 0,
            node: None,
            services: HashMap::new(),
            endpoints: HashMap::new(),
            by_revision: BTreeMap::new(),
            tombstones: BTreeMap::new(),
            max_tombstones,
            horizon: 0,
        }
    }

    pub fn revision(&self) -> u64 {
        self.revision
    }

    fn node(&self) -> Option<&Arc<NodeInfo>> {
        self.node.as_ref().and_then(|e| e.value.as_ref())
    }

    /// Brings the `changed` service ports up to date. The cost follows
    /// the number of changed ports.
    pub fn update<'a>(
        &mut self,
        changed: impl IntoIterator<Item = &'a ServicePortName>,
        services: &ServicePortMap,
        endpoints: &EndpointsMap,
        shared: &mut SharedParts,
    ) {
        for name in changed {
            let name = shared.name(name);
            let svc = services.get(&*name);
            let selected = svc.map(|svc| {
                let eps = endpoints.get(&*name).map(Vec::as_slice).unwrap_or(&[]);
                let zone = self.node().map_or("", |n| n.zone.as_str());
                shared.select(&name, svc, eps, &self.node_name, zone)
            });
            let old = self.services.remove(&*name);
            let key = Key::Service(name.clone());
            if let Some(entry) = self.next(key, old, svc.cloned()) {
                self.services.insert(name.clone(), entry);
            }
            let old = self.endpoints.remove(&*name);
            let key = Key::Endpoints(name.clone());
            if let Some(entry) = self.next(key, old, selected) {
                self.endpoints.insert(name, entry);
            }
        }
        self.forget_old_tombstones();
    }

    /// Takes the node's Node object (`None` once deleted). A new zone
    /// changes the selection of every port, so all are looked at again.
    pub fn set_node(
        &mut self,
        node: Option<NodeInfo>,
        services: &ServicePortMap,
        endpoints: &EndpointsMap,
        shared: &mut SharedParts,
    ) {
        let node = node.map(Arc::new);
        let zone = |n: Option<&Arc<NodeInfo>>| n.map(|n| n.zone.clone());
        let zone_moved = zone(node.as_ref()) != zone(self.node());
        let old = self.node.take();
        self.node = self.next(Key::Node, old, node);
        if zone_moved {
            let names: Vec<ServicePortName> = services
                .keys()
                .chain(self.services.keys().map(|name| &**name))
                .cloned()
                .collect();
            self.update(&names, services, endpoints, shared);
        }
        self.forget_old_tombstones();
    }

    /// The entry `key` becomes with `value`: `old` itself when it holds
    /// that already, else an entry with a new revision.
    fn next<T: PartialEq>(
        &mut self,
        key: Key,
        old: Option<Entry<T>>,
        value: Option<Arc<T>>,
    ) -> Option<Entry<T>> {
        if old.as_ref().and_then(|e| e.value.as_ref()) == value.as_ref() {
            return old;
        }
        self.revision += 1;
        if let Some(old) = old {
            self.by_revision.remove(&old.revision);
            self.tombstones.remove(&old.revision);
        }
        if value.is_none() {
            self.tombstones.insert(self.revision, key.clone());
        }
        self.by_revision.insert(self.revision, key);
        Some(Entry {
            revision: self.revision,
            value,
        })
    }

    fn forget_old_tombstones(&mut self) {
        while self.tombstones.len() > self.max_tombstones {
            let Some((revision, key)) = self.tombstones.pop_first() else {
                return;
            };
            self.by_revision.remove(&revision);
            match key {
                Key::Node => self.node = None,
                Key::Service(name) => {
                    self.services.remove(&name);
                }
                Key::Endpoints(name) => {
                    self.endpoints.remove(&name);
                }
            }
            self.horizon = revision;
        }
    }

    /// What a node that has `revision` (none: a node that starts) needs
    /// to reach the current revision.
    pub fn since(&self, revision: Option<u64>) -> Update {
        match revision {
            Some(r) if r >= self.horizon && r <= self.revision => Update {
                full: false,
                changes: self
                    .by_revision
                    .range(r + 1..)
                    .map(|(_, key)| self.change(key))
                    .collect(),
                revision: self.revision,
                synced: true,
            },
            _ => self.full(),
        }
    }

    /// Everything the node programs, as a starting node receives it.
    pub fn full(&self) -> Update {
        let mut keys: Vec<&Key> = self
            .by_revision
            .values()
            .filter(|key| !matches!(self.change(key), Change::Delete(_)))
            .collect();
        keys.sort();
        Update {
            full: true,
            changes: keys.into_iter().map(|k| self.change(k)).collect(),
            revision: self.revision,
            synced: true,
        }
    }

    fn change(&self, key: &Key) -> Change {
        let change = match key {
            Key::Node => self.node.as_ref().and_then(Entry::live).map(Change::Node),
            Key::Service(name) => self
                .services
                .get(name)
                .and_then(Entry::live)
                .map(|svc| Change::Service(name.clone(), svc)),
            Key::Endpoints(name) => self
                .endpoints
                .get(name)
                .and_then(Entry::live)
                .map(|eps| Change::Endpoints(name.clone(), eps)),
        };
        change.unwrap_or_else(|| Change::Delete(key.clone()))
    }
}

/// What the views of all nodes share: the port names their keys hold,
/// and the selection of each port for the nodes of a zone that have none
/// of its endpoints and no hint naming them, which is the same for all of
/// them (most nodes, for most ports).
#[derive(Debug, Default)]
pub struct SharedParts {
    names: HashSet<Arc<ServicePortName>>,
    by_zone: HashMap<Arc<ServicePortName>, HashMap<String, Arc<NodeEndpoints>>>,
}

impl SharedParts {
    /// Drops what was shared of the `changed` ports: their selections are
    /// made again from what they are now.
    pub fn forget<'a>(
        &mut self,
        changed: impl IntoIterator<Item = &'a ServicePortName>,
        services: &ServicePortMap,
    ) {
        for name in changed {
            self.by_zone.remove(name);
            if !services.contains_key(name) {
                // Views may still hold it (tombstones): they keep it
                // alive, and a port that comes back gets a new one.
                self.names.remove(name);
            }
        }
    }

    fn name(&mut self, name: &ServicePortName) -> Arc<ServicePortName> {
        if let Some(shared) = self.names.get(name) {
            return shared.clone();
        }
        let shared = Arc::new(name.clone());
        self.names.insert(shared.clone());
        shared
    }

    fn select(
        &mut self,
        name: &Arc<ServicePortName>,
        svc: &ServicePortInfo,
        endpoints: &[Arc<EndpointInfo>],
        node_name: &str,
        zone: &str,
    ) -> Arc<NodeEndpoints> {
        let own = endpoints.iter().any(|ep| {
            ep.node_name.as_deref() == Some(node_name)
                || ep.node_hints.contains(node_name)
        });
        if own {
            return Arc::new(node_endpoints(svc, endpoints, node_name, zone));
        }
        self.by_zone
            .entry(name.clone())
            .or_default()
            .entry(zone.to_owned())
            .or_insert_with(|| {
                Arc::new(node_endpoints(svc, endpoints, node_name, zone))
            })
            .clone()
    }
}

/// What the node `node_name` in `zone` programs of a port's `endpoints`,
/// which the API side converted for no node: the node's own endpoints
/// are marked local first, then the proxy's own selection runs.
pub fn node_endpoints(
    svc: &ServicePortInfo,
    endpoints: &[Arc<EndpointInfo>],
    node_name: &str,
    zone: &str,
) -> NodeEndpoints {
    let on_node = |ep: &EndpointInfo| ep.node_name.as_deref() == Some(node_name);
    let localized: Cow<'_, [Arc<EndpointInfo>]> =
        if endpoints.iter().any(|ep| on_node(ep)) {
            Cow::Owned(
                endpoints
                    .iter()
                    .map(|ep| {
                        if on_node(ep) && !ep.is_local {
                            let mut local = EndpointInfo::clone(ep);
                            local.is_local = true;
                            Arc::new(local)
                        } else {
                            ep.clone()
                        }
                    })
                    .collect(),
            )
        } else {
            Cow::Borrowed(endpoints)
        };
    select(svc, &localized, node_name, zone)
}

/// The node side: what a node holds of its view, as received.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Received {
    pub node: Option<Arc<NodeInfo>>,
    pub services: ServicePortMap,
    pub endpoints: NodeEndpointsMap,
    /// The revision of the consistent state held; `None` before the
    /// first, and while a full state arrives in parts.
    pub revision: Option<u64>,
}

/// What applying an [`Update`] changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The service ports whose service or endpoints changed.
    pub changed_ports: BTreeSet<ServicePortName>,
    pub node_changed: bool,
}

impl Received {
    pub fn apply(&mut self, update: Update) -> Applied {
        let mut applied = Applied::default();
        if update.full {
            let old = std::mem::take(self);
            applied.changed_ports.extend(
                old.services.into_keys().chain(old.endpoints.into_keys()),
            );
            applied.node_changed = old.node.is_some();
        }
        // Changes held past the revision are harmless: resuming from it
        // sends them again, and setting an entry twice sets it once.
        for change in update.changes {
            match change {
                Change::Node(node) => {
                    applied.node_changed |= self.node.as_ref() != Some(&node);
                    self.node = Some(node);
                }
                Change::Service(name, svc) => {
                    self.services.insert((*name).clone(), svc);
                    applied.changed_ports.insert((*name).clone());
                }
                Change::Endpoints(name, eps) => {
                    self.endpoints.insert((*name).clone(), eps);
                    applied.changed_ports.insert((*name).clone());
                }
                Change::Delete(Key::Node) => {
                    applied.node_changed |= self.node.take().is_some();
                }
                Change::Delete(Key::Service(name)) => {
                    self.services.remove(&*name);
                    applied.changed_ports.insert((*name).clone());
                }
                Change::Delete(Key::Endpoints(name)) => {
                    self.endpoints.remove(&*name);
                    applied.changed_ports.insert((*name).clone());
                }
            }
        }
        if update.synced {
            self.revision = Some(update.revision);
        }
        applied
    }
}
