//! ServiceChangeTracker: the service ports that changed since the last
//! sync, as upstream's `servicechangetracker.go`.
//!
//! For each service it keeps the ports as of the last checkout
//! (`previous`) and as of now (`current`); when an update brings
//! `current` back to `previous` the entry goes away, so a change that is
//! undone before the next sync costs nothing.

use std::{
    collections::{HashMap, HashSet},
    net::IpAddr,
    sync::Arc,
};

use crate::{
    model::{
        NamespacedName, Protocol, ServicePortMap, ServicePortName, ServicePorts,
    },
    telemetry::{self as names, handles},
};

#[cfg(test)]
mod tests;

#[derive(Debug)]
struct Change {
    previous: ServicePorts,
    current: ServicePorts,
}

/// What a checkout changed in the [`ServicePortMap`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ServiceUpdateResult {
    /// Services with at least one pending change (added, updated or
    /// deleted), as upstream's `UpdatedServices`.
    pub updated_services: HashSet<NamespacedName>,
    /// Every port key whose entry was added, removed or modified.
    pub changed_ports: HashSet<ServicePortName>,
    /// Cluster IPs of UDP ports that went away, whose conntrack entries
    /// must be flushed (upstream's `DeletedUDPClusterIPs`). Includes the
    /// secondary cluster IP of a UDP port whose service dropped a family.
    pub deleted_udp_cluster_ips: HashSet<IpAddr>,
}

impl ServiceUpdateResult {
    /// This checkout's result followed by `next`'s, as one.
    pub fn merge(&mut self, next: ServiceUpdateResult) {
        self.updated_services.extend(next.updated_services);
        self.changed_ports.extend(next.changed_ports);
        self.deleted_udp_cluster_ips
            .extend(next.deleted_udp_cluster_ips);
    }
}

#[derive(Debug, Default)]
pub struct ServiceChangeTracker {
    items: HashMap<NamespacedName, Change>,
}

impl ServiceChangeTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a change of Service `name`: `previous` is its ports as the
    /// source last delivered them (None for an add), `current` the new
    /// ones (None for a delete). Returns true when the tracker holds
    /// changes that need a sync, whether or not this update caused them.
    pub fn update(
        &mut self,
        name: &NamespacedName,
        previous: Option<&ServicePorts>,
        current: Option<&ServicePorts>,
    ) -> bool {
        if previous.is_none() && current.is_none() {
            return !self.items.is_empty();
        }
        handles::counter(names::SERVICE_CHANGES_TOTAL, &[]).increment(1);
        let key = name;
        let change = self.items.entry(key.clone()).or_insert_with(|| Change {
            previous: previous.cloned().unwrap_or_default(),
            current: ServicePorts::new(),
        });
        change.current = current.cloned().unwrap_or_default();
        if change.previous == change.current {
            self.items.remove(key);
        } else {
            tracing::debug!(
                service = %key,
                ports = change.current.len(),
                "service updated"
            );
        }
        handles::gauge(names::SERVICE_CHANGES_PENDING, &[])
            .set(self.items.len() as f64);
        !self.items.is_empty()
    }

    /// Number of services with pending changes.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.items.len()
    }

    /// Applies the pending changes to `map` and forgets them.
    pub fn checkout(
        &mut self,
        map: &mut ServicePortMap,
    ) -> ServiceUpdateResult {
        let mut result = ServiceUpdateResult::default();
        for (name, change) in self.items.drain() {
            result.updated_services.insert(name);
            for (key, info) in &change.current {
                let old = map.insert(key.clone(), Arc::clone(info));
                if old.as_ref() != Some(info) {
                    result.changed_ports.insert(key.clone());
                }
                // A UDP port that loses a family's cluster IP leaves
                // conntrack entries for that IP behind.
                if let Some(old) = old.filter(|_| key.protocol == Protocol::Udp)
                {
                    result.deleted_udp_cluster_ips.extend(
                        old.cluster_ips
                            .iter()
                            .filter(|ip| !info.cluster_ips.contains(ip)),
                    );
                }
            }
            for key in change.previous.into_keys() {
                if change.current.contains_key(&key) {
                    continue;
                }
                let Some(old) = map.remove(&key) else {
                    tracing::warn!(
                        port = %key,
                        "removed service port was not tracked"
                    );
                    continue;
                };
                if key.protocol == Protocol::Udp {
                    result.deleted_udp_cluster_ips.extend(&old.cluster_ips);
                }
                result.changed_ports.insert(key);
            }
        }
        handles::gauge(names::SERVICE_CHANGES_PENDING, &[]).set(0.0);
        result
    }
}

#[cfg(test)]
impl ServiceChangeTracker {
    /// [`ServiceChangeTracker::update`] for two versions of an object.
    pub(crate) fn update_objects(
        &mut self,
        previous: Option<&k8s_openapi::api::core::v1::Service>,
        current: Option<&k8s_openapi::api::core::v1::Service>,
    ) -> bool {
        use crate::{
            model::ServiceRecord, telemetry::events::ReportProblems as _,
        };
        let previous = previous.map(|s| ServiceRecord::convert(s).value);
        let current = current.map(|s| ServiceRecord::convert(s).report());
        let Some(name) = current
            .as_ref()
            .or(previous.as_ref())
            .map(|r| r.name.clone())
        else {
            return self.update(&NamespacedName::new("", ""), None, None);
        };
        self.update(
            &name,
            previous.as_ref().map(|r| &r.ports),
            current.as_ref().map(|r| &r.ports),
        )
    }
}
