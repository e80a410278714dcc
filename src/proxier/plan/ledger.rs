//! What the proxier asked the kernel for, and the operations of a sync.

use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
    ops::Bound,
    sync::Arc,
};

use super::{
    lists::{IpvsLists, SetLists},
    KernelOps,
};
use crate::{
    desired::{
        ServiceDelta, ServiceState, SetEntry, SetKind, SetName, VirtualServer,
    },
    kernel::{
        addresses::AddressOp,
        ipsets::{IpsetOp, SetSpec},
        ipvs::{ServiceSpec, VirtualServerKey},
    },
    model::ServicePortName,
};

/// What the proxier last asked the kernel for, per service port, with the
/// reference counts of shared addresses and set entries.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    services: HashMap<ServicePortName, Arc<ServiceState>>,
    /// The service ports claiming each virtual server, sorted; the first
    /// is programmed. Almost always one: a `Vec`, not a set's node.
    pub(super) owners: BTreeMap<VirtualServerKey, Vec<ServicePortName>>,
    pub(super) addresses: BTreeMap<IpAddr, usize>,
    entries: BTreeMap<(SetName, SetEntry), usize>,
}

/// The programmed form of a virtual server.
pub fn service_spec(vs: &VirtualServer) -> ServiceSpec {
    let scheduling = &vs.scheduling;
    spec_of(
        vs.key(),
        &scheduling.scheduler,
        vs.persistent.then_some(vs.timeout),
    )
    .with_flags(scheduling.flags)
}

/// The one place a [`ServiceSpec`] is built, so that a field the IPVS
/// facility adds is filled in here only: the scheduler's flags as
/// upstream sets them, which [`service_spec`] replaces with the virtual
/// server's own.
pub fn spec_of(
    key: VirtualServerKey,
    scheduler: &str,
    persistence: Option<u32>,
) -> ServiceSpec {
    ServiceSpec::new(key, scheduler, persistence)
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

    /// The virtual server programmed for `key`, if any service port claims
    /// it.
    pub fn virtual_server(
        &self,
        key: &VirtualServerKey,
    ) -> Option<&VirtualServer> {
        let owner = self.owners.get(key)?.first()?;
        self.services
            .get(owner)?
            .virtual_servers
            .iter()
            .find(|vs| vs.key() == *key)
    }

    /// The state holding the virtual server programmed for `key`, and its
    /// place there: what a plan notes as its starting point, without
    /// copying the virtual server and its real servers.
    fn programmed(&self, key: &VirtualServerKey) -> Programmed {
        let owner = self.owners.get(key)?.first()?;
        let state = self.services.get(owner)?;
        let at = state
            .virtual_servers
            .iter()
            .position(|vs| vs.key() == *key)?;
        Some((Arc::clone(state), at))
    }

    #[cfg(test)]
    /// Every programmed virtual server, by key.
    pub fn virtual_servers(
        &self,
    ) -> impl Iterator<Item = (VirtualServerKey, &VirtualServer)> {
        self.owners
            .keys()
            .filter_map(|key| Some((*key, self.virtual_server(key)?)))
    }

    /// Whether `addr` should be bound on the dummy link.
    pub fn binds(&self, addr: &IpAddr) -> bool {
        self.addresses.contains_key(addr)
    }

    /// Whether `set` should hold `entry`.
    pub fn has_entry(&self, set: SetName, entry: &SetEntry) -> bool {
        match (set.kind, entry) {
            (SetKind::IpvsIps, SetEntry::Ip(addr)) => {
                addr.is_ipv6() == set.ipv6 && self.binds(addr)
            }
            _ => self.entries.contains_key(&(set, entry.clone())),
        }
    }

    #[cfg(test)]
    /// Every address bound on the dummy link.
    pub fn bound_addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.addresses.keys().copied()
    }

    #[cfg(test)]
    /// Every set entry, `KUBE-IPVS-IPS` (which mirrors the bound
    /// addresses) included.
    pub fn set_entries(
        &self,
    ) -> BTreeMap<SetName, std::collections::BTreeSet<SetEntry>> {
        let mut sets: BTreeMap<SetName, std::collections::BTreeSet<SetEntry>> =
            BTreeMap::new();
        let mirrored = self.addresses.keys().map(|a| ipvs_ips(*a));
        for (set, entry) in self.entries.keys().cloned().chain(mirrored) {
            sets.entry(set).or_default().insert(entry);
        }
        sets
    }

    /// The entries the ledger wants in `set` after `after`, in order.
    /// `KUBE-IPVS-IPS` mirrors the bound addresses of its family.
    pub(super) fn set_entries_after<'a>(
        &'a self,
        set: SetName,
        after: &Option<SetEntry>,
    ) -> Box<dyn Iterator<Item = SetEntry> + 'a> {
        if set.kind == SetKind::IpvsIps {
            let start = match after {
                Some(SetEntry::Ip(addr)) => Bound::Excluded(*addr),
                _ => Bound::Unbounded,
            };
            return Box::new(
                self.addresses
                    .range((start, Bound::Unbounded))
                    .map(|(addr, _)| *addr)
                    .filter(move |addr| addr.is_ipv6() == set.ipv6)
                    .map(SetEntry::Ip),
            );
        }
        let start = match after {
            Some(entry) => Bound::Excluded((set, entry.clone())),
            None => Bound::Included((set, FIRST_ENTRY)),
        };
        Box::new(
            self.entries
                .range((start, Bound::Unbounded))
                .take_while(move |((s, _), _)| *s == set)
                .map(|((_, entry), _)| entry.clone()),
        )
    }

    fn insert(&mut self, name: &ServicePortName, state: Arc<ServiceState>) {
        for vs in &state.virtual_servers {
            let owners = self.owners.entry(vs.key()).or_default();
            if let Err(at) = owners.binary_search(name) {
                owners.insert(at, name.clone());
            }
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
                owners.retain(|owner| owner != name);
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
        let mut vs_before: BTreeMap<VirtualServerKey, Programmed> =
            BTreeMap::new();
        let mut addr_before: BTreeMap<IpAddr, bool> = BTreeMap::new();
        let mut entry_before: BTreeMap<(SetName, SetEntry), bool> =
            BTreeMap::new();
        for delta in deltas {
            let old = self.services.get(&delta.service).cloned();
            if old == delta.current {
                continue;
            }
            if let (Some(old), Some(current)) = (&old, &delta.current) {
                if same_claims(old, current) {
                    // Only what its virtual servers hold changed (the
                    // churn's usual change, an endpoint): no address,
                    // set entry or virtual server changes hands.
                    let pairs = old
                        .virtual_servers
                        .iter()
                        .zip(&current.virtual_servers);
                    for (was, now) in pairs {
                        if was != now {
                            let key = now.key();
                            vs_before
                                .entry(key)
                                .or_insert_with(|| self.programmed(&key));
                        }
                    }
                    if let Some(state) = self.services.get_mut(&delta.service) {
                        *state = Arc::clone(current);
                    }
                    continue;
                }
            }
            for state in old.iter().chain(delta.current.iter()) {
                for vs in &state.virtual_servers {
                    let key = vs.key();
                    vs_before
                        .entry(key)
                        .or_insert_with(|| self.programmed(&key));
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
            let before = before
                .as_ref()
                .map(|(state, at)| &state.virtual_servers[*at]);
            ipvs.diff(*key, before, self.virtual_server(key));
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

/// A programmed virtual server as [`Ledger::programmed`] finds it.
type Programmed = Option<(Arc<ServiceState>, usize)>;

/// Whether two states of a service port claim the same addresses, set
/// entries and virtual servers (in the same order), so that replacing one
/// by the other moves no reference count.
fn same_claims(old: &ServiceState, new: &ServiceState) -> bool {
    old.bound_addresses == new.bound_addresses
        && old.set_entries == new.set_entries
        && old.virtual_servers.len() == new.virtual_servers.len()
        && old
            .virtual_servers
            .iter()
            .zip(&new.virtual_servers)
            .all(|(a, b)| a.key() == b.key())
}

fn release<K: Ord>(counts: &mut BTreeMap<K, usize>, key: &K) {
    if let Some(n) = counts.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            counts.remove(key);
        }
    }
}

/// The smallest [`SetEntry`]: where a set's entries begin in the ledger.
const FIRST_ENTRY: SetEntry =
    SetEntry::Ip(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
