//! The facts the rules depend on, kept up to date from service deltas in
//! O(what changed): which sets are non-empty, and which load balancers are
//! closed to the node.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::rules::{FamilyInput, LocalDetector, NoNodeAccess, RulesInput};
use crate::desired::{ServiceDelta, ServiceState, SetEntry, SetKind, SetName};
use crate::kernel::iptables::IpFamily;

/// Whether a set's emptiness decides a rule: upstream's
/// `ipsetWithIptablesChain` plus the sets `writeIptablesRules` and
/// `acceptIPVSTraffic` test. The health-check ports and the IPVS
/// addresses only appear in rules that are always written, so their
/// entries never force a restore.
fn decides_a_rule(kind: SetKind) -> bool {
    !matches!(kind, SetKind::HealthCheckNodePort | SetKind::IpvsIps)
}

/// Reference counts of set entries and of closed load balancers across all
/// service ports. Several service ports can produce the same entry (two
/// services in front of one pod port share a KUBE-LOOP-BACK entry), hence
/// counts rather than sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RulesFacts {
    entries: HashMap<SetName, usize>,
    closed: BTreeMap<NoNodeAccess, usize>,
}

/// Upstream's `lbNoNodeAccessIPPortProtocolEntries` for one service port:
/// each load balancer with source ranges (an entry in KUBE-LOAD-BALANCER-FW)
/// whose ranges do not admit the node (no matching KUBE-LOAD-BALANCER-
/// SOURCE-IP entry).
fn closed_to_node(state: &ServiceState) -> Vec<NoNodeAccess> {
    let admitted: BTreeSet<&SetEntry> = state
        .set_entries
        .iter()
        .filter(|(set, _)| set.kind == SetKind::LoadBalancerSourceIp)
        .map(|(_, e)| e)
        .collect();
    state
        .set_entries
        .iter()
        .filter(|(set, _)| set.kind == SetKind::LoadBalancerFw)
        .filter_map(|(_, e)| match e {
            SetEntry::IpPort(ip, proto, port) => {
                let own = SetEntry::IpPortIp(*ip, *proto, *port, *ip);
                (!admitted.contains(&own)).then_some(NoNodeAccess {
                    address: *ip,
                    protocol: *proto,
                    port: *port,
                })
            }
            _ => None,
        })
        .collect()
}

fn dec(count: Option<&mut usize>) -> bool {
    match count {
        Some(c) if *c > 1 => {
            *c -= 1;
            false
        }
        Some(_) => true,
        None => false,
    }
}

impl RulesFacts {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, state: &ServiceState) {
        for (set, _) in &state.set_entries {
            *self.entries.entry(*set).or_default() += 1;
        }
        for c in closed_to_node(state) {
            *self.closed.entry(c).or_default() += 1;
        }
    }

    pub fn remove(&mut self, state: &ServiceState) {
        for (set, _) in &state.set_entries {
            if dec(self.entries.get_mut(set)) {
                self.entries.remove(set);
            }
        }
        for c in closed_to_node(state) {
            if dec(self.closed.get_mut(&c)) {
                self.closed.remove(&c);
            }
        }
    }

    /// Accounts for one sync's change to one service port.
    pub fn apply(&mut self, delta: &ServiceDelta) {
        if let Some(previous) = &delta.previous {
            self.remove(previous);
        }
        if let Some(current) = &delta.current {
            self.add(current);
        }
    }

    /// The rules' input for these families (each with its local-traffic
    /// detector).
    pub fn input(
        &self,
        masquerade_all: bool,
        masquerade_bit: u8,
        random_fully: bool,
        families: &[(IpFamily, LocalDetector)],
    ) -> RulesInput {
        let families = families
            .iter()
            .map(|(family, detector)| {
                let ipv6 = *family == IpFamily::V6;
                FamilyInput {
                    family: *family,
                    local_detector: detector.clone(),
                    non_empty_sets: SetKind::ALL
                        .into_iter()
                        .filter(|&kind| {
                            decides_a_rule(kind)
                                && self
                                    .entries
                                    .contains_key(&SetName { kind, ipv6 })
                        })
                        .collect(),
                    lb_no_node_access: self
                        .closed
                        .keys()
                        .filter(|c| IpFamily::of(c.address) == *family)
                        .copied()
                        .collect(),
                }
            })
            .collect();
        RulesInput {
            masquerade_all,
            masquerade_bit,
            random_fully,
            families,
        }
    }
}

#[cfg(test)]
mod tests;
