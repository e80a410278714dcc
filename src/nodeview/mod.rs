//! Each node's view of the cluster, as the API side serves it: its Node,
//! its service ports, and per port the endpoints it programs, selected
//! for it (`NodeEndpoints`); the changes a node is sent to catch up
//! ([`Update`]); and what the node holds of it ([`Received`]).
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
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::SystemTime,
};

use crate::{
    model::{
        EndpointInfo, NamespacedName, NodeInfo, ServicePortInfo,
        ServicePortMap, ServicePortName,
    },
    selection::{select, NodeEndpoints, NodeEndpointsMap},
};

pub mod endpoint;
mod layer;
mod views;
pub mod wire;

pub use views::{CatchUp, Position, Views};

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

/// Per service, the `last-change-trigger-time`s of the EndpointSlice
/// changes behind what a node is sent, for its network programming
/// latency (kube-proxy's `lastChangeTriggerTimes`).
pub type TriggerTimes = BTreeMap<NamespacedName, Vec<SystemTime>>;

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
    /// The trigger times of the endpoints changes among `changes`, in a
    /// catch-up only: a full state is what a node starts from (or starts
    /// over from), and its times were observed already, or are from
    /// before the node started. Of a change merged into a later one
    /// while the node was slow, only the later one's times come.
    pub trigger_times: TriggerTimes,
}

impl Update {
    /// Splits the update into parts of at most `max_changes` changes (at
    /// least one part), the first one full if the update is, the last one
    /// synced if the update is.
    #[cfg(test)]
    pub fn split(self, max_changes: usize) -> Vec<Update> {
        let Update {
            full,
            mut changes,
            revision,
            synced,
            trigger_times,
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
                trigger_times: TriggerTimes::new(),
            });
            if rest.is_empty() {
                break;
            }
            changes = rest;
        }
        // The times count once the changes are programmed, which is
        // after the last part at the earliest.
        if let Some(last) = parts.last_mut() {
            last.synced = synced;
            last.trigger_times = trigger_times;
        }
        parts
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
    let on_node = |ep: &EndpointInfo| {
        !node_name.is_empty() && ep.node_name.as_deref() == Some(node_name)
    };
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

/// What applying an [`Update`] changed, kept apart as the service and
/// endpoints trackers report it, so that a port is not looked at twice.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The service ports whose service changed.
    pub services: BTreeSet<ServicePortName>,
    /// The service ports whose endpoints changed.
    pub endpoints: BTreeSet<ServicePortName>,
    pub node_changed: bool,
}

impl Applied {
    /// The service ports whose service or endpoints changed.
    #[cfg(test)]
    pub fn changed_ports(&self) -> BTreeSet<ServicePortName> {
        self.services.union(&self.endpoints).cloned().collect()
    }
}

impl Received {
    pub fn apply(&mut self, update: Update) -> Applied {
        let mut applied = Applied::default();
        if update.full {
            let old = std::mem::take(self);
            applied.services.extend(old.services.into_keys());
            applied.endpoints.extend(old.endpoints.into_keys());
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
                    applied.services.insert((*name).clone());
                }
                Change::Endpoints(name, eps) => {
                    self.endpoints.insert((*name).clone(), eps);
                    applied.endpoints.insert((*name).clone());
                }
                Change::Delete(Key::Node) => {
                    applied.node_changed |= self.node.take().is_some();
                }
                Change::Delete(Key::Service(name)) => {
                    self.services.remove(&*name);
                    applied.services.insert((*name).clone());
                }
                Change::Delete(Key::Endpoints(name)) => {
                    self.endpoints.remove(&*name);
                    applied.endpoints.insert((*name).clone());
                }
            }
        }
        if update.synced {
            self.revision = Some(update.revision);
        }
        applied
    }
}
