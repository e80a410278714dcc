//! Object stores that apply watcher events and swap on relist.
//!
//! A store remembers the last object seen per namespace/name so that every
//! event can be handed on as a (previous, current) pair, which is what the
//! change trackers consume. A relist (`Init` … `InitDone`) is buffered and
//! swapped in whole; only its difference to the old contents goes out, so a
//! watcher restart that finds nothing new costs the trackers nothing.

use std::{collections::HashMap, fmt, sync::Arc};

use ::kube::{runtime::watcher::Event, Resource, ResourceExt};
use k8s_openapi::api::{
    core::v1::{Node, Service},
    discovery::v1::EndpointSlice,
};

use super::SourceEvent;
use crate::model::NamespacedName;

#[cfg(test)]
mod tests;

/// One object's change: `previous` is what the store held before (None for
/// an addition), `current` what it holds now (None for a deletion).
pub type Change<K> = (Option<Arc<K>>, Option<Arc<K>>);

/// The objects of one kind, keyed by namespace/name (an empty namespace for
/// cluster-scoped kinds).
pub struct Store<K> {
    objects: HashMap<NamespacedName, Arc<K>>,
    /// Objects of a relist in progress; swapped in at `InitDone`.
    relist: Option<HashMap<NamespacedName, Arc<K>>>,
    synced: bool,
}

impl<K> Default for Store<K> {
    fn default() -> Self {
        Self {
            objects: HashMap::new(),
            relist: None,
            synced: false,
        }
    }
}

impl<K> fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("objects", &self.objects.len())
            .field("relisting", &self.relist.is_some())
            .field("synced", &self.synced)
            .finish()
    }
}

impl<K> Store<K>
where
    K: Resource<DynamicType = ()> + PartialEq,
{
    pub fn new() -> Self {
        Self::default()
    }

    /// True once a first relist has completed: before that the store may
    /// hold only part of what exists.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    pub fn get(&self, key: &NamespacedName) -> Option<&Arc<K>> {
        self.objects.get(key)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&NamespacedName, &Arc<K>)> {
        self.objects.iter()
    }

    /// Applies one watcher event and returns the changes it makes, in a
    /// deterministic order (by key) for relists.
    pub fn apply(&mut self, event: Event<K>) -> Vec<Change<K>> {
        match event {
            Event::Apply(obj) => {
                let Some(key) = key_of(&obj) else {
                    return Vec::new();
                };
                let current = Arc::new(obj);
                let previous = self.objects.insert(key, current.clone());
                match previous {
                    Some(prev) if unchanged(&*prev, &*current) => Vec::new(),
                    previous => vec![(previous, Some(current))],
                }
            }
            Event::Delete(obj) => {
                let Some(key) = key_of(&obj) else {
                    return Vec::new();
                };
                match self.objects.remove(&key) {
                    Some(prev) => vec![(Some(prev), None)],
                    // Nothing was handed on for it, so nothing to take back.
                    None => Vec::new(),
                }
            }
            Event::Init => {
                self.relist = Some(HashMap::new());
                Vec::new()
            }
            Event::InitApply(obj) => {
                if let Some(key) = key_of(&obj) {
                    self.relist
                        .get_or_insert_with(HashMap::new)
                        .insert(key, Arc::new(obj));
                }
                Vec::new()
            }
            Event::InitDone => {
                let relisted = self.relist.take().unwrap_or_default();
                let old = std::mem::replace(&mut self.objects, relisted);
                self.synced = true;
                diff(old, &self.objects)
            }
        }
    }
}

/// The changes that turn `old` into `new`, sorted by key.
fn diff<K: Resource + PartialEq>(
    mut old: HashMap<NamespacedName, Arc<K>>,
    new: &HashMap<NamespacedName, Arc<K>>,
) -> Vec<Change<K>> {
    let mut changes: Vec<(NamespacedName, Change<K>)> = Vec::new();
    for (key, current) in new {
        match old.remove(key) {
            Some(prev) if unchanged(&*prev, &**current) => {}
            prev => changes.push((key.clone(), (prev, Some(current.clone())))),
        }
    }
    changes
        .extend(old.into_iter().map(|(key, prev)| (key, (Some(prev), None))));
    changes.sort_by(|a, b| a.0.cmp(&b.0));
    changes.into_iter().map(|(_, change)| change).collect()
}

/// The API server bumps resourceVersion on every write, so equal versions
/// mean the same object; objects without one (from a file) are compared
/// whole.
fn unchanged<K: Resource + PartialEq>(a: &K, b: &K) -> bool {
    match (&a.meta().resource_version, &b.meta().resource_version) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Objects without a name cannot be told apart: they are dropped with a
/// warning rather than all collapsing onto one key.
fn key_of<K: Resource<DynamicType = ()>>(obj: &K) -> Option<NamespacedName> {
    let name = obj.meta().name.as_deref().unwrap_or_default();
    if name.is_empty() {
        tracing::warn!(
            kind = %K::kind(&()),
            namespace = obj.namespace().unwrap_or_default(),
            "ignoring an object without metadata.name"
        );
        return None;
    }
    Some(NamespacedName::new(
        obj.namespace().unwrap_or_default(),
        name,
    ))
}

/// One object's change, tagged with its kind.
#[derive(Debug, Clone, PartialEq)]
pub enum ObjectChange {
    Service {
        previous: Option<Arc<Service>>,
        current: Option<Arc<Service>>,
    },
    EndpointSlice {
        previous: Option<Arc<EndpointSlice>>,
        current: Option<Arc<EndpointSlice>>,
    },
    Node {
        previous: Option<Arc<Node>>,
        current: Option<Arc<Node>>,
    },
}

/// The stores of the three kinds the proxy reads.
#[derive(Debug, Default)]
pub struct Stores {
    pub services: Store<Service>,
    pub endpoint_slices: Store<EndpointSlice>,
    pub nodes: Store<Node>,
}

impl Stores {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn apply(&mut self, event: SourceEvent) -> Vec<ObjectChange> {
        match event {
            SourceEvent::Service(ev) => self
                .services
                .apply(ev)
                .into_iter()
                .map(|(previous, current)| ObjectChange::Service {
                    previous,
                    current,
                })
                .collect(),
            SourceEvent::EndpointSlice(ev) => self
                .endpoint_slices
                .apply(ev)
                .into_iter()
                .map(|(previous, current)| ObjectChange::EndpointSlice {
                    previous,
                    current,
                })
                .collect(),
            SourceEvent::Node(ev) => self
                .nodes
                .apply(ev)
                .into_iter()
                .map(|(previous, current)| ObjectChange::Node {
                    previous,
                    current,
                })
                .collect(),
        }
    }

    /// The proxy programs nothing before both Services and EndpointSlices
    /// have been listed once, as upstream waits for both informers: a sync
    /// on half the picture would tear down what it cannot see yet.
    pub fn ready(&self) -> bool {
        self.services.is_synced() && self.endpoint_slices.is_synced()
    }
}
