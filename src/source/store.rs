//! Stores that apply watcher events and swap on relist, keeping of each
//! object only what the proxy reads of it.
//!
//! An object is converted when it arrives ([`Keep`]): a Service to its
//! ports, a slice to its endpoints, our Node to what the proxy reads of
//! it, with the conversion's problems reported once, then. The store keeps
//! that and the resourceVersion, never the object (whose managed fields,
//! annotations and unused fields are most of its size), so that every
//! event can be handed on as a (previous, current) pair, which is what the
//! change trackers consume. A relist (`Init` … `InitApply` … `InitDone`)
//! is buffered, converted, and swapped in whole; only its difference to
//! the old contents goes out, so a watcher restart that finds nothing new
//! costs the trackers nothing.

use crate::telemetry::events::ReportProblems as _;
use std::{collections::HashMap, fmt, sync::Arc};

use ::kube::{runtime::watcher::Event, Resource, ResourceExt};
use k8s_openapi::api::{
    core::v1::{Node, Service},
    discovery::v1::EndpointSlice,
};

use super::SourceEvent;
use crate::model::{
    node_info, Converted, NamespacedName, NodeInfo, ServiceRecord, SliceRecord,
};

#[cfg(test)]
mod tests;

/// What a store keeps of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept<R> {
    /// `namespace/name` (an empty namespace for cluster-scoped kinds).
    pub key: NamespacedName,
    pub resource_version: Option<String>,
    pub record: R,
}

/// The record a kept object holds, if any: a change's `previous` or
/// `current`, as the trackers take them.
pub fn record<R>(kept: &Option<Arc<Kept<R>>>) -> Option<&R> {
    kept.as_ref().map(|k| &k.record)
}

/// One object's change: `previous` is what the store held before (None
/// for an addition), `current` what it holds now (None for a deletion).
pub type Change<R> = (Option<Arc<Kept<R>>>, Option<Arc<Kept<R>>>);

/// How a kind's objects become what the proxy keeps of them.
pub trait Keep: Resource<DynamicType = ()> {
    type Record: PartialEq + fmt::Debug;

    /// Converts the object for the proxy on `node_name`; its problems
    /// come back to be reported once.
    fn convert(&self, node_name: &str) -> Converted<Self::Record>;
}

impl Keep for Service {
    type Record = ServiceRecord;

    fn convert(&self, _: &str) -> Converted<ServiceRecord> {
        ServiceRecord::convert(self)
    }
}

impl Keep for EndpointSlice {
    type Record = SliceRecord;

    fn convert(&self, node_name: &str) -> Converted<SliceRecord> {
        SliceRecord::convert(self, node_name)
    }
}

impl Keep for Node {
    type Record = NodeInfo;

    fn convert(&self, _: &str) -> Converted<NodeInfo> {
        node_info(self)
    }
}

/// What the store keeps of each object of one kind, keyed by
/// namespace/name.
pub struct Store<K: Keep> {
    node_name: Arc<str>,
    objects: HashMap<NamespacedName, Arc<Kept<K::Record>>>,
    /// Objects of a relist in progress; swapped in at `InitDone`.
    relist: Option<HashMap<NamespacedName, Arc<Kept<K::Record>>>>,
    /// A first list into an empty store: it has nothing to diff against,
    /// so its objects go out as they arrive.
    streaming: bool,
    synced: bool,
}

impl<K: Keep> fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("objects", &self.objects.len())
            .field("relisting", &self.relist.is_some())
            .field("synced", &self.synced)
            .finish()
    }
}

impl<K: Keep> Store<K> {
    /// A store for the proxy on `node_name` (slices' endpoints on it are
    /// local).
    pub fn new(node_name: Arc<str>) -> Self {
        Self {
            node_name,
            objects: HashMap::new(),
            relist: None,
            streaming: false,
            synced: false,
        }
    }

    /// True once a first relist has completed: before that the store may
    /// hold only part of what exists.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    #[cfg(test)]
    pub fn get(&self, key: &NamespacedName) -> Option<&Arc<Kept<K::Record>>> {
        self.objects.get(key)
    }

    /// Applies one watcher event and returns the changes it makes, in a
    /// deterministic order (by key) for relists.
    pub fn apply(&mut self, event: Event<K>) -> Vec<Change<K::Record>> {
        match event {
            Event::Apply(obj) => {
                let Some(key) = key_of(&obj) else {
                    return Vec::new();
                };
                let previous = self.objects.get(&key);
                if previous.is_some_and(|p| same_version(p, &obj)) {
                    return Vec::new();
                }
                let current = Arc::new(self.kept(key.clone(), &obj));
                let previous = self.objects.insert(key, current.clone());
                match previous {
                    Some(prev) if unchanged(&prev, &current) => Vec::new(),
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
            // The first list goes out object by object, so that the
            // trackers (and a node's desired state) keep up with it
            // rather than take it whole at its end; a later relist, or a
            // first one that began again, is diffed against what went
            // out.
            Event::Init if !self.synced && self.objects.is_empty() => {
                self.streaming = true;
                Vec::new()
            }
            Event::Init => {
                self.streaming = false;
                self.relist = Some(HashMap::new());
                Vec::new()
            }
            Event::InitApply(obj) if self.streaming => {
                self.apply(Event::Apply(obj))
            }
            Event::InitDone if self.streaming => {
                self.streaming = false;
                self.synced = true;
                Vec::new()
            }
            Event::InitApply(obj) => {
                if let Some(key) = key_of(&obj) {
                    // Unchanged objects keep what was kept: no conversion,
                    // no second report of their problems.
                    let kept = match self.objects.get(&key) {
                        Some(kept) if same_version(kept, &obj) => kept.clone(),
                        _ => Arc::new(self.kept(key.clone(), &obj)),
                    };
                    self.relist
                        .get_or_insert_with(HashMap::new)
                        .insert(key, kept);
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

    fn kept(&self, key: NamespacedName, obj: &K) -> Kept<K::Record> {
        Kept {
            key,
            resource_version: obj.meta().resource_version.clone(),
            record: obj.convert(&self.node_name).report(),
        }
    }
}

/// The API server bumps resourceVersion on every write, so equal versions
/// mean the same object and nothing needs converting again.
fn same_version<R, K: Resource>(kept: &Kept<R>, obj: &K) -> bool {
    kept.resource_version.is_some()
        && kept.resource_version == obj.meta().resource_version
}

/// The changes that turn `old` into `new`, sorted by key.
fn diff<R: PartialEq>(
    mut old: HashMap<NamespacedName, Arc<Kept<R>>>,
    new: &HashMap<NamespacedName, Arc<Kept<R>>>,
) -> Vec<Change<R>> {
    let mut changes: Vec<(NamespacedName, Change<R>)> = Vec::new();
    for (key, current) in new {
        match old.remove(key) {
            Some(prev) if unchanged(&prev, current) => {}
            prev => changes.push((key.clone(), (prev, Some(current.clone())))),
        }
    }
    changes
        .extend(old.into_iter().map(|(key, prev)| (key, (Some(prev), None))));
    changes.sort_by(|a, b| a.0.cmp(&b.0));
    changes.into_iter().map(|(_, change)| change).collect()
}

/// Every write bumps the resourceVersion, so a new one is a change (the
/// trackers count it, as upstream's count every update event) even when
/// nothing kept differs; without versions, only a different record is.
fn unchanged<R: PartialEq>(a: &Kept<R>, b: &Kept<R>) -> bool {
    match (&a.resource_version, &b.resource_version) {
        (Some(x), Some(y)) => x == y,
        _ => a.record == b.record,
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

/// One kept object's change, tagged with its kind: what the trackers
/// take.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordChange {
    Service(Change<ServiceRecord>),
    EndpointSlice(Change<SliceRecord>),
    Node(Change<NodeInfo>),
}

/// One API object's change, as tests and benchmarks state one:
/// [`SyncState::apply_objects`](crate::sync::SyncState::apply_objects)
/// converts it as the stores would and applies the [`RecordChange`].
#[cfg(any(test, feature = "test-support"))]
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
#[derive(Debug)]
pub struct Stores {
    pub services: Store<Service>,
    pub endpoint_slices: Store<EndpointSlice>,
    pub nodes: Store<Node>,
}

impl Stores {
    /// The stores of the proxy on `node_name`.
    pub fn new(node_name: &str) -> Self {
        let node_name: Arc<str> = node_name.into();
        Self {
            services: Store::new(node_name.clone()),
            endpoint_slices: Store::new(node_name.clone()),
            nodes: Store::new(node_name),
        }
    }

    pub fn apply(&mut self, event: SourceEvent) -> Vec<RecordChange> {
        match event {
            SourceEvent::Service(ev) => self
                .services
                .apply(ev)
                .into_iter()
                .map(RecordChange::Service)
                .collect(),
            SourceEvent::EndpointSlice(ev) => self
                .endpoint_slices
                .apply(ev)
                .into_iter()
                .map(RecordChange::EndpointSlice)
                .collect(),
            SourceEvent::Node(ev) => self
                .nodes
                .apply(ev)
                .into_iter()
                .map(RecordChange::Node)
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
