//! The IPVS proxier: the spine's per-service deltas into kernel
//! operations, through the facility traits of [`crate::kernel`].
//!
//! A sync plans from the deltas alone ([`plan::Ledger::plan`]), so its
//! cost follows the change; the periodic full reconcile reads each
//! facility back with one dump and repairs drift ([`plan::reconcile`]).
//! Start-up never flushes: it makes sure the dummy link and the sets
//! exist and leaves everything else to the first sync, which is a full
//! reconcile against the whole desired state, so connections through
//! virtual servers that are still wanted survive a restart.
//!
//! Every operation's result is kept in the [`ApplyReport`] and counted in
//! [`KERNEL_OPERATIONS_TOTAL`]; a failure does not stop the rest. The
//! ledger records what was asked for, not what succeeded: the next full
//! reconcile compares it with the kernel and repairs whatever failed.

pub mod conntrack;
pub mod graceful;
pub mod iptables;
pub mod plan;
pub mod stack;
#[cfg(test)]
mod tests;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    ops::RangeInclusive,
    time::Instant,
};

use ipnet::IpNet;
use tracing::{debug, info, warn};

use crate::{
    config::Config,
    daemon::{Backend, BackendError, SyncBatch},
    desired::{DesiredState, ServiceDelta},
    kernel::{
        addresses::{AddressOp, Addresses},
        ipsets::{IpsetOp, Ipsets},
        iptables::Family,
        ipvs::{Ipvs, IpvsOp, ServiceKey},
        ErrorKind, KernelError,
    },
};
use graceful::{GracefulConfig, GracefulQueue, Observation};
use plan::{KernelOps, Ledger, Observed, Ownership};

/// Ours: kernel operations by `facility` (ipvs, addresses, ipsets, link),
/// `op` (add_service, add, create, …) and `result` (`ok` or the
/// [`ErrorKind`] label).
pub const KERNEL_OPERATIONS_TOTAL: &str =
    "kube_ipvs_proxy_kernel_operations_total";

/// kube-proxy's dummy link.
pub const DUMMY_LINK: &str = "kube-ipvs0";

/// Every set of ours starts with this; dumps ask for nothing else.
const SET_PREFIX: &str = "KUBE-";

/// The Kubernetes default `--service-node-port-range`.
pub const DEFAULT_NODE_PORT_RANGE: RangeInclusive<u16> = 30000..=32767;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxierConfig {
    pub link: String,
    pub exclude_cidrs: Vec<IpNet>,
    pub graceful: GracefulConfig,
    /// See [`Ownership::node_port_range`].
    pub node_port_range: Option<RangeInclusive<u16>>,
    /// The families whose sets `start` creates before the first sync
    /// says which the node runs.
    pub ipv4: bool,
    pub ipv6: bool,
}

impl Default for ProxierConfig {
    fn default() -> Self {
        Self {
            link: DUMMY_LINK.to_string(),
            exclude_cidrs: Vec::new(),
            graceful: GracefulConfig::default(),
            node_port_range: Some(DEFAULT_NODE_PORT_RANGE),
            ipv4: true,
            ipv6: false,
        }
    }
}

impl ProxierConfig {
    pub fn from_config(config: &Config) -> Self {
        Self {
            exclude_cidrs: config.ipvs.exclude_cidrs.clone(),
            ..Self::default()
        }
    }
}

/// One operation's result.
pub type OpResult = Result<(), KernelError>;

/// Every operation a sync attempted, in order, with its result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    pub ipvs: Vec<(IpvsOp, OpResult)>,
    pub addresses: Vec<(AddressOp, OpResult)>,
    pub ipsets: Vec<(IpsetOp, OpResult)>,
    /// Failures outside the operation lists: dumps, the dummy link.
    pub errors: Vec<KernelError>,
    /// Foreign virtual servers seen for the first time (logged once).
    pub foreign: Vec<ServiceKey>,
}

impl ApplyReport {
    pub fn op_count(&self) -> usize {
        self.ipvs.len() + self.addresses.len() + self.ipsets.len()
    }

    pub fn failures(&self) -> usize {
        fn failed<T>(ops: &[(T, OpResult)]) -> usize {
            ops.iter().filter(|(_, r)| r.is_err()).count()
        }
        failed(&self.ipvs)
            + failed(&self.addresses)
            + failed(&self.ipsets)
            + self.errors.len()
    }

    pub fn is_ok(&self) -> bool {
        self.failures() == 0
    }

    /// Every failure, for logs.
    pub fn failed(&self) -> impl Iterator<Item = &KernelError> {
        fn errs<T>(
            ops: &[(T, OpResult)],
        ) -> impl Iterator<Item = &KernelError> {
            ops.iter().filter_map(|(_, r)| r.as_ref().err())
        }
        errs(&self.ipvs)
            .chain(errs(&self.addresses))
            .chain(errs(&self.ipsets))
            .chain(&self.errors)
    }

    fn merge(&mut self, other: ApplyReport) {
        self.ipvs.extend(other.ipvs);
        self.addresses.extend(other.addresses);
        self.ipsets.extend(other.ipsets);
        self.errors.extend(other.errors);
        self.foreign.extend(other.foreign);
    }
}

pub struct Proxier<I, A, S> {
    ipvs: I,
    addresses: A,
    ipsets: S,
    config: ProxierConfig,
    ledger: Ledger,
    graceful: GracefulQueue,
    /// Virtual servers off the dummy link that this run programmed, or
    /// failed to delete: see [`Ownership::programmed`].
    programmed: BTreeSet<ServiceKey>,
    node_addresses: BTreeSet<IpAddr>,
    ipv4: bool,
    ipv6: bool,
    foreign_logged: BTreeSet<ServiceKey>,
    /// Until the first full reconcile, incremental syncs would compare
    /// with an empty ledger that does not describe the kernel.
    needs_full: bool,
}

impl<I: Ipvs, A: Addresses, S: Ipsets> Proxier<I, A, S> {
    pub fn new(
        ipvs: I,
        addresses: A,
        ipsets: S,
        config: ProxierConfig,
    ) -> Self {
        Self {
            ipvs,
            addresses,
            ipsets,
            graceful: GracefulQueue::new(config.graceful.timeout),
            ipv4: config.ipv4,
            ipv6: config.ipv6,
            config,
            ledger: Ledger::new(),
            programmed: BTreeSet::new(),
            node_addresses: BTreeSet::new(),
            foreign_logged: BTreeSet::new(),
            needs_full: true,
        }
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    pub fn graceful(&self) -> &GracefulQueue {
        &self.graceful
    }

    pub fn config(&self) -> &ProxierConfig {
        &self.config
    }

    /// Whether the next sync must be a full reconcile (before the first,
    /// and after one that could not read the kernel).
    pub fn needs_full_reconcile(&self) -> bool {
        self.needs_full
    }

    /// The kernel handles, for tests and for the lead's wiring.
    pub fn handles(&mut self) -> (&mut I, &mut A, &mut S) {
        (&mut self.ipvs, &mut self.addresses, &mut self.ipsets)
    }

    /// The iptables-restore payloads for the current state. Empty until
    /// `kernel::iptables::rules` is wired in; the lead connects it here so
    /// that rules are written only when they change.
    pub fn iptables_payloads(&self) -> Vec<(Family, String)> {
        Vec::new()
    }

    /// Makes sure the dummy link and our sets exist. Nothing is deleted
    /// or flushed: the first sync, a full reconcile, applies the
    /// difference.
    pub async fn start(&mut self) -> ApplyReport {
        let mut report = ApplyReport::default();
        let link = self.config.link.clone();
        let ensured = self.addresses.ensure_dummy(&link).await;
        count_one("link", "ensure", &ensured);
        if let Err(e) = ensured {
            report.errors.push(e);
        }
        match self.ipsets.dump(SET_PREFIX).await {
            Ok(have) => {
                let ops: Vec<IpsetOp> =
                    plan::expected_sets(self.ipv4, self.ipv6)
                        .into_iter()
                        .filter(|set| !have.contains_key(&set.name()))
                        .map(|set| IpsetOp::Create(plan::set_spec(set)))
                        .collect();
                let results = self.ipsets.apply(&ops).await;
                report.ipsets = zip(ops, results);
            }
            Err(e) => report.errors.push(e),
        }
        self.needs_full = true;
        finish(&report, "start");
        report
    }

    /// Applies one sync's deltas: exactly the operations for what
    /// changed.
    pub async fn sync(&mut self, deltas: &[ServiceDelta]) -> ApplyReport {
        let mut ops = self.ledger.plan(deltas);
        self.programmed.extend(plan::node_port_keys(
            deltas.iter().filter_map(|d| d.current.as_deref()),
        ));
        ops.ipvs = graceful::route(
            &mut self.graceful,
            std::mem::take(&mut ops.ipvs),
            Instant::now(),
            None,
        );
        let report = self.apply(ops).await;
        finish(&report, "sync");
        report
    }

    /// Compares the whole desired state with the kernel, read back with
    /// one dump per facility, and repairs the difference. Only objects
    /// we own are deleted; a foreign virtual server is logged once.
    pub async fn full_reconcile(
        &mut self,
        desired: &DesiredState,
    ) -> ApplyReport {
        let ctx = desired.context();
        self.ipv4 = ctx.ipv4;
        self.ipv6 = ctx.ipv6;
        self.node_addresses = ctx.node_port_addresses.iter().copied().collect();
        self.ledger = Ledger::from_services(desired.services());
        self.programmed.extend(plan::node_port_keys(
            desired.services().map(|(_, state)| &**state),
        ));

        let mut report = ApplyReport::default();
        let link = self.config.link.clone();
        if let Err(e) = self.addresses.ensure_dummy(&link).await {
            report.errors.push(e);
        }
        let observed = self.observe(&mut report).await;
        let reconciled = plan::reconcile(
            &self.ledger,
            &plan::expected_sets(self.ipv4, self.ipv6),
            &observed,
            &self.ownership(),
        );
        for warning in &reconciled.warnings {
            warn!("{warning}");
        }
        for key in reconciled.foreign {
            if self.foreign_logged.insert(key) {
                info!(
                    virtual_server = %plan::service_name(&key),
                    "leaving a virtual server that is not ours"
                );
                report.foreign.push(key);
            }
        }
        let mut ops = reconciled.ops;
        ops.ipvs = graceful::route(
            &mut self.graceful,
            std::mem::take(&mut ops.ipvs),
            Instant::now(),
            observed.ipvs.as_ref(),
        );
        let applied = self.apply(ops).await;
        report.merge(applied);
        // Only a reconcile that saw every facility describes the kernel.
        self.needs_full = observed.ipvs.is_none()
            || observed.link_addresses.is_none()
            || observed.sets.is_none();
        finish(&report, "full reconcile");
        report
    }

    /// Reads the draining services' real servers and deletes those that
    /// are done: called every [`GracefulConfig::check_interval`].
    pub async fn poll_graceful(&mut self, now: Instant) -> ApplyReport {
        if self.graceful.is_empty() {
            return ApplyReport::default();
        }
        let services: Vec<ServiceKey> =
            self.graceful.draining_services().copied().collect();
        let mut observed = BTreeMap::new();
        let mut report = ApplyReport::default();
        for service in services {
            match self.ipvs.dests(&service).await {
                Ok(dests) => {
                    observed.insert(service, Observation::Dests(dests));
                }
                Err(e) if e.kind == ErrorKind::NotFound => {
                    observed.insert(service, Observation::ServiceGone);
                }
                Err(e) => report.errors.push(e),
            }
        }
        let ops = self.graceful.poll(now, &observed);
        report.merge(
            self.apply(KernelOps {
                ipvs: ops,
                ..KernelOps::default()
            })
            .await,
        );
        if report.op_count() > 0 || !report.errors.is_empty() {
            finish(&report, "graceful termination");
        }
        report
    }

    /// Removes everything we own (virtual servers, our sets, the dummy
    /// link with its addresses) and nothing else. iptables rules that
    /// reference the sets must be removed first, or destroying the sets
    /// fails (EBUSY).
    pub async fn cleanup(&mut self) -> ApplyReport {
        let mut report = ApplyReport::default();
        let link = self.config.link.clone();
        match self.addresses.local_addresses(&link).await {
            Ok(local) => self.node_addresses.extend(local),
            Err(e) => report.errors.push(e),
        }
        let observed = self.observe(&mut report).await;
        let ops = plan::cleanup(&observed, &self.ownership());
        report.merge(self.apply(ops).await);
        let deleted = match self.addresses.delete_link(&link).await {
            Err(e) if e.kind == ErrorKind::NotFound => Ok(()),
            other => other,
        };
        count_one("link", "delete", &deleted);
        if let Err(e) = deleted {
            report.errors.push(e);
        }
        self.ledger = Ledger::new();
        self.graceful = GracefulQueue::new(self.config.graceful.timeout);
        self.programmed.clear();
        finish(&report, "cleanup");
        report
    }

    fn ownership(&self) -> Ownership {
        Ownership {
            exclude_cidrs: self.config.exclude_cidrs.clone(),
            programmed: self.programmed.clone(),
            node_addresses: self.node_addresses.clone(),
            node_port_range: self.config.node_port_range.clone(),
        }
    }

    async fn observe(&mut self, report: &mut ApplyReport) -> Observed {
        let link = self.config.link.clone();
        let ipvs = self.ipvs.dump().await;
        let addresses = self.addresses.list(&link).await;
        let sets = self.ipsets.dump(SET_PREFIX).await;
        Observed {
            ipvs: keep(ipvs, report),
            link_addresses: keep(addresses, report),
            sets: keep(sets, report),
        }
    }

    /// Applies each facility's list in the documented order, keeping
    /// every result.
    async fn apply(&mut self, ops: KernelOps) -> ApplyReport {
        let mut report = ApplyReport::default();
        // Per facility, so that a slow sync says where its time went.
        if !ops.ipvs.is_empty() {
            let start = Instant::now();
            let results = self.ipvs.apply(&ops.ipvs).await;
            debug!(
                operations = ops.ipvs.len(),
                elapsed = ?start.elapsed(),
                "ipvs operations applied"
            );
            report.ipvs = zip(ops.ipvs, results);
        }
        if !ops.addresses.is_empty() {
            let start = Instant::now();
            let link = self.config.link.clone();
            let results = self.addresses.apply(&link, &ops.addresses).await;
            debug!(
                operations = ops.addresses.len(),
                elapsed = ?start.elapsed(),
                "address operations applied"
            );
            report.addresses = zip(ops.addresses, results);
        }
        if !ops.ipsets.is_empty() {
            let start = Instant::now();
            let results = self.ipsets.apply(&ops.ipsets).await;
            debug!(
                operations = ops.ipsets.len(),
                elapsed = ?start.elapsed(),
                "ipset operations applied"
            );
            report.ipsets = zip(ops.ipsets, results);
        }
        for (op, result) in &report.ipvs {
            if let IpvsOp::DeleteService(key) = op {
                // A virtual server we failed to delete stays ours, even
                // once its address has left the dummy link.
                if result.is_ok() {
                    self.programmed.remove(key);
                } else {
                    self.programmed.insert(*key);
                }
            }
        }
        count(&report);
        report
    }
}

/// Pairs operations with results; an implementation that returned too
/// few results leaves the rest marked as failed rather than unreported.
fn zip<T: std::fmt::Debug>(
    ops: Vec<T>,
    results: Vec<OpResult>,
) -> Vec<(T, OpResult)> {
    let mut results = results.into_iter();
    ops.into_iter()
        .map(|op| {
            let result = results.next().unwrap_or_else(|| {
                Err(KernelError::new(
                    ErrorKind::Transport,
                    format!("{op:?}"),
                    "no result returned for this operation",
                ))
            });
            (op, result)
        })
        .collect()
}

fn keep<T>(
    result: Result<T, KernelError>,
    report: &mut ApplyReport,
) -> Option<T> {
    match result {
        Ok(v) => Some(v),
        Err(e) => {
            report.errors.push(e);
            None
        }
    }
}

fn ipvs_label(op: &IpvsOp) -> &'static str {
    match op {
        IpvsOp::AddService(_) => "add_service",
        IpvsOp::UpdateService(_) => "update_service",
        IpvsOp::DeleteService(_) => "delete_service",
        IpvsOp::AddDest(..) => "add_dest",
        IpvsOp::UpdateDest(..) => "update_dest",
        IpvsOp::DeleteDest(..) => "delete_dest",
    }
}

fn address_label(op: &AddressOp) -> &'static str {
    match op {
        AddressOp::Add(_) => "add",
        AddressOp::Delete(_) => "delete",
    }
}

fn ipset_label(op: &IpsetOp) -> &'static str {
    match op {
        IpsetOp::Create(_) => "create",
        IpsetOp::Destroy(_) => "destroy",
        IpsetOp::Flush(_) => "flush",
        IpsetOp::Add(..) => "add",
        IpsetOp::Delete(..) => "delete",
    }
}

fn result_label<T>(result: &Result<T, KernelError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(e) => e.kind.metric_label(),
    }
}

/// Counts a report's operations, aggregated first: a cold sync has
/// hundreds of thousands of operations but a few dozen label sets.
fn count(report: &ApplyReport) {
    let mut counts: BTreeMap<(&str, &str, &str), u64> = BTreeMap::new();
    let mut tally = |facility, op, result| {
        *counts.entry((facility, op, result)).or_default() += 1;
    };
    for (op, r) in &report.ipvs {
        tally("ipvs", ipvs_label(op), result_label(r));
    }
    for (op, r) in &report.addresses {
        tally("addresses", address_label(op), result_label(r));
    }
    for (op, r) in &report.ipsets {
        tally("ipsets", ipset_label(op), result_label(r));
    }
    for ((facility, op, result), n) in counts {
        metrics::counter!(
            KERNEL_OPERATIONS_TOTAL,
            "facility" => facility,
            "op" => op,
            "result" => result
        )
        .increment(n);
    }
}

fn count_one<T>(
    facility: &'static str,
    op: &'static str,
    result: &Result<T, KernelError>,
) {
    metrics::counter!(
        KERNEL_OPERATIONS_TOTAL,
        "facility" => facility,
        "op" => op,
        "result" => result_label(result)
    )
    .increment(1);
}

fn finish(report: &ApplyReport, what: &str) {
    for error in report.failed() {
        warn!(error = %error, "{what}: kernel operation failed");
    }
    debug!(
        operations = report.op_count(),
        failures = report.failures(),
        "{what} applied"
    );
}

impl<I, A, S> Backend for Proxier<I, A, S>
where
    I: Ipvs + Send + 'static,
    A: Addresses + Send + 'static,
    S: Ipsets + Send + 'static,
{
    async fn apply(&mut self, batch: &SyncBatch) -> Result<(), BackendError> {
        let (report, full) = match &batch.desired {
            Some(desired) => (self.full_reconcile(desired).await, true),
            None => (self.sync(&batch.outcome.deltas).await, false),
        };
        let failures = report.failures();
        // A failed incremental sync asks for a retry, which the daemon
        // makes a full reconcile; a failed full reconcile waits for the
        // next period (or the next change) rather than dumping the kernel
        // every second.
        if (failures > 0 || self.needs_full) && !full {
            return Err(BackendError(format!(
                "{failures} of {} kernel operations failed",
                report.op_count()
            )));
        }
        Ok(())
    }

    async fn local_addresses(&mut self) -> Option<Vec<IpAddr>> {
        let link = self.config.link.clone();
        let read = self.addresses.local_addresses(&link).await;
        count_one("addresses", "list_local", &read);
        match read {
            Ok(local) => Some(local),
            Err(e) => {
                warn!(
                    error = %e,
                    "cannot read the node's addresses; keeping the last known"
                );
                None
            }
        }
    }

    fn poll_interval(&self) -> Option<std::time::Duration> {
        Some(self.config.graceful.check_interval)
    }

    async fn poll(&mut self) {
        self.poll_graceful(Instant::now()).await;
    }
}
