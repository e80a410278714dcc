//! The drift repair's comparison of the ledger with the kernel, a
//! bounded number of keys at a time.

use std::{
    cmp::Ordering,
    collections::{BTreeMap, BTreeSet, HashSet},
    net::IpAddr,
    ops::Bound,
};

use super::{
    lists::{dests, IpvsLists, SetLists},
    service_spec, set_spec, KernelOps, Ledger, Owner, Ownership,
};
use crate::{
    desired::{SetEntry, SetName},
    kernel::{
        addresses::AddressOp,
        ipsets::{IpsetOp, SetState},
        ipvs::{DestKey, IpvsOp, IpvsTable, ServiceEntry, VirtualServerKey},
    },
};

/// The kernel as read back by one dump per facility. A facility whose
/// dump failed is `None` and is left alone by [`repair_step`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    pub ipvs: Option<IpvsTable>,
    /// The addresses on the dummy link.
    pub link_addresses: Option<BTreeSet<IpAddr>>,
    /// The `KUBE-` sets, by name.
    pub sets: Option<BTreeMap<String, SetState>>,
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

/// Which phases a cursor walks: all of them, or the link's addresses
/// apart from the rest, so that a full reconcile can write the two side
/// by side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Walks {
    #[default]
    Everything,
    AllButAddresses,
    AddressesAlone,
}

/// Where a repair round stands: each phase walks its keys in order, and
/// a step resumes after the last key the previous one compared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairCursor {
    phase: Phase,
    walks: Walks,
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

    /// A cursor that walks the link's addresses alone; its steps list
    /// address operations only.
    pub fn addresses_alone() -> Self {
        Self {
            phase: Phase::Addresses,
            walks: Walks::AddressesAlone,
            ..Self::default()
        }
    }

    /// A cursor that walks everything but the link's addresses (which
    /// one of [`RepairCursor::addresses_alone`] walks).
    pub fn all_but_addresses() -> Self {
        Self {
            walks: Walks::AllButAddresses,
            ..Self::default()
        }
    }

    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    fn ipvs_done(&mut self) {
        self.phase = match self.walks {
            Walks::AllButAddresses => Phase::Sets,
            Walks::Everything | Walks::AddressesAlone => Phase::Addresses,
        };
    }

    fn addresses_done(&mut self) {
        self.phase = match self.walks {
            Walks::AddressesAlone => Phase::Done,
            Walks::Everything | Walks::AllButAddresses => Phase::Sets,
        };
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
    let no_addresses = BTreeSet::new();
    let mut step = Step {
        ledger,
        observed,
        ownership,
        touched,
        link: observed.link_addresses.as_ref().unwrap_or(&no_addresses),
        left: budget.max(1),
        out: Reconciled::default(),
        ipvs: IpvsLists::default(),
        sets: SetLists::default(),
        binds: Vec::new(),
        unbinds: Vec::new(),
    };
    while step.left > 0 && cursor.phase != Phase::Done {
        match cursor.phase {
            Phase::Ipvs => step.virtual_servers(cursor),
            Phase::Addresses => step.addresses(cursor),
            Phase::Sets => step.set(sets, cursor),
            Phase::Done => {}
        }
    }
    step.finish()
}

/// One repair step's inputs, budget left and operations so far; each
/// phase compares what the budget allows and moves the cursor on.
struct Step<'a> {
    ledger: &'a Ledger,
    observed: &'a Observed,
    ownership: &'a Ownership,
    touched: &'a Touched,
    link: &'a BTreeSet<IpAddr>,
    left: usize,
    out: Reconciled,
    ipvs: IpvsLists,
    sets: SetLists,
    binds: Vec<AddressOp>,
    unbinds: Vec<AddressOp>,
}

impl Step<'_> {
    fn virtual_servers(&mut self, cursor: &mut RepairCursor) {
        let Some(table) = &self.observed.ipvs else {
            cursor.ipvs_done();
            return;
        };
        let range = after(&cursor.after_service);
        let (keys, exhausted) = merged(
            self.ledger.owners.range(range).map(|(k, _)| *k),
            table.services.range(range).map(|(k, _)| *k),
            self.left,
        );
        self.left -= keys.len();
        for (key, _, _) in keys {
            cursor.after_service = Some(key);
            if !self.touched.services.contains(&key) {
                repair_virtual_server(
                    self.ledger,
                    table,
                    self.link,
                    self.ownership,
                    key,
                    &mut self.ipvs,
                    &mut self.out,
                );
            }
        }
        if exhausted {
            cursor.ipvs_done();
        }
    }

    fn addresses(&mut self, cursor: &mut RepairCursor) {
        let Some(have) = &self.observed.link_addresses else {
            cursor.addresses_done();
            return;
        };
        let range = after(&cursor.after_address);
        let (keys, exhausted) = merged(
            self.ledger.addresses.range(range).map(|(a, _)| *a),
            have.range(range).copied(),
            self.left,
        );
        self.left -= keys.len();
        for (addr, want, has) in keys {
            cursor.after_address = Some(addr);
            if self.touched.addresses.contains(&addr) {
                continue;
            }
            match (want, has) {
                (true, false) => self.binds.push(AddressOp::Add(addr)),
                // The kernel adds an IPv6 link-local address to a link
                // that is set up by hand; it is not ours.
                (false, true) if !is_link_local_v6(&addr) => {
                    self.unbinds.push(AddressOp::Delete(addr))
                }
                _ => {}
            }
        }
        if exhausted {
            cursor.addresses_done();
        }
    }

    /// The set the cursor is at: created if missing, then its entries.
    fn set(&mut self, sets: &[SetName], cursor: &mut RepairCursor) {
        let (Some(have), Some(set)) =
            (&self.observed.sets, sets.get(cursor.set))
        else {
            cursor.phase = Phase::Done;
            return;
        };
        let name = set.name();
        let state = have.get(&name);
        if cursor.after_entry.is_none() {
            match state {
                None if !self.touched.sets.contains(&name) => {
                    self.sets.create.push(IpsetOp::Create(set_spec(*set)))
                }
                Some(state) if state.spec.set_type != set.kind.set_type() => {
                    self.out.warnings.push(format!(
                        "ipset {name} has type {} instead of {}; left as it is",
                        state.spec.set_type.as_str(),
                        set.kind.set_type().as_str()
                    ));
                    cursor.set += 1;
                    return;
                }
                _ => {}
            }
        }
        let empty = BTreeSet::new();
        let current = state.map_or(&empty, |s| &s.entries);
        let (keys, exhausted) = merged(
            self.ledger.set_entries_after(*set, &cursor.after_entry),
            current.range(after(&cursor.after_entry)).cloned(),
            self.left,
        );
        self.left -= keys.len();
        for (entry, want, has) in keys {
            cursor.after_entry = Some(entry.clone());
            if self
                .touched
                .entries
                .contains(&(name.clone(), entry.clone()))
            {
                continue;
            }
            match (want, has) {
                (true, false) => {
                    self.sets.add.push(IpsetOp::Add(name.clone(), entry))
                }
                (false, true) => {
                    self.sets.delete.push(IpsetOp::Delete(name.clone(), entry))
                }
                _ => {}
            }
        }
        if exhausted {
            cursor.set += 1;
            cursor.after_entry = None;
        }
    }

    /// The operations in the documented order.
    fn finish(self) -> Reconciled {
        let mut out = self.out;
        out.ops.ipvs = self.ipvs.into_ops();
        let mut addresses = self.binds;
        addresses.extend(self.unbinds);
        out.ops.addresses = addresses;
        out.ops.ipsets = self.sets.into_ops();
        out
    }
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

fn is_link_local_v6(addr: &IpAddr) -> bool {
    matches!(addr, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80)
}
