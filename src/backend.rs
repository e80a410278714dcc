//! The contract between the sync loop and what it drives: the loop owns
//! the trackers and decides when to sync; a [`Backend`] turns each sync
//! into kernel state and repairs drift when asked.
//!
//! Both sides depend on this module and on nothing of each other, so the
//! proxier never reaches back into the daemon.
//!
//! # Repair
//!
//! Drift (someone deleted a virtual server, flushed a set, a write that
//! failed) is repaired in rounds every `syncPeriod`. A round must never
//! hold up the syncs for longer than a small, fixed time, whatever the
//! cluster's size, so it is split in two:
//!
//! 1. [`Backend::begin_repair`] returns a future that reads the kernel on
//!    connections of its own. The loop runs it beside the syncs; from the
//!    moment the round begins, the backend remembers what the syncs touch.
//! 2. [`Backend::repair_step`] compares a bounded slice of what was read
//!    with what the backend asked for and repairs the difference, leaving
//!    alone whatever a sync touched since the round began (the read is not
//!    the truth about those). The loop calls it between syncs until it
//!    answers [`RepairStep::Done`].

use std::{fmt, future::Future, net::IpAddr, time::Duration};

use crate::{
    desired::ServiceDelta,
    kernel::KernelError,
    runner::SyncTrigger,
    sync::{SyncOutcome, SyncState},
};

/// One sync's input to the backend: what changed, and read-only views of
/// the whole state for a backend that needs more than the deltas (the
/// first sync, a retry, the conntrack layer's UDP index).
#[derive(Clone, Copy)]
pub struct SyncBatch<'a> {
    pub trigger: SyncTrigger,
    pub outcome: &'a SyncOutcome,
    pub state: &'a SyncState,
}

impl fmt::Debug for SyncBatch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncBatch")
            .field("trigger", &self.trigger)
            .field("deltas", &self.outcome.deltas.len())
            .finish_non_exhaustive()
    }
}

/// Why applying a sync failed. The loop retries every kind the same
/// way (with a growing pause); the kind is what its log line and the
/// operator go by.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// Some of the sync's kernel operations failed; the backend keeps
    /// them and tries them again with the next sync.
    #[error("{failed} of {attempted} kernel operations failed")]
    KernelOperations { failed: usize, attempted: usize },
    /// The backend lost track of the kernel (the dummy link gone, a set
    /// missing): the next sync compares the whole desired state.
    #[error(
        "the kernel lost what was programmed; the next sync compares it whole"
    )]
    LostTrack,
    #[error("{tables} iptables table(s) could not be restored")]
    IptablesRestore { tables: usize },
    #[error("UDP conntrack entries not listed: {0}")]
    ConntrackDump(KernelError),
    #[error("{failed} stale UDP conntrack entries not deleted")]
    ConntrackDelete { failed: usize },
}

impl BackendError {
    /// The kind, as a log field.
    pub fn reason(&self) -> &'static str {
        match self {
            BackendError::KernelOperations { .. } => "kernel_operations",
            BackendError::LostTrack => "lost_track",
            BackendError::IptablesRestore { .. } => "iptables_restore",
            BackendError::ConntrackDump(_) => "conntrack_dump",
            BackendError::ConntrackDelete { .. } => "conntrack_delete",
        }
    }
}

/// What one repair step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairStep {
    /// More to compare: call again (after any sync that is due).
    Continue,
    /// The round is over; the backend no longer remembers what syncs
    /// touch.
    Done,
}

/// What a repair round read, as the loop needs to know it: the node's
/// own addresses come with the kernel's other state, so that NodePorts
/// follow a node that gained or lost an address.
pub trait Observation: Send + 'static {
    /// Every address on the node's interfaces but the proxy's own link;
    /// `None` when they could not be read.
    fn local_addresses(&self) -> Option<&[IpAddr]>;
}

pub trait Backend: Send + 'static {
    /// What [`Backend::begin_repair`] reads.
    type Observed: Observation;

    /// Brings the kernel to the batch's state. Usually that is the
    /// deltas' operations only; the first sync, and a backend that lost
    /// track of the kernel, compare the whole desired state instead. An
    /// error asks for a retry: the backend keeps what it failed to do
    /// and tries that again at the next call.
    fn apply(
        &mut self,
        batch: SyncBatch<'_>,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Begins a repair round (see the module docs). The future borrows
    /// nothing, so that it can run while syncs go on.
    fn begin_repair(
        &mut self,
    ) -> impl Future<Output = Self::Observed> + Send + 'static + use<Self>;

    /// Compares and repairs one bounded part of `observed`.
    fn repair_step(
        &mut self,
        observed: &mut Self::Observed,
    ) -> impl Future<Output = RepairStep> + Send;

    /// The node's addresses on every interface but the proxy's own, read
    /// at start-up (health check servers bind to them); `None` when they
    /// cannot be read.
    fn local_addresses(
        &mut self,
    ) -> impl Future<Output = Option<Vec<IpAddr>>> + Send {
        std::future::ready(None)
    }

    /// Whether the kernel has `scheduler`, which a Service's annotation
    /// names: asked once per name, before a virtual server uses it.
    fn has_scheduler(
        &mut self,
        scheduler: &str,
    ) -> impl Future<Output = bool> + Send {
        let _ = scheduler;
        std::future::ready(true)
    }

    /// Before the first sync, while the list still arrives: what a batch
    /// of it changed in the desired state, not applied. A backend may
    /// write now what the first sync will want and what does no harm if
    /// it turns out unwanted; the first sync still brings the whole
    /// kernel to the desired state.
    fn ahead_of_first_sync(
        &mut self,
        deltas: &[ServiceDelta],
    ) -> impl Future<Output = ()> + Send {
        let _ = deltas;
        std::future::ready(())
    }

    /// How often [`Backend::poll`] should run; `None` never.
    fn poll_interval(&self) -> Option<Duration> {
        None
    }

    /// Periodic work between syncs (graceful termination of real
    /// servers).
    fn poll(&mut self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }
}

/// In a layer's `impl Backend` (iptables, conntrack over the proxier):
/// what the layer leaves to the backend it wraps, its field `inner`: the
/// node's addresses, the kernel's schedulers and the periodic work
/// between syncs.
macro_rules! leave_to_inner {
    () => {
        fn local_addresses(
            &mut self,
        ) -> impl ::std::future::Future<Output = Option<Vec<::std::net::IpAddr>>>
               + Send {
            self.inner.local_addresses()
        }

        fn has_scheduler(
            &mut self,
            scheduler: &str,
        ) -> impl ::std::future::Future<Output = bool> + Send {
            self.inner.has_scheduler(scheduler)
        }

        fn ahead_of_first_sync(
            &mut self,
            deltas: &[$crate::desired::ServiceDelta],
        ) -> impl ::std::future::Future<Output = ()> + Send {
            self.inner.ahead_of_first_sync(deltas)
        }

        fn poll_interval(&self) -> Option<::std::time::Duration> {
            self.inner.poll_interval()
        }

        fn poll(&mut self) -> impl ::std::future::Future<Output = ()> + Send {
            self.inner.poll()
        }
    };
}
pub(crate) use leave_to_inner;

/// Nothing read: a backend without a kernel to repair.
impl Observation for () {
    fn local_addresses(&self) -> Option<&[IpAddr]> {
        None
    }
}

/// Programs nothing and repairs nothing: the inner backend
/// under the layers (iptables, conntrack) when only a layer is tested.
#[cfg(any(test, feature = "test-support"))]
#[derive(Debug, Default)]
pub struct NoKernel;

#[cfg(any(test, feature = "test-support"))]
impl Backend for NoKernel {
    type Observed = ();

    async fn apply(&mut self, _: SyncBatch<'_>) -> Result<(), BackendError> {
        Ok(())
    }

    fn begin_repair(
        &mut self,
    ) -> impl Future<Output = ()> + Send + 'static + use<> {
        std::future::ready(())
    }

    async fn repair_step(&mut self, _: &mut ()) -> RepairStep {
        RepairStep::Done
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use crate::runner::SyncReason;

    /// The batch of sync `seq` of `state`, whose outcome it is.
    pub(crate) fn batch<'a>(
        state: &'a SyncState,
        outcome: &'a SyncOutcome,
        seq: u64,
    ) -> SyncBatch<'a> {
        SyncBatch {
            trigger: SyncTrigger {
                seq,
                reason: SyncReason::Requested,
            },
            outcome,
            state,
        }
    }
}
