//! The link's addresses bound while the first list still arrives.
//!
//! Binding is a cold start's longest kernel work (each address walks the
//! link's list), and the first sync cannot begin before the list ends.
//! Adding a listed Service's addresses early is harmless: the first sync
//! (a full reconcile) still compares everything, and it takes back an
//! address whose Service went away meanwhile.

use std::{collections::BTreeSet, future::Future, net::IpAddr, pin::Pin};

use futures::FutureExt;

use super::{operation::Operation, OpResult};
use crate::{desired::ServiceDelta, kernel::addresses::AddressOp};

/// Binds in flight, answered as one result per operation.
type Binding = Pin<Box<dyn Future<Output = Vec<OpResult>> + Send>>;

/// What was bound ahead of the first sync, and what is still in flight.
#[derive(Default)]
pub(super) struct BindAhead {
    /// Addresses on the link when it was first read.
    on_link: BTreeSet<IpAddr>,
    /// Those, and every address sent since: none is sent twice.
    known: BTreeSet<IpAddr>,
    /// Binds not yet answered, with their operations.
    sent: Vec<(Vec<AddressOp>, Binding)>,
    /// Binds answered: each batch's operations and results.
    answered: Vec<(Vec<AddressOp>, Vec<OpResult>)>,
}

/// Whether a bind's answer left its address on the link.
pub(super) fn bound(op: &AddressOp, result: &OpResult) -> bool {
    match result {
        Ok(()) => true,
        Err(e) => op.settled(e),
    }
}

impl BindAhead {
    pub(super) fn new(on_link: BTreeSet<IpAddr>) -> Self {
        Self {
            known: on_link.clone(),
            on_link,
            ..Self::default()
        }
    }

    /// The binds the deltas' new states ask for and nobody sent yet.
    pub(super) fn binds(&mut self, deltas: &[ServiceDelta]) -> Vec<AddressOp> {
        deltas
            .iter()
            .filter_map(|delta| delta.current.as_deref())
            .flat_map(|state| state.bound_addresses.iter().copied())
            .filter(|addr| self.known.insert(*addr))
            .map(AddressOp::Add)
            .collect()
    }

    pub(super) fn sending(
        &mut self,
        ops: Vec<AddressOp>,
        binding: impl Future<Output = Vec<OpResult>> + Send + 'static,
    ) {
        self.sent.push((ops, Box::pin(binding)));
    }

    /// Takes in the binds answered by now, without waiting.
    pub(super) fn take_answered(&mut self) {
        let mut pending = Vec::new();
        for (ops, mut binding) in std::mem::take(&mut self.sent) {
            match (&mut binding).now_or_never() {
                Some(answers) => self.answered.push((ops, answers)),
                None => pending.push((ops, binding)),
            }
        }
        self.sent = pending;
    }

    /// The link's addresses as a full reconcile may take them without
    /// reading the link again (a read now would wait behind the binds
    /// still in flight, each holding the kernel's lock): those on it at
    /// first, and each address sent that was bound or is still `wanted`.
    /// A wanted one whose bind failed counts too: its failure is settled
    /// with the others, and retried by the next sync as any. Second, the
    /// addresses in flight no longer wanted: to take back once answered.
    pub(super) fn link(
        &self,
        wanted: impl Fn(&IpAddr) -> bool,
    ) -> (BTreeSet<IpAddr>, BTreeSet<IpAddr>) {
        let mut link = self.on_link.clone();
        for (ops, results) in &self.answered {
            for (op, result) in ops.iter().zip(results) {
                if bound(op, result) || wanted(&op.address()) {
                    link.insert(op.address());
                }
            }
        }
        let mut take_back = BTreeSet::new();
        for (ops, _) in &self.sent {
            for addr in ops.iter().map(AddressOp::address) {
                match wanted(&addr) {
                    true => link.insert(addr),
                    false => take_back.insert(addr),
                };
            }
        }
        (link, take_back)
    }

    /// Waits for every bind sent; each batch's operations and results.
    pub(super) async fn answers(
        mut self,
    ) -> Vec<(Vec<AddressOp>, Vec<OpResult>)> {
        for (ops, binding) in std::mem::take(&mut self.sent) {
            self.answered.push((ops, binding.await));
        }
        self.answered
    }
}
