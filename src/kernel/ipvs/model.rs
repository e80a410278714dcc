//! An in-memory IPVS table that answers as the kernel does.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    dest_object, DestKey, DestSpec, DestState, Ipvs, IpvsOp, IpvsTable,
    ServiceEntry, ServiceSpec, VirtualServerKey,
};
use crate::kernel::{DetachedRead, ErrorKind, KernelError};

/// The kernel keeps weights in a signed int and answers ERANGE for one
/// that turns negative there (seen in the guest, 6.1).
const MAX_WEIGHT: u32 = i32::MAX as u32;
pub(super) use libc::ERANGE;

/// The IPVS table in memory. Every operation fails where the kernel's
/// does, with the kernel's errno: EEXIST for a duplicate service or real
/// server, ESRCH for a missing service (whatever the operation), ENOENT
/// for a missing real server or an unknown scheduler, EINVAL for a real
/// server of the other address family, ERANGE for a weight above
/// `i32::MAX`.
#[derive(Debug, Clone)]
pub struct IpvsModel {
    table: IpvsTable,
    schedulers: BTreeSet<String>,
    applied: usize,
}

impl Default for IpvsModel {
    fn default() -> Self {
        Self::new()
    }
}

impl IpvsModel {
    pub fn new() -> Self {
        Self::with_table(IpvsTable::default())
    }

    /// A model that starts from `table` (what an earlier run left).
    pub fn with_table(table: IpvsTable) -> Self {
        Self {
            table,
            // A stock kernel's (`ip_vs_*.ko`); others are refused with
            // ENOENT, as the kernel does when the module does not exist.
            schedulers: crate::model::STANDARD_SCHEDULERS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            applied: 0,
        }
    }

    pub fn table(&self) -> &IpvsTable {
        &self.table
    }

    /// How many operations `apply` was given so far, failed ones
    /// included: what a test of incremental syncs counts.
    pub fn applied_ops(&self) -> usize {
        self.applied
    }

    /// Sets a real server's connection counts, as traffic would. False
    /// when there is no such real server.
    pub fn set_conns(
        &mut self,
        service: &VirtualServerKey,
        dest: &DestKey,
        active: u32,
        inactive: u32,
    ) -> bool {
        match self
            .table
            .services
            .get_mut(service)
            .and_then(|entry| entry.dests.get_mut(dest))
        {
            Some(state) => {
                state.active_conns = active;
                state.inactive_conns = inactive;
                true
            }
            None => false,
        }
    }

    fn apply_one(&mut self, op: &IpvsOp) -> Result<(), KernelError> {
        match op {
            IpvsOp::AddService(spec) => {
                if self.table.services.contains_key(&spec.key) {
                    return Err(KernelError::exists(spec.key));
                }
                self.check_scheduler(spec)?;
                self.table.services.insert(
                    spec.key,
                    ServiceEntry {
                        spec: spec.clone(),
                        dests: BTreeMap::new(),
                    },
                );
                Ok(())
            }
            IpvsOp::UpdateService(spec) => {
                self.check_scheduler(spec)?;
                let entry = self.service_mut(&spec.key)?;
                entry.spec = spec.clone();
                Ok(())
            }
            IpvsOp::DeleteService(key) => self
                .table
                .services
                .remove(key)
                .map(drop)
                .ok_or_else(|| no_service(key)),
            IpvsOp::AddDest(service, dest) => {
                let entry = self.service_mut(service)?;
                check_dest(service, dest)?;
                if entry.dests.contains_key(&dest.key) {
                    return Err(KernelError::exists(dest_object(
                        service, &dest.key,
                    )));
                }
                entry.dests.insert(
                    dest.key,
                    DestState {
                        weight: dest.weight,
                        ..DestState::default()
                    },
                );
                Ok(())
            }
            IpvsOp::UpdateDest(service, dest) => {
                let entry = self.service_mut(service)?;
                check_dest(service, dest)?;
                let state =
                    entry.dests.get_mut(&dest.key).ok_or_else(|| {
                        KernelError::not_found(dest_object(service, &dest.key))
                    })?;
                state.weight = dest.weight;
                Ok(())
            }
            IpvsOp::DeleteDest(service, dest) => {
                let entry = self.service_mut(service)?;
                entry.dests.remove(dest).map(drop).ok_or_else(|| {
                    KernelError::not_found(dest_object(service, dest))
                })
            }
        }
    }

    fn service_mut(
        &mut self,
        key: &VirtualServerKey,
    ) -> Result<&mut ServiceEntry, KernelError> {
        self.table
            .services
            .get_mut(key)
            .ok_or_else(|| no_service(key))
    }

    fn check_scheduler(&self, spec: &ServiceSpec) -> Result<(), KernelError> {
        if self.schedulers.contains(&spec.scheduler) {
            return Ok(());
        }
        Err(KernelError::new(
            ErrorKind::NotFound,
            spec.key,
            format!("no scheduler {:?} in this kernel", spec.scheduler),
        )
        .with_errno(libc::ENOENT))
    }
}

/// The kernel looks the service up before anything else and answers
/// ESRCH when it is missing, for services and real servers alike.
fn no_service(key: &VirtualServerKey) -> KernelError {
    KernelError::new(ErrorKind::NotFound, key, "no such service")
        .with_errno(libc::ESRCH)
}

fn check_dest(
    service: &VirtualServerKey,
    dest: &DestSpec,
) -> Result<(), KernelError> {
    let object = || dest_object(service, &dest.key);
    // Masquerading needs both ends in one family (only tunnels may mix).
    if dest.key.address.is_ipv4() != service.address.is_ipv4() {
        return Err(KernelError::invalid(
            object(),
            "real server and virtual server differ in address family",
        ));
    }
    if dest.weight > MAX_WEIGHT {
        return Err(KernelError::new(
            ErrorKind::Other,
            object(),
            format!("weight {} above {MAX_WEIGHT}", dest.weight),
        )
        .with_errno(ERANGE));
    }
    Ok(())
}

impl Ipvs for IpvsModel {
    async fn dump(&mut self) -> Result<IpvsTable, KernelError> {
        Ok(self.table.clone())
    }

    /// The table as it is now: a read that finished at once.
    fn dump_detached(&self) -> impl DetachedRead<IpvsTable> + use<> {
        std::future::ready(Ok(self.table.clone()))
    }

    async fn service(
        &mut self,
        key: &VirtualServerKey,
    ) -> Result<Option<ServiceEntry>, KernelError> {
        Ok(self.table.services.get(key).cloned())
    }

    async fn dests(
        &mut self,
        service: &VirtualServerKey,
    ) -> Result<BTreeMap<DestKey, DestState>, KernelError> {
        Ok(self
            .table
            .services
            .get(service)
            .map(|entry| entry.dests.clone())
            .unwrap_or_default())
    }

    async fn apply(&mut self, ops: &[IpvsOp]) -> Vec<Result<(), KernelError>> {
        self.applied += ops.len();
        ops.iter()
            .map(|op| {
                // Named as the real implementation names it: the object
                // of the operation, even when its service is missing.
                self.apply_one(op).map_err(|mut err| {
                    err.object = op.object();
                    err
                })
            })
            .collect()
    }
}
