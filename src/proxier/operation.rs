//! What the apply step knows of every facility's operations alike: the
//! label each is counted under, whether a failure still left the kernel
//! as asked, and the pairing of a batch's operations with their results,
//! counted and timed per facility (so that a slow sync says where its
//! time went).

use std::{fmt::Debug, time::Instant};

use tracing::debug;

use super::OpResult;
use crate::{
    kernel::{
        addresses::{AddressOp, EADDRNOTAVAIL},
        ipsets::IpsetOp,
        ipvs::IpvsOp,
        ErrorKind, KernelError,
    },
    telemetry::events::{Facility, KernelOperations},
};

pub(super) trait Operation: Debug {
    const FACILITY: Facility;
    /// The debug line once the facility answered (the conformance
    /// harness reads it to say where a stuck sync stands).
    const APPLIED: &'static str;

    /// The `operation` label of its count.
    fn label(&self) -> &'static str;

    /// Whether a failure still left the kernel as asked, so that it is
    /// counted by its answer but is no failure.
    fn settled(&self, e: &KernelError) -> bool;
}

impl Operation for IpvsOp {
    const FACILITY: Facility = Facility::Ipvs;
    const APPLIED: &'static str = "ipvs operations applied";

    fn label(&self) -> &'static str {
        match self {
            IpvsOp::AddService(_) => "add_service",
            IpvsOp::UpdateService(_) => "update_service",
            IpvsOp::DeleteService(_) => "delete_service",
            IpvsOp::AddDest(..) => "add_dest",
            IpvsOp::UpdateDest(..) => "update_dest",
            IpvsOp::DeleteDest(..) => "delete_dest",
        }
    }

    /// A virtual or real server already gone. One already there may
    /// differ from what was asked, so an add that found it is a failure,
    /// and the retry compares it.
    fn settled(&self, e: &KernelError) -> bool {
        matches!(self, IpvsOp::DeleteService(_) | IpvsOp::DeleteDest(..))
            && e.kind == ErrorKind::NotFound
    }
}

impl Operation for AddressOp {
    const FACILITY: Facility = Facility::Addresses;
    const APPLIED: &'static str = "address operations applied";

    fn label(&self) -> &'static str {
        match self {
            AddressOp::Add(_) => "add",
            AddressOp::Delete(_) => "delete",
        }
    }

    /// An address already bound, or already gone.
    fn settled(&self, e: &KernelError) -> bool {
        match self {
            AddressOp::Add(_) => e.kind == ErrorKind::Exists,
            AddressOp::Delete(_) => e.errno == Some(EADDRNOTAVAIL),
        }
    }
}

impl Operation for IpsetOp {
    const FACILITY: Facility = Facility::Ipsets;
    const APPLIED: &'static str = "ipset operations applied";

    fn label(&self) -> &'static str {
        match self {
            IpsetOp::Create(_) => "create",
            IpsetOp::Destroy(_) => "destroy",
            IpsetOp::Add(..) => "add",
            IpsetOp::Delete(..) => "delete",
        }
    }

    /// An entry (or set) already there for an add, already gone for a
    /// delete. A missing set (ENOENT) is not: its entries are gone with
    /// it.
    fn settled(&self, e: &KernelError) -> bool {
        match self {
            IpsetOp::Create(_) | IpsetOp::Add(..) => {
                e.kind == ErrorKind::Exists
            }
            IpsetOp::Delete(..) => {
                e.kind == ErrorKind::NotFound && e.errno != Some(libc::ENOENT)
            }
            IpsetOp::Destroy(_) => e.kind == ErrorKind::NotFound,
        }
    }
}

/// One facility's operations paired with their results, each counted;
/// `started` is when the facility was asked. An implementation that
/// returned too few results leaves the rest failed rather than
/// unreported.
pub(super) fn settle<'a, O: Operation + 'a>(
    ops: Vec<O>,
    results: Vec<OpResult>,
    started: Instant,
    counts: &'a mut KernelOperations,
) -> impl Iterator<Item = (O, OpResult)> + 'a {
    debug!(
        operations = ops.len(),
        elapsed = ?started.elapsed(),
        "{}",
        O::APPLIED
    );
    let mut results = results.into_iter();
    ops.into_iter().map(move |op| {
        let result = results.next().unwrap_or_else(|| {
            Err(KernelError::new(
                ErrorKind::Transport,
                format!("{op:?}"),
                "no result returned for this operation",
            ))
        });
        counts.record(O::FACILITY, op.label(), outcome(&result));
        (op, result)
    })
}

/// The `result` label of an operation's count.
pub(super) fn outcome<T>(result: &Result<T, KernelError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(e) => e.kind.metric_label(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation comes back with a result and is counted under its
    /// label and outcome; those a facility gave no result for are failed.
    #[test]
    fn each_operation_is_paired_counted_and_never_left_unreported() {
        let ops = vec![
            AddressOp::Add("198.18.0.1".parse().unwrap()),
            AddressOp::Delete("198.18.0.2".parse().unwrap()),
            AddressOp::Add("198.18.0.3".parse().unwrap()),
        ];
        let exists =
            KernelError::new(ErrorKind::Exists, "198.18.0.2", "already bound");
        let results = vec![Ok(()), Err(exists.clone())];
        let mut counts = KernelOperations::new();
        let settled: Vec<_> =
            settle(ops.clone(), results, Instant::now(), &mut counts).collect();
        assert_eq!(settled.len(), 3);
        assert_eq!(settled[0], (ops[0], Ok(())));
        assert_eq!(settled[1], (ops[1], Err(exists)));
        let unanswered = settled[2].1.as_ref().unwrap_err();
        assert_eq!(unanswered.kind, ErrorKind::Transport);
        assert_eq!(counts.count(Facility::Addresses, "add", "ok"), 1);
        assert_eq!(
            counts.count(
                Facility::Addresses,
                "add",
                ErrorKind::Transport.metric_label()
            ),
            1
        );
        assert_eq!(
            counts.count(
                Facility::Addresses,
                "delete",
                ErrorKind::Exists.metric_label()
            ),
            1
        );
        // A delete that finds nothing bound is as asked; an add that
        // finds the address bound is too.
        let gone = KernelError {
            errno: Some(EADDRNOTAVAIL),
            ..KernelError::new(ErrorKind::NotFound, "198.18.0.2", "gone")
        };
        assert!(ops[1].settled(&gone));
        assert!(ops[0].settled(&KernelError::new(
            ErrorKind::Exists,
            "198.18.0.1",
            "bound"
        )));
        assert!(!ops[0].settled(&gone));
    }
}
