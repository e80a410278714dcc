//! What `--cleanup` removes.

use std::collections::BTreeSet;

use super::{
    expected_sets, listed_in_sets, KernelOps, Observed, Owner, Ownership,
};
use crate::kernel::{ipsets::IpsetOp, ipvs::IpvsOp};

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
