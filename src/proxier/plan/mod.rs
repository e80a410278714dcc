//! Pure planning: desired service-port states in, kernel operations out.
//!
//! One job per module: [`ledger`] is the proxier's record of what it asked
//! the kernel for (every service port's last applied state, plus
//! reference counts for what service ports share), and
//! [`Ledger::plan`] turns a sync's deltas into the operations for
//! exactly that change; [`ownership`] says whose a virtual server in the
//! kernel is; [`repair`] compares part of the ledger with a snapshot of
//! the kernel, a bounded number of keys at a time, for the drift repair
//! that runs between syncs; [`cleanup()`] lists what
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

mod cleanup;
pub mod ledger;
mod lists;
pub mod ownership;
pub mod repair;
#[cfg(test)]
mod tests;

use crate::kernel::{
    addresses::AddressOp, ipsets::IpsetOp, ipvs::IpvsOp, ipvs::VirtualServerKey,
};

pub use cleanup::cleanup;
pub use ledger::{expected_sets, service_spec, set_spec, Ledger};
pub use ownership::{listed_in_sets, node_port_keys, Listed, Owner, Ownership};
#[cfg(test)]
pub use repair::reconcile;
pub use repair::{repair_one, repair_step, Observed, RepairCursor, Touched};

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

/// `TCP 198.18.0.10:80`, as `ipvsadm` names a virtual server.
pub fn service_name(key: &VirtualServerKey) -> String {
    format!(
        "{} {}",
        key.protocol,
        std::net::SocketAddr::new(key.address, key.port)
    )
}
