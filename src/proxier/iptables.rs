//! kube-proxy's iptables rules on top of any backend. With ipset-based
//! rules the rules depend only on the configuration and on which sets are
//! empty, so most syncs run no iptables process at all: the facts are kept
//! up to date from the same deltas the proxier applies, and a restore runs
//! only when the rules' input changes, or when a repair round's saves
//! (read beside the syncs) show the kernel's chains drifted from it.
//!
//! This is policy, beside the IPVS policy in `plan/`: which chains and
//! rules, from which facts. The kernel layer only saves and restores.
//!
//! - [`rules`]: the rules themselves, a pure function of [`RulesInput`].
//! - [`facts::RulesFacts`]: that input, kept up to date from service
//!   deltas.
//! - [`apply::RulesApplier`]: one sync's work against any [`Iptables`];
//!   [`apply::cleanup`] is `--cleanup`'s.
//! - [`saved`]: what a table's dump means for our rules (missing jumps,
//!   drift, what cleanup removes).

use std::{future::Future, net::IpAddr};

use ipnet::IpNet;
use tracing::warn;

use crate::{
    backend::{Backend, BackendError, Observation, RepairStep, SyncBatch},
    config::{Config, DetectLocal},
    desired::NodeContext,
    kernel::iptables::{IpFamily, Iptables},
};

pub mod apply;
#[cfg(any(test, feature = "test-support"))]
// Test support: a failed expectation is the calling test's failure.
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod contract;
pub mod facts;
pub mod rules;
pub mod saved;
#[cfg(test)]
mod tests;

pub use apply::{cleanup, RulesApplier, TableSave};
pub use facts::RulesFacts;
pub use rules::{LocalDetector, RulesInput};

/// What the rules take from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulesSettings {
    pub masquerade_all: bool,
    pub masquerade_bit: u8,
    pub detect_local: DetectLocal,
    pub cluster_cidrs: Vec<IpNet>,
    /// Whether MASQUERADE gets `--random-fully`: always on a node.
    pub random_fully: bool,
}

impl RulesSettings {
    pub fn from_config(config: &Config, random_fully: bool) -> Self {
        Self {
            masquerade_all: config.masquerade_all,
            masquerade_bit: config.masquerade_bit,
            detect_local: config.detect_local.clone(),
            cluster_cidrs: config.cluster_cidrs.clone(),
            random_fully,
        }
    }

    /// The families the node runs, each with its local-traffic detector.
    fn families(&self, ctx: &NodeContext) -> Vec<(IpFamily, LocalDetector)> {
        [(ctx.ipv4, IpFamily::V4), (ctx.ipv6, IpFamily::V6)]
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, family)| {
                let detector = LocalDetector::for_family(
                    &self.detect_local,
                    &self.cluster_cidrs,
                    &ctx.pod_cidrs,
                    family,
                );
                (family, detector)
            })
            .collect()
    }
}

pub struct WithIptables<B, T> {
    inner: B,
    iptables: T,
    settings: RulesSettings,
    facts: RulesFacts,
    applier: RulesApplier,
    families: Vec<(IpFamily, LocalDetector)>,
}

/// A repair round's read: the inner backend's, then the tables saved
/// beside it.
pub struct IptablesObserved<O> {
    inner: O,
    inner_done: bool,
    saved: Vec<TableSave>,
    restores_before: u64,
}

impl<O: Observation> Observation for IptablesObserved<O> {
    fn local_addresses(&self) -> Option<&[IpAddr]> {
        self.inner.local_addresses()
    }
}

impl<B, T> WithIptables<B, T> {
    pub fn new(inner: B, iptables: T, settings: RulesSettings) -> Self {
        Self {
            inner,
            iptables,
            settings,
            facts: RulesFacts::new(),
            applier: RulesApplier::new(),
            families: Vec::new(),
        }
    }

    #[cfg(test)]
    pub fn inner(&self) -> &B {
        &self.inner
    }

    #[cfg(test)]
    pub fn iptables(&self) -> &T {
        &self.iptables
    }

    fn input(&self) -> RulesInput {
        self.facts.input(
            self.settings.masquerade_all,
            self.settings.masquerade_bit,
            self.settings.random_fully,
            &self.families,
        )
    }
}

impl<B, T> Backend for WithIptables<B, T>
where
    B: Backend,
    T: Iptables + Send + 'static,
{
    type Observed = IptablesObserved<B::Observed>;

    async fn apply(
        &mut self,
        batch: SyncBatch<'_>,
    ) -> Result<(), BackendError> {
        // The facts follow the desired state, not the kernel: a failed
        // kernel operation does not change which sets should be empty.
        // Every sync's deltas come here once, from an empty state on.
        for delta in &batch.outcome.deltas {
            self.facts.apply(delta);
        }
        self.families = self.settings.families(batch.state.desired().context());
        let input = self.input();
        // A sync with nothing applied to trust (the first, the one after
        // a failed restore) reads each table back before restoring it.
        // The reads touch nothing the inner backend writes, so they run
        // beside its writes (a cold sync's take seconds); the restores
        // still follow them, as upstream's do.
        let saves = self.applier.reads(&input, false).into_iter().map(
            |(family, name)| {
                let save = self.iptables.save_detached(family, name);
                async move { (family, name, save.await) }
            },
        );
        let (result, saved) = futures::join!(
            self.inner.apply(batch),
            futures::future::join_all(saves)
        );
        let started = std::time::Instant::now();
        let report = self
            .applier
            .sync_saved(&mut self.iptables, &input, false, saved)
            .await;
        tracing::debug!(elapsed = ?started.elapsed(), "iptables synced");
        for (family, table, error) in &report.errors {
            warn!(%family, table, %error, "iptables rules not applied");
        }
        result?;
        if !report.is_ok() {
            return Err(BackendError::IptablesRestore {
                tables: report.errors.len(),
            });
        }
        Ok(())
    }

    fn begin_repair(
        &mut self,
    ) -> impl Future<Output = Self::Observed> + Send + 'static + use<B, T> {
        let input = self.input();
        let saves: Vec<_> = rules::table_rules(&input)
            .into_iter()
            .map(|table| {
                let (family, name) = (table.family, table.table);
                let save = self.iptables.save_detached(family, name);
                async move { (family, name, save.await) }
            })
            .collect();
        let restores_before = self.applier.restores();
        let inner = self.inner.begin_repair();
        async move {
            let (inner, saved) =
                futures::join!(inner, futures::future::join_all(saves));
            IptablesObserved {
                inner,
                inner_done: false,
                saved,
                restores_before,
            }
        }
    }

    async fn repair_step(
        &mut self,
        observed: &mut Self::Observed,
    ) -> RepairStep {
        if !observed.inner_done {
            let step = self.inner.repair_step(&mut observed.inner).await;
            observed.inner_done = step == RepairStep::Done;
            return RepairStep::Continue;
        }
        let input = self.input();
        let report = self
            .applier
            .repair(
                &mut self.iptables,
                &input,
                &observed.saved,
                observed.restores_before,
            )
            .await;
        for (family, table, error) in &report.errors {
            warn!(%family, table, %error, "iptables rules not repaired");
        }
        RepairStep::Done
    }

    crate::backend::leave_to_inner!();
}
