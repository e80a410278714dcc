//! kube-proxy's iptables rules on top of any backend. With ipset-based
//! rules the rules depend only on the configuration and on which sets are
//! empty, so most syncs run no iptables process at all: the facts are kept
//! up to date from the same deltas the proxier applies, and a restore runs
//! only when the rules' input changes (or, on full syncs, when the kernel's
//! chains drifted from it).

use std::net::IpAddr;

use ipnet::IpNet;
use tracing::warn;

use crate::{
    config::{Config, DetectLocal},
    daemon::{Backend, BackendError, SyncBatch},
    desired::NodeContext,
    kernel::iptables::{
        apply::RulesApplier, facts::RulesFacts, rules::LocalDetector, Family,
        Iptables,
    },
};

#[cfg(test)]
mod tests;

/// What the rules take from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulesSettings {
    pub masquerade_all: bool,
    pub masquerade_bit: u8,
    pub detect_local: DetectLocal,
    pub cluster_cidrs: Vec<IpNet>,
    /// Whether MASQUERADE gets `--random-fully` (the binary supports it).
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
    fn families(&self, ctx: &NodeContext) -> Vec<(Family, LocalDetector)> {
        [(ctx.ipv4, Family::V4), (ctx.ipv6, Family::V6)]
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
    families: Vec<(Family, LocalDetector)>,
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

    pub fn inner(&self) -> &B {
        &self.inner
    }

    pub fn iptables(&self) -> &T {
        &self.iptables
    }
}

impl<B, T> Backend for WithIptables<B, T>
where
    B: Backend,
    T: Iptables + Send + 'static,
{
    async fn apply(&mut self, batch: &SyncBatch) -> Result<(), BackendError> {
        let result = self.inner.apply(batch).await;
        // The facts follow the desired state, not the kernel: a failed
        // kernel operation does not change which sets should be empty.
        match &batch.desired {
            Some(desired) => {
                let mut facts = RulesFacts::new();
                for (_, state) in desired.services() {
                    facts.add(state);
                }
                self.facts = facts;
                self.families = self.settings.families(desired.context());
            }
            None => {
                for delta in &batch.outcome.deltas {
                    self.facts.apply(delta);
                }
            }
        }
        let input = self.facts.input(
            self.settings.masquerade_all,
            self.settings.masquerade_bit,
            self.settings.random_fully,
            &self.families,
        );
        let verify = batch.desired.is_some();
        let report =
            self.applier.sync(&mut self.iptables, &input, verify).await;
        for (family, table, error) in &report.errors {
            warn!(%family, table, %error, "iptables rules not applied");
        }
        result?;
        if !report.is_ok() {
            return Err(BackendError(format!(
                "{} iptables table(s) could not be restored",
                report.errors.len()
            )));
        }
        Ok(())
    }

    async fn local_addresses(&mut self) -> Option<Vec<IpAddr>> {
        self.inner.local_addresses().await
    }

    fn poll_interval(&self) -> Option<std::time::Duration> {
        self.inner.poll_interval()
    }

    async fn poll(&mut self) {
        self.inner.poll().await
    }
}
