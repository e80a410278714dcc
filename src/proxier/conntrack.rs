//! UDP conntrack cleanup on top of any backend. The layer keeps every UDP
//! service port's serving endpoints ([`UdpServing`]) from the ports each
//! sync changed; after a sync whose trackers saw UDP endpoints change or a
//! UDP service go, once the kernel is programmed, the flows answered by an
//! endpoint that no longer serves are deleted, so that their clients reach
//! a live one. Syncs that touch no UDP service dump nothing.

use std::{future::Future, time::Instant};

use tracing::{debug, warn};

use crate::{
    backend::{Backend, BackendError, RepairStep, SyncBatch},
    kernel::{
        conntrack::{clean_stale_udp_flows, Conntrack, Flow, UdpServing},
        KernelError,
    },
    model::{IpFamily, Protocol, ServicePortInfo},
    sync::SyncOutcome,
    telemetry::events::{ConntrackReconciled, InternalEvent},
};

#[cfg(test)]
mod tests;

pub struct WithConntrack<B, C> {
    inner: B,
    conntrack: C,
    /// The node's families, from each sync's context: each gets its
    /// reconciler metrics, as upstream runs one cleanup per family.
    families: Vec<IpFamily>,
    /// Every UDP service port's serving endpoints, kept from the ports
    /// each sync changed (every port, from an empty state on).
    serving: UdpServing,
    /// A cleanup asked for by a sync that failed, or that failed itself,
    /// is owed to the next sync.
    owed: bool,
}

impl<B, C> WithConntrack<B, C> {
    pub fn new(inner: B, conntrack: C) -> Self {
        Self {
            inner,
            conntrack,
            families: Vec::new(),
            serving: UdpServing::new(),
            owed: false,
        }
    }

    #[cfg(test)]
    pub fn inner(&self) -> &B {
        &self.inner
    }

    #[cfg(test)]
    pub fn conntrack(&self) -> &C {
        &self.conntrack
    }

    #[cfg(test)]
    pub fn serving(&self) -> &UdpServing {
        &self.serving
    }

    /// Brings the serving endpoints up to date with the UDP ports the
    /// sync changed.
    fn track(&mut self, batch: SyncBatch<'_>) {
        let outcome = batch.outcome;
        let changed = outcome
            .services
            .changed_ports
            .iter()
            .chain(&outcome.endpoints.changed_ports)
            .filter(|name| name.protocol == Protocol::Udp);
        let (services, endpoints) =
            (batch.state.service_map(), batch.state.endpoints());
        let gated = batch.state.desired().context().without_external_ips;
        for name in changed {
            let service = services.get(name).map(|s| &**s);
            // External IPs the gate keeps off the node are no frontends.
            let without_external_ips = service
                .filter(|s| gated && !s.external_ips.is_empty())
                .map(|s| ServicePortInfo {
                    external_ips: Vec::new(),
                    ..s.clone()
                });
            self.serving.update(
                name,
                without_external_ips.as_ref().or(service),
                &endpoints.serving_addresses(name),
            );
        }
    }
}

/// Whether the sync changed what UDP clients may be stuck on: upstream
/// cleans conntrack after every sync; the trackers tell us when it can
/// matter.
fn needs_cleanup(outcome: &SyncOutcome) -> bool {
    outcome.endpoints.conntrack_cleanup_required
        || !outcome.services.deleted_udp_cluster_ips.is_empty()
}

impl<B, C> WithConntrack<B, C>
where
    C: Conntrack + Send,
{
    async fn clean(&mut self) -> Result<(), BackendError> {
        let started = Instant::now();
        let mut counting = Counting {
            inner: &mut self.conntrack,
            deleted_v4: 0,
            deleted_v6: 0,
        };
        let result = clean_stale_udp_flows(&mut counting, &self.serving).await;
        let (deleted_v4, deleted_v6) =
            (counting.deleted_v4, counting.deleted_v6);
        let duration = started.elapsed();
        for family in &self.families {
            let deleted = match family {
                IpFamily::V4 => deleted_v4,
                IpFamily::V6 => deleted_v6,
            };
            ConntrackReconciled {
                family: *family,
                duration,
                deleted,
            }
            .emit();
        }
        let report = result.map_err(BackendError::ConntrackDump)?;
        debug!(
            dumped = report.dumped,
            deleted = report.deleted,
            already_gone = report.already_gone,
            "stale UDP flows cleaned"
        );
        for error in &report.errors {
            warn!(%error, "stale UDP flow not deleted");
        }
        if !report.errors.is_empty() {
            return Err(BackendError::ConntrackDelete {
                failed: report.errors.len(),
            });
        }
        Ok(())
    }
}

impl<B, C> Backend for WithConntrack<B, C>
where
    B: Backend,
    C: Conntrack + Send + 'static,
{
    type Observed = B::Observed;

    async fn apply(
        &mut self,
        batch: SyncBatch<'_>,
    ) -> Result<(), BackendError> {
        let ctx = batch.state.desired().context();
        self.families = [(ctx.ipv4, IpFamily::V4), (ctx.ipv6, IpFamily::V6)]
            .into_iter()
            .filter_map(|(on, family)| on.then_some(family))
            .collect();
        self.track(batch);
        self.owed |= needs_cleanup(batch.outcome);
        self.inner.apply(batch).await?;
        // Only once the kernel sends new flows to the serving endpoints:
        // deleting earlier would let a client's next datagram recreate
        // the entry towards the endpoint that is going away. A failed
        // apply leaves the cleanup owed to the retry.
        if !self.owed {
            return Ok(());
        }
        self.clean().await?;
        self.owed = false;
        Ok(())
    }

    fn begin_repair(
        &mut self,
    ) -> impl Future<Output = Self::Observed> + Send + 'static + use<B, C> {
        self.inner.begin_repair()
    }

    fn repair_step(
        &mut self,
        observed: &mut Self::Observed,
    ) -> impl Future<Output = RepairStep> + Send {
        self.inner.repair_step(observed)
    }

    crate::backend::leave_to_inner!();
}

/// Counts the successful deletes per family on their way through, for
/// the per-family metrics the shared cleanup does not split.
struct Counting<'a, C> {
    inner: &'a mut C,
    deleted_v4: u64,
    deleted_v6: u64,
}

impl<C: Conntrack + Send> Conntrack for Counting<'_, C> {
    async fn dump_udp(&mut self) -> Result<Vec<Flow>, KernelError> {
        self.inner.dump_udp().await
    }

    async fn delete(&mut self, flows: &[Flow]) -> Vec<Result<(), KernelError>> {
        let results = self.inner.delete(flows).await;
        for (flow, result) in flows.iter().zip(&results) {
            if result.is_ok() {
                match IpFamily::of(flow.original.dst.ip()) {
                    IpFamily::V4 => self.deleted_v4 += 1,
                    IpFamily::V6 => self.deleted_v6 += 1,
                }
            }
        }
        results
    }
}
