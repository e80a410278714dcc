//! An in-memory conntrack table of UDP flows.

use std::{
    collections::BTreeSet,
    future::{ready, Future},
};

use super::{Conntrack, Flow};
use crate::kernel::KernelError;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConntrackModel {
    pub flows: BTreeSet<Flow>,
}

impl ConntrackModel {
    pub fn new(flows: impl IntoIterator<Item = Flow>) -> Self {
        Self {
            flows: flows.into_iter().collect(),
        }
    }
}

impl Conntrack for ConntrackModel {
    fn dump_udp(
        &mut self,
    ) -> impl Future<Output = Result<Vec<Flow>, KernelError>> + Send {
        ready(Ok(self.flows.iter().copied().collect()))
    }

    fn delete(
        &mut self,
        flows: &[Flow],
    ) -> impl Future<Output = Vec<Result<(), KernelError>>> + Send {
        // The kernel finds an entry by its original tuple alone.
        let results = flows
            .iter()
            .map(|f| {
                let found = self
                    .flows
                    .iter()
                    .find(|g| g.original == f.original)
                    .copied();
                match found {
                    Some(g) => {
                        self.flows.remove(&g);
                        Ok(())
                    }
                    None => Err(KernelError::not_found(f)),
                }
            })
            .collect();
        ready(results)
    }
}
