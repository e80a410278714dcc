//! IPVS virtual and real servers.

use std::{
    collections::BTreeMap,
    fmt,
    future::Future,
    net::{IpAddr, SocketAddr},
};

use super::KernelError;
pub use crate::desired::VirtualServerKey as ServiceKey;

/// A virtual server as the proxy programs it: masquerade forwarding,
/// `persistence` for ClientIP affinity (netmask /32 or /128, as
/// kube-proxy sets it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSpec {
    pub key: ServiceKey,
    pub scheduler: String,
    /// Persistence timeout in seconds.
    pub persistence: Option<u32>,
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
    pub services: BTreeMap<ServiceKey, ServiceEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpvsOp {
    AddService(ServiceSpec),
    /// Scheduler or persistence changed; the kernel answers ESRCH when
    /// the service is missing.
    UpdateService(ServiceSpec),
    DeleteService(ServiceKey),
    AddDest(ServiceKey, DestSpec),
    UpdateDest(ServiceKey, DestSpec),
    DeleteDest(ServiceKey, DestKey),
}

pub trait Ipvs {
    /// Reads every service and its real servers.
    fn dump(
        &mut self,
    ) -> impl Future<Output = Result<IpvsTable, KernelError>> + Send;

    /// Reads the real servers of one service: graceful termination polls
    /// draining services this way without dumping the whole table.
    fn dests(
        &mut self,
        service: &ServiceKey,
    ) -> impl Future<Output = Result<BTreeMap<DestKey, DestState>, KernelError>> + Send;

    /// Applies the operations in order, all in flight at once where the
    /// implementation can, and returns one result per operation.
    fn apply(
        &mut self,
        ops: &[IpvsOp],
    ) -> impl Future<Output = Vec<Result<(), KernelError>>> + Send;
}
