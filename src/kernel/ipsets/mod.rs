//! ipsets: kube-proxy's sets and their entries.
//!
//! [`NetlinkIpsets`] programs the kernel over ipset's netlink protocol;
//! `IpsetsModel` (tests only) holds sets in memory and fails where the kernel does.
//! The scenarios in `contract` hold the two to the same results.

#[cfg(any(test, feature = "test-support"))]
// Test support: a failed expectation is the calling test's failure.
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod contract;
#[cfg(any(test, feature = "test-support"))]
mod model;
pub(crate) mod netlink;
pub(crate) mod real;
#[cfg(test)]
mod tests;

use std::{
    collections::{BTreeMap, BTreeSet},
    future::Future,
};

use super::{DetachedRead, KernelError};
pub use crate::desired::{SetEntry, SetType};
#[cfg(any(test, feature = "test-support"))]
pub use model::IpsetsModel;
pub use real::NetlinkIpsets;

/// A set as the proxy creates it (kube-proxy's options: family, hash
/// size 1024, maxelem 65536; bitmap:port with range 0-65535).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetSpec {
    pub name: String,
    pub set_type: SetType,
    pub ipv6: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetState {
    pub spec: SetSpec,
    pub entries: BTreeSet<SetEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpsetOp {
    Create(SetSpec),
    Destroy(String),
    Add(String, SetEntry),
    Delete(String, SetEntry),
}

/// Whether sets of a type can be created here: the kernel loads a type's
/// module on demand, so asking is enough, and creates nothing.
pub trait SetTypes {
    fn check_type(&mut self, set_type: SetType) -> Result<(), KernelError>;
}

impl IpsetOp {
    /// What an error about this operation names: the set, and the
    /// element in `ipset save` syntax.
    pub fn object(&self) -> String {
        match self {
            IpsetOp::Create(spec) => spec.name.clone(),
            IpsetOp::Destroy(name) => name.clone(),
            IpsetOp::Add(name, entry) | IpsetOp::Delete(name, entry) => {
                format!("{name} {entry}")
            }
        }
    }
}

/// The family of a listed set when the kernel does not keep one: a
/// bitmap:port set has no family, so (as kube-proxy names them) the
/// `KUBE-6-` prefix is what says it serves IPv6.
pub(crate) fn family_of_listed(set_type: SetType, name: &str) -> Option<bool> {
    match set_type {
        SetType::BitmapPort => Some(name.starts_with("KUBE-6-")),
        _ => None,
    }
}

pub trait Ipsets {
    /// Every set whose name starts with `prefix` (`KUBE-`), with entries.
    fn dump(
        &mut self,
        prefix: &str,
    ) -> impl Future<Output = Result<BTreeMap<String, SetState>, KernelError>> + Send;

    /// [`Ipsets::dump`] on a socket of its own, as a future that borrows
    /// nothing: the repair reads while this handle writes.
    fn dump_detached(
        &self,
        prefix: &str,
    ) -> impl DetachedRead<BTreeMap<String, SetState>> + use<Self>;

    fn apply(
        &mut self,
        ops: &[IpsetOp],
    ) -> impl Future<Output = Vec<Result<(), KernelError>>> + Send;
}
