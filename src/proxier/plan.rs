//! Pure planning: desired service-port states in, kernel operations out.
//!
//! [`Ledger`] is the proxier's record of what it asked the kernel for:
//! every service port's last applied [`ServiceState`], plus reference
//! counts for what service ports share. [`Ledger::plan`] turns a sync's
//! [`ServiceDelta`]s into the operations for exactly that change;
//! [`repair_step`] compares part of the ledger with a snapshot of the
//! kernel, a bounded number of keys at a time, for the drift repair that
//! runs between syncs; [`cleanup`] lists what `--cleanup` removes.
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
    cmp::Ordering,
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    net::IpAddr,
    ops::Bound,
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
        ipvs::{
            DestKey, DestSpec, IpvsOp, IpvsTable, ServiceEntry, ServiceSpec,
            VirtualServerKey,
        },
    },
    model::{Protocol, ServicePortName},
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
    #[cfg(any(test, feature = "test-support"))]
    pub fn is_empty(&self) -> bool {
        self.ipvs.is_empty()
            && self.addresses.is_empty()
            && self.ipsets.is_empty()
    }

    #[cfg(any(test, feature = "test-support"))]
    pub fn len(&self) -> usize {
        self.ipvs.len() + self.addresses.len() + self.ipsets.len()
    }
}

/// What the proxier last asked the kernel for, per service port, with the
/// reference counts of shared addresses and set entries.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    services: HashMap<ServicePortName, Arc<ServiceState>>,
    /// The service ports claiming each virtual server, sorted; the first
    /// is programmed. Almost always one: a `Vec`, not a set's node.
    owners: BTreeMap<VirtualServerKey, Vec<ServicePortName>>,
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
    key: VirtualServerKey,
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

/// The set of ours named `name`, of either family.
pub fn set_named(name: &str) -> Option<SetName> {
    expected_sets(true, true)
        .into_iter()
        .find(|set| set.name() == name)
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
    pub fn set_entries(&self) -> BTreeMap<SetName, BTreeSet<SetEntry>> {
        let mut sets: BTreeMap<SetName, BTreeSet<SetEntry>> = BTreeMap::new();
        let mirrored = self.addresses.keys().map(|a| ipvs_ips(*a));
        for (set, entry) in self.entries.keys().cloned().chain(mirrored) {
            sets.entry(set).or_default().insert(entry);
        }
        sets
    }

    /// The entries the ledger wants in `set` after `after`, in order.
    /// `KUBE-IPVS-IPS` mirrors the bound addresses of its family.
    fn set_entries_after<'a>(
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
        let mut vs_before: BTreeMap<VirtualServerKey, Option<VirtualServer>> =
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
        key: VirtualServerKey,
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
        key: VirtualServerKey,
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
    pub programmed: BTreeSet<VirtualServerKey>,
    /// The addresses NodePorts listen on.
    pub node_addresses: BTreeSet<IpAddr>,
    /// What the kernel's sets say a kube-proxy (ours or upstream's)
    /// programmed ([`listed_in_sets`]): after a restart or a takeover the
    /// process has no record of a NodePort or an external IP on a node
    /// address deleted meanwhile, and nothing else marks it.
    pub listed: Listed,
}

/// The virtual servers a kube-proxy's sets list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listed {
    /// From the sets of external and load-balancer IPs, and SCTP
    /// NodePorts (address, protocol and port in each entry).
    pub services: BTreeSet<VirtualServerKey>,
    /// From the TCP and UDP NodePort sets, which hold ports only: a
    /// virtual server on a node address with one of these is a NodePort,
    /// whatever the cluster's `--service-node-port-range`.
    pub node_ports: BTreeSet<(Protocol, u16)>,
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
        key: &VirtualServerKey,
        link_addresses: &BTreeSet<IpAddr>,
    ) -> Owner {
        if self
            .exclude_cidrs
            .iter()
            .any(|net| net.contains(&key.address))
        {
            return Owner::Excluded;
        }
        let listed_node_port = self.node_addresses.contains(&key.address)
            && self.listed.node_ports.contains(&(key.protocol, key.port));
        if link_addresses.contains(&key.address)
            || self.programmed.contains(key)
            || listed_node_port
            || self.listed.services.contains(key)
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
    pub foreign: Vec<VirtualServerKey>,
    /// Things that cannot be repaired by adding and deleting, such as a
    /// set of ours with the wrong type: logged, left as they are.
    pub warnings: Vec<String>,
}

/// What syncs touched since a repair round began: the round's read of
/// these may predate a sync's write, so it is not the truth about them
/// and the round leaves them alone (the next round looks again).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Touched {
    services: HashSet<VirtualServerKey>,
    addresses: HashSet<IpAddr>,
    sets: HashSet<String>,
    entries: HashSet<(String, SetEntry)>,
}

impl Touched {
    pub fn new() -> Self {
        Self::default()
    }

    /// Remembers every object the operations act on.
    pub fn record(&mut self, ops: &KernelOps) {
        for op in &ops.ipvs {
            self.services.insert(op.service());
        }
        self.addresses
            .extend(ops.addresses.iter().map(AddressOp::address));
        for op in &ops.ipsets {
            match op {
                IpsetOp::Create(spec) => {
                    self.sets.insert(spec.name.clone());
                }
                IpsetOp::Destroy(name) => {
                    self.sets.insert(name.clone());
                }
                IpsetOp::Add(name, entry) | IpsetOp::Delete(name, entry) => {
                    self.entries.insert((name.clone(), entry.clone()));
                }
            }
        }
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
            && self.addresses.is_empty()
            && self.sets.is_empty()
            && self.entries.is_empty()
    }
}

/// Which part of the kernel a repair round is comparing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Phase {
    #[default]
    Ipvs,
    Addresses,
    Sets,
    Done,
}

/// Where a repair round stands: each phase walks its keys in order, and
/// a step resumes after the last key the previous one compared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairCursor {
    phase: Phase,
    after_service: Option<VirtualServerKey>,
    after_address: Option<IpAddr>,
    /// The index of the set being compared in the expected sets.
    set: usize,
    after_entry: Option<SetEntry>,
}

impl RepairCursor {
    pub fn new() -> Self {
        Self::default()
    }

    /// A round with nothing (more) to compare.
    pub fn done() -> Self {
        Self {
            phase: Phase::Done,
            ..Self::default()
        }
    }

    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }
}

/// Up to `n` keys from two sorted sequences, in order and each once, with
/// the sides each came from; and whether both sequences are exhausted.
fn merged<K: Ord + Clone>(
    a: impl Iterator<Item = K>,
    b: impl Iterator<Item = K>,
    n: usize,
) -> (Vec<(K, bool, bool)>, bool) {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    let mut out = Vec::new();
    while out.len() < n {
        let order = match (a.peek(), b.peek()) {
            (None, None) => return (out, true),
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
        };
        let next = match order {
            Ordering::Less => a.next().map(|k| (k, true, false)),
            Ordering::Equal => {
                b.next();
                a.next().map(|k| (k, true, true))
            }
            Ordering::Greater => b.next().map(|k| (k, false, true)),
        };
        out.extend(next);
    }
    let exhausted = a.peek().is_none() && b.peek().is_none();
    (out, exhausted)
}

fn after<K>(key: &Option<K>) -> (Bound<&K>, Bound<&K>) {
    match key {
        Some(k) => (Bound::Excluded(k), Bound::Unbounded),
        None => (Bound::Unbounded, Bound::Unbounded),
    }
}

/// The smallest [`SetEntry`]: where a set's entries begin in the ledger.
const FIRST_ENTRY: SetEntry =
    SetEntry::Ip(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));

/// Compares up to `budget` keys of the ledger and the kernel, resuming
/// where `cursor` stands, and lists the operations that repair the
/// difference: missing or changed virtual servers, real servers and
/// weights (which restores real servers an earlier run left at weight 0:
/// the ones still meant to drain are not in the ledger), addresses and set
/// entries, missing sets. Only objects we own are deleted, nothing is
/// flushed, and whatever `touched` names is left alone. A facility whose
/// read failed is skipped.
///
/// Real servers in the kernel that the ledger lacks come out as
/// `DeleteDest`; the graceful-termination router decides whether they go
/// now or drain.
pub fn repair_step(
    ledger: &Ledger,
    sets: &[SetName],
    observed: &Observed,
    ownership: &Ownership,
    touched: &Touched,
    cursor: &mut RepairCursor,
    budget: usize,
) -> Reconciled {
    let mut out = Reconciled::default();
    let mut ipvs = IpvsLists::default();
    let mut set_lists = SetLists::default();
    let (mut binds, mut unbinds) = (Vec::new(), Vec::new());
    let no_addresses = BTreeSet::new();
    let link = observed.link_addresses.as_ref().unwrap_or(&no_addresses);
    let mut left = budget.max(1);
    while left > 0 && cursor.phase != Phase::Done {
        match cursor.phase {
            Phase::Ipvs => {
                let Some(table) = &observed.ipvs else {
                    cursor.phase = Phase::Addresses;
                    continue;
                };
                let range = after(&cursor.after_service);
                let (keys, exhausted) = merged(
                    ledger.owners.range(range).map(|(k, _)| *k),
                    table.services.range(range).map(|(k, _)| *k),
                    left,
                );
                left -= keys.len();
                for (key, _, _) in keys {
                    cursor.after_service = Some(key);
                    if !touched.services.contains(&key) {
                        repair_virtual_server(
                            ledger, table, link, ownership, key, &mut ipvs,
                            &mut out,
                        );
                    }
                }
                if exhausted {
                    cursor.phase = Phase::Addresses;
                }
            }
            Phase::Addresses => {
                let Some(have) = &observed.link_addresses else {
                    cursor.phase = Phase::Sets;
                    continue;
                };
                let range = after(&cursor.after_address);
                let (keys, exhausted) = merged(
                    ledger.addresses.range(range).map(|(a, _)| *a),
                    have.range(range).copied(),
                    left,
                );
                left -= keys.len();
                for (addr, want, has) in keys {
                    cursor.after_address = Some(addr);
                    if touched.addresses.contains(&addr) {
                        continue;
                    }
                    match (want, has) {
                        (true, false) => binds.push(AddressOp::Add(addr)),
                        // The kernel adds an IPv6 link-local address to a
                        // link that is set up by hand; it is not ours.
                        (false, true) if !is_link_local_v6(&addr) => {
                            unbinds.push(AddressOp::Delete(addr))
                        }
                        _ => {}
                    }
                }
                if exhausted {
                    cursor.phase = Phase::Sets;
                }
            }
            Phase::Sets => {
                let (Some(have), Some(set)) =
                    (&observed.sets, sets.get(cursor.set))
                else {
                    cursor.phase = Phase::Done;
                    continue;
                };
                let name = set.name();
                let state = have.get(&name);
                if cursor.after_entry.is_none() {
                    match state {
                        None if !touched.sets.contains(&name) => set_lists
                            .create
                            .push(IpsetOp::Create(set_spec(*set))),
                        Some(state)
                            if state.spec.set_type != set.kind.set_type() =>
                        {
                            out.warnings.push(format!(
                                "ipset {name} has type {} instead of {}; \
                                 left as it is",
                                state.spec.set_type.as_str(),
                                set.kind.set_type().as_str()
                            ));
                            cursor.set += 1;
                            continue;
                        }
                        _ => {}
                    }
                }
                let empty = BTreeSet::new();
                let current = state.map_or(&empty, |s| &s.entries);
                let (keys, exhausted) = merged(
                    ledger.set_entries_after(*set, &cursor.after_entry),
                    current.range(after(&cursor.after_entry)).cloned(),
                    left,
                );
                left -= keys.len();
                for (entry, want, has) in keys {
                    cursor.after_entry = Some(entry.clone());
                    if touched.entries.contains(&(name.clone(), entry.clone()))
                    {
                        continue;
                    }
                    match (want, has) {
                        (true, false) => set_lists
                            .add
                            .push(IpsetOp::Add(name.clone(), entry)),
                        (false, true) => set_lists
                            .delete
                            .push(IpsetOp::Delete(name.clone(), entry)),
                        _ => {}
                    }
                }
                if exhausted {
                    cursor.set += 1;
                    cursor.after_entry = None;
                }
            }
            Phase::Done => {}
        }
    }
    out.ops.ipvs = ipvs.into_ops();
    binds.extend(unbinds);
    out.ops.addresses = binds;
    out.ops.ipsets = set_lists.into_ops();
    out
}

fn repair_virtual_server(
    ledger: &Ledger,
    table: &IpvsTable,
    link: &BTreeSet<IpAddr>,
    ownership: &Ownership,
    key: VirtualServerKey,
    lists: &mut IpvsLists,
    out: &mut Reconciled,
) {
    match (ledger.virtual_server(&key), table.services.get(&key)) {
        (Some(vs), None) => lists.diff(key, None, Some(vs)),
        (Some(vs), Some(entry)) => {
            if entry.spec != service_spec(vs) {
                lists.services.push(IpvsOp::UpdateService(service_spec(vs)));
            }
            let have: BTreeMap<DestKey, u32> =
                entry.dests.iter().map(|(k, s)| (*k, s.weight)).collect();
            lists.dests(key, &have, &dests(vs));
        }
        (None, Some(_)) => match ownership.classify(&key, link) {
            Owner::Ours => {
                lists.delete_services.push(IpvsOp::DeleteService(key))
            }
            Owner::Excluded => {}
            Owner::Foreign => out.foreign.push(key),
        },
        (None, None) => {}
    }
}

/// The operations that take one virtual server from what the kernel
/// has (`None`: missing) to what the ledger wants: how a retry repairs
/// a service whose writes failed.
pub fn repair_one(
    ledger: &Ledger,
    key: VirtualServerKey,
    have: Option<&ServiceEntry>,
    ownership: &Ownership,
    link: &BTreeSet<IpAddr>,
) -> Reconciled {
    let mut out = Reconciled::default();
    let mut lists = IpvsLists::default();
    let table;
    let table = match have {
        Some(entry) => {
            table = IpvsTable {
                services: [(key, entry.clone())].into(),
            };
            &table
        }
        None => &IpvsTable::default(),
    };
    repair_virtual_server(
        ledger, table, link, ownership, key, &mut lists, &mut out,
    );
    out.ops.ipvs = lists.into_ops();
    out
}

/// The whole comparison at once: what a repair round amounts to when
/// nothing is touched meanwhile.
#[cfg(test)]
pub fn reconcile(
    ledger: &Ledger,
    sets: &[SetName],
    observed: &Observed,
    ownership: &Ownership,
) -> Reconciled {
    repair_step(
        ledger,
        sets,
        observed,
        ownership,
        &Touched::new(),
        &mut RepairCursor::new(),
        usize::MAX,
    )
}

/// What the sets of external and load-balancer IPs and of NodePorts (both
/// families, `Local` ones included) list. Only a kube-proxy writes those
/// sets, so a virtual server they list is one, even when its address is
/// the node's own: an external IP that is a node address needs no binding
/// to kube-ipvs0, a NodePort none, and upstream's state after a takeover
/// has no record of ours.
pub fn listed_in_sets(sets: &BTreeMap<String, SetState>) -> Listed {
    let kinds = [
        SetKind::ExternalIp,
        SetKind::ExternalIpLocal,
        SetKind::LoadBalancer,
        SetKind::LoadBalancerLocal,
        SetKind::NodePortTcp,
        SetKind::NodePortLocalTcp,
        SetKind::NodePortUdp,
        SetKind::NodePortLocalUdp,
        SetKind::NodePortSctp,
        SetKind::NodePortLocalSctp,
    ];
    let mut out = Listed::default();
    for ipv6 in [false, true] {
        for kind in kinds {
            let Some(set) = sets.get(&SetName { kind, ipv6 }.name()) else {
                continue;
            };
            let port_protocol = match kind {
                SetKind::NodePortTcp | SetKind::NodePortLocalTcp => {
                    Some(Protocol::Tcp)
                }
                SetKind::NodePortUdp | SetKind::NodePortLocalUdp => {
                    Some(Protocol::Udp)
                }
                _ => None,
            };
            for entry in &set.entries {
                match (entry, port_protocol) {
                    (SetEntry::IpPort(address, protocol, port), _) => {
                        out.services.insert(VirtualServerKey {
                            address: *address,
                            port: *port,
                            protocol: *protocol,
                        });
                    }
                    (SetEntry::Port(port), Some(protocol)) => {
                        out.node_ports.insert((protocol, *port));
                    }
                    _ => {}
                }
            }
        }
    }
    out
}

/// What `--cleanup` removes: every virtual server we own, every set of
/// ours of either family. The dummy link is deleted by the caller (its
/// addresses go with it). Sets must be destroyed after the iptables
/// rules that reference them are gone, or the kernel refuses (EBUSY).
pub fn cleanup(observed: &Observed, ownership: &Ownership) -> KernelOps {
    let mut ops = KernelOps::default();
    let no_addresses = BTreeSet::new();
    let link = observed.link_addresses.as_ref().unwrap_or(&no_addresses);
    let listed = Ownership {
        listed: observed
            .sets
            .as_ref()
            .map(listed_in_sets)
            .unwrap_or_default(),
        ..ownership.clone()
    };
    if let Some(table) = &observed.ipvs {
        ops.ipvs = table
            .services
            .keys()
            .filter(|key| listed.classify(key, link) == Owner::Ours)
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
) -> impl Iterator<Item = VirtualServerKey> + 'a {
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
pub fn service_name(key: &VirtualServerKey) -> String {
    format!(
        "{} {}",
        key.protocol,
        std::net::SocketAddr::new(key.address, key.port)
    )
}
