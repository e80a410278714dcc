//! kube-ipvs0 and the addresses bound to it.

use std::{collections::BTreeSet, future::Future, net::IpAddr};

use super::KernelError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddressOp {
    /// Adds the address as /32 or /128.
    Add(IpAddr),
    Delete(IpAddr),
}

pub trait Addresses {
    /// Creates the dummy link if it is missing, and leaves it down: IPVS
    /// accepts traffic for its addresses all the same, and a down link
    /// never answers ARP for them.
    fn ensure_dummy(
        &mut self,
        link: &str,
    ) -> impl Future<Output = Result<(), KernelError>> + Send;

    fn delete_link(
        &mut self,
        link: &str,
    ) -> impl Future<Output = Result<(), KernelError>> + Send;

    /// The addresses on `link`; empty when the link does not exist.
    fn list(
        &mut self,
        link: &str,
    ) -> impl Future<Output = Result<BTreeSet<IpAddr>, KernelError>> + Send;

    /// Every address on every other link: the node's own addresses, for
    /// NodePorts and for not binding an external IP the node already has.
    fn local_addresses(
        &mut self,
        except_link: &str,
    ) -> impl Future<Output = Result<Vec<IpAddr>, KernelError>> + Send;

    fn apply(
        &mut self,
        link: &str,
        ops: &[AddressOp],
    ) -> impl Future<Output = Vec<Result<(), KernelError>>> + Send;
}
