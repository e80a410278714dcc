//! `kubeproxy_sync_proxy_rules_no_local_endpoints_total`, kept
//! incrementally: upstream recounts every service on every sync; here
//! only the service ports a sync changed are looked at again.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::telemetry::events::{InternalEvent, NoLocalEndpoints};
use crate::{
    desired::NodeContext,
    model::IpFamily,
    model::{NamespacedName, ServicePortMap, ServicePortName},
    selection::{ipvs_lacks_local_endpoints, EndpointsView},
};

/// The metric's `traffic_policy` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TrafficPolicy {
    Internal,
    External,
}

/// Services (not ports, as upstream counts) with a Local traffic policy
/// whose endpoints all live on other nodes: IPVS then falls back to
/// them, so in-cluster clients still work while external ones fail.
#[derive(Debug, Default)]
pub struct NoLocalEndpointsTracker {
    /// Per family and policy: service → how many of its ports lack.
    lacking:
        BTreeMap<(IpFamily, TrafficPolicy), HashMap<NamespacedName, usize>>,
    /// What each port counted for, to take it back when it changes.
    ports: HashMap<ServicePortName, Vec<(IpFamily, TrafficPolicy)>>,
    families: Vec<IpFamily>,
}

impl NoLocalEndpointsTracker {
    /// Looks again at the `changed` ports. A change of the node's
    /// families looks at every port, as it changes every service.
    pub fn update<'a>(
        &mut self,
        changed: impl IntoIterator<Item = &'a ServicePortName>,
        services: &ServicePortMap,
        endpoints: &(impl EndpointsView + ?Sized),
        ctx: &NodeContext,
    ) {
        let families = ctx.families();
        if families != self.families {
            self.families = families;
            let every: BTreeSet<ServicePortName> =
                services.keys().chain(self.ports.keys()).cloned().collect();
            for name in &every {
                self.recount(name, services, endpoints, ctx);
            }
        } else {
            let changed: BTreeSet<&ServicePortName> =
                changed.into_iter().collect();
            for name in changed {
                self.recount(name, services, endpoints, ctx);
            }
        }
    }

    fn recount(
        &mut self,
        name: &ServicePortName,
        services: &ServicePortMap,
        endpoints: &(impl EndpointsView + ?Sized),
        ctx: &NodeContext,
    ) {
        self.forget(name);
        let counted = self.lacks(name, services, endpoints, ctx);
        for key in &counted {
            *self
                .lacking
                .entry(*key)
                .or_default()
                .entry(name.service.clone())
                .or_default() += 1;
        }
        if !counted.is_empty() {
            self.ports.insert(name.clone(), counted);
        }
    }

    fn forget(&mut self, name: &ServicePortName) {
        for key in self.ports.remove(name).unwrap_or_default() {
            if let Some(by_service) = self.lacking.get_mut(&key) {
                if let Some(n) = by_service.get_mut(&name.service) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        by_service.remove(&name.service);
                    }
                }
            }
        }
    }

    fn lacks(
        &self,
        name: &ServicePortName,
        services: &ServicePortMap,
        endpoints: &(impl EndpointsView + ?Sized),
        ctx: &NodeContext,
    ) -> Vec<(IpFamily, TrafficPolicy)> {
        let mut counted = Vec::new();
        let Some(svc) = services.get(name) else {
            return counted;
        };
        if !svc.internal_policy_local && !svc.external_policy_local {
            return counted;
        }
        let selected =
            endpoints.node_endpoints(name, svc, &ctx.node_name, &ctx.zone);
        for &cluster_ip in &svc.cluster_ips {
            let family = IpFamily::of(cluster_ip);
            if !self.families.contains(&family) {
                continue;
            }
            let c = selected.family(cluster_ip);
            if svc.internal_policy_local && ipvs_lacks_local_endpoints(c, true)
            {
                counted.push((family, TrafficPolicy::Internal));
            }
            if svc.external_policy_local && ipvs_lacks_local_endpoints(c, true)
            {
                counted.push((family, TrafficPolicy::External));
            }
        }
        counted
    }

    pub fn count(&self, family: IpFamily, policy: TrafficPolicy) -> usize {
        self.lacking.get(&(family, policy)).map_or(0, HashMap::len)
    }

    /// Sets the gauges of every active family.
    pub fn emit(&self) {
        for &family in &self.families {
            NoLocalEndpoints {
                family,
                internal: self.count(family, TrafficPolicy::Internal),
                external: self.count(family, TrafficPolicy::External),
            }
            .emit();
        }
    }
}

#[cfg(test)]
mod tests;
