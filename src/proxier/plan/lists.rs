//! Operations collected by kind and emitted in the order the module
//! docs of [`super`] give, for a sync's plan and a repair alike.

use std::collections::BTreeMap;

use super::service_spec;

use crate::{
    desired::{RealServer, VirtualServer},
    kernel::{
        ipsets::IpsetOp,
        ipvs::{DestKey, DestSpec, IpvsOp, VirtualServerKey},
    },
};

/// The real servers a virtual server wants, with their weights.
pub(super) fn dests(vs: &VirtualServer) -> BTreeMap<DestKey, u32> {
    dest_map(&vs.real_servers)
}

fn dest_map(real_servers: &[RealServer]) -> BTreeMap<DestKey, u32> {
    real_servers
        .iter()
        .map(|rs| (dest_key(rs), rs.weight))
        .collect()
}

fn dest_key(rs: &RealServer) -> DestKey {
    DestKey {
        address: rs.address,
        port: rs.port,
    }
}

/// IPVS operations collected by kind, emitted in the documented order.
#[derive(Default)]
pub(super) struct IpvsLists {
    pub(super) services: Vec<IpvsOp>,
    pub(super) add_dests: Vec<IpvsOp>,
    pub(super) update_dests: Vec<IpvsOp>,
    pub(super) delete_dests: Vec<IpvsOp>,
    pub(super) delete_services: Vec<IpvsOp>,
}

impl IpvsLists {
    /// Compares what was programmed with what should be. `before` may come
    /// from the ledger (weights as desired) or from a dump (weights as the
    /// kernel has them): either way a differing weight is updated.
    pub(super) fn diff(
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
                self.real_servers(key, &[], &vs.real_servers);
            }
            (Some(old), Some(new)) => {
                let same_spec = old.scheduling == new.scheduling
                    && old.persistent.then_some(old.timeout)
                        == new.persistent.then_some(new.timeout);
                if !same_spec {
                    self.services
                        .push(IpvsOp::UpdateService(service_spec(new)));
                }
                self.real_servers(key, &old.real_servers, &new.real_servers);
            }
        }
    }

    /// [`Self::dests`] for two lists of real servers. The desired state
    /// keeps them sorted by address and port, one each, so they are
    /// walked side by side; the maps are built only for lists that are
    /// not.
    fn real_servers(
        &mut self,
        key: VirtualServerKey,
        old: &[RealServer],
        new: &[RealServer],
    ) {
        let sorted = |list: &[RealServer]| {
            list.windows(2)
                .all(|pair| dest_key(&pair[0]) < dest_key(&pair[1]))
        };
        if !sorted(old) || !sorted(new) {
            self.dests(key, &dest_map(old), &dest_map(new));
            return;
        }
        let spec = |rs: &RealServer| DestSpec {
            key: dest_key(rs),
            weight: rs.weight,
        };
        let (mut i, mut j) = (0, 0);
        loop {
            match (old.get(i), new.get(j)) {
                (None, None) => break,
                (Some(was), Some(now)) if dest_key(was) == dest_key(now) => {
                    if was.weight != now.weight {
                        self.update_dests
                            .push(IpvsOp::UpdateDest(key, spec(now)));
                    }
                    (i, j) = (i + 1, j + 1);
                }
                (Some(was), Some(now)) if dest_key(now) < dest_key(was) => {
                    self.add_dests.push(IpvsOp::AddDest(key, spec(now)));
                    j += 1;
                }
                (Some(was), _) => {
                    self.delete_dests
                        .push(IpvsOp::DeleteDest(key, dest_key(was)));
                    i += 1;
                }
                (None, Some(now)) => {
                    self.add_dests.push(IpvsOp::AddDest(key, spec(now)));
                    j += 1;
                }
            }
        }
    }

    pub(super) fn dests(
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

    pub(super) fn into_ops(self) -> Vec<IpvsOp> {
        let mut ops = self.services;
        ops.extend(self.add_dests);
        ops.extend(self.update_dests);
        ops.extend(self.delete_dests);
        ops.extend(self.delete_services);
        ops
    }
}

#[derive(Default)]
pub(super) struct SetLists {
    pub(super) create: Vec<IpsetOp>,
    pub(super) add: Vec<IpsetOp>,
    pub(super) delete: Vec<IpsetOp>,
}

impl SetLists {
    pub(super) fn into_ops(self) -> Vec<IpsetOp> {
        let mut ops = self.create;
        ops.extend(self.add);
        ops.extend(self.delete);
        ops
    }
}
