//! The IPVS proxier: the desired state's per-service deltas into kernel
//! operations, through the facility traits of [`crate::kernel`].
//!
//! A sync plans from the deltas alone ([`plan::Ledger::plan`]), so its
//! cost follows the change. Drift is repaired without holding up syncs:
//! a snapshot of the kernel is read on sockets of its own, away from the
//! sync loop, and then compared with the ledger a bounded number of keys
//! at a time ([`plan::repair_step`]), leaving alone whatever a sync
//! touched since the snapshot was taken. Start-up never flushes: it makes
//! sure the dummy link and the sets exist and leaves everything else to
//! the first sync, which compares the whole desired state with the
//! kernel, so connections through virtual servers that are still wanted
//! survive a restart.
//!
//! Every operation's result is kept in the [`ApplyReport`] and counted in
//! [`crate::telemetry::KERNEL_OPERATIONS_TOTAL`]; a failure does not stop
//! the rest. The ledger records what was asked for, not what succeeded:
//! the objects whose operations failed are read back and retried at the
//! next sync, and the repair catches whatever else differs.

mod bind_ahead;
pub mod conntrack;
pub mod graceful;
pub mod host;
pub mod iptables;
mod operation;
pub mod plan;
pub mod stack;
#[cfg(test)]
mod tests;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    time::Instant,
};

use futures::future::Either;
use ipnet::IpNet;
use tracing::{debug, info, warn};

use crate::{
    backend::{Backend, BackendError, RepairStep, SyncBatch},
    config::Config,
    desired::{DesiredState, NodeContext, ServiceDelta, SetEntry, SetName},
    kernel::{
        addresses::{AddressOp, Addresses, ENODEV},
        capabilities,
        ipsets::{IpsetOp, Ipsets},
        ipvs::{Ipvs, IpvsOp, IpvsTable, ServiceEntry, VirtualServerKey},
        ErrorKind, KernelError,
    },
    model::Protocol,
    telemetry::events::{Facility, InternalEvent, KernelOperations},
};
use bind_ahead::BindAhead;
use graceful::{GracefulConfig, GracefulQueue, Observation};
use operation::{outcome, settle, Operation};
use plan::{KernelOps, Ledger, Observed, Ownership, RepairCursor, Touched};

/// kube-proxy's dummy link.
pub const DUMMY_LINK: &str = "kube-ipvs0";

/// Every set of ours starts with this; dumps ask for nothing else.
const SET_PREFIX: &str = "KUBE-";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxierConfig {
    pub link: String,
    pub exclude_cidrs: Vec<IpNet>,
    pub graceful: GracefulConfig,
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

/// What a sync attempted: how many operations per facility, and those
/// that failed with their errors. Successful operations are counted,
/// not kept: a cold sync has hundreds of thousands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    pub ipvs_ops: usize,
    pub address_ops: usize,
    pub ipset_ops: usize,
    pub failed_ipvs: Vec<(IpvsOp, KernelError)>,
    pub failed_addresses: Vec<(AddressOp, KernelError)>,
    pub failed_ipsets: Vec<(IpsetOp, KernelError)>,
    /// Failures outside the operation lists: dumps, the dummy link.
    pub errors: Vec<KernelError>,
    /// Foreign virtual servers seen for the first time (logged once).
    pub foreign: Vec<VirtualServerKey>,
}

impl ApplyReport {
    pub fn op_count(&self) -> usize {
        self.ipvs_ops + self.address_ops + self.ipset_ops
    }

    /// Failures that left the kernel other than asked for. An address or
    /// set entry that was already there for an add, or anything already
    /// gone for a delete, is as asked whatever the kernel answered:
    /// counted in the metrics by its answer, but no failure.
    pub fn failures(&self) -> usize {
        self.failed().count()
    }

    #[cfg(test)]
    pub fn is_ok(&self) -> bool {
        self.failures() == 0
    }

    /// Every failure, for logs.
    pub fn failed(&self) -> impl Iterator<Item = &KernelError> {
        fn unsettled<O: Operation>(
            failed: &[(O, KernelError)],
        ) -> impl Iterator<Item = &KernelError> {
            failed
                .iter()
                .filter(|(op, e)| !op.settled(e))
                .map(|(_, e)| e)
        }
        unsettled(&self.failed_ipvs)
            .chain(unsettled(&self.failed_addresses))
            .chain(unsettled(&self.failed_ipsets))
            .chain(&self.errors)
    }

    fn merge(&mut self, other: ApplyReport) {
        self.ipvs_ops += other.ipvs_ops;
        self.address_ops += other.address_ops;
        self.ipset_ops += other.ipset_ops;
        self.failed_ipvs.extend(other.failed_ipvs);
        self.failed_addresses.extend(other.failed_addresses);
        self.failed_ipsets.extend(other.failed_ipsets);
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
    /// Whose a virtual server in the kernel is; its `programmed` holds the
    /// virtual servers off the dummy link that this run programmed, or
    /// failed to delete.
    ownership: Ownership,
    ipv4: bool,
    ipv6: bool,
    foreign_logged: BTreeSet<VirtualServerKey>,
    /// The next sync compares the whole desired state with the kernel:
    /// before the first, and after one that could not read the kernel or
    /// found a whole object gone (the dummy link, a set).
    needs_full: bool,
    /// What failed and is tried again at the next sync.
    suspects: Suspects,
    /// While a repair round runs: what syncs touched since it began.
    touched: Option<Touched>,
    /// The latest repair round begun; an older round's read is stale.
    round: u64,
    /// Before the first sync: the addresses bound while the list arrived.
    ahead: Option<BindAhead>,
}

/// The objects whose last write failed: a retry compares just these with
/// the kernel, so a failure never turns later syncs into full ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Suspects {
    services: BTreeSet<VirtualServerKey>,
    addresses: BTreeSet<IpAddr>,
    entries: BTreeSet<(String, SetEntry)>,
}

impl Suspects {
    fn is_empty(&self) -> bool {
        self.services.is_empty()
            && self.addresses.is_empty()
            && self.entries.is_empty()
    }
}

/// A repair round's read of the kernel, and where its steps stand.
#[derive(Debug)]
pub struct ProxierObserved {
    round: u64,
    kernel: Observed,
    local: Option<Vec<IpAddr>>,
    /// The reads that failed, reported by the first step.
    errors: Vec<KernelError>,
    cursor: RepairCursor,
}

impl ProxierObserved {
    pub fn is_done(&self) -> bool {
        self.cursor.is_done()
    }
}

impl crate::backend::Observation for ProxierObserved {
    fn local_addresses(&self) -> Option<&[IpAddr]> {
        self.local.as_deref()
    }
}

/// Keys a repair step compares at most: whatever the cluster's size, a
/// step holds the sync loop for the time of a few hundred comparisons
/// (and, where it found drift, their repair).
pub const REPAIR_STEP_BUDGET: usize = 256;

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
            ownership: Ownership {
                exclude_cidrs: config.exclude_cidrs.clone(),
                programmed: BTreeSet::new(),
                node_addresses: BTreeSet::new(),
                listed: plan::Listed::default(),
            },
            config,
            ledger: Ledger::new(),
            foreign_logged: BTreeSet::new(),
            needs_full: true,
            suspects: Suspects::default(),
            touched: None,
            round: 0,
            ahead: None,
        }
    }

    #[cfg(test)]
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    #[cfg(test)]
    pub fn graceful(&self) -> &GracefulQueue {
        &self.graceful
    }

    #[cfg(test)]
    pub fn config(&self) -> &ProxierConfig {
        &self.config
    }

    /// Whether the next sync must be a full reconcile (before the first,
    /// and after one that could not read the kernel).
    #[cfg(test)]
    pub(crate) fn needs_full_reconcile(&self) -> bool {
        self.needs_full
    }

    /// The kernel handles, for tests.
    #[cfg(test)]
    pub(crate) fn handles(&mut self) -> (&mut I, &mut A, &mut S) {
        (&mut self.ipvs, &mut self.addresses, &mut self.ipsets)
    }

    /// Makes sure the dummy link and our sets exist. Nothing is deleted
    /// or flushed: the first sync, a full reconcile, applies the
    /// difference.
    pub async fn start(&mut self) -> ApplyReport {
        let mut report = ApplyReport::default();
        let link = self.config.link.clone();
        let ensured = self.addresses.ensure_dummy(&link).await;
        count_one(Facility::Addresses, "ensure_link", &ensured);
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
                report.merge(
                    self.apply(KernelOps {
                        ipsets: ops,
                        ..KernelOps::default()
                    })
                    .await,
                );
            }
            Err(e) => report.errors.push(e),
        }
        self.needs_full = true;
        finish(&report, "start");
        report
    }

    /// The node's families and NodePort addresses, from the context each
    /// sync's desired state carries (a few addresses: cheap). A family
    /// the node gained gets its sets, as the deltas that follow (and the
    /// iptables rules that name the sets) need them.
    fn track_context(&mut self, ctx: &NodeContext) -> KernelOps {
        let gained =
            plan::expected_sets(ctx.ipv4 && !self.ipv4, ctx.ipv6 && !self.ipv6);
        self.ipv4 = ctx.ipv4;
        self.ipv6 = ctx.ipv6;
        self.ownership.node_addresses =
            ctx.node_port_addresses.iter().copied().collect();
        KernelOps {
            ipsets: gained
                .into_iter()
                .map(|set| IpsetOp::Create(plan::set_spec(set)))
                .collect(),
            ..KernelOps::default()
        }
    }

    /// Applies one sync's deltas: exactly the operations for what
    /// changed, plus a retry of what failed before, each compared with
    /// the kernel on its own.
    pub async fn sync(&mut self, deltas: &[ServiceDelta]) -> ApplyReport {
        let mut ops = self.ledger.plan(deltas);
        self.ownership.programmed.extend(plan::node_port_keys(
            deltas.iter().filter_map(|d| d.current.as_deref()),
        ));
        let mut report = ApplyReport::default();
        self.retry_suspects(&mut ops, &mut report).await;
        let start = Instant::now();
        let removing = self.read_removing(&ops.ipvs, &mut report).await;
        debug!(
            services = removing.services.len(),
            elapsed = ?start.elapsed(),
            "real servers read before removals"
        );
        ops.ipvs = graceful::route(
            &mut self.graceful,
            std::mem::take(&mut ops.ipvs),
            Instant::now(),
            Some(&removing),
        );
        report.merge(self.apply(ops).await);
        finish(&report, "sync");
        report
    }

    /// The real servers of the TCP services a sync removes real servers
    /// from, read now (one read per such service, a system call for an
    /// IPv4 one: the cost follows the change): an idle one is deleted at
    /// once, as upstream does, and only one with connections drains at
    /// weight 0.
    async fn read_removing(
        &mut self,
        ops: &[IpvsOp],
        report: &mut ApplyReport,
    ) -> IpvsTable {
        let services: BTreeSet<VirtualServerKey> = ops
            .iter()
            .filter_map(|op| match op {
                IpvsOp::DeleteDest(key, dest)
                    if key.protocol == Protocol::Tcp
                        && !self.graceful.is_draining(key, dest) =>
                {
                    Some(*key)
                }
                _ => None,
            })
            .collect();
        let mut table = IpvsTable::default();
        for key in services {
            let Some(vs) = self.ledger.virtual_server(&key) else {
                continue;
            };
            let spec = plan::service_spec(vs);
            match self.ipvs.dests(&key).await {
                Ok(dests) => {
                    table.services.insert(key, ServiceEntry { spec, dests });
                }
                // Unread, it drains: the poll deletes it once idle.
                Err(e) => report.errors.push(e),
            }
        }
        table
    }

    /// Replaces whatever `ops` would do to a suspect object by what the
    /// ledger wants of it now: virtual servers are read back and
    /// compared; addresses and set entries are written again (one that
    /// is already as asked counts as done, see [`ApplyReport::failures`]).
    async fn retry_suspects(
        &mut self,
        ops: &mut KernelOps,
        report: &mut ApplyReport,
    ) {
        if self.suspects.is_empty() {
            return;
        }
        let suspects = std::mem::take(&mut self.suspects);
        ops.ipvs
            .retain(|op| !suspects.services.contains(&op.service()));
        let no_link = BTreeSet::new();
        for key in &suspects.services {
            match self.ipvs.service(key).await {
                Ok(have) => {
                    let repaired = plan::repair_one(
                        &self.ledger,
                        *key,
                        have.as_ref(),
                        &self.ownership,
                        &no_link,
                    );
                    ops.ipvs.extend(repaired.ops.ipvs);
                }
                Err(e) => {
                    report.errors.push(e);
                    self.suspects.services.insert(*key);
                }
            }
        }
        ops.addresses
            .retain(|op| !suspects.addresses.contains(&op.address()));
        ops.addresses.extend(suspects.addresses.iter().map(|addr| {
            match self.ledger.binds(addr) {
                true => AddressOp::Add(*addr),
                false => AddressOp::Delete(*addr),
            }
        }));
        ops.ipsets.retain(|op| match op {
            IpsetOp::Add(name, entry) | IpsetOp::Delete(name, entry) => {
                !suspects.entries.contains(&(name.clone(), entry.clone()))
            }
            _ => true,
        });
        for (name, entry) in suspects.entries {
            let want = SetName::from_kernel_name(&name)
                .is_some_and(|set| self.ledger.has_entry(set, &entry));
            ops.ipsets.push(match want {
                true => IpsetOp::Add(name, entry),
                false => IpsetOp::Delete(name, entry),
            });
        }
    }

    /// Compares the whole desired state with the kernel, in repair steps
    /// back to back, and repairs the difference: the first sync, and the
    /// sync after one that lost track of the kernel. Only objects we own
    /// are deleted; a foreign virtual server is logged once.
    pub async fn full_reconcile(
        &mut self,
        desired: &DesiredState,
    ) -> ApplyReport {
        // The round's sets phase creates whatever set is missing.
        let started = Instant::now();
        self.track_context(desired.context());
        self.ledger = Ledger::from_services(desired.services());
        debug!(elapsed = ?started.elapsed(), "full reconcile: the ledger built");
        self.ownership.programmed.extend(plan::node_port_keys(
            desired.services().map(|(_, state)| &**state),
        ));
        self.suspects = Suspects::default();
        let mut ahead = self.ahead.take();
        let mut known_link = None;
        let mut take_back = BTreeSet::new();
        if let Some(ahead) = &mut ahead {
            ahead.take_answered();
            let (link, back) = ahead.link(|addr| self.ledger.binds(addr));
            (known_link, take_back) = (Some(link), back);
        }
        let started = Instant::now();
        // The node's addresses are not compared: a repair round reads them.
        let mut observed = self.read_kernel(known_link, false).await;
        debug!(elapsed = ?started.elapsed(), "full reconcile: the kernel read");
        // Nothing else writes meanwhile.
        self.touched = None;
        let mut report = ApplyReport::default();
        self.round_begins(&mut observed, &mut report).await;
        // Binding an address is the kernel's slowest write here (each
        // walks the link's list), and a cold sync binds one per service:
        // the link's addresses are written on a thread of their own while
        // the steps write IPVS and the sets, which they do not depend on.
        let mut addresses = RepairCursor::addresses_alone();
        let binds = plan::repair_step(
            &self.ledger,
            &[],
            &observed.kernel,
            &self.ownership,
            &Touched::new(),
            &mut addresses,
            usize::MAX,
        )
        .ops
        .addresses;
        let link = self.config.link.clone();
        let binding = Instant::now();
        let bound = self.addresses.apply_detached(&link, binds.clone());
        observed.cursor = RepairCursor::all_but_addresses();
        while !observed.is_done() {
            report.merge(
                self.repair_step(&mut observed, REPAIR_STEP_BUDGET).await,
            );
        }
        let mut counts = KernelOperations::new();
        let results = bound.await;
        self.settle_addresses(
            binds,
            results,
            binding,
            &mut counts,
            &mut report,
        );
        if let Some(ahead) = ahead {
            let mut unbinds = Vec::new();
            for (ops, results) in ahead.answers().await {
                unbinds.extend(
                    ops.iter()
                        .zip(&results)
                        .filter(|(op, result)| bind_ahead::bound(op, result))
                        .map(|(op, _)| op.address())
                        .filter(|addr| take_back.contains(addr))
                        .map(AddressOp::Delete),
                );
                self.settle_addresses(
                    ops,
                    results,
                    binding,
                    &mut counts,
                    &mut report,
                );
            }
            if !unbinds.is_empty() {
                report.merge(
                    self.apply(KernelOps {
                        addresses: unbinds,
                        ..KernelOps::default()
                    })
                    .await,
                );
            }
        }
        counts.emit();
        // Only a reconcile that saw every facility describes the kernel.
        let kernel = &observed.kernel;
        self.needs_full = kernel.ipvs.is_none()
            || kernel.link_addresses.is_none()
            || kernel.sets.is_none();
        finish(&report, "full reconcile");
        report
    }

    /// Before the first sync, while the list still arrives: binds the
    /// addresses the deltas' new states ask for and nobody sent yet, on
    /// the link's own connection and thread, without waiting for them
    /// (see `bind_ahead`). The first sync settles them.
    pub async fn bind_ahead(&mut self, deltas: &[ServiceDelta]) {
        if !self.needs_full {
            return;
        }
        let link = self.config.link.clone();
        let ahead = match &mut self.ahead {
            Some(ahead) => ahead,
            None => {
                // What is bound already (a restart) is not sent again.
                let read = self.addresses.list(&link).await;
                count_one(Facility::Addresses, "list", &read);
                match read {
                    Ok(on_link) => self.ahead.insert(BindAhead::new(on_link)),
                    Err(error) => {
                        debug!(%error, "no addresses bound ahead: the link unread");
                        return;
                    }
                }
            }
        };
        let ops = ahead.binds(deltas);
        if !ops.is_empty() {
            let binding = self.addresses.apply_detached(&link, ops.clone());
            ahead.sending(ops, binding);
        }
    }

    /// Begins a repair round: from now on what syncs write is remembered,
    /// and the returned future reads the kernel on the facilities'
    /// detached connections.
    pub fn begin_repair(
        &mut self,
    ) -> impl std::future::Future<Output = ProxierObserved>
           + Send
           + 'static
           + use<I, A, S> {
        self.read_kernel(None, true)
    }

    /// [`Proxier::begin_repair`]'s read, the link's addresses taken as
    /// `known_link` instead when given, the node's addresses read only
    /// with `local`.
    fn read_kernel(
        &mut self,
        known_link: Option<BTreeSet<IpAddr>>,
        local: bool,
    ) -> impl std::future::Future<Output = ProxierObserved>
           + Send
           + 'static
           + use<I, A, S> {
        self.touched = Some(Touched::new());
        self.round += 1;
        let round = self.round;
        let link = self.config.link.clone();
        let ipvs = self.ipvs.dump_detached();
        let bound = match known_link {
            Some(known) => Either::Left(std::future::ready(Ok(known))),
            None => Either::Right(self.addresses.list_detached(&link)),
        };
        let local =
            local.then(|| self.addresses.local_addresses_detached(&link));
        let sets = self.ipsets.dump_detached(SET_PREFIX);
        async move {
            let local = async move {
                match local {
                    Some(read) => Some(read.await),
                    None => None,
                }
            };
            let (ipvs, bound, local, sets) =
                futures::join!(ipvs, bound, local, sets);
            let mut errors = Vec::new();
            let kernel = Observed {
                ipvs: keep_read(ipvs, &mut errors),
                link_addresses: keep_read(bound, &mut errors),
                sets: keep_read(sets, &mut errors),
            };
            ProxierObserved {
                round,
                kernel,
                local: local.and_then(|read| keep_read(read, &mut errors)),
                errors,
                cursor: RepairCursor::new(),
            }
        }
    }

    /// What a round's first step does before comparing: the read's
    /// errors reported, the sets' entries known, the link there.
    async fn round_begins(
        &mut self,
        observed: &mut ProxierObserved,
        report: &mut ApplyReport,
    ) {
        report.errors.append(&mut observed.errors);
        if let Some(sets) = &observed.kernel.sets {
            self.ownership.listed = plan::listed_in_sets(sets);
        }
        let link = self.config.link.clone();
        if let Err(e) = self.addresses.ensure_dummy(&link).await {
            report.errors.push(e);
        }
    }

    /// Compares up to `budget` keys of the round's read with the ledger,
    /// leaving alone what syncs touched since the round began, and
    /// repairs the difference. The round ends when `observed` is done.
    pub async fn repair_step(
        &mut self,
        observed: &mut ProxierObserved,
        budget: usize,
    ) -> ApplyReport {
        let mut report = ApplyReport::default();
        if observed.round != self.round {
            // A later round, or a full reconcile, began since this read:
            // it describes a kernel we have moved on from.
            observed.cursor = RepairCursor::done();
            return report;
        }
        if observed.cursor == RepairCursor::new() {
            self.round_begins(observed, &mut report).await;
        }
        // Out while the step's own operations go: only syncs' writes are
        // what a round must leave alone.
        let touched = self.touched.take();
        let reconciled = plan::repair_step(
            &self.ledger,
            &plan::expected_sets(self.ipv4, self.ipv6),
            &observed.kernel,
            &self.ownership,
            touched.as_ref().unwrap_or(&Touched::new()),
            &mut observed.cursor,
            budget,
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
            observed.kernel.ipvs.as_ref(),
        );
        report.merge(self.apply(ops).await);
        self.touched = touched;
        if observed.is_done() {
            self.touched = None;
        }
        if report.op_count() > 0 || !report.errors.is_empty() {
            finish(&report, "repair");
        }
        report
    }

    /// Reads the draining services' real servers and deletes those that
    /// are done: called every [`GracefulConfig::check_interval`].
    pub async fn poll_graceful(&mut self, now: Instant) -> ApplyReport {
        if self.graceful.is_empty() {
            return ApplyReport::default();
        }
        let services: Vec<VirtualServerKey> =
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
            Ok(local) => self.ownership.node_addresses.extend(local),
            Err(e) => report.errors.push(e),
        }
        let observed = self.observe(&mut report).await;
        let ops = plan::cleanup(&observed, &self.ownership);
        report.merge(self.apply(ops).await);
        let deleted = match self.addresses.delete_link(&link).await {
            Err(e) if e.kind == ErrorKind::NotFound => Ok(()),
            other => other,
        };
        count_one(Facility::Addresses, "delete_link", &deleted);
        if let Err(e) = deleted {
            report.errors.push(e);
        }
        self.ledger = Ledger::new();
        self.graceful = GracefulQueue::new(self.config.graceful.timeout);
        self.ownership.programmed.clear();
        finish(&report, "cleanup");
        report
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

    /// Applies each facility's list in the documented order, counting
    /// every result; remembers what a repair round must leave alone and
    /// what failed.
    async fn apply(&mut self, ops: KernelOps) -> ApplyReport {
        if let Some(touched) = &mut self.touched {
            touched.record(&ops);
        }
        let mut report = ApplyReport::default();
        let mut counts = KernelOperations::new();
        if !ops.ipvs.is_empty() {
            let started = Instant::now();
            let results = self.ipvs.apply(&ops.ipvs).await;
            report.ipvs_ops = ops.ipvs.len();
            for (op, result) in settle(ops.ipvs, results, started, &mut counts)
            {
                if let IpvsOp::DeleteService(key) = &op {
                    // A virtual server we failed to delete stays ours,
                    // even once its address has left the dummy link.
                    match &result {
                        Ok(()) => self.ownership.programmed.remove(key),
                        Err(_) => self.ownership.programmed.insert(*key),
                    };
                }
                if let Err(e) = result {
                    if !op.settled(&e) {
                        self.suspects.services.insert(op.service());
                    }
                    report.failed_ipvs.push((op, e));
                }
            }
        }
        if !ops.addresses.is_empty() {
            let started = Instant::now();
            let link = self.config.link.clone();
            let results = self.addresses.apply(&link, &ops.addresses).await;
            self.settle_addresses(
                ops.addresses,
                results,
                started,
                &mut counts,
                &mut report,
            );
        }
        if !ops.ipsets.is_empty() {
            let started = Instant::now();
            let results = self.ipsets.apply(&ops.ipsets).await;
            report.ipset_ops = ops.ipsets.len();
            for (op, result) in
                settle(ops.ipsets, results, started, &mut counts)
            {
                if let Err(e) = result {
                    self.suspect_set_failure(&op, &e);
                    report.failed_ipsets.push((op, e));
                }
            }
        }
        counts.emit();
        report
    }

    /// A failed address is retried at the next sync; a missing link
    /// calls for a full reconcile.
    fn settle_addresses(
        &mut self,
        ops: Vec<AddressOp>,
        results: Vec<OpResult>,
        started: Instant,
        counts: &mut KernelOperations,
        report: &mut ApplyReport,
    ) {
        report.address_ops += ops.len();
        for (op, result) in settle(ops, results, started, counts) {
            if let Err(e) = result {
                if !op.settled(&e) {
                    // The link itself is gone: every address with it.
                    self.needs_full |= e.errno == Some(ENODEV);
                    self.suspects.addresses.insert(op.address());
                }
                report.failed_addresses.push((op, e));
            }
        }
    }

    /// A failed entry is retried at the next sync; a set that is gone
    /// (ENOENT), or a failure of a whole set's operation, calls for a
    /// full reconcile.
    fn suspect_set_failure(&mut self, op: &IpsetOp, e: &KernelError) {
        if op.settled(e) {
            return;
        }
        match op {
            IpsetOp::Add(name, entry) | IpsetOp::Delete(name, entry) => {
                self.needs_full |= e.errno == Some(libc::ENOENT);
                self.suspects.entries.insert((name.clone(), entry.clone()));
            }
            _ => self.needs_full = true,
        }
    }
}

fn keep_read<T>(
    result: Result<T, KernelError>,
    errors: &mut Vec<KernelError>,
) -> Option<T> {
    match result {
        Ok(v) => Some(v),
        Err(e) => {
            errors.push(e);
            None
        }
    }
}

fn keep<T>(
    result: Result<T, KernelError>,
    report: &mut ApplyReport,
) -> Option<T> {
    keep_read(result, &mut report.errors)
}

fn count_one<T>(
    facility: Facility,
    op: &'static str,
    result: &Result<T, KernelError>,
) {
    let mut counts = KernelOperations::new();
    counts.record(facility, op, outcome(result));
    counts.emit();
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
    type Observed = ProxierObserved;

    async fn has_scheduler(&mut self, scheduler: &str) -> bool {
        match capabilities::try_scheduler(&mut self.ipvs, scheduler).await {
            Ok(()) => true,
            Err(error) => {
                warn!(scheduler, %error, "the kernel has no such IPVS scheduler");
                false
            }
        }
    }

    async fn apply(
        &mut self,
        batch: SyncBatch<'_>,
    ) -> Result<(), BackendError> {
        let desired = batch.state.desired();
        let report = match self.needs_full {
            true => self.full_reconcile(desired).await,
            false => {
                let sets = self.track_context(desired.context());
                let mut report = self.apply(sets).await;
                report.merge(self.sync(&batch.outcome.deltas).await);
                report
            }
        };
        let failed = report.failures();
        if failed > 0 {
            return Err(BackendError::KernelOperations {
                failed,
                attempted: report.op_count(),
            });
        }
        if self.needs_full {
            return Err(BackendError::LostTrack);
        }
        Ok(())
    }

    fn begin_repair(
        &mut self,
    ) -> impl std::future::Future<Output = ProxierObserved>
           + Send
           + 'static
           + use<I, A, S> {
        Proxier::begin_repair(self)
    }

    async fn repair_step(
        &mut self,
        observed: &mut ProxierObserved,
    ) -> RepairStep {
        Proxier::repair_step(self, observed, REPAIR_STEP_BUDGET).await;
        match observed.is_done() {
            true => RepairStep::Done,
            false => RepairStep::Continue,
        }
    }

    async fn local_addresses(&mut self) -> Option<Vec<IpAddr>> {
        let link = self.config.link.clone();
        let read = self.addresses.local_addresses(&link).await;
        count_one(Facility::Addresses, "list_local", &read);
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

    async fn ahead_of_first_sync(&mut self, deltas: &[ServiceDelta]) {
        self.bind_ahead(deltas).await;
    }

    fn poll_interval(&self) -> Option<std::time::Duration> {
        Some(self.config.graceful.check_interval)
    }

    async fn poll(&mut self) {
        self.poll_graceful(Instant::now()).await;
    }
}
