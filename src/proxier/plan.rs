//! Pure planning: desired service-port states in, kernel operations out.
//!
//! [`Ledger`] is the proxier's record of what it asked the kernel for:
//! every service port's last applied [`ServiceState`], plus reference
//! counts for what service ports share. [`Ledger::plan`] turns a sync's
//! [`ServiceDelta`]s into the operations for exactly that change;
//! [`reconcile`] compares the whole ledger with the kernel's dumps, for
//! start-up and the periodic full reconcile; [`cleanup`] lists what
//! `--cleanup` removes.
//!
//! Sharing is why counts are needed: several service ports use one
//! cluster IP (ports 80 and 443 of one service), so the address is bound
//! when the first of them appears and unbound when the last goes, and its
//! `KUBE-IPVS-IPS` entry with it. Set entries are shared the same way:
//! every port of an ETP=Local service adds the service's one
//! health-check node port, and two ports with one target port add the
//! same `KUBE-LOOP-BACK` entry. A virtual server claimed by two service
//! ports (a misconfiguration: two services with one external IP and
//! port) is programmed from the first claimant by name, as
//! [`DesiredState::snapshot`](crate::desired::DesiredState::snapshot)
//! shows it, and passes to the next when that one goes.
//!
//! # Ordering
//!
//! Each facility's operations come as one ordered list, and the proxier
//! applies the lists in the order IPVS, addresses, ipsets:
//!
//! - IPVS: add or update services, then add real servers, update real
//!   servers, delete real servers, then delete services. A real server
//!   needs its service; adding a service's new real servers before
//!   deleting its old ones never leaves it empty in between; deleting a
//!   service deletes its real servers with it, so those are not listed.
//! - Addresses: binds, then unbinds. IPVS does not need the address bound
//!   to accept a service on it, so the service comes first (as upstream
//!   does): once the address is bound, packets to it find the service.
//! - ipsets: creates, then adds, then deletes; never a flush. Entries are
//!   added after the virtual servers they admit traffic to exist; an entry
//!   deleted after its virtual server is harmless (iptables then marks
//!   packets no virtual server takes, for one sync at most).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::IpAddr,
    ops::RangeInclusive,
    sync::Arc,
};

use ipnet::IpNet;

use crate::{
    desired::{
        ServiceDelta, ServiceState, SetEntry, SetKind, SetName, VirtualServer,
        VirtualServerKind,
    },
    kernel::{
        addresses::AddressOp,
        ipsets::{IpsetOp, SetSpec, SetState},
        ipvs::{DestKey, DestSpec, IpvsOp, IpvsTable, ServiceKey, ServiceSpec},
    },
    model::ServicePortName,
};

#[cfg(test)]
mod tests;

/// The operations of one sync, one ordered list per facility (see the
/// module docs for the order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelOps {
    pub ipvs: Vec<IpvsOp>,
    pub addresses: Vec<AddressOp>,
    pub ipsets: Vec<IpsetOp>,
}

impl KernelOps {
    pub fn is_empty(&self) -> bool {
        self.ipvs.is_empty()
            && self.addresses.is_empty()
            && self.ipsets.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ipvs.len() + self.addresses.len() + self.ipsets.len()
    }
}

/// What the proxier last asked the kernel for, per service port, with the
/// reference counts of shared addresses and set entries.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    services: HashMap<ServicePortName, Arc<ServiceState>>,
    /// The service ports claiming each virtual server; the first by name
    /// is programmed.
    owners: BTreeMap<ServiceKey, BTreeSet<ServicePortName>>,
    addresses: BTreeMap<IpAddr, usize>,
    entries: BTreeMap<(SetName, SetEntry), usize>,
}

/// The programmed form of a virtual server.
pub fn service_spec(vs: &VirtualServer) -> ServiceSpec {
    spec_of(vs.key(), &vs.scheduler, vs.persistent.then_some(vs.timeout))
}

/// The one place a [`ServiceSpec`] is built, so that a field the IPVS
/// facility adds (the `mh` scheduler's flag) is filled in here only.
pub fn spec_of(
    key: ServiceKey,
    scheduler: &str,
    persistence: Option<u32>,
) -> ServiceSpec {
    ServiceSpec::new(key, scheduler, persistence)
}

fn dests(vs: &VirtualServer) -> BTreeMap<DestKey, u32> {
    vs.real_servers
        .iter()
        .map(|rs| {
            (
                DestKey {
                    address: rs.address,
                    port: rs.port,
                },
                rs.weight,
            )
        })
        .collect()
}

/// The spec every kube-proxy set is created with.
pub fn set_spec(set: SetName) -> SetSpec {
    SetSpec {
        name: set.name(),
        set_type: set.kind.set_type(),
        ipv6: set.ipv6,
    }
}

/// Every set of kube-proxy's for the families the node runs.
pub fn expected_sets(ipv4: bool, ipv6: bool) -> Vec<SetName> {
    let mut sets = Vec::new();
    for (enabled, v6) in [(ipv4, false), (ipv6, true)] {
        if enabled {
            sets.extend(
                SetKind::ALL.iter().map(|&kind| SetName { kind, ipv6: v6 }),
            );
        }
    }
    sets
}

fn ipvs_ips(addr: IpAddr) -> (SetName, SetEntry) {
    (
        SetName::for_addr(SetKind::IpvsIps, addr),
        SetEntry::Ip(addr),
    )
}

impl Ledger {
    pub fn new() -> Self {
        Self::default()
    }

    /// A ledger holding the given states, as if each had been applied:
    /// what a full reconcile compares the kernel with.
    pub fn from_services<'a>(
        services: impl IntoIterator<
            Item = (&'a ServicePortName, &'a Arc<ServiceState>),
        >,
    ) -> Self {
        let mut ledger = Self::default();
        for (name, state) in services {
            ledger.insert(name, Arc::clone(state));
        }
        ledger
    }

    pub fn len(&self) -> usize {
        self.services.len()
    }

    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    pub fn service(&self, name: &ServicePortName) -> Option<&ServiceState> {
        self.services.get(name).map(|s| &**s)
    }

    /// The virtual server programmed for `key`, if any service port claims
    /// it.
    pub fn virtual_server(&self, key: &ServiceKey) -> Option<&VirtualServer> {
        let owner = self.owners.get(key)?.first()?;
        self.services
            .get(owner)?
            .virtual_servers
            .iter()
            .find(|vs| vs.key() == *key)
    }

    /// Every programmed virtual server, by key.
    pub fn virtual_servers(
        &self,
    ) -> impl Iterator<Item = (ServiceKey, &VirtualServer)> {
        self.owners
            .keys()
            .filter_map(|key| Some((*key, self.virtual_server(key)?)))
    }

    /// Every address bound on the dummy link.
    pub fn bound_addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.addresses.keys().copied()
    }

    /// Every set entry, `KUBE-IPVS-IPS` (which mirrors the bound
    /// addresses) included.
    pub fn set_entries(&self) -> BTreeMap<SetName, BTreeSet<SetEntry>> {
        let mut sets: BTreeMap<SetName, BTreeSet<SetEntry>> = BTreeMap::new();
        let mirrored = self.addresses.keys().map(|a| ipvs_ips(*a));
        for (set, entry) in self.entries.keys().cloned().chain(mirrored) {
            sets.entry(set).or_default().insert(entry);
        }
        sets
    }

    fn insert(&mut self, name: &ServicePortName, state: Arc<ServiceState>) {
        for vs in &state.virtual_servers {
            self.owners
                .entry(vs.key())
                .or_default()
                .insert(name.clone());
        }
        for addr in &state.bound_addresses {
            *self.addresses.entry(*addr).or_default() += 1;
        }
        for entry in &state.set_entries {
            *self.entries.entry(entry.clone()).or_default() += 1;
        }
        self.services.insert(name.clone(), state);
    }

    fn remove(&mut self, name: &ServicePortName) {
        let Some(state) = self.services.remove(name) else {
            return;
        };
        for vs in &state.virtual_servers {
            let key = vs.key();
            if let Some(owners) = self.owners.get_mut(&key) {
                owners.remove(name);
                if owners.is_empty() {
                    self.owners.remove(&key);
                }
            }
        }
        for addr in &state.bound_addresses {
            release(&mut self.addresses, addr);
        }
        for entry in &state.set_entries {
            release(&mut self.entries, entry);
        }
    }

    /// Records the deltas as applied and returns the operations that take
    /// the kernel from the ledger's previous state to the new one. The
    /// ledger's own record, not the deltas' `previous`, is the baseline,
    /// so a delta for a port the ledger never saw still comes out right.
    /// The cost follows the deltas: only the objects they mention are
    /// compared.
    pub fn plan(&mut self, deltas: &[ServiceDelta]) -> KernelOps {
        let mut vs_before: BTreeMap<ServiceKey, Option<VirtualServer>> =
            BTreeMap::new();
        let mut addr_before: BTreeMap<IpAddr, bool> = BTreeMap::new();
        let mut entry_before: BTreeMap<(SetName, SetEntry), bool> =
            BTreeMap::new();
        for delta in deltas {
            let old = self.services.get(&delta.service).cloned();
            if old == delta.current {
                continue;
            }
            for state in old.iter().chain(delta.current.iter()) {
                for vs in &state.virtual_servers {
                    let key = vs.key();
                    vs_before
                        .entry(key)
                        .or_insert_with(|| self.virtual_server(&key).cloned());
                }
                for addr in &state.bound_addresses {
                    addr_before
                        .entry(*addr)
                        .or_insert_with(|| self.addresses.contains_key(addr));
                }
                for entry in &state.set_entries {
                    if !entry_before.contains_key(entry) {
                        let had = self.entries.contains_key(entry);
                        entry_before.insert(entry.clone(), had);
                    }
                }
            }
            self.remove(&delta.service);
            if let Some(current) = &delta.current {
                self.insert(&delta.service, Arc::clone(current));
            }
        }

        let mut ipvs = IpvsLists::default();
        for (key, before) in &vs_before {
            ipvs.diff(*key, before.as_ref(), self.virtual_server(key));
        }
        let mut ops = KernelOps {
            ipvs: ipvs.into_ops(),
            ..KernelOps::default()
        };
        let mut sets = SetLists::default();
        let mut unbind = Vec::new();
        for (addr, had) in addr_before {
            let has = self.addresses.contains_key(&addr);
            let (set, entry) = ipvs_ips(addr);
            match (had, has) {
                (false, true) => {
                    ops.addresses.push(AddressOp::Add(addr));
                    sets.add.push(IpsetOp::Add(set.name(), entry));
                }
                (true, false) => {
                    unbind.push(AddressOp::Delete(addr));
                    sets.delete.push(IpsetOp::Delete(set.name(), entry));
                }
                _ => {}
            }
        }
        ops.addresses.extend(unbind);
        for ((set, entry), had) in entry_before {
            let has = self.entries.contains_key(&(set, entry.clone()));
            match (had, has) {
                (false, true) => sets.add.push(IpsetOp::Add(set.name(), entry)),
                (true, false) => {
                    sets.delete.push(IpsetOp::Delete(set.name(), entry))
                }
                _ => {}
            }
        }
        ops.ipsets = sets.into_ops();
        ops
    }
}

fn release<K: Ord>(counts: &mut BTreeMap<K, usize>, key: &K) {
    if let Some(n) = counts.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            counts.remove(key);
        }
    }
}

/// IPVS operations collected by kind, emitted in the documented order.
#[derive(Default)]
struct IpvsLists {
    services: Vec<IpvsOp>,
    add_dests: Vec<IpvsOp>,
    update_dests: Vec<IpvsOp>,
    delete_dests: Vec<IpvsOp>,
    delete_services: Vec<IpvsOp>,
}

impl IpvsLists {
    /// Compares what was programmed with what should be. `before` may come
    /// from the ledger (weights as desired) or from a dump (weights as the
    /// kernel has them): either way a differing weight is updated.
    fn diff(
        &mut self,
        key: ServiceKey,
        before: Option<&VirtualServer>,
        after: Option<&VirtualServer>,
    ) {
        match (before, after) {
            (None, None) => {}
            (Some(_), None) => {
                self.delete_services.push(IpvsOp::DeleteService(key))
            }
            (None, Some(vs)) => {
                self.services.push(IpvsOp::AddService(service_spec(vs)));
                self.dests(key, &BTreeMap::new(), &dests(vs));
            }
            (Some(old), Some(new)) => {
                let spec = service_spec(new);
                if service_spec(old) != spec {
                    self.services.push(IpvsOp::UpdateService(spec));
                }
                self.dests(key, &dests(old), &dests(new));
            }
        }
    }

    fn dests(
        &mut self,
        key: ServiceKey,
        old: &BTreeMap<DestKey, u32>,
        new: &BTreeMap<DestKey, u32>,
    ) {
        for (dest, &weight) in new {
            let spec = DestSpec { key: *dest, weight };
            match old.get(dest) {
                None => self.add_dests.push(IpvsOp::AddDest(key, spec)),
                Some(&w) if w != weight => {
                    self.update_dests.push(IpvsOp::UpdateDest(key, spec))
                }
                Some(_) => {}
            }
        }
        for dest in old.keys().filter(|d| !new.contains_key(d)) {
            self.delete_dests.push(IpvsOp::DeleteDest(key, *dest));
        }
    }

    fn into_ops(self) -> Vec<IpvsOp> {
        let mut ops = self.services;
        ops.extend(self.add_dests);
        ops.extend(self.update_dests);
        ops.extend(self.delete_dests);
        ops.extend(self.delete_services);
        ops
    }
}

#[derive(Default)]
struct SetLists {
    create: Vec<IpsetOp>,
    add: Vec<IpsetOp>,
    delete: Vec<IpsetOp>,
}

impl SetLists {
    fn into_ops(self) -> Vec<IpsetOp> {
        let mut ops = self.create;
        ops.extend(self.add);
        ops.extend(self.delete);
        ops
    }
}

/// The kernel as read back by one dump per facility. A facility whose
/// dump failed is `None` and is left alone by [`reconcile`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    pub ipvs: Option<IpvsTable>,
    /// The addresses on the dummy link.
    pub link_addresses: Option<BTreeSet<IpAddr>>,
    /// The `KUBE-` sets, by name.
    pub sets: Option<BTreeMap<String, SetState>>,
}

/// Whose a virtual server in the kernel is. Upstream deletes every
/// virtual server it does not know; we delete only our own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ownership {
    /// `excludeCIDRs`: virtual servers on these addresses are never
    /// deleted, as upstream's cleanup skips them.
    pub exclude_cidrs: Vec<IpNet>,
    /// Virtual servers this process programmed off the dummy link
    /// (NodePorts on node addresses) or failed to delete: ours although
    /// their address is not on the link.
    pub programmed: BTreeSet<ServiceKey>,
    /// The addresses NodePorts listen on.
    pub node_addresses: BTreeSet<IpAddr>,
    /// A virtual server on a node address with a port in this range is
    /// taken for a NodePort of an earlier run (after a restart the
    /// process has no record of it). `None` trusts only `programmed`.
    pub node_port_range: Option<RangeInclusive<u16>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    Ours,
    /// In `excludeCIDRs`: left alone whoever it belongs to.
    Excluded,
    Foreign,
}

impl Ownership {
    pub fn classify(
        &self,
        key: &ServiceKey,
        link_addresses: &BTreeSet<IpAddr>,
    ) -> Owner {
        if self
            .exclude_cidrs
            .iter()
            .any(|net| net.contains(&key.address))
        {
            return Owner::Excluded;
        }
        let stale_node_port = self.node_addresses.contains(&key.address)
            && self
                .node_port_range
                .as_ref()
                .is_some_and(|range| range.contains(&key.port));
        if link_addresses.contains(&key.address)
            || self.programmed.contains(key)
            || stale_node_port
        {
            Owner::Ours
        } else {
            Owner::Foreign
        }
    }
}

/// The result of comparing the ledger with the kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconciled {
    pub ops: KernelOps,
    /// Virtual servers in the kernel that are not ours and were left
    /// alone.
    pub foreign: Vec<ServiceKey>,
    /// Things that cannot be repaired by adding and deleting, such as a
    /// set of ours with the wrong type: logged, left as they are.
    pub warnings: Vec<String>,
}

/// Compares the whole ledger with the kernel and lists the operations
/// that repair the difference: missing or changed virtual servers, real
/// servers and weights (which restores real servers an earlier run left
/// at weight 0: the ones still meant to drain are not in the ledger),
/// addresses and set entries, missing sets. Only objects we own are
/// deleted, and nothing is flushed, so connections through virtual
/// servers that should stay survive.
///
/// Real servers in the kernel that the ledger lacks come out as
/// `DeleteDest`; the graceful-termination router decides whether they go
/// now or drain.
pub fn reconcile(
    ledger: &Ledger,
    sets: &[SetName],
    observed: &Observed,
    ownership: &Ownership,
) -> Reconciled {
    let mut out = Reconciled::default();
    let no_addresses = BTreeSet::new();
    let link = observed.link_addresses.as_ref().unwrap_or(&no_addresses);
    if let Some(table) = &observed.ipvs {
        out.ops.ipvs = reconcile_ipvs(ledger, table, link, ownership, &mut out);
    }
    if let Some(link) = &observed.link_addresses {
        let want: BTreeSet<IpAddr> = ledger.bound_addresses().collect();
        let add = want.difference(link).map(|a| AddressOp::Add(*a));
        // The kernel adds an IPv6 link-local address to a link that is
        // set up by hand; it is not ours to remove.
        let delete = link
            .difference(&want)
            .filter(|a| !is_link_local_v6(a))
            .map(|a| AddressOp::Delete(*a));
        out.ops.addresses = add.chain(delete).collect();
    }
    if let Some(have) = &observed.sets {
        out.ops.ipsets = reconcile_sets(ledger, sets, have, &mut out.warnings);
    }
    out
}

fn reconcile_ipvs(
    ledger: &Ledger,
    table: &IpvsTable,
    link: &BTreeSet<IpAddr>,
    ownership: &Ownership,
    out: &mut Reconciled,
) -> Vec<IpvsOp> {
    let mut lists = IpvsLists::default();
    for (key, vs) in ledger.virtual_servers() {
        let Some(entry) = table.services.get(&key) else {
            lists.diff(key, None, Some(vs));
            continue;
        };
        if entry.spec != service_spec(vs) {
            lists.services.push(IpvsOp::UpdateService(service_spec(vs)));
        }
        let have: BTreeMap<DestKey, u32> =
            entry.dests.iter().map(|(k, s)| (*k, s.weight)).collect();
        lists.dests(key, &have, &dests(vs));
    }
    for key in table.services.keys() {
        if ledger.virtual_server(key).is_some() {
            continue;
        }
        match ownership.classify(key, link) {
            Owner::Ours => {
                lists.delete_services.push(IpvsOp::DeleteService(*key))
            }
            Owner::Excluded => {}
            Owner::Foreign => out.foreign.push(*key),
        }
    }
    lists.into_ops()
}

fn reconcile_sets(
    ledger: &Ledger,
    sets: &[SetName],
    have: &BTreeMap<String, SetState>,
    warnings: &mut Vec<String>,
) -> Vec<IpsetOp> {
    let mut lists = SetLists::default();
    let mut want = ledger.set_entries();
    let empty = BTreeSet::new();
    for set in sets {
        let name = set.name();
        let entries = want.remove(set).unwrap_or_default();
        let current = match have.get(&name) {
            None => {
                lists.create.push(IpsetOp::Create(set_spec(*set)));
                &empty
            }
            Some(state) if state.spec.set_type != set.kind.set_type() => {
                warnings.push(format!(
                    "ipset {name} has type {} instead of {}; left as it is",
                    state.spec.set_type.as_str(),
                    set.kind.set_type().as_str()
                ));
                continue;
            }
            Some(state) => &state.entries,
        };
        for entry in entries.difference(current) {
            lists.add.push(IpsetOp::Add(name.clone(), entry.clone()));
        }
        for entry in current.difference(&entries) {
            lists
                .delete
                .push(IpsetOp::Delete(name.clone(), entry.clone()));
        }
    }
    // Entries of a family the node does not run have no set to go in.
    for set in want.keys() {
        warnings.push(format!(
            "entries for {set} skipped: that family's sets are not managed"
        ));
    }
    lists.into_ops()
}

/// What `--cleanup` removes: every virtual server we own, every set of
/// ours of either family. The dummy link is deleted by the caller (its
/// addresses go with it). Sets must be destroyed after the iptables
/// rules that reference them are gone, or the kernel refuses (EBUSY).
pub fn cleanup(observed: &Observed, ownership: &Ownership) -> KernelOps {
    let mut ops = KernelOps::default();
    let no_addresses = BTreeSet::new();
    let link = observed.link_addresses.as_ref().unwrap_or(&no_addresses);
    if let Some(table) = &observed.ipvs {
        ops.ipvs = table
            .services
            .keys()
            .filter(|key| ownership.classify(key, link) == Owner::Ours)
            .map(|key| IpvsOp::DeleteService(*key))
            .collect();
    }
    if let Some(have) = &observed.sets {
        ops.ipsets = expected_sets(true, true)
            .into_iter()
            .map(|set| set.name())
            .filter(|name| have.contains_key(name))
            .map(IpsetOp::Destroy)
            .collect();
    }
    ops
}

/// NodePort virtual servers of the given states: ours although their
/// address is not on the dummy link.
pub fn node_port_keys<'a>(
    states: impl IntoIterator<Item = &'a ServiceState> + 'a,
) -> impl Iterator<Item = ServiceKey> + 'a {
    states.into_iter().flat_map(|state| {
        state
            .virtual_servers
            .iter()
            .filter(|vs| vs.kind == VirtualServerKind::NodePort)
            .map(VirtualServer::key)
    })
}

fn is_link_local_v6(addr: &IpAddr) -> bool {
    matches!(addr, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80)
}

/// `TCP 198.18.0.10:80`, as `ipvsadm` names a virtual server.
pub fn service_name(key: &ServiceKey) -> String {
    format!(
        "{} {}",
        key.protocol,
        std::net::SocketAddr::new(key.address, key.port)
    )
}
