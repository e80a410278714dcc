//! IPVS virtual and real servers.
//!
//! [`NetlinkIpvs`] programs the kernel through `ipvs-sys`; `IpvsModel`
//! (tests only) is the in-memory stand-in, held to the kernel's answers by
//! the scenarios in `contract`.

#[cfg(any(test, feature = "test-support"))]
// Test support: a failed expectation is the calling test's failure.
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod contract;
pub mod listing;
#[cfg(any(test, feature = "test-support"))]
mod model;
pub(crate) mod proc_table;
mod real;
#[cfg(test)]
mod tests;
mod timeouts;

use std::{
    collections::BTreeMap,
    fmt,
    future::Future,
    net::{IpAddr, SocketAddr},
};

#[cfg(any(test, feature = "test-support"))]
pub use model::IpvsModel;
pub use real::NetlinkIpvs;
pub use timeouts::ConnTimeouts;

use super::{DetachedRead, KernelError};
pub use crate::desired::VirtualServerKey;
use crate::model::SchedulerFlags;

/// A virtual server as the proxy programs it: masquerade forwarding,
/// `persistence` for ClientIP affinity (netmask /32 or /128, as
/// kube-proxy sets it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSpec {
    pub key: VirtualServerKey,
    pub scheduler: String,
    /// Persistence timeout in seconds.
    pub persistence: Option<u32>,
    /// The scheduler's flags (`IP_VS_SVC_F_SCHED1..3`), part of the spec
    /// so that a dump shows them and a change is an edit.
    pub flags: SchedulerFlags,
}

impl ServiceSpec {
    /// The spec kube-proxy would program: the scheduler's flags follow
    /// from the scheduler (`mh-port` with `mh`, as upstream sets it on
    /// every virtual server).
    pub fn new(
        key: VirtualServerKey,
        scheduler: impl Into<String>,
        persistence: Option<u32>,
    ) -> Self {
        let scheduler = scheduler.into();
        Self {
            key,
            flags: SchedulerFlags::upstream_default(&scheduler),
            scheduler,
            persistence,
        }
    }

    /// The same with other flags.
    #[must_use]
    pub fn with_flags(mut self, flags: SchedulerFlags) -> Self {
        self.flags = flags;
        self
    }
}

/// `TCP 198.18.0.10:80`, `UDP [2001:db8::1]:53`: how errors and logs name
/// a virtual server (the same as ipvs-sys and ipvsadm).
impl fmt::Display for VirtualServerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}",
            self.protocol.as_str(),
            SocketAddr::new(self.address, self.port)
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DestKey {
    pub address: IpAddr,
    pub port: u16,
}

impl fmt::Display for DestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", SocketAddr::new(self.address, self.port))
    }
}

/// A real server, always masquerade-forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DestSpec {
    pub key: DestKey,
    pub weight: u32,
}

/// A real server as the kernel reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DestState {
    pub weight: u32,
    pub active_conns: u32,
    pub inactive_conns: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceEntry {
    pub spec: ServiceSpec,
    pub dests: BTreeMap<DestKey, DestState>,
}

/// The whole IPVS table; fwmark services are not listed (never ours).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpvsTable {
    pub services: BTreeMap<VirtualServerKey, ServiceEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpvsOp {
    AddService(ServiceSpec),
    /// Scheduler or persistence changed; the kernel answers ESRCH when
    /// the service is missing.
    UpdateService(ServiceSpec),
    DeleteService(VirtualServerKey),
    AddDest(VirtualServerKey, DestSpec),
    UpdateDest(VirtualServerKey, DestSpec),
    DeleteDest(VirtualServerKey, DestKey),
}

impl IpvsOp {
    /// The virtual server the operation acts on.
    pub fn service(&self) -> VirtualServerKey {
        match self {
            IpvsOp::AddService(spec) | IpvsOp::UpdateService(spec) => spec.key,
            IpvsOp::DeleteService(key)
            | IpvsOp::AddDest(key, _)
            | IpvsOp::UpdateDest(key, _)
            | IpvsOp::DeleteDest(key, _) => *key,
        }
    }

    /// The object the operation acts on, as its error names it:
    /// `TCP 198.18.0.10:80` or `198.19.0.5:8080 in TCP 198.18.0.10:80`.
    pub fn object(&self) -> String {
        match self {
            IpvsOp::AddService(spec) | IpvsOp::UpdateService(spec) => {
                spec.key.to_string()
            }
            IpvsOp::DeleteService(key) => key.to_string(),
            IpvsOp::AddDest(service, dest)
            | IpvsOp::UpdateDest(service, dest) => {
                dest_object(service, &dest.key)
            }
            IpvsOp::DeleteDest(service, dest) => dest_object(service, dest),
        }
    }
}

pub(crate) fn dest_object(
    service: &VirtualServerKey,
    dest: &DestKey,
) -> String {
    format!("{dest} in {service}")
}

pub trait Ipvs {
    /// Reads every service and its real servers.
    fn dump(
        &mut self,
    ) -> impl Future<Output = Result<IpvsTable, KernelError>> + Send;

    /// [`Ipvs::dump`] on a connection of its own, as a future that
    /// borrows nothing: the repair reads the table while this handle goes
    /// on writing.
    fn dump_detached(&self) -> impl DetachedRead<IpvsTable> + use<Self>;

    /// Reads one service with its real servers; `None` when it does not
    /// exist. A retry compares just the services whose writes failed.
    fn service(
        &mut self,
        key: &VirtualServerKey,
    ) -> impl Future<Output = Result<Option<ServiceEntry>, KernelError>> + Send;

    /// Reads the real servers of one service: graceful termination polls
    /// draining services this way without dumping the whole table. A
    /// missing service has none (the kernel answers with an empty dump).
    fn dests(
        &mut self,
        service: &VirtualServerKey,
    ) -> impl Future<Output = Result<BTreeMap<DestKey, DestState>, KernelError>> + Send;

    /// Applies the operations in order, all in flight at once where the
    /// implementation can, and returns one result per operation.
    fn apply(
        &mut self,
        ops: &[IpvsOp],
    ) -> impl Future<Output = Vec<Result<(), KernelError>>> + Send;
}
