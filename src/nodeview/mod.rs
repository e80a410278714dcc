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
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
};

use crate::{
    model::{
        EndpointInfo, EndpointsMap, NodeInfo, ServicePortInfo,
        ServicePortMap, ServicePortName,
    },
    selection::{select, NodeEndpoints, NodeEndpointsMap},
};

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

/// One entry of a node's view.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// The node's own Node object, which the node no longer watches.
    Node,
    Service(ServicePortName),
    Endpoints(ServicePortName),
}

/// An entry's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Node(Arc<NodeInfo>),
    Service(Arc<ServicePortInfo>),
    Endpoints(Arc<NodeEndpoints>),
}

/// What a node is told about one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Set(Key, Item),
    Delete(Key),
}

/// What a node is sent to catch up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// Replace everything held with `changes` (all of them `Set`).
    pub full: bool,
    pub changes: Vec<Change>,
    /// The revision the node has once it applied `changes`.
    pub revision: u64,
}

#[derive(Debug, Clone)]
struct Entry {
    revision: u64,
    /// `None`: deleted at `revision`, kept so that a node resuming from
    /// an earlier revision hears of the deletion.
    item: Option<Item>,
}

/// How many deletions a view remembers, by default, beyond which a node
/// resuming from before the oldest of them gets a full state.
pub const TOMBSTONES: usize = 4096;

/// One node's view.
#[derive(Debug)]
pub struct NodeView {
    node_name: String,
    node: Option<Arc<NodeInfo>>,
    revision: u64,
    entries: HashMap<Key, Entry>,
    /// Every entry's key by its revision (one key per revision: each
    /// change takes a new one).
    by_revision: BTreeMap<u64, Key>,
    /// The deleted entries' keys by revision, oldest first forgotten.
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
            node: None,
            revision: 0,
            entries: HashMap::new(),
            by_revision: BTreeMap::new(),
            tombstones: BTreeMap::new(),
            max_tombstones,
            horizon: 0,
        }
    }

    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The node's zone, which topology hints are matched against.
    fn zone(&self) -> &str {
        self.node.as_ref().map_or("", |n| n.zone.as_str())
    }

    /// Brings the `changed` service ports up to date. The cost follows
    /// the number of changed ports.
    pub fn update<'a>(
        &mut self,
        changed: impl IntoIterator<Item = &'a ServicePortName>,
        services: &ServicePortMap,
        endpoints: &EndpointsMap,
    ) {
        for name in changed {
            let svc = services.get(name);
            let selected = svc.map(|svc| {
                let eps = endpoints.get(name).map(Vec::as_slice).unwrap_or(&[]);
                Arc::new(node_endpoints(svc, eps, &self.node_name, self.zone()))
            });
            self.put(
                Key::Service(name.clone()),
                svc.map(|svc| Item::Service(svc.clone())),
            );
            self.put(Key::Endpoints(name.clone()), selected.map(Item::Endpoints));
        }
    }

    /// Takes the node's Node object (`None` once deleted). A new zone
    /// changes the selection of every port, so all are looked at again.
    pub fn set_node(
        &mut self,
        node: Option<NodeInfo>,
        services: &ServicePortMap,
        endpoints: &EndpointsMap,
    ) {
        let node = node.map(Arc::new);
        if node == self.node {
            return;
        }
        let zone_moved =
            node.as_ref().map(|n| &n.zone) != self.node.as_ref().map(|n| &n.zone);
        self.node = node.clone();
        self.put(Key::Node, node.map(Item::Node));
        if zone_moved {
            let names: Vec<ServicePortName> = services
                .keys()
                .chain(self.entries.keys().filter_map(|k| match k {
                    Key::Service(name) => Some(name),
                    _ => None,
                }))
                .cloned()
                .collect();
            self.update(&names, services, endpoints);
        }
    }

    /// Records `item` under `key` with a new revision, unless it is what
    /// the entry already holds.
    fn put(&mut self, key: Key, item: Option<Item>) {
        let old = self.entries.get(&key);
        match (old.and_then(|e| e.item.as_ref()), &item) {
            (None, None) => return,
            (Some(a), Some(b)) if a == b => return,
            _ => {}
        }
        self.revision += 1;
        if let Some(old) = old {
            self.by_revision.remove(&old.revision);
            self.tombstones.remove(&old.revision);
        }
        if item.is_none() {
            self.tombstones.insert(self.revision, key.clone());
        }
        self.by_revision.insert(self.revision, key.clone());
        self.entries.insert(
            key,
            Entry {
                revision: self.revision,
                item,
            },
        );
        self.forget_old_tombstones();
    }

    fn forget_old_tombstones(&mut self) {
        while self.tombstones.len() > self.max_tombstones {
            let Some((revision, key)) = self.tombstones.pop_first() else {
                return;
            };
            self.by_revision.remove(&revision);
            self.entries.remove(&key);
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
            },
            _ => self.full(),
        }
    }

    /// Everything the node programs, as a starting node receives it.
    pub fn full(&self) -> Update {
        let mut keys: Vec<&Key> = self
            .entries
            .iter()
            .filter(|(_, e)| e.item.is_some())
            .map(|(k, _)| k)
            .collect();
        keys.sort();
        Update {
            full: true,
            changes: keys.into_iter().map(|k| self.change(k)).collect(),
            revision: self.revision,
        }
    }

    fn change(&self, key: &Key) -> Change {
        match &self.entries[key].item {
            Some(item) => Change::Set(key.clone(), item.clone()),
            None => Change::Delete(key.clone()),
        }
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
    /// The revision held; `None` before the first update.
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
        for change in update.changes {
            match change {
                Change::Set(_, Item::Node(node)) => {
                    applied.node_changed |= self.node.as_ref() != Some(&node);
                    self.node = Some(node);
                }
                Change::Set(Key::Service(name), Item::Service(svc)) => {
                    self.services.insert(name.clone(), svc);
                    applied.changed_ports.insert(name);
                }
                Change::Set(Key::Endpoints(name), Item::Endpoints(eps)) => {
                    self.endpoints.insert(name.clone(), eps);
                    applied.changed_ports.insert(name);
                }
                // A key with another kind's item: nothing sends it.
                Change::Set(..) => {}
                Change::Delete(Key::Node) => {
                    applied.node_changed |= self.node.take().is_some();
                }
                Change::Delete(Key::Service(name)) => {
                    self.services.remove(&name);
                    applied.changed_ports.insert(name);
                }
                Change::Delete(Key::Endpoints(name)) => {
                    self.endpoints.remove(&name);
                    applied.changed_ports.insert(name);
                }
            }
        }
        self.revision = Some(update.revision);
        applied
    }
}
