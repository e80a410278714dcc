//! The proxy's state between syncs: object changes go into the trackers,
//! a sync checks them out and brings the desired state up to date for
//! exactly the service ports that changed.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    sync::Arc,
    time::SystemTime,
};

use ipnet::IpNet;
use kube::runtime::watcher::Event;

use crate::{
    config::{Config, DetectLocal, NodePortAddress},
    desired::{DesiredState, NodeContext, SchedulerPolicy, ServiceDelta},
    model::{
        EndpointInfo, EndpointsMap, FlagChoice, IpFamily, NamespacedName,
        NodeInfo, Protocol, ServicePortMap, ServicePortName,
    },
    nodeview::{Change, Key, Received, Update},
    selection::EndpointsView,
    source::{
        file::Snapshot,
        store::{record, RecordChange, Stores},
        SourceEvent,
    },
    tracker::{
        self,
        endpoints::{EndpointsChangeTracker, EndpointsUpdateResult},
        node::{NodeTracker, NodeUpdate},
        services::{ServiceChangeTracker, ServiceUpdateResult},
    },
};

#[cfg(test)]
mod tests;

/// The parts of the configuration that shape the desired state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSettings {
    pub scheduler: Arc<str>,
    /// `--ipvs-scheduler-flags`.
    pub scheduler_flags: FlagChoice,
    /// `--ipvs-service-schedulers`.
    pub service_schedulers: BTreeSet<Arc<str>>,
    pub node_port_addresses: Vec<NodePortAddress>,
    pub detect_local_node_cidr: bool,
    /// `bindAddress`, when a specific address: the node's primary IP of
    /// its family, whatever the Node object says (upstream's
    /// `detectNodeIPs`).
    pub primary_ip_override: Option<IpAddr>,
    /// The `AllowServiceExternalIPs` gate.
    pub serve_external_ips: bool,
}

impl NodeSettings {
    pub fn from_config(config: &Config) -> Self {
        Self {
            scheduler: config.ipvs.scheduler.as_str().into(),
            scheduler_flags: config.scheduler_flags,
            service_schedulers: (config.service_schedulers.iter())
                .map(|s| Arc::from(s.as_str()))
                .collect(),
            node_port_addresses: config.node_port_addresses.clone(),
            detect_local_node_cidr: config.detect_local
                == DetectLocal::NodeCidr,
            primary_ip_override: config.primary_ip_override,
            serve_external_ips: config.allow_service_external_ips,
        }
    }
}

impl Default for NodeSettings {
    fn default() -> Self {
        Self::from_config(&Config::default())
    }
}

/// Derives what the computation needs to know about this node.
///
/// `local` is the kernel's view (addresses on every interface but
/// kube-ipvs0); without a kernel to ask, as for `plan`, the Node object's
/// addresses stand in for it.
pub fn node_context(
    node_name: &str,
    node: Option<&NodeInfo>,
    settings: &NodeSettings,
    local: Option<&[IpAddr]>,
) -> NodeContext {
    let node_addresses: &[IpAddr] =
        node.map(|n| n.addresses.as_slice()).unwrap_or(&[]);
    let local: Vec<IpAddr> = local.unwrap_or(node_addresses).to_vec();
    let primary_ips = primary_ips(node_addresses, settings.primary_ip_override);
    let node_port_addresses = node_port_addresses(
        &local,
        &primary_ips,
        &settings.node_port_addresses,
    );

    let families = families_of(&local);
    NodeContext {
        node_name: node_name.to_string(),
        zone: node.map(|n| n.zone.clone()).unwrap_or_default(),
        node_port_addresses,
        primary_ips,
        local_addresses: local.iter().copied().collect(),
        schedulers: SchedulerPolicy::new(
            settings.scheduler.clone(),
            settings.scheduler_flags,
            settings.service_schedulers.clone(),
        ),
        ipv4: families.contains(&IpFamily::V4),
        ipv6: families.contains(&IpFamily::V6),
        pod_cidrs: node.map(|n| n.pod_cidrs.clone()).unwrap_or_default(),
        without_external_ips: !settings.serve_external_ips,
    }
}

/// The families a node with these addresses runs, IPv4 first. A node
/// with no known address is taken to be IPv4-only, the common case;
/// dual-stack needs the node's addresses.
pub fn families_of(local: &[IpAddr]) -> Vec<IpFamily> {
    let has_v6 = local.iter().any(IpAddr::is_ipv6);
    let has_v4 = local.iter().any(IpAddr::is_ipv4);
    let mut families = Vec::with_capacity(2);
    if has_v4 || !has_v6 {
        families.push(IpFamily::V4);
    }
    if has_v6 {
        families.push(IpFamily::V6);
    }
    families
}

/// Upstream's node IPs, one per family: the bind address for its family,
/// else the Node's first address of the family, else loopback (which a
/// load balancer's source range may still contain).
fn primary_ips(node_addresses: &[IpAddr], bind: Option<IpAddr>) -> Vec<IpAddr> {
    [false, true]
        .into_iter()
        .map(|ipv6| {
            bind.filter(|ip| ip.is_ipv6() == ipv6)
                .or_else(|| {
                    node_addresses
                        .iter()
                        .find(|ip| ip.is_ipv6() == ipv6)
                        .copied()
                })
                .unwrap_or(if ipv6 {
                    IpAddr::V6(Ipv6Addr::LOCALHOST)
                } else {
                    IpAddr::V4(Ipv4Addr::LOCALHOST)
                })
        })
        .collect()
}

/// The addresses NodePorts are served on, per family as upstream's two
/// proxiers choose them: the entries of `nodePortAddresses` of that
/// family (`primary` is the node's IP of the family, unless that is
/// loopback), matched against local addresses, loopback never; a family
/// without entries, or with a zero-length CIDR, gets every local address
/// that can take traffic from outside.
fn node_port_addresses(
    local: &[IpAddr],
    primary_ips: &[IpAddr],
    wanted: &[NodePortAddress],
) -> Vec<IpAddr> {
    let usable = |ip: &IpAddr| !ip.is_loopback() && !is_link_local_v6(ip);
    let mut out: Vec<IpAddr> = Vec::new();
    for ipv6 in [false, true] {
        let mut nets: Vec<IpNet> = Vec::new();
        for want in wanted {
            match want {
                NodePortAddress::Primary => nets.extend(
                    primary_ips
                        .iter()
                        .filter(|ip| ip.is_ipv6() == ipv6 && !ip.is_loopback())
                        .map(|ip| IpNet::from(*ip)),
                ),
                NodePortAddress::Cidr(net) if net.addr().is_ipv6() == ipv6 => {
                    nets.push(*net)
                }
                NodePortAddress::Cidr(_) => {}
            }
        }
        let match_all =
            nets.is_empty() || nets.iter().any(|net| net.prefix_len() == 0);
        for ip in local.iter().filter(|ip| ip.is_ipv6() == ipv6) {
            let take = if match_all {
                usable(ip)
            } else {
                !ip.is_loopback() && nets.iter().any(|net| net.contains(ip))
            };
            if take && !out.contains(ip) {
                out.push(*ip);
            }
        }
    }
    out
}

fn is_link_local_v6(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
        IpAddr::V4(_) => false,
    }
}

/// What applying an object change means for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeOutcome {
    Unchanged,
    NeedsSync,
    /// The proxy cannot continue with its current rules: exit so that
    /// the restart rebuilds them, as upstream does.
    Restart(RestartReason),
}

/// Why the proxy must restart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestartReason {
    /// Our Node's podCIDRs changed under `detectLocalMode: NodeCIDR`:
    /// the local-traffic rules are built from them once.
    #[error(
        "node {node} podCIDRs changed from {old:?} to {new:?} under \
         detectLocalMode NodeCIDR; restarting to rebuild the local-traffic \
         rules"
    )]
    PodCidrsChanged {
        node: String,
        old: Vec<IpNet>,
        new: Vec<IpNet>,
    },
}

impl ChangeOutcome {
    fn needs_sync(needs: bool) -> Self {
        if needs {
            ChangeOutcome::NeedsSync
        } else {
            ChangeOutcome::Unchanged
        }
    }
}

/// The result of one sync.
#[derive(Debug, Default)]
pub struct SyncOutcome {
    pub deltas: Vec<ServiceDelta>,
    pub services: ServiceUpdateResult,
    pub endpoints: EndpointsUpdateResult,
}

impl SyncOutcome {
    /// This sync followed at once by `next`, as one: a port both changed
    /// goes from this one's previous state to `next`'s current, and the
    /// trackers' results are joined.
    pub fn then(self, next: SyncOutcome) -> SyncOutcome {
        let mut merged = Merged::default();
        merged.push(self);
        merged.push(next);
        merged.into_outcome()
    }
}

/// Syncs' outcomes taken as one, as [`SyncOutcome::then`] joins two,
/// each pushed at the cost of its own deltas: what a node computes while
/// a list arrives, for its first sync to apply.
#[derive(Debug, Default)]
pub struct Merged {
    outcome: SyncOutcome,
    /// Where each port's delta is in the outcome's.
    at: HashMap<ServicePortName, usize>,
}

impl Merged {
    pub fn push(&mut self, next: SyncOutcome) {
        let outcome = &mut self.outcome;
        outcome.services.merge(next.services);
        outcome.endpoints.merge(next.endpoints);
        for delta in next.deltas {
            match self.at.get(&delta.service) {
                Some(&i) => outcome.deltas[i].current = delta.current,
                None => {
                    self.at.insert(delta.service.clone(), outcome.deltas.len());
                    outcome.deltas.push(delta);
                }
            }
        }
    }

    pub fn into_outcome(self) -> SyncOutcome {
        let mut outcome = self.outcome;
        // A port that came back to where it was is no change.
        outcome.deltas.retain(|d| d.previous != d.current);
        outcome
    }
}

#[derive(Debug)]
pub struct SyncState {
    node_name: String,
    settings: NodeSettings,
    local_addresses: Option<Vec<IpAddr>>,
    input: Input,
    node: NodeTracker,
    desired: DesiredState,
    node_dirty: bool,
    /// Trigger times before this are from before we started, whichever
    /// side tracked them.
    start_time: SystemTime,
    /// Schedulers Services' annotations named that the kernel was asked
    /// about, and those of them it lacks.
    probed_schedulers: BTreeSet<Arc<str>>,
    missing_schedulers: BTreeSet<Arc<str>>,
}

/// Where a node's services and endpoints come from: one or the other for
/// the life of the state, each checked out its own way into the same
/// results.
#[derive(Debug)]
enum Input {
    /// API objects (the API server, a state file), through kube-proxy's
    /// change trackers.
    Objects(Trackers),
    /// The API side's view of this node, its endpoints already selected.
    View(ViewInput),
}

/// kube-proxy's change trackers and the maps they check out into.
#[derive(Debug)]
struct Trackers {
    services: ServiceChangeTracker,
    endpoints: EndpointsChangeTracker,
    service_map: ServicePortMap,
    endpoints_map: EndpointsMap,
}

impl Input {
    /// What changed since the last checkout, as kube-proxy's trackers
    /// report it.
    fn checkout(&mut self) -> (ServiceUpdateResult, EndpointsUpdateResult) {
        match self {
            Input::Objects(t) => (
                t.services.checkout(&mut t.service_map),
                t.endpoints.checkout(&mut t.endpoints_map),
            ),
            Input::View(view) => view.checkout(),
        }
    }

    fn service_map(&self) -> &ServicePortMap {
        match self {
            Input::Objects(t) => &t.service_map,
            Input::View(view) => &view.received.services,
        }
    }

    fn endpoints(&self) -> &dyn EndpointsView {
        match self {
            Input::Objects(t) => &t.endpoints_map,
            Input::View(view) => &view.received.endpoints,
        }
    }
}

/// A view received from the API side, and what changed in it since the
/// last sync.
#[derive(Debug, Default)]
struct ViewInput {
    received: Received,
    services_changed: HashSet<ServicePortName>,
    endpoints_changed: HashSet<ServicePortName>,
    deleted_udp_cluster_ips: HashSet<IpAddr>,
    last_change_trigger_times: HashMap<NamespacedName, Vec<SystemTime>>,
}

impl SyncState {
    pub fn new(
        node_name: impl Into<String>,
        settings: NodeSettings,
        local_addresses: Option<Vec<IpAddr>>,
        start_time: SystemTime,
    ) -> Self {
        let node_name = node_name.into();
        let ctx = node_context(
            &node_name,
            None,
            &settings,
            local_addresses.as_deref(),
        );
        Self {
            input: Input::Objects(Trackers {
                services: ServiceChangeTracker::new(),
                endpoints: EndpointsChangeTracker::new(start_time),
                service_map: ServicePortMap::new(),
                endpoints_map: EndpointsMap::new(),
            }),
            node: NodeTracker::new(
                &*node_name,
                settings.detect_local_node_cidr,
            ),
            node_name,
            settings,
            local_addresses,
            desired: DesiredState::new(ctx),
            node_dirty: false,
            start_time,
            probed_schedulers: BTreeSet::new(),
            missing_schedulers: BTreeSet::new(),
        }
    }

    /// The schedulers the deltas' virtual servers run that the kernel was
    /// not asked about yet: Services' own, never the node's, which the
    /// start-up probe asked for.
    pub fn unprobed_schedulers(
        &self,
        deltas: &[ServiceDelta],
    ) -> Vec<Arc<str>> {
        let mut names = BTreeSet::new();
        for state in deltas.iter().filter_map(|d| d.current.as_ref()) {
            for vs in &state.virtual_servers {
                let name = &vs.scheduling.scheduler;
                if *name != self.settings.scheduler
                    && !self.probed_schedulers.contains(name)
                {
                    names.insert(name.clone());
                }
            }
        }
        names.into_iter().collect()
    }

    /// What the kernel answered for `scheduler`. One it lacks makes the
    /// next sync recompute every port: the Services that chose it run
    /// the node's scheduler instead.
    pub fn scheduler_probed(&mut self, scheduler: Arc<str>, present: bool) {
        self.probed_schedulers.insert(scheduler.clone());
        if !present && self.missing_schedulers.insert(scheduler) {
            self.node_dirty = true;
        }
    }

    /// A state fed by the API side's view of this node
    /// ([`apply_view`](Self::apply_view)) instead of API objects. The
    /// daemon makes its state so when its source is the API side.
    pub fn fed_by_view(mut self) -> Self {
        if !self.is_fed_by_view() {
            self.input = Input::View(ViewInput::default());
        }
        self
    }

    fn is_fed_by_view(&self) -> bool {
        matches!(self.input, Input::View(_))
    }

    /// Takes a consistent update of this node's view from the API side.
    /// A state still fed by objects is fed by views from now on (what
    /// its trackers held is dropped: one source feeds a state).
    pub fn apply_view(&mut self, mut update: Update) -> ChangeOutcome {
        if !self.is_fed_by_view() {
            self.input = Input::View(ViewInput::default());
        }
        let Input::View(view) = &mut self.input else {
            return ChangeOutcome::Unchanged;
        };
        // As the endpoints tracker takes them from slices: a full state
        // carries none (the API side sends none with it), and times from
        // before our start would count the start-up as latency.
        let trigger_times = std::mem::take(&mut update.trigger_times);
        if !update.full {
            for (service, times) in trigger_times {
                let times: Vec<SystemTime> = times
                    .into_iter()
                    .filter(|time| *time > self.start_time)
                    .collect();
                if !times.is_empty() {
                    view.last_change_trigger_times
                        .entry(service)
                        .or_default()
                        .extend(times);
                }
            }
        }
        // UDP cluster IPs that go away: their conntrack entries are
        // flushed, as the service tracker reports them for a proxy.
        let touched: Vec<ServicePortName> = if update.full {
            view.received.services.keys().cloned().collect()
        } else {
            update
                .changes
                .iter()
                .filter_map(|change| match change {
                    Change::Service(name, _)
                    | Change::Delete(Key::Service(name)) => {
                        Some((**name).clone())
                    }
                    _ => None,
                })
                .collect()
        };
        let udp_before: Vec<(ServicePortName, Vec<IpAddr>)> = touched
            .into_iter()
            .filter(|name| name.protocol == Protocol::Udp)
            .filter_map(|name| {
                let ips =
                    view.received.services.get(&name)?.cluster_ips.clone();
                Some((name, ips))
            })
            .collect();
        let applied = view.received.apply(update);
        for (name, ips) in udp_before {
            let now = view.received.services.get(&name);
            view.deleted_udp_cluster_ips
                .extend(ips.into_iter().filter(|ip| {
                    !now.is_some_and(|svc| svc.cluster_ips.contains(ip))
                }));
        }
        let mut needs_sync =
            !applied.services.is_empty() || !applied.endpoints.is_empty();
        view.services_changed.extend(applied.services);
        view.endpoints_changed.extend(applied.endpoints);
        if applied.node_changed {
            let node = view.received.node.clone();
            let update = self.node.update(node.as_deref());
            match self.node_changed(update) {
                Ok(changed) => needs_sync |= changed,
                Err(restart) => return restart,
            }
        }
        ChangeOutcome::needs_sync(needs_sync)
    }

    /// Takes what the Node tracker made of a change: whether a sync has
    /// something to do, or the restart a podCIDR change under `NodeCIDR`
    /// requires.
    fn node_changed(
        &mut self,
        update: NodeUpdate,
    ) -> Result<bool, ChangeOutcome> {
        match update {
            NodeUpdate::Unchanged => Ok(false),
            NodeUpdate::Changed(_) | NodeUpdate::Deleted => {
                self.node_dirty = true;
                Ok(true)
            }
            NodeUpdate::PodCidrsChanged { old, new } => {
                Err(ChangeOutcome::Restart(RestartReason::PodCidrsChanged {
                    node: self.node_name.clone(),
                    old,
                    new,
                }))
            }
        }
    }

    /// Takes one object's change, as the stores hand it on.
    pub fn apply(&mut self, change: &RecordChange) -> ChangeOutcome {
        let needs_sync = match change {
            RecordChange::Node((previous, current)) => {
                let update =
                    self.node.change(record(previous), record(current));
                match self.node_changed(update) {
                    Ok(changed) => changed,
                    Err(restart) => return restart,
                }
            }
            // A view carries the services and endpoints of a state fed
            // by one: no object reaches its trackers.
            _ => match &mut self.input {
                Input::Objects(t) => {
                    tracker::track(&mut t.services, &mut t.endpoints, change)
                }
                Input::View(_) => false,
            },
        };
        ChangeOutcome::needs_sync(needs_sync)
    }

    /// Takes one API object's change: converted as the stores convert
    /// what arrives (the current object's problems reported), then
    /// applied.
    #[cfg(any(test, feature = "test-support"))]
    pub fn apply_objects(
        &mut self,
        change: &crate::source::store::ObjectChange,
    ) -> ChangeOutcome {
        use crate::{
            source::store::{Keep, Kept, ObjectChange},
            telemetry::events::ReportProblems as _,
        };
        fn kept<K: Keep>(
            obj: &Option<Arc<K>>,
            node: &str,
            report: bool,
        ) -> Option<Arc<Kept<K::Record>>> {
            let obj = obj.as_deref()?;
            let meta = obj.meta();
            let converted = obj.convert(node);
            let record = match report {
                true => converted.report(),
                // Reported when it was current.
                false => converted.value,
            };
            Some(Arc::new(Kept {
                key: crate::model::convert::object_name(meta),
                resource_version: meta.resource_version.clone(),
                record,
            }))
        }
        let node = self.node_name.clone();
        let change = match change {
            ObjectChange::Service { previous, current } => {
                RecordChange::Service((
                    kept(previous, &node, false),
                    kept(current, &node, true),
                ))
            }
            ObjectChange::EndpointSlice { previous, current } => {
                RecordChange::EndpointSlice((
                    kept(previous, &node, false),
                    kept(current, &node, true),
                ))
            }
            ObjectChange::Node { previous, current } => RecordChange::Node((
                kept(previous, &node, false),
                kept(current, &node, true),
            )),
        };
        self.apply(&change)
    }

    /// Replaces the kernel's view of local addresses (read at start-up
    /// and by each repair round); everything is recomputed at the next
    /// sync if it differs, which the result says.
    pub fn set_local_addresses(&mut self, local: Vec<IpAddr>) -> bool {
        if self.local_addresses.as_ref() == Some(&local) {
            return false;
        }
        self.local_addresses = Some(local);
        self.node_dirty = true;
        true
    }

    /// Checks out the trackers' changes (or the view's) and updates the
    /// desired state for the changed service ports only.
    pub fn sync(&mut self) -> SyncOutcome {
        let (services, endpoints) = self.input.checkout();
        let mut deltas = Vec::new();
        let service_map = self.input.service_map();
        let endpoints_view = self.input.endpoints();
        if std::mem::take(&mut self.node_dirty) {
            let mut ctx = node_context(
                &self.node_name,
                self.node.node(),
                &self.settings,
                self.local_addresses.as_deref(),
            );
            ctx.schedulers.missing = self.missing_schedulers.clone();
            deltas = self.desired.set_context(ctx, service_map, endpoints_view);
        }
        // After a context change every port was recomputed already; the
        // update below then finds nothing new for the changed ones.
        deltas.extend(
            self.desired.update(
                service_map,
                endpoints_view,
                services
                    .changed_ports
                    .iter()
                    .chain(&endpoints.changed_ports),
            ),
        );
        report_refused_schedulers(&deltas);
        SyncOutcome {
            deltas,
            services,
            endpoints,
        }
    }

    /// Applies every object of a snapshot as a first listing of each kind
    /// (nodes first, so the first sync already knows the node), through
    /// the stores a running proxy uses.
    pub fn apply_snapshot(&mut self, snapshot: &Snapshot) -> ChangeOutcome {
        let mut outcome = ChangeOutcome::Unchanged;
        for change in snapshot_changes(snapshot, &self.node_name) {
            match self.apply(&change) {
                ChangeOutcome::Unchanged => {}
                ChangeOutcome::NeedsSync => outcome = ChangeOutcome::NeedsSync,
                restart @ ChangeOutcome::Restart(_) => return restart,
            }
        }
        outcome
    }

    /// The node this proxy runs on.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    #[cfg(test)]
    pub fn pending(&self) -> usize {
        match &self.input {
            Input::Objects(t) => t.services.pending() + t.endpoints.pending(),
            Input::View(_) => 0,
        }
    }

    pub fn desired(&self) -> &DesiredState {
        &self.desired
    }

    pub fn service_map(&self) -> &ServicePortMap {
        self.input.service_map()
    }

    /// Each service port's endpoints as this node uses them.
    pub fn endpoints(&self) -> &dyn EndpointsView {
        self.input.endpoints()
    }

    /// The copies of `service`'s endpoints that its slices hold more than
    /// once and the merge left out, by port: none for a node fed by the
    /// API side, which receives endpoints already merged.
    pub fn dropped_endpoint_copies(
        &self,
        service: &NamespacedName,
    ) -> HashMap<ServicePortName, Vec<Arc<EndpointInfo>>> {
        match &self.input {
            Input::Objects(t) => t.endpoints.dropped_copies(service),
            Input::View(_) => HashMap::new(),
        }
    }

    /// Our Node as last seen; `None` before it is known.
    pub fn node(&self) -> Option<&NodeInfo> {
        self.node.node()
    }
}

/// The changes a snapshot's objects make, listed as a first listing of
/// each kind (nodes first) through the stores of the proxy on
/// `node_name` (the API side's: no node).
pub fn snapshot_changes(
    snapshot: &Snapshot,
    node_name: &str,
) -> Vec<RecordChange> {
    let mut stores = Stores::new(node_name);
    let mut events = Vec::new();
    macro_rules! listed {
        ($kind:ident, $objects:expr) => {
            events.push(SourceEvent::$kind(Event::Init));
            events.extend(
                $objects
                    .iter()
                    .cloned()
                    .map(|o| SourceEvent::$kind(Event::InitApply(o))),
            );
            events.push(SourceEvent::$kind(Event::InitDone));
        };
    }
    listed!(Node, snapshot.nodes);
    listed!(Service, snapshot.services);
    listed!(EndpointSlice, snapshot.endpoint_slices);
    events
        .into_iter()
        .flat_map(|event| stores.apply(event))
        .collect()
}

impl ViewInput {
    /// What changed since the last sync, as the trackers would report it
    /// for a proxy watching the API server.
    fn checkout(&mut self) -> (ServiceUpdateResult, EndpointsUpdateResult) {
        let services_changed = std::mem::take(&mut self.services_changed);
        let endpoints_changed = std::mem::take(&mut self.endpoints_changed);
        let of = |ports: &HashSet<ServicePortName>| -> HashSet<_> {
            ports.iter().map(|name| name.service.clone()).collect()
        };
        let udp = |ports: &HashSet<ServicePortName>| {
            ports.iter().any(|name| name.protocol == Protocol::Udp)
        };
        let services = ServiceUpdateResult {
            updated_services: of(&services_changed),
            deleted_udp_cluster_ips: std::mem::take(
                &mut self.deleted_udp_cluster_ips,
            ),
            changed_ports: services_changed,
        };
        let endpoints = EndpointsUpdateResult {
            updated_services: of(&endpoints_changed),
            conntrack_cleanup_required: udp(&services.changed_ports)
                || udp(&endpoints_changed),
            changed_ports: endpoints_changed,
            last_change_trigger_times: std::mem::take(
                &mut self.last_change_trigger_times,
            ),
            ..EndpointsUpdateResult::default()
        };
        (services, endpoints)
    }
}

/// Computes the plan for a parsed state file: the objects go through the
/// same trackers as a running proxy's, then one sync.
#[cfg(any(test, feature = "test-support"))]
pub fn plan(
    snapshot: &Snapshot,
    node_name: &str,
    settings: &NodeSettings,
) -> crate::desired::Plan {
    synced(snapshot, node_name, settings, None)
        .desired()
        .snapshot()
}

/// The state of a node given `snapshot` once, synced: what `plan`
/// prints and the other one-shot commands read. `local` are the
/// addresses of the host the node is, when it is this one (its
/// NodePorts listen on them); without them, the Node's own.
pub fn synced(
    snapshot: &Snapshot,
    node_name: &str,
    settings: &NodeSettings,
    local: Option<Vec<IpAddr>>,
) -> SyncState {
    let mut state =
        SyncState::new(node_name, settings.clone(), local, SystemTime::now());
    // A one-shot plan has no earlier podCIDRs to conflict with.
    let _ = state.apply_snapshot(snapshot);
    state.sync();
    state
}

/// The plan of a node fed by the API side: what `update`, a full state
/// of its view, makes it program.
#[cfg(any(test, feature = "test-support"))]
pub fn plan_from_view(
    update: Update,
    node_name: &str,
    settings: &NodeSettings,
) -> crate::desired::Plan {
    synced_from_view(update, node_name, settings, None)
        .desired()
        .snapshot()
}

/// The state of a node fed `update` by the API side, synced; `local` as
/// for [`synced`].
pub fn synced_from_view(
    update: Update,
    node_name: &str,
    settings: &NodeSettings,
    local: Option<Vec<IpAddr>>,
) -> SyncState {
    let mut state =
        SyncState::new(node_name, settings.clone(), local, SystemTime::now())
            .fed_by_view();
    let _ = state.apply_view(update);
    state.sync();
    state
}

/// The node a plan is for: the one asked for, else the file's only Node.
pub fn plan_node_name(
    snapshot: &Snapshot,
    requested: Option<&str>,
) -> Option<String> {
    if let Some(name) = requested {
        return Some(name.to_string());
    }
    match snapshot.nodes.as_slice() {
        [only] => only.metadata.name.clone(),
        _ => None,
    }
}

/// A Service's annotated scheduler that the node does not run is named
/// when the refusal appears, once per Service whatever its ports.
fn report_refused_schedulers(deltas: &[ServiceDelta]) {
    use crate::{
        desired::Refusal,
        model::{InvalidObject, InvalidReason, ObjectKind},
        telemetry::events::InternalEvent as _,
    };
    let mut named = HashSet::new();
    for delta in deltas {
        let refused = |s: &Option<Arc<crate::desired::ServiceState>>| {
            s.as_ref().and_then(|s| s.refused_scheduler.clone())
        };
        let Some(now) = refused(&delta.current) else {
            continue;
        };
        if refused(&delta.previous).as_ref() == Some(&now)
            || !named.insert(&delta.service.service)
        {
            continue;
        }
        let scheduler = now.scheduler.to_string();
        let reason = match now.why {
            Refusal::NotAllowed => {
                InvalidReason::SchedulerNotAllowed { scheduler }
            }
            Refusal::NotInKernel => {
                InvalidReason::SchedulerNotInKernel { scheduler }
            }
        };
        (&InvalidObject {
            kind: ObjectKind::Service,
            object: delta.service.service.clone(),
            reason,
        })
            .emit();
    }
}
