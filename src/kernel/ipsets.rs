//! ipsets: kube-proxy's sets and their entries.

use std::{
    collections::{BTreeMap, BTreeSet},
    future::Future,
};

use super::KernelError;
pub use crate::desired::{SetEntry, SetType};

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
    Flush(String),
    Add(String, SetEntry),
    Delete(String, SetEntry),
}

pub trait Ipsets {
    /// Every set whose name starts with `prefix` (`KUBE-`), with entries.
    fn dump(
        &mut self,
        prefix: &str,
    ) -> impl Future<Output = Result<BTreeMap<String, SetState>, KernelError>> + Send;

    fn apply(
        &mut self,
        ops: &[IpsetOp],
    ) -> impl Future<Output = Vec<Result<(), KernelError>>> + Send;
}
