//! kube-ipvs0 and the addresses bound to it.
//!
//! Addresses are bound as /32 or /128 with scope global (as upstream's
//! netlink handle binds them), so `ip addr` on a node looks the same as
//! under kube-proxy.

use std::{collections::BTreeSet, fmt, future::Future, net::IpAddr};

use super::{DetachedRead, KernelError};

/// Scenarios run against the model by the unit tests and against the
/// kernel by the guest tests (public for the latter).
#[cfg(any(test, feature = "test-support"))]
// Test support: a failed expectation is the calling test's failure.
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod contract;
#[cfg(any(test, feature = "test-support"))]
mod model;
pub(crate) mod real;
#[cfg(test)]
mod tests;

#[cfg(any(test, feature = "test-support"))]
pub use model::AddressesModel;
pub use real::NetlinkAddresses;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddressOp {
    /// Adds the address as /32 or /128.
    Add(IpAddr),
    Delete(IpAddr),
}

impl AddressOp {
    /// How errors name the address this operation binds or unbinds.
    pub fn object<'a>(&self, link: &'a str) -> BoundAddress<'a> {
        BoundAddress {
            address: self.address(),
            link,
        }
    }

    pub fn address(&self) -> IpAddr {
        match *self {
            AddressOp::Add(ip) | AddressOp::Delete(ip) => ip,
        }
    }
}

/// How an error names a bound address: `198.18.0.10/32 on kube-ipvs0`.
pub struct BoundAddress<'a> {
    pub address: IpAddr,
    pub link: &'a str,
}

impl fmt::Display for BoundAddress<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} on {}",
            self.address,
            host_prefix_len(self.address),
            self.link
        )
    }
}

/// The prefix length of a single-address network: 32 or 128.
pub fn host_prefix_len(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

pub trait Addresses {
    /// Creates the dummy link if it is missing, and leaves it down: IPVS
    /// accepts traffic for its addresses all the same, and a down link
    /// never answers ARP for them.
    fn ensure_dummy(
        &mut self,
        link: &str,
    ) -> impl Future<Output = Result<(), KernelError>> + Send;

    /// Deletes the link; NotFound (ENODEV) when it does not exist, which
    /// `--cleanup` treats as done.
    fn delete_link(
        &mut self,
        link: &str,
    ) -> impl Future<Output = Result<(), KernelError>> + Send;

    /// The addresses on `link`; empty when the link does not exist.
    fn list(
        &mut self,
        link: &str,
    ) -> impl Future<Output = Result<BTreeSet<IpAddr>, KernelError>> + Send;

    /// Every address on every other link, sorted, without duplicates:
    /// the node's own addresses, for NodePorts and for not binding an
    /// external IP the node already has. Like upstream's
    /// GetAllLocalAddressesExcept it keeps loopback and link-local
    /// addresses; the nodePortAddresses rules filter them.
    fn local_addresses(
        &mut self,
        except_link: &str,
    ) -> impl Future<Output = Result<Vec<IpAddr>, KernelError>> + Send;

    /// [`Addresses::list`] on a connection of its own, as a future that
    /// borrows nothing: the repair reads while this handle writes.
    fn list_detached(
        &self,
        link: &str,
    ) -> impl DetachedRead<BTreeSet<IpAddr>> + use<Self>;

    /// [`Addresses::local_addresses`], detached the same way.
    fn local_addresses_detached(
        &self,
        except_link: &str,
    ) -> impl DetachedRead<Vec<IpAddr>> + use<Self>;

    /// Adds and deletes addresses on `link`, all requests in flight at
    /// once, one result per operation in order: Exists (EEXIST) for an
    /// address already bound, NotFound (EADDRNOTAVAIL) for deleting one
    /// that is not, NotFound (ENODEV) for every operation when the link
    /// is missing. Each error names the address and the link.
    fn apply(
        &mut self,
        link: &str,
        ops: &[AddressOp],
    ) -> impl Future<Output = Vec<Result<(), KernelError>>> + Send;

    /// [`Addresses::apply`] as a future that borrows nothing, its
    /// requests sent and answered on a connection and thread of their
    /// own: binding an address is the kernel's slowest write here (each
    /// walks the link's list of addresses), and a full reconcile binds
    /// thousands while the loop writes IPVS. Whatever the operations do
    /// may happen at any time between the call and the future's end.
    fn apply_detached(
        &mut self,
        link: &str,
        ops: Vec<AddressOp>,
    ) -> impl Future<Output = Vec<Result<(), KernelError>>>
           + Send
           + 'static
           + use<Self>;
}

pub(crate) use libc::{EADDRNOTAVAIL, ENODEV};

/// What an address or link operation's errno means: a missing link
/// (ENODEV) and a missing address (EADDRNOTAVAIL) are both NotFound.
pub(crate) fn errno_kind(errno: i32) -> super::ErrorKind {
    use super::ErrorKind;
    use libc as e;
    match errno {
        e::EEXIST => ErrorKind::Exists,
        e::ENOENT | e::ESRCH | ENODEV | EADDRNOTAVAIL => ErrorKind::NotFound,
        e::EINVAL => ErrorKind::Invalid,
        _ => ErrorKind::Other,
    }
}

/// The error the kernel gives for `errno` on `object`.
pub(crate) fn errno_error(
    object: impl fmt::Display,
    errno: i32,
    message: impl Into<String>,
) -> KernelError {
    KernelError::new(errno_kind(errno), object, message).with_errno(errno)
}
