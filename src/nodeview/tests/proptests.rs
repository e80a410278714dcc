//! Property: a node fed by its view programs what a proxy watching the
//! API server on that node programs, whatever the sequence of Service and
//! EndpointSlice events, whenever the node catches up, and however many
//! deletions the view has forgotten.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::SystemTime,
};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use proptest::prelude::*;

use crate::nodeview::{wire, CatchUp, Position, Received, Update, Views};
use crate::{
    desired::DesiredState,
    model::{EndpointsMap, NodeInfo, ServicePortMap, ServicePortName},
    source::nodeview::merge,
    sync::{node_context, NodeSettings},
    tracker::{
        endpoints::EndpointsChangeTracker,
        proptests::{build_service, build_slice, event, Event, NODE},
        services::ServiceChangeTracker,
    },
};

/// A pair of trackers and the maps they keep, as a proxy converted for
/// `node` has them (`""`: the API side's, for no node).
struct Tracked {
    node: &'static str,
    services: ServiceChangeTracker,
    endpoints: EndpointsChangeTracker,
    service_map: ServicePortMap,
    endpoints_map: EndpointsMap,
}

impl Tracked {
    fn new(node: &'static str) -> Self {
        Self {
            node,
            services: ServiceChangeTracker::new(),
            endpoints: EndpointsChangeTracker::new(SystemTime::now()),
            service_map: ServicePortMap::new(),
            endpoints_map: EndpointsMap::new(),
        }
    }

    fn service(&mut self, old: Option<&Service>, new: Option<&Service>) {
        self.services.update_objects(old, new);
    }

    fn slice(&mut self, slice: &EndpointSlice, deleted: bool) {
        self.endpoints.update_object(self.node, slice, deleted);
    }

    fn checkout(&mut self) -> Vec<ServicePortName> {
        let services = self.services.checkout(&mut self.service_map);
        let endpoints = self.endpoints.checkout(&mut self.endpoints_map);
        services
            .changed_ports
            .into_iter()
            .chain(endpoints.changed_ports)
            .collect()
    }
}

fn node(name: &str, zone: &str) -> NodeInfo {
    NodeInfo {
        name: name.to_owned(),
        zone: zone.to_owned(),
        addresses: vec![
            "198.18.100.1".parse().unwrap(),
            "2001:db8::100:1".parse().unwrap(),
        ],
        eligible: true,
        ..NodeInfo::default()
    }
}

/// Sends `update` over the wire in parts of `part_size` changes; returns
/// the service ports that changed and whether the node did.
fn receive(
    received: &mut Received,
    update: Update,
    part_size: usize,
) -> Result<(BTreeSet<ServicePortName>, bool), TestCaseError> {
    let mut changed = BTreeSet::new();
    let mut node_changed = false;
    for part in update.split(part_size) {
        let part = wire::decode(wire::encode(&part, "test"));
        let part = part.map_err(|e| TestCaseError::fail(e.to_string()))?;
        let applied = received.apply(part);
        changed.extend(applied.changed_ports());
        node_changed |= applied.node_changed;
    }
    Ok((changed, node_changed))
}

fn context(info: &NodeInfo) -> crate::desired::NodeContext {
    node_context(&info.name, Some(info), &NodeSettings::default(), None)
}

/// One node of the property: a proxy on it, and the node fed by the
/// API side's view of it.
struct Fed {
    name: &'static str,
    proxy: Tracked,
    programmed: DesiredState,
    received: Received,
    fed: DesiredState,
    /// Where it stands in its view, and the parts it has of a batch.
    position: Position,
    batch: Option<Update>,
    /// The last sync it walked after.
    seen: u64,
}

impl Fed {
    fn new(name: &'static str, zone: &str) -> Self {
        let ctx = context(&node(name, zone));
        Fed {
            name,
            proxy: Tracked::new(name),
            programmed: DesiredState::new(ctx.clone()),
            received: Received::default(),
            fed: DesiredState::new(ctx),
            position: Position::Held(None),
            batch: None,
            seen: 0,
        }
    }

    /// Takes at most `parts` parts of its view over the wire (0: until
    /// it lacks nothing), merged as a node merges them; a synced batch is
    /// programmed. Returns whether it lacks nothing now.
    fn walk(
        &mut self,
        views: &Views,
        parts: usize,
        part_size: usize,
    ) -> Result<bool, TestCaseError> {
        let mut taken = 0;
        while parts == 0 || taken < parts {
            let Some((part, position)) =
                views.next(self.name, self.position, false, part_size)
            else {
                return Ok(true);
            };
            taken += 1;
            prop_assert!(part.changes.len() <= part_size.max(1));
            self.position = position;
            let part = wire::decode(wire::encode(&part, "test"))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let whole = merge(self.batch.take(), part);
            if !whole.synced {
                self.batch = Some(whole);
                continue;
            }
            let applied = self.received.apply(whole);
            let held = (&self.received.services, &self.received.endpoints);
            if let Some(info) = self.received.node.as_deref() {
                if applied.node_changed {
                    self.fed.set_context(context(info), held.0, held.1);
                }
            }
            let changed: Vec<_> = applied.changed_ports().into_iter().collect();
            self.fed.update(held.0, held.1, &changed);
        }
        Ok(false)
    }
}

/// Where the sync's shared catch-up says it is what `n` lacks, it is
/// what `n`'s own walk would send it.
fn check_catch_up(
    views: &Views,
    catch_up: &CatchUp<Update>,
    n: &Fed,
    part_size: usize,
) -> Result<(), TestCaseError> {
    let (Position::Held(Some(held)), None) = (n.position, &n.batch) else {
        return Ok(());
    };
    let Some(zone) = views.zone_of(n.name) else {
        return Ok(());
    };
    let Some(shared) = catch_up.for_node(n.name, zone, held, n.seen) else {
        return Ok(());
    };
    let own = views.next(n.name, n.position, false, part_size);
    match (shared, own) {
        (None, None) => {}
        (Some(shared), Some((own, position))) => {
            prop_assert_eq!(shared, &own);
            prop_assert_eq!(position, Position::Held(Some(catch_up.upto)));
        }
        (shared, own) => {
            prop_assert!(false, "{} held {held} in {zone}: shared {shared:?}, own walk {own:?}, catch-up from {} upto {} touched {:?}", n.name, catch_up.from, catch_up.upto, catch_up.touched);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Three nodes: node-a and node-b have endpoints in the generated
    /// slices, node-c never does, so its selections are always the ones
    /// its zone shares, as are the others' for the ports they have none
    /// of. node-b starts watching late, and node-a moves to another zone
    /// on the way.
    #[test]
    fn a_node_fed_by_its_view_programs_what_a_proxy_there_does(
        events in prop::collection::vec(event(), 0..60),
        zones in prop::collection::vec(
            prop::sample::select(&["zone-a", "zone-b", ""][..]),
            4,
        ),
        late in 0usize..6,
        moves in 0usize..10,
        // Which checkouts the nodes catch up after, and how many
        // deletions the views keep.
        catch_up in prop::collection::vec(any::<bool>(), 60),
        tombstones in 0usize..4,
        // How many changes go in one message, and how many messages a
        // node takes when it catches up (0: all it lacks), so that views
        // change while a node walks them.
        part_size in 1usize..6,
        parts in prop::collection::vec(0usize..4, 60),
    ) {
        let mut api = Tracked::new("");
        let mut views = Views::with_tombstones(tombstones);
        let mut nodes: Vec<Fed> = [NODE, "node-b", "node-c"]
            .into_iter()
            .zip(&zones)
            .map(|(name, zone)| Fed::new(name, zone))
            .collect();
        let none = (ServicePortMap::new(), EndpointsMap::new());
        for n in [&nodes[0], &nodes[2]] {
            let info = node(n.name, &n.programmed.context().zone);
            views.set_node(n.name, Some(info), &none.0, &none.1);
        }

        let mut services: BTreeMap<usize, Service> = BTreeMap::new();
        let mut slices: BTreeMap<(usize, usize), EndpointSlice> =
            BTreeMap::new();
        let mut checkouts = 0;
        let last = Event::Checkout;
        for event in events.iter().chain([&last]) {
            match event {
                Event::SetService(i, spec) => {
                    let new = build_service(*i, spec);
                    let old = services.insert(*i, new.clone());
                    api.service(old.as_ref(), Some(&new));
                    for n in &mut nodes {
                        n.proxy.service(old.as_ref(), Some(&new));
                    }
                }
                Event::DeleteService(i) => {
                    if let Some(old) = services.remove(i) {
                        api.service(Some(&old), None);
                        for n in &mut nodes {
                            n.proxy.service(Some(&old), None);
                        }
                    }
                }
                Event::SetSlice(i, j, spec) => {
                    let slice = build_slice(*i, *j, spec);
                    api.slice(&slice, false);
                    for n in &mut nodes {
                        n.proxy.slice(&slice, false);
                    }
                    slices.insert((*i, *j), slice);
                }
                Event::DeleteSlice(i, j) => {
                    if let Some(slice) = slices.remove(&(*i, *j)) {
                        api.slice(&slice, true);
                        for n in &mut nodes {
                            n.proxy.slice(&slice, true);
                        }
                    }
                }
                Event::Checkout => {
                    let changed = api.checkout();
                    let (services, slices) = (&api.service_map, &api.endpoints_map);
                    let begun = views.begin();
                    views.update(&changed, services, slices, &Default::default());
                    checkouts += 1;
                    if checkouts == late {
                        let info = node("node-b", zones[1]);
                        views.set_node("node-b", Some(info), services, slices);
                    }
                    if checkouts == moves {
                        let info = node(NODE, zones[3]);
                        let n = &mut nodes[0];
                        let proxy = (&n.proxy.service_map, &n.proxy.endpoints_map);
                        n.programmed.set_context(context(&info), proxy.0, proxy.1);
                        views.set_node(NODE, Some(info), services, slices);
                    }
                    let shared = views.catch_up(begun, part_size);
                    for n in &nodes {
                        check_catch_up(&views, &shared, n, part_size)?;
                    }
                    let is_last = std::ptr::eq(event, &last);
                    let catch_up =
                        is_last || catch_up[checkouts % catch_up.len()];
                    for n in &mut nodes {
                        let proxied = n.proxy.checkout();
                        n.programmed.update(
                            &n.proxy.service_map,
                            &n.proxy.endpoints_map,
                            &proxied,
                        );
                        if !catch_up || !views.has(n.name) {
                            continue;
                        }
                        let parts = if is_last { 0 } else { parts[checkouts % parts.len()] };
                        n.seen = views.syncs();
                        if !n.walk(&views, parts, part_size)? {
                            continue;
                        }
                        let held = n.received.revision.unwrap_or_default();
                        prop_assert!(views.revision(n.name) <= held);
                        prop_assert_eq!(n.programmed.snapshot(), n.fed.snapshot());
                    }
                }
            }
        }
        // What each node pieced together equals a full state sent now,
        // but for the revision: changes that do not concern a node leave
        // it where it is.
        for n in nodes.iter().filter(|n| views.has(n.name)) {
            let mut fresh = Received::default();
            receive(&mut fresh, views.full(n.name), usize::MAX)?;
            fresh.revision = n.received.revision;
            prop_assert_eq!(&n.received, &fresh);
        }
    }
}
