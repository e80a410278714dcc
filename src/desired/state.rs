use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::IpAddr,
    sync::Arc,
};

use serde::Serialize;

use super::{
    compute::service_state, NodeContext, ServiceState, SetEntry, SetKind,
    SetName, VirtualServer, VirtualServerKey,
};
use crate::{
    model::{ServicePortMap, ServicePortName},
    selection::EndpointsView,
};

/// The desired state of every service port, updated incrementally.
/// Cloning shares each port's state (`Arc`): it copies the index only.
#[derive(Debug, Default, Clone)]
pub struct DesiredState {
    ctx: NodeContext,
    services: HashMap<ServicePortName, Arc<ServiceState>>,
}

/// What a sync changed for one service port: the backend turns the
/// difference between `previous` and `current` into kernel operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceDelta {
    pub service: ServicePortName,
    pub previous: Option<Arc<ServiceState>>,
    pub current: Option<Arc<ServiceState>>,
}

impl DesiredState {
    pub fn new(ctx: NodeContext) -> Self {
        Self {
            ctx,
            services: HashMap::new(),
        }
    }

    pub fn context(&self) -> &NodeContext {
        &self.ctx
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.services.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    pub fn service(&self, name: &ServicePortName) -> Option<&ServiceState> {
        self.services.get(name).map(|s| &**s)
    }

    /// Every service port's state, in no particular order: for a full
    /// reconcile, which walks everything by design.
    pub fn services(
        &self,
    ) -> impl Iterator<Item = (&ServicePortName, &Arc<ServiceState>)> {
        self.services.iter()
    }

    /// Recomputes the given service ports only; the cost follows the
    /// number of changed ports, not the number of services. Ports whose
    /// result did not change produce no delta.
    pub fn update<'a>(
        &mut self,
        services: &ServicePortMap,
        endpoints: &(impl EndpointsView + ?Sized),
        changed: impl IntoIterator<Item = &'a ServicePortName>,
    ) -> Vec<ServiceDelta> {
        let mut deltas = Vec::new();
        let ctx = &self.ctx;
        for name in changed {
            let current = services.get(name).map(|svc| {
                let eps = endpoints.node_endpoints(
                    name,
                    svc,
                    &ctx.node_name,
                    &ctx.zone,
                );
                service_state(name, svc, &eps, ctx)
            });
            let previous = self.services.get(name);
            if previous.map(|p| &**p) == current.as_ref() {
                continue;
            }
            let current = current.map(Arc::new);
            let previous = match &current {
                Some(cur) => self.services.insert(name.clone(), cur.clone()),
                None => self.services.remove(name),
            };
            deltas.push(ServiceDelta {
                service: name.clone(),
                previous,
                current,
            });
        }
        deltas
    }

    /// Replaces the node context and recomputes every service port: node
    /// IPs, the zone and the scheduler touch all of them.
    pub fn set_context(
        &mut self,
        ctx: NodeContext,
        services: &ServicePortMap,
        endpoints: &(impl EndpointsView + ?Sized),
    ) -> Vec<ServiceDelta> {
        if ctx == self.ctx {
            return Vec::new();
        }
        self.ctx = ctx;
        let names: BTreeSet<ServicePortName> = services
            .keys()
            .chain(self.services.keys())
            .cloned()
            .collect();
        self.update(services, endpoints, &names)
    }

    /// The whole state, merged across services and sorted, as `plan`
    /// prints it. This walks everything: it is for output and tests, not
    /// for the sync path.
    pub fn snapshot(&self) -> Plan {
        let mut by_key: BTreeMap<VirtualServerKey, &VirtualServer> =
            BTreeMap::new();
        let mut bound = BTreeSet::new();
        let mut entries: BTreeMap<SetName, BTreeSet<SetEntry>> =
            BTreeMap::new();
        let mut names: Vec<&ServicePortName> = self.services.keys().collect();
        names.sort();
        for name in names {
            let state = &self.services[name];
            for vs in &state.virtual_servers {
                // Two services claiming one address and port: the first
                // by name wins, deterministically.
                by_key.entry(vs.key()).or_insert(vs);
            }
            bound.extend(state.bound_addresses.iter().copied());
            for (set, entry) in &state.set_entries {
                entries.entry(*set).or_default().insert(entry.clone());
            }
        }
        for ip in &bound {
            entries
                .entry(SetName::for_addr(SetKind::IpvsIps, *ip))
                .or_default()
                .insert(SetEntry::Ip(*ip));
        }

        let mut ipsets = BTreeMap::new();
        for (ipv6, enabled) in [(false, self.ctx.ipv4), (true, self.ctx.ipv6)] {
            if !enabled {
                continue;
            }
            for kind in SetKind::ALL {
                let set = SetName { kind, ipv6 };
                let members = entries
                    .get(&set)
                    .map(|es| es.iter().map(|e| e.to_string()).collect())
                    .unwrap_or_default();
                ipsets.insert(set.name(), members);
            }
        }
        Plan {
            virtual_servers: by_key.into_values().cloned().collect(),
            bound_addresses: bound.into_iter().collect(),
            ipsets,
        }
    }
}

/// The merged desired state; its JSON form is `plan --output json`, a
/// stable interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub virtual_servers: Vec<VirtualServer>,
    pub bound_addresses: Vec<IpAddr>,
    pub ipsets: BTreeMap<String, Vec<String>>,
}
