//! Every watching node's view, in layers, so that a node costs what is
//! its own and not the cluster's size.
//!
//! Most nodes program the same thing for most ports: a node that has
//! none of a port's endpoints and no topology hint naming it selects what
//! any such node of its zone selects. So a port's service is kept once,
//! its selection once per zone (for such nodes), and only the nodes that
//! do have endpoints of it (or a hint) keep a selection of their own, in
//! an overlay over their zone's. A change then costs one update per zone
//! and per node it concerns, not per node of the cluster.
//!
//! One revision counter runs through all layers, so a node's revision
//! means the same in each. What a node lacks since its revision is what
//! changed since in the services, in its zone and in its overlay (an
//! overlay entry handed back meaning "take the zone's again"); a node
//! that moved zones, or is behind a forgotten deletion, starts over from
//! a full state.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    sync::Arc,
    time::SystemTime,
};

use super::{
    layer::{Entry, Layer},
    node_endpoints, Change, Key, TriggerTimes, Update,
};
use crate::{
    model::{
        EndpointInfo, EndpointsMap, NamespacedName, NodeInfo, ServicePortInfo,
        ServicePortMap, ServicePortName,
    },
    selection::NodeEndpoints,
};

/// How many deletions each layer remembers, by default, beyond which a
/// node resuming from before the oldest of them gets a full state.
pub const TOMBSTONES: usize = 4096;

/// The name a zone's shared selection is made for: no node has it, so
/// no endpoint is local to it and no hint names it.
const NO_NODE: &str = "";

#[derive(Debug)]
struct NodeState {
    node: Option<Entry<NodeInfo>>,
    zone: String,
    /// The ports whose selection is this node's own.
    own: Layer<NodeEndpoints>,
    /// A node at a revision below this starts over (it moved zones).
    horizon: u64,
}

#[derive(Debug)]
pub struct Views {
    revision: u64,
    max_tombstones: usize,
    /// One name per port, which every layer's keys share.
    names: HashSet<Arc<ServicePortName>>,
    services: Layer<ServicePortInfo>,
    /// Per zone of a watching node: the selection of its nodes that have
    /// no endpoint of the port and no hint naming them.
    zones: HashMap<String, Layer<NodeEndpoints>>,
    nodes: HashMap<String, NodeState>,
    /// Per port: the watching nodes that have a selection of their own.
    owners: HashMap<Arc<ServicePortName>, BTreeSet<String>>,
    /// Per port, and per node, watching or not: the nodes its endpoints
    /// are on or name, and the ports that name a node; so that a node's
    /// first watch looks at its own ports, not at every port.
    named: HashMap<Arc<ServicePortName>, BTreeSet<String>>,
    by_node: HashMap<String, BTreeSet<Arc<ServicePortName>>>,
    /// Per port whose last update came with slice trigger times: those
    /// times, and the revision after that update. A node behind it is
    /// sent them with the port's endpoints.
    triggers: HashMap<Arc<ServicePortName>, Trigger>,
    /// The nodes changed, or given a selection of their own or a new one,
    /// since the last [`Views::catch_up`]: what they lack is theirs alone.
    touched: HashSet<String>,
    /// How many catch-ups were made: how many syncs there were.
    syncs: u64,
}

#[derive(Debug)]
struct Trigger {
    revision: u64,
    times: Vec<SystemTime>,
}

/// Where a node stands in catching up, between two parts sent to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// It holds a consistent state at this revision (`None`: nothing).
    Held(Option<u64>),
    /// It is being sent what it lacks, in parts.
    Walking(Walk),
}

/// A walk through a node's view in steps of a few entries, so that what
/// a node lacks (its whole view, when it starts) is never built whole:
/// each layer is walked in the order of its changes, from where the node
/// stood up to the revision the walk began at. What changes meanwhile
/// moves past that revision, and a catch-up walk from it follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walk {
    /// `None`: a full state, live entries only; otherwise the revision the
    /// node holds, and deletions after it are walked too.
    from: Option<u64>,
    upto: u64,
    stage: Stage,
    /// The revision of the last entry walked in this stage.
    after: u64,
    /// Whether a part of this walk was sent: the first part of a full
    /// state says so.
    started: bool,
    /// Whether the trigger times of the endpoints walked are sent: not
    /// in a full state, nor in the catch-ups that complete one (a node
    /// starts from it, and did not see those changes happen).
    times: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Node,
    Services,
    /// The node's zone, for the ports it has no selection of its own for.
    Zone,
    Own,
    Done,
}

impl Walk {
    fn new(from: Option<u64>, upto: u64) -> Self {
        Self {
            from,
            upto,
            stage: Stage::Node,
            after: from.unwrap_or(0),
            started: false,
            times: from.is_some(),
        }
    }

    fn next_stage(&mut self, stage: Stage) {
        self.stage = stage;
        self.after = self.from.unwrap_or(0);
    }
}

/// The layers one walk reads.
#[derive(Clone, Copy)]
struct Layers<'a> {
    node: Option<&'a Entry<NodeInfo>>,
    zone: Option<&'a Layer<NodeEndpoints>>,
    own: Option<&'a Layer<NodeEndpoints>>,
}

/// Where the views stood when a sync began ([`Views::begin`]).
#[derive(Debug)]
pub struct Begun {
    from: u64,
    /// Per zone, the last change a node of it reads in the layers all its
    /// nodes share.
    floors: HashMap<String, u64>,
}

/// What the nodes that a sync left alone lack after it: one update per
/// zone, the same for each of its nodes, so that the API side makes it
/// (and encodes it) once for all of them. `T` is the update, or its
/// encoding.
#[derive(Debug)]
pub struct CatchUp<T> {
    /// Which sync it was ([`Views::syncs`]).
    pub sync: u64,
    /// The views' revision before the sync and after it.
    pub from: u64,
    pub upto: u64,
    pub zones: HashMap<String, ZoneCatchUp<T>>,
    /// The nodes that the sync (or a change of their Node since the
    /// last sync) changed something of their own for: they walk their
    /// own view.
    pub touched: HashSet<String>,
}

#[derive(Debug)]
pub struct ZoneCatchUp<T> {
    /// A node holding an older revision lacks more than this sync's
    /// changes, or is behind a forgotten deletion.
    pub floor: u64,
    /// `None`: the sync changed nothing the zone's nodes read.
    pub update: Option<T>,
}

impl<T> CatchUp<T> {
    /// What `node`, in `zone` and holding `held`, lacks after the sync,
    /// if that is its zone's shared update: `Some(None)` when it lacks
    /// nothing. `None`: it must walk its own view ([`Views::next`]).
    ///
    /// `seen` is the last sync the node took the catch-up of, or walked
    /// after: one it missed may have touched it.
    pub fn for_node(
        &self,
        node: &str,
        zone: &str,
        held: u64,
        seen: u64,
    ) -> Option<Option<&T>> {
        if held >= self.upto {
            return Some(None);
        }
        let shared = self.zones.get(zone)?;
        let fits = shared.floor <= held && held <= self.from;
        let alone = seen + 1 == self.sync && !self.touched.contains(node);
        (fits && alone).then_some(shared.update.as_ref())
    }

    /// The same, each zone's update made into something else (its bytes
    /// on the wire).
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> CatchUp<U> {
        CatchUp {
            sync: self.sync,
            from: self.from,
            upto: self.upto,
            zones: (self.zones.into_iter())
                .map(|(zone, shared)| {
                    let update = shared.update.map(&mut f);
                    (
                        zone,
                        ZoneCatchUp {
                            floor: shared.floor,
                            update,
                        },
                    )
                })
                .collect(),
            touched: self.touched,
        }
    }
}

impl Default for Views {
    fn default() -> Self {
        Self::with_tombstones(TOMBSTONES)
    }
}

/// The nodes a port's endpoints are on or name in their hints.
fn named_by(endpoints: &[Arc<EndpointInfo>]) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for ep in endpoints {
        named.extend(ep.node_name.as_deref().map(str::to_owned));
        named.extend(ep.node_hints.iter().cloned());
    }
    named
}

impl Views {
    pub fn with_tombstones(max_tombstones: usize) -> Self {
        Self {
            revision: 0,
            max_tombstones,
            names: HashSet::new(),
            services: Layer::new(max_tombstones),
            zones: HashMap::new(),
            nodes: HashMap::new(),
            owners: HashMap::new(),
            named: HashMap::new(),
            by_node: HashMap::new(),
            triggers: HashMap::new(),
            touched: HashSet::new(),
            syncs: 0,
        }
    }

    fn name(&mut self, name: &ServicePortName) -> Arc<ServicePortName> {
        if let Some(shared) = self.names.get(name) {
            return shared.clone();
        }
        let shared = Arc::new(name.clone());
        self.names.insert(shared.clone());
        shared
    }

    /// How many nodes have a view.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The revision of the latest change of any view.
    pub fn current(&self) -> u64 {
        self.revision
    }

    /// Whether `node` has a view.
    pub fn has(&self, node: &str) -> bool {
        self.nodes.contains_key(node)
    }

    /// Brings the `changed` service ports up to date in every layer they
    /// touch: the services, each zone, and the overlays of the nodes that
    /// have or had a selection of their own. `trigger_times` are the
    /// trackers' for the slice changes behind them.
    pub fn update<'a>(
        &mut self,
        changed: impl IntoIterator<Item = &'a ServicePortName>,
        services: &ServicePortMap,
        endpoints: &EndpointsMap,
        trigger_times: &HashMap<NamespacedName, Vec<SystemTime>>,
    ) {
        for name in changed {
            let name = self.name(name);
            let svc = services.get(&*name);
            let eps = endpoints.get(&*name).map(Vec::as_slice).unwrap_or(&[]);
            self.services.put(&name, svc.cloned(), &mut self.revision);
            for (zone, layer) in &mut self.zones {
                let selected = svc.map(|svc| {
                    Arc::new(node_endpoints(svc, eps, NO_NODE, zone))
                });
                layer.put(&name, selected, &mut self.revision);
            }
            let named = match svc {
                Some(_) => named_by(eps),
                None => BTreeSet::new(),
            };
            self.rename(&name, &named);
            let owners: BTreeSet<String> = named
                .into_iter()
                .filter(|node| self.nodes.contains_key(node))
                .collect();
            let before = self.owners.remove(&*name).unwrap_or_default();
            // Even an owner whose selection stays must not take its
            // zone's new one.
            self.touched.extend(before.union(&owners).cloned());
            for node in before.difference(&owners) {
                if let Some(state) = self.nodes.get_mut(node) {
                    state.own.put(&name, None, &mut self.revision);
                }
            }
            if let Some(svc) = svc {
                for node in &owners {
                    if let Some(state) = self.nodes.get_mut(node) {
                        let selected =
                            node_endpoints(svc, eps, node, &state.zone);
                        state.own.put(
                            &name,
                            Some(Arc::new(selected)),
                            &mut self.revision,
                        );
                    }
                }
            }
            if !owners.is_empty() {
                self.owners.insert(name.clone(), owners);
            }
            // Times from an earlier update are not this one's: a node
            // behind both gets the port once, with the latest times.
            match trigger_times.get(&name.service) {
                Some(times) if svc.is_some() && !times.is_empty() => {
                    let trigger = Trigger {
                        revision: self.revision,
                        times: times.clone(),
                    };
                    self.triggers.insert(name.clone(), trigger);
                }
                _ => {
                    self.triggers.remove(&*name);
                }
            }
            if svc.is_none() {
                // Layers may still hold it (tombstones), which keeps it
                // alive; a port that comes back gets a new one.
                self.names.remove(&*name);
            }
        }
    }

    /// Starts `node`'s view if it has none (the one time a node costs
    /// the cluster's size), then takes its Node object (`None`: not
    /// known, or deleted). A node that moves zones starts over.
    pub fn set_node(
        &mut self,
        node: &str,
        info: Option<NodeInfo>,
        services: &ServicePortMap,
        endpoints: &EndpointsMap,
    ) {
        let zone = info.as_ref().map(|n| n.zone.clone()).unwrap_or_default();
        self.zone(&zone, services, endpoints);
        let info = info.map(Arc::new);
        let known = self.nodes.contains_key(node);
        // A new view is walked whole by the watch it is made for, which
        // then holds every change so far; a node that held a view before
        // lacks its Node's change, which no zone's catch-up carries.
        if known {
            self.touched.insert(node.to_owned());
        }
        let state =
            self.nodes
                .entry(node.to_owned())
                .or_insert_with(|| NodeState {
                    node: None,
                    zone: zone.clone(),
                    own: Layer::new(self.max_tombstones),
                    horizon: 0,
                });
        if state.node.as_ref().and_then(|e| e.value.as_ref()) != info.as_ref() {
            self.revision += 1;
            state.node = Some(Entry {
                revision: self.revision,
                value: info,
            });
        }
        let moved = known && state.zone != zone;
        if known && !moved {
            return;
        }
        state.zone = zone.clone();
        // Its own selections, made (again) for its zone: every port whose
        // endpoints are on it or name it. Nobody else's changes.
        let own: Vec<Arc<ServicePortName>> = self
            .by_node
            .get(node)
            .map(|ports| ports.iter().cloned().collect())
            .unwrap_or_default();
        for name in own {
            let Some(svc) = services.get(&*name) else {
                continue;
            };
            let eps = endpoints.get(&*name).map(Vec::as_slice).unwrap_or(&[]);
            let selected = node_endpoints(svc, eps, node, &zone);
            if let Some(state) = self.nodes.get_mut(node) {
                state.own.put(
                    &name,
                    Some(Arc::new(selected)),
                    &mut self.revision,
                );
            }
            self.owners.entry(name).or_default().insert(node.to_owned());
        }
        if moved {
            if let Some(state) = self.nodes.get_mut(node) {
                state.horizon = self.revision;
            }
        }
    }

    /// Keeps the nodes `name` names, and the ports each node is named by,
    /// as `named`.
    fn rename(
        &mut self,
        name: &Arc<ServicePortName>,
        named: &BTreeSet<String>,
    ) {
        let before = match named.is_empty() {
            true => self.named.remove(&**name),
            false => self.named.insert(name.clone(), named.clone()),
        }
        .unwrap_or_default();
        for node in before.difference(named) {
            if let Some(ports) = self.by_node.get_mut(node) {
                ports.remove(&**name);
                if ports.is_empty() {
                    self.by_node.remove(node);
                }
            }
        }
        for node in named.difference(&before) {
            let ports = self.by_node.entry(node.clone()).or_default();
            ports.insert(name.clone());
        }
    }

    /// The shared layer of `zone`, made on its first node.
    fn zone(
        &mut self,
        zone: &str,
        services: &ServicePortMap,
        endpoints: &EndpointsMap,
    ) {
        if self.zones.contains_key(zone) {
            return;
        }
        let mut layer = Layer::new(self.max_tombstones);
        for (name, svc) in services {
            let name = self.name(name);
            let eps = endpoints.get(&*name).map(Vec::as_slice).unwrap_or(&[]);
            let selected = node_endpoints(svc, eps, NO_NODE, zone);
            layer.put(&name, Some(Arc::new(selected)), &mut self.revision);
        }
        self.zones.insert(zone.to_owned(), layer);
    }

    /// The zone `node`'s view is made for.
    pub fn zone_of(&self, node: &str) -> Option<&str> {
        self.nodes.get(node).map(|s| s.zone.as_str())
    }

    /// How many syncs there were: a node that walked its view now has
    /// what each of them changed.
    pub fn syncs(&self) -> u64 {
        self.syncs
    }

    /// Notes where the views stand before a sync, for [`Views::catch_up`].
    pub fn begin(&self) -> Begun {
        let shared = self.services.last();
        Begun {
            from: self.revision,
            floors: (self.zones.iter())
                .map(|(zone, layer)| (zone.clone(), shared.max(layer.last())))
                .collect(),
        }
    }

    /// What each zone's nodes lack after the sync that began at `begun`,
    /// when it fits one part of `max` changes; a zone whose update
    /// does not, or that is new since, has its nodes walk.
    ///
    /// A node holding a revision between its zone's last change before
    /// the sync and the sync's start lacks, in the layers it shares with
    /// its zone, exactly what changed in the sync. If it took the last
    /// sync's catch-up or walked since, and this sync did not touch it,
    /// its own layer and Node did not change since it last heard of
    /// them: it lacks that and nothing else, as [`Views::next`] would
    /// walk it.
    pub fn catch_up(&mut self, begun: Begun, max: usize) -> CatchUp<Update> {
        let touched = std::mem::take(&mut self.touched);
        self.syncs += 1;
        let mut zones = HashMap::new();
        for (zone, layer) in &self.zones {
            let Some(floor) = begun.floors.get(zone) else {
                continue;
            };
            let floor =
                (*floor).max(self.services.horizon()).max(layer.horizon());
            let mut walk = Walk::new(Some(begun.from), self.revision);
            let mut update = Update {
                full: false,
                changes: Vec::new(),
                revision: self.revision,
                synced: true,
                trigger_times: TriggerTimes::new(),
            };
            let layers = Layers {
                node: None,
                zone: Some(layer),
                own: None,
            };
            // A walk that fills a part goes on in another, as a node's
            // own walk would.
            self.walk_layers(layers, &mut walk, max, &mut update);
            if walk.stage != Stage::Done || update.changes.len() >= max {
                continue;
            }
            let update = (!update.changes.is_empty()).then_some(update);
            zones.insert(zone.clone(), ZoneCatchUp { floor, update });
        }
        CatchUp {
            sync: self.syncs,
            from: begun.from,
            upto: self.revision,
            zones,
            touched,
        }
    }

    /// The revision of the latest change `node` is concerned by.
    pub fn revision(&self, node: &str) -> u64 {
        let Some(state) = self.nodes.get(node) else {
            return 0;
        };
        let zone = self.zones.get(&state.zone).map_or(0, Layer::last);
        let info = state.node.as_ref().map_or(0, |e| e.revision);
        self.services
            .last()
            .max(zone)
            .max(state.own.last())
            .max(info)
            .max(state.horizon)
    }

    /// What `node`, holding `revision` (none: starting), lacks, as one
    /// update: the walk [`Views::next`] makes, whole, which the tests
    /// read more easily.
    #[cfg(test)]
    pub fn since(&self, node: &str, revision: Option<u64>) -> Update {
        let position = Position::Held(revision);
        match self.next(node, position, true, usize::MAX) {
            Some((update, _)) => update,
            None => self.synced(revision.unwrap_or(self.revision)),
        }
    }

    /// The next part of what `node`, standing at `position`, lacks: at
    /// most about `max` changes, and where the node stands once it has
    /// them; `None` when it lacks nothing. With `always`, a node that
    /// lacks nothing is still told that what it holds is consistent.
    ///
    /// A node that cannot resume from its revision walks a full state;
    /// the parts of one walk are synced in the last only, and a walk
    /// that the view moved past (a zone move, a deletion forgotten while
    /// walking) starts over as a full state.
    pub fn next(
        &self,
        node: &str,
        position: Position,
        always: bool,
        max: usize,
    ) -> Option<(Update, Position)> {
        let mut walk = match position {
            Position::Held(held) => {
                // A node ahead of the view (not this process's revision)
                // is not up to date: it starts over.
                let fresh =
                    |r: &u64| *r <= self.revision && self.revision(node) <= *r;
                if let Some(r) = held.filter(fresh) {
                    let update = always.then(|| self.synced(r))?;
                    return Some((update, position));
                }
                let from = held.filter(|r| self.resumable(node, *r));
                Walk::new(from, self.revision)
            }
            Position::Walking(walk) => walk,
        };
        let mut update = Update {
            full: walk.from.is_none() && !walk.started,
            changes: Vec::new(),
            revision: walk.upto,
            synced: false,
            trigger_times: TriggerTimes::new(),
        };
        walk.started = true;
        // Parts of at most `max`; a walk that ends with room left goes on
        // with the next one, so that a node that keeps up hears of a
        // change in one message.
        loop {
            self.walk(node, &mut walk, max, &mut update);
            if walk.stage != Stage::Done || update.changes.len() >= max {
                return Some((update, Position::Walking(walk)));
            }
            // Walked past a deletion since forgotten, or a zone move?
            let whole = walk.from.is_none_or(|r| self.resumable(node, r));
            if whole && self.revision(node) <= walk.upto {
                update.synced = true;
                update.revision = walk.upto;
                return Some((update, Position::Held(Some(walk.upto))));
            }
            if whole && self.resumable(node, walk.upto) {
                // What changed while it walked.
                let times = walk.times;
                walk = Walk::new(Some(walk.upto), self.revision);
                walk.times = times;
                walk.started = true;
                continue;
            }
            // It starts over, in a part that says the state is full.
            let over = Walk::new(None, self.revision);
            if !update.changes.is_empty() {
                return Some((update, Position::Walking(over)));
            }
            walk = over;
            walk.started = true;
            update.full = true;
            update.trigger_times.clear();
        }
    }

    /// An empty update that says the node is consistent at `revision`.
    fn synced(&self, revision: u64) -> Update {
        Update {
            full: false,
            changes: Vec::new(),
            revision,
            synced: true,
            trigger_times: TriggerTimes::new(),
        }
    }

    /// Whether `node` can resume from revision `r`: nothing it may have
    /// missed since is forgotten, and it did not move zones since.
    fn resumable(&self, node: &str, r: u64) -> bool {
        let Some(state) = self.nodes.get(node) else {
            return false;
        };
        let zone = self.zones.get(&state.zone).map_or(0, Layer::horizon);
        let horizon = self
            .services
            .horizon()
            .max(zone)
            .max(state.own.horizon())
            .max(state.horizon);
        r >= horizon && r <= self.revision
    }

    /// Walks on from `walk` into `update` until it holds `max` changes or
    /// the walk is done.
    fn walk(
        &self,
        node: &str,
        walk: &mut Walk,
        max: usize,
        update: &mut Update,
    ) {
        let state = self.nodes.get(node);
        let layers = Layers {
            node: state.and_then(|s| s.node.as_ref()),
            zone: state.and_then(|s| self.zones.get(&s.zone)),
            own: state.map(|s| &s.own),
        };
        self.walk_layers(layers, walk, max, update);
    }

    /// [`Views::walk`] through the layers given: a node's, or a zone's
    /// alone for what its nodes share.
    fn walk_layers(
        &self,
        layers: Layers<'_>,
        walk: &mut Walk,
        max: usize,
        update: &mut Update,
    ) {
        let Layers { node, zone, own } = layers;
        let deletions = walk.from.is_some();
        // What the node programs for a port: its own selection, else its
        // zone's.
        let endpoints = |name: &Arc<ServicePortName>| match own
            .and_then(|o| o.get(name))
            .or_else(|| zone?.get(name))
        {
            Some(eps) => Change::Endpoints(name.clone(), eps.clone()),
            None => Change::Delete(Key::Endpoints(name.clone())),
        };
        while update.changes.len() < max.max(1) && walk.stage != Stage::Done {
            let room = max.max(1) - update.changes.len();
            let (after, upto) = (walk.after, walk.upto);
            match walk.stage {
                Stage::Node => {
                    let change = match node {
                        Some(e) if e.revision <= after => None,
                        Some(Entry {
                            value: Some(info), ..
                        }) => Some(Change::Node(info.clone())),
                        Some(_) if deletions => Some(Change::Delete(Key::Node)),
                        _ => None,
                    };
                    update.changes.extend(change);
                    walk.next_stage(Stage::Services);
                }
                Stage::Services => {
                    let mut walked = 0;
                    for (revision, name, svc) in
                        self.services.between(after, upto, deletions).take(room)
                    {
                        update.changes.push(match svc {
                            Some(svc) => {
                                Change::Service(name.clone(), svc.clone())
                            }
                            None => Change::Delete(Key::Service(name.clone())),
                        });
                        walk.after = revision;
                        walked += 1;
                    }
                    if walked < room {
                        walk.next_stage(Stage::Zone);
                    }
                }
                Stage::Zone | Stage::Own => {
                    let layer =
                        if walk.stage == Stage::Zone { zone } else { own };
                    let mut walked = 0;
                    for (revision, name, _) in layer
                        .into_iter()
                        .flat_map(|l| l.between(after, upto, deletions))
                        .take(room)
                    {
                        walk.after = revision;
                        walked += 1;
                        // A port with a selection of its own is the own
                        // stage's, which walks every such entry; one it
                        // handed back since is the zone stage's, which
                        // walked it if the zone's entry changed too.
                        let skip = match walk.stage {
                            Stage::Zone => own.is_some_and(|o| o.holds(name)),
                            _ => {
                                let zoned =
                                    zone.and_then(|z| z.revision_of(name));
                                !own.is_some_and(|o| o.holds(name))
                                    && zoned.is_some_and(|r| {
                                        r > walk.from.unwrap_or(0) && r <= upto
                                    })
                            }
                        };
                        if skip {
                            continue;
                        }
                        update.changes.push(endpoints(name));
                        if let Some(from) = walk.from.filter(|_| walk.times) {
                            self.add_triggers(
                                name,
                                from,
                                &mut update.trigger_times,
                            );
                        }
                    }
                    if walked < room {
                        let next = if walk.stage == Stage::Zone {
                            Stage::Own
                        } else {
                            Stage::Done
                        };
                        walk.next_stage(next);
                    }
                }
                Stage::Done => {}
            }
        }
    }

    /// The trigger times of `name`'s last update, if it came after `r`.
    fn add_triggers(
        &self,
        name: &Arc<ServicePortName>,
        r: u64,
        trigger_times: &mut TriggerTimes,
    ) {
        let Some(trigger) =
            self.triggers.get(&**name).filter(|t| t.revision > r)
        else {
            return;
        };
        // A service's ports share its times: each counts once.
        let times = trigger_times.entry(name.service.clone()).or_default();
        for time in &trigger.times {
            if !times.contains(time) {
                times.push(*time);
            }
        }
    }

    /// Everything `node` programs, as a starting node receives it, built
    /// whole and apart from the walk, which the tests hold to it.
    #[cfg(any(test, feature = "test-support"))]
    pub fn full(&self, node: &str) -> Update {
        let mut changes = std::collections::BTreeMap::<Key, Change>::new();
        if let Some(state) = self.nodes.get(node) {
            if let Some(info) =
                state.node.as_ref().and_then(|e| e.value.clone())
            {
                changes.insert(Key::Node, Change::Node(info));
            }
            if let Some(zone) = self.zones.get(&state.zone) {
                for (name, eps) in zone.live() {
                    let eps = state.own.get(name).unwrap_or(eps);
                    changes.insert(
                        Key::Endpoints(name.clone()),
                        Change::Endpoints(name.clone(), eps.clone()),
                    );
                }
            }
        }
        for (name, svc) in self.services.live() {
            changes.insert(
                Key::Service(name.clone()),
                Change::Service(name.clone(), svc.clone()),
            );
        }
        Update {
            full: true,
            changes: changes.into_values().collect(),
            revision: self.revision,
            synced: true,
            trigger_times: TriggerTimes::new(),
        }
    }
}
