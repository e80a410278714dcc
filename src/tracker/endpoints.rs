//! EndpointSliceCache and EndpointsChangeTracker, as upstream's
//! `endpointslicecache.go` and `endpointschangetracker.go`.
//!
//! Slices are kept per service and per slice name, once as applied at the
//! last checkout and once as pending since then, because an endpoint may
//! move from one slice to another and must not vanish while only one of
//! the two updates has arrived. A checkout merges the slices of only the
//! services that have pending slices, so its cost follows the change.

use std::{
    collections::{hash_map::Entry, BTreeMap, HashMap, HashSet},
    net::IpAddr,
    sync::Arc,
    time::SystemTime,
};

#[cfg(test)]
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::{
    model::{
        EndpointInfo, EndpointSliceInfo, EndpointsMap, NamespacedName,
        Protocol, ServicePortName, SliceRecord,
    },
    telemetry::{self as names, handles},
};

#[cfg(test)]
mod tests;

/// The applied and pending slices of one service. Pending `None` means
/// the slice is to be removed. Ordered by name so that merging is
/// deterministic.
#[derive(Debug, Default)]
struct SliceTracker {
    applied: BTreeMap<String, Arc<EndpointSliceInfo>>,
    pending: BTreeMap<String, Option<Arc<EndpointSliceInfo>>>,
}

/// The endpoints of one service before and after a checkout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointsChange {
    pub service: NamespacedName,
    pub previous: EndpointsMap,
    pub current: EndpointsMap,
}

/// Caches the slices of every service; see the module documentation.
#[derive(Debug, Default)]
pub struct EndpointSliceCache {
    services: HashMap<NamespacedName, SliceTracker>,
    /// Services with pending slices: a checkout visits only these.
    dirty: HashSet<NamespacedName>,
}

impl EndpointSliceCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a slice as pending (`None`: removed). Returns whether this
    /// differs from what is pending or, if nothing is, applied.
    pub fn update_pending(
        &mut self,
        service: &NamespacedName,
        slice_name: &str,
        info: Option<Arc<EndpointSliceInfo>>,
    ) -> bool {
        let tracker = match self.services.entry(service.clone()) {
            Entry::Occupied(entry) => entry.into_mut(),
            // Removing a slice we never saw changes nothing.
            Entry::Vacant(_) if info.is_none() => return false,
            Entry::Vacant(entry) => entry.insert(SliceTracker::default()),
        };
        let changed = match tracker.pending.get(slice_name) {
            Some(pending) => pending.as_deref() != info.as_deref(),
            None => match tracker.applied.get(slice_name) {
                Some(applied) => Some(&**applied) != info.as_deref(),
                None => info.is_some(),
            },
        };
        if changed {
            tracker.pending.insert(slice_name.to_owned(), info);
            self.dirty.insert(service.clone());
        }
        changed
    }

    /// Number of services with pending slices.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.dirty.len()
    }

    /// The copies of `service`'s endpoints that the applied slices hold
    /// more than once and the merge left out, by port.
    pub fn dropped_copies(
        &self,
        service: &NamespacedName,
    ) -> HashMap<ServicePortName, Vec<Arc<EndpointInfo>>> {
        let mut copies: HashMap<_, Vec<_>> = HashMap::new();
        if let Some(tracker) = self.services.get(service) {
            merge_slices_dropping(tracker.applied.values(), |key, ep| {
                copies.entry(key.clone()).or_default().push(Arc::clone(ep));
            });
        }
        copies
    }

    /// Applies the pending slices and returns, for each service that had
    /// some, its endpoints before and after.
    pub fn checkout_changes(&mut self) -> Vec<EndpointsChange> {
        let mut changes = Vec::with_capacity(self.dirty.len());
        for service in self.dirty.drain() {
            let Some(tracker) = self.services.get_mut(&service) else {
                continue;
            };
            let previous = merge_slices(tracker.applied.values());
            for (name, pending) in std::mem::take(&mut tracker.pending) {
                match pending {
                    Some(info) => {
                        tracker.applied.insert(name, info);
                    }
                    None => {
                        tracker.applied.remove(&name);
                    }
                }
            }
            let current = merge_slices(tracker.applied.values());
            if tracker.applied.is_empty() {
                self.services.remove(&service);
            }
            changes.push(EndpointsChange {
                service,
                previous,
                current,
            });
        }
        changes
    }
}

/// Merges the slices of one service into per-port endpoint lists, as
/// upstream's `endpointInfoByServicePort`: an `ip:port` present in several
/// slices (an endpoint moving between slices, or a terminating pod whose
/// IP was reused) is kept once, preferring a non-terminating copy. The
/// rule is upstream's: a later copy replaces an earlier one unless the
/// later one is terminating. Upstream visits slices in map order, so ties
/// between two running copies are undefined there; here slices are
/// visited in name order, making the later-named slice win and the result
/// independent of event order. Lists come out sorted by address and
/// port.
pub fn merge_slices<'a>(
    slices: impl IntoIterator<Item = &'a Arc<EndpointSliceInfo>>,
) -> EndpointsMap {
    merge_slices_dropping(slices, |_, _| {})
}

/// [`merge_slices`], handing each copy of an endpoint that the merge
/// leaves out to `dropped`: one rule for what is kept and what `explain`
/// reports as a duplicate.
fn merge_slices_dropping<'a>(
    slices: impl IntoIterator<Item = &'a Arc<EndpointSliceInfo>>,
    mut dropped: impl FnMut(&ServicePortName, &Arc<EndpointInfo>),
) -> EndpointsMap {
    type Kept = BTreeMap<(IpAddr, u16), Arc<EndpointInfo>>;
    let mut by_port: HashMap<ServicePortName, (Kept, Vec<Arc<EndpointInfo>>)> =
        HashMap::new();
    for slice in slices {
        for (key, endpoints) in slice.endpoints_per_port() {
            let (kept, left_out) = by_port.entry(key).or_default();
            for endpoint in endpoints {
                match kept.entry((endpoint.ip, endpoint.port)) {
                    std::collections::btree_map::Entry::Vacant(entry) => {
                        entry.insert(Arc::clone(endpoint));
                    }
                    std::collections::btree_map::Entry::Occupied(mut entry) => {
                        left_out.push(if endpoint.terminating {
                            Arc::clone(endpoint)
                        } else {
                            entry.insert(Arc::clone(endpoint))
                        });
                    }
                }
            }
        }
    }
    by_port
        .into_iter()
        .filter(|(_, (kept, _))| !kept.is_empty())
        .map(|(key, (kept, left_out))| {
            for ep in &left_out {
                dropped(&key, ep);
            }
            (key, kept.into_values().collect())
        })
        .collect()
}

/// A UDP endpoint whose conntrack entries may be stale (upstream's
/// `ServiceEndpoint`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServiceEndpoint {
    pub service_port: ServicePortName,
    pub endpoint: Arc<EndpointInfo>,
}

/// What a checkout changed in the [`EndpointsMap`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EndpointsUpdateResult {
    /// Services whose endpoints changed.
    pub updated_services: HashSet<NamespacedName>,
    /// Every port key whose endpoint list was added, removed or modified.
    pub changed_ports: HashSet<ServicePortName>,
    /// UDP endpoints that were serving and are gone or changed, whose
    /// conntrack entries must be flushed.
    pub deleted_udp_endpoints: Vec<ServiceEndpoint>,
    /// UDP service ports that went from no serving endpoint to some:
    /// conntrack may hold entries that black-hole their traffic.
    pub newly_active_udp_services: HashSet<ServicePortName>,
    /// Whether a changed service has UDP ports before or after: newer
    /// upstream releases replace the two lists above by this flag and a
    /// full conntrack scan (`conntrack.CleanStaleEntries`).
    pub conntrack_cleanup_required: bool,
    /// Trigger times of the slice changes since the last checkout, for
    /// the network programming latency metric.
    pub last_change_trigger_times: HashMap<NamespacedName, Vec<SystemTime>>,
}

impl EndpointsUpdateResult {
    /// This checkout's result followed by `next`'s, as one: an endpoint
    /// flushed twice, or a port active twice over, costs a flush that
    /// finds nothing.
    pub fn merge(&mut self, next: EndpointsUpdateResult) {
        self.updated_services.extend(next.updated_services);
        self.changed_ports.extend(next.changed_ports);
        self.deleted_udp_endpoints
            .extend(next.deleted_udp_endpoints);
        self.newly_active_udp_services
            .extend(next.newly_active_udp_services);
        self.conntrack_cleanup_required |= next.conntrack_cleanup_required;
        for (service, times) in next.last_change_trigger_times {
            (self.last_change_trigger_times.entry(service).or_default())
                .extend(times);
        }
    }
}

/// Tracks EndpointSlice changes between syncs.
#[derive(Debug)]
pub struct EndpointsChangeTracker {
    cache: EndpointSliceCache,
    last_change_trigger_times: HashMap<NamespacedName, Vec<SystemTime>>,
    /// Trigger times before this are from before we started: reporting
    /// them would count the proxy's start-up as programming latency.
    start_time: SystemTime,
}

impl EndpointsChangeTracker {
    pub fn new(start_time: SystemTime) -> Self {
        Self {
            cache: EndpointSliceCache::new(),
            last_change_trigger_times: HashMap::new(),
            start_time,
        }
    }

    /// Records an added or updated slice, or a deleted one (`removed`).
    /// Returns true when this update changed what the next sync must do.
    pub fn endpoint_slice_update(
        &mut self,
        slice: &SliceRecord,
        removed: bool,
    ) -> bool {
        let Some((service, slice_name)) = &slice.keys else {
            return false;
        };
        let info = match (removed, &slice.info) {
            (true, _) => None,
            (false, Some(info)) => Some(Arc::clone(info)),
            // Not a slice kube-proxy uses; its problems were reported
            // when it arrived.
            (false, None) => return false,
        };
        handles::counter(names::ENDPOINT_CHANGES_TOTAL, &[]).increment(1);
        let changed = self.cache.update_pending(service, slice_name, info);
        if changed {
            handles::gauge(names::ENDPOINT_CHANGES_PENDING, &[]).increment(1.0);
            // On delete the annotation holds the time of the slice's last
            // update, not of the deletion: drop what we have instead.
            if removed {
                self.last_change_trigger_times.remove(service);
            } else if let Some(time) =
                slice.trigger_time.filter(|time| *time > self.start_time)
            {
                self.last_change_trigger_times
                    .entry(service.clone())
                    .or_default()
                    .push(time);
            }
        }
        changed
    }

    /// [`EndpointsChangeTracker::endpoint_slice_update`] for an object,
    /// converted for `node_name`.
    #[cfg(test)]
    pub(crate) fn update_object(
        &mut self,
        node_name: &str,
        slice: &EndpointSlice,
        removed: bool,
    ) -> bool {
        use crate::telemetry::events::ReportProblems as _;
        let converted = SliceRecord::convert(slice, node_name);
        let record = match removed {
            true => converted.value,
            false => converted.report(),
        };
        self.endpoint_slice_update(&record, removed)
    }

    /// Number of services with pending slice changes.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.cache.pending()
    }

    /// [`EndpointSliceCache::dropped_copies`] of the applied slices.
    pub fn dropped_copies(
        &self,
        service: &NamespacedName,
    ) -> HashMap<ServicePortName, Vec<Arc<EndpointInfo>>> {
        self.cache.dropped_copies(service)
    }

    /// Applies the pending changes to `map` and forgets them. Services
    /// whose merged endpoints came out unchanged (an update undone before
    /// the sync) are not reported.
    pub fn checkout(
        &mut self,
        map: &mut EndpointsMap,
    ) -> EndpointsUpdateResult {
        handles::gauge(names::ENDPOINT_CHANGES_PENDING, &[]).set(0.0);
        let mut result = EndpointsUpdateResult {
            last_change_trigger_times: std::mem::take(
                &mut self.last_change_trigger_times,
            ),
            ..EndpointsUpdateResult::default()
        };
        for change in self.cache.checkout_changes() {
            if change.previous == change.current {
                continue;
            }
            for (key, endpoints) in &change.previous {
                if change.current.get(key) != Some(endpoints) {
                    map.remove(key);
                    result.changed_ports.insert(key.clone());
                }
            }
            for (key, endpoints) in &change.current {
                if change.previous.get(key) != Some(endpoints) {
                    map.insert(key.clone(), endpoints.clone());
                    result.changed_ports.insert(key.clone());
                }
            }
            detect_stale_udp(&change, &mut result);
            result.conntrack_cleanup_required |= change
                .previous
                .keys()
                .chain(change.current.keys())
                .any(|key| key.protocol == Protocol::Udp);
            result.updated_services.insert(change.service);
        }
        result
    }
}

/// Upstream's `detectStaleConntrackEntries`, for one service.
fn detect_stale_udp(
    change: &EndpointsChange,
    result: &mut EndpointsUpdateResult,
) {
    let no_endpoints = Vec::new();
    for (key, old_list) in &change.previous {
        if key.protocol != Protocol::Udp {
            continue;
        }
        let new_list = change.current.get(key).unwrap_or(&no_endpoints);
        // An endpoint that was not serving got no traffic, so it cannot
        // have conntrack entries; one that changed in any way (e.g. it
        // stopped serving) has entries that must go.
        for old in old_list.iter().filter(|ep| ep.serving) {
            if !new_list.contains(old) {
                result.deleted_udp_endpoints.push(ServiceEndpoint {
                    service_port: key.clone(),
                    endpoint: Arc::clone(old),
                });
            }
        }
    }
    for (key, new_list) in &change.current {
        if key.protocol != Protocol::Udp {
            continue;
        }
        let serving_now = new_list.iter().any(|ep| ep.serving);
        let serving_before = change
            .previous
            .get(key)
            .is_some_and(|list| list.iter().any(|ep| ep.serving));
        if serving_now && !serving_before {
            result.newly_active_udp_services.insert(key.clone());
        }
    }
}
