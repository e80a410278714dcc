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

use crate::nodeview::{wire, NodeView, Received, Update};
use crate::{
    desired::DesiredState,
    model::{EndpointsMap, NodeInfo, ServicePortMap, ServicePortName},
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

fn node(zone: &str) -> NodeInfo {
    NodeInfo {
        name: NODE.to_owned(),
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
/// the service ports that changed.
fn receive(
    received: &mut Received,
    update: Update,
    part_size: usize,
) -> Result<BTreeSet<ServicePortName>, TestCaseError> {
    let mut changed = BTreeSet::new();
    for part in update.split(part_size) {
        let part = wire::decode(wire::encode(&part, "test"));
        let part = part.map_err(|e| TestCaseError::fail(e.to_string()))?;
        changed.extend(received.apply(part).changed_ports);
    }
    Ok(changed)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_node_fed_by_its_view_programs_what_a_proxy_there_does(
        events in prop::collection::vec(event(), 0..60),
        zone in prop::sample::select(&["zone-a", "zone-b", ""][..]),
        // Which checkouts the node catches up after, and how many
        // deletions the view keeps.
        catch_up in prop::collection::vec(any::<bool>(), 60),
        tombstones in 0usize..4,
        // How many changes go in one message.
        part_size in 1usize..6,
    ) {
        let node = node(zone);
        let ctx = node_context(NODE, Some(&node), &NodeSettings::default(), None);
        let mut proxy = Tracked::new(NODE);
        let mut api = Tracked::new("");
        let mut programmed = DesiredState::new(ctx.clone());
        let mut fed = DesiredState::new(ctx);
        let mut view = NodeView::with_tombstones(NODE, tombstones);
        view.set_node(Some(node), &api.service_map, &api.endpoints_map);
        let mut received = Received::default();

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
                    proxy.service(old.as_ref(), Some(&new));
                    api.service(old.as_ref(), Some(&new));
                }
                Event::DeleteService(i) => {
                    if let Some(old) = services.remove(i) {
                        proxy.service(Some(&old), None);
                        api.service(Some(&old), None);
                    }
                }
                Event::SetSlice(i, j, spec) => {
                    let slice = build_slice(*i, *j, spec);
                    proxy.slice(&slice, false);
                    api.slice(&slice, false);
                    slices.insert((*i, *j), slice);
                }
                Event::DeleteSlice(i, j) => {
                    if let Some(slice) = slices.remove(&(*i, *j)) {
                        proxy.slice(&slice, true);
                        api.slice(&slice, true);
                    }
                }
                Event::Checkout => {
                    let changed = proxy.checkout();
                    programmed.update(
                        &proxy.service_map,
                        &proxy.endpoints_map,
                        &changed,
                    );
                    let changed = api.checkout();
                    view.update(&changed, &api.service_map, &api.endpoints_map);
                    checkouts += 1;
                    let is_last = std::ptr::eq(event, &last);
                    if !is_last && !catch_up[checkouts % catch_up.len()] {
                        continue;
                    }
                    let update = view.since(received.revision);
                    let changed = receive(&mut received, update, part_size)?;
                    fed.update(&received.services, &received.endpoints, &changed);
                    prop_assert_eq!(received.revision, Some(view.revision()));
                    prop_assert_eq!(programmed.snapshot(), fed.snapshot());
                }
            }
        }
        // What the node pieced together equals a full state sent now.
        let mut fresh = Received::default();
        receive(&mut fresh, view.full(), usize::MAX)?;
        prop_assert_eq!(&received, &fresh);
    }
}
