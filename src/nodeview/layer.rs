//! A map of service ports whose entries keep the revision of their last
//! change; a deletion stays a while as a tombstone, so that a reader that
//! last looked before it still hears of it.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use crate::model::ServicePortName;

#[derive(Debug)]
pub(super) struct Entry<T> {
    pub revision: u64,
    /// `None`: deleted (in an overlay, handed back to the layer below)
    /// at `revision`.
    pub value: Option<Arc<T>>,
}

#[derive(Debug)]
pub(super) struct Layer<T> {
    entries: HashMap<Arc<ServicePortName>, Entry<T>>,
    by_revision: BTreeMap<u64, Arc<ServicePortName>>,
    tombstones: BTreeMap<u64, Arc<ServicePortName>>,
    max_tombstones: usize,
    /// A reader at a revision below this may have missed a tombstone
    /// that is forgotten.
    horizon: u64,
}

impl<T: PartialEq> Layer<T> {
    pub fn new(max_tombstones: usize) -> Self {
        Self {
            entries: HashMap::new(),
            by_revision: BTreeMap::new(),
            tombstones: BTreeMap::new(),
            max_tombstones,
            horizon: 0,
        }
    }

    /// Sets `name` to `value` (`None`: deletes it) with the next of
    /// `revision`, unless that is what it holds. Deleting what is not
    /// there changes nothing.
    pub fn put(
        &mut self,
        name: &Arc<ServicePortName>,
        value: Option<Arc<T>>,
        revision: &mut u64,
    ) {
        let old = self.entries.get(&**name);
        if old.and_then(|e| e.value.as_ref()) == value.as_ref() {
            return;
        }
        *revision += 1;
        if let Some(old) = self.entries.remove(&**name) {
            self.by_revision.remove(&old.revision);
            self.tombstones.remove(&old.revision);
        }
        if value.is_none() {
            self.tombstones.insert(*revision, name.clone());
        }
        self.by_revision.insert(*revision, name.clone());
        self.entries.insert(
            name.clone(),
            Entry {
                revision: *revision,
                value,
            },
        );
        while self.tombstones.len() > self.max_tombstones {
            let Some((old, name)) = self.tombstones.pop_first() else {
                break;
            };
            self.by_revision.remove(&old);
            self.entries.remove(&*name);
            self.horizon = old;
        }
    }

    pub fn get(&self, name: &ServicePortName) -> Option<&Arc<T>> {
        self.entries.get(name).and_then(|e| e.value.as_ref())
    }

    /// The revision of `name`'s last change, deletions included, while
    /// the layer remembers it.
    pub fn revision_of(&self, name: &ServicePortName) -> Option<u64> {
        self.entries.get(name).map(|e| e.revision)
    }

    /// Whether the entry is there and not deleted.
    pub fn holds(&self, name: &ServicePortName) -> bool {
        self.get(name).is_some()
    }

    /// Every entry that is not deleted.
    #[cfg(any(test, feature = "test-support"))]
    pub fn live(
        &self,
    ) -> impl Iterator<Item = (&Arc<ServicePortName>, &Arc<T>)> {
        self.entries
            .iter()
            .filter_map(|(name, e)| Some((name, e.value.as_ref()?)))
    }

    /// The entries whose last change is after `after` and at most
    /// `upto`, deletions only `with_deletions`, in the order of those
    /// changes, each with its revision: a reader can walk the layer in
    /// steps while it changes, as what changes meanwhile moves past
    /// `upto`.
    pub fn between(
        &self,
        after: u64,
        upto: u64,
        with_deletions: bool,
    ) -> impl Iterator<Item = (u64, &Arc<ServicePortName>, Option<&Arc<T>>)>
    {
        let range = (after < upto).then_some(after + 1..=upto);
        range
            .into_iter()
            .flat_map(|range| self.by_revision.range(range))
            .filter_map(move |(revision, name)| {
                let value = self.entries.get(&**name)?.value.as_ref();
                (value.is_some() || with_deletions)
                    .then_some((*revision, name, value))
            })
    }

    pub fn horizon(&self) -> u64 {
        self.horizon
    }

    /// The revision of the latest change, 0 before any; a deletion
    /// already forgotten counts too.
    pub fn last(&self) -> u64 {
        let kept = self.by_revision.keys().next_back().copied();
        kept.unwrap_or(0).max(self.horizon)
    }
}
