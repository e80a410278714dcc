//! The API side's stream as a node reads it: updates the API side made
//! from generated objects, split for the wire, some of them damaged or
//! replaced by arbitrary protobuf, delivered to a node fed by its view.

use std::{sync::Arc, time::SystemTime};

use kube::runtime::watcher::Event;
use nodeview_protocol::{prost::Message, v1};

use super::{
    input::Input,
    objects::{self, Objects, NODE},
};
use crate::{
    apiside::cluster::{Cluster, NO_NODE},
    nodeview::{wire, Change, Position, Received, Update},
    source::{nodeview::merge, store::Stores, SourceEvent},
    sync::{plan, plan_from_view, ChangeOutcome, NodeSettings, SyncState},
};

/// The node's side: what it holds as received, the sync state that
/// programs it, and the parts of an update still arriving.
struct ViewNode {
    settings: NodeSettings,
    received: Received,
    state: SyncState,
    batch: Option<Update>,
    /// The revision of the consistent state held, to resume from.
    revision: Option<u64>,
}

impl ViewNode {
    fn new(settings: NodeSettings) -> Self {
        Self {
            state: SyncState::new(
                NODE,
                settings.clone(),
                None,
                SystemTime::UNIX_EPOCH,
            )
            .fed_by_view(),
            settings,
            received: Received::default(),
            batch: None,
            revision: None,
        }
    }

    /// One message off the stream, as the node's watch takes it.
    fn receive(&mut self, mut message: v1::ViewUpdate) {
        if let Some(version) = message.kubernetes.take() {
            if let Ok(taken) = wire::decode_kubernetes(version.clone()) {
                assert_eq!(wire::encode_kubernetes(&taken), version);
            }
        }
        let (part, _rejected) = wire::decode_skipping(message);
        // Whatever decodes is something the API side could have sent.
        let again = wire::decode(wire::encode(&part, "fuzz"));
        assert_eq!(again.as_ref().ok(), Some(&part), "{again:?}");
        let whole = merge(self.batch.take(), part);
        if !whole.synced {
            self.batch = Some(whole);
            return;
        }
        self.revision = Some(whole.revision);
        let _ = self.received.apply(whole.clone());
        if let ChangeOutcome::Restart(_) = self.state.apply_view(whole) {
            // The node exits and is started again (a podCIDR change under
            // NodeCIDR): its new watch begins with all it held.
            *self = ViewNode {
                received: std::mem::take(&mut self.received),
                revision: self.revision,
                ..ViewNode::new(self.settings.clone())
            };
            let _ = self.state.apply_view(full_state(&self.received));
        }
    }

    /// A new watch: the parts of an unfinished update are dropped.
    fn reconnect(&mut self) {
        self.batch = None;
    }

    /// What the node programs, synced now, against what a node that
    /// started from the state it holds would.
    fn assert_as_fresh(&mut self) -> crate::desired::Plan {
        self.state.sync();
        let held = self.state.desired().snapshot();
        let fresh =
            plan_from_view(full_state(&self.received), NODE, &self.settings);
        assert_eq!(
            held, fresh,
            "the view applied change by change is not a fresh start's"
        );
        held
    }
}

/// Everything `received` holds, as one full update.
fn full_state(received: &Received) -> Update {
    let mut changes: Vec<Change> = Vec::new();
    changes.extend(received.node.clone().map(Change::Node));
    let mut services: Vec<_> = received.services.iter().collect();
    services.sort_by(|a, b| a.0.cmp(b.0));
    changes.extend(services.into_iter().map(|(name, svc)| {
        Change::Service(Arc::new(name.clone()), svc.clone())
    }));
    let mut endpoints: Vec<_> = received.endpoints.iter().collect();
    endpoints.sort_by(|a, b| a.0.cmp(b.0));
    changes.extend(endpoints.into_iter().map(|(name, eps)| {
        Change::Endpoints(Arc::new(name.clone()), eps.clone())
    }));
    Update {
        full: true,
        changes,
        revision: received.revision.unwrap_or_default(),
        synced: true,
        trigger_times: Default::default(),
    }
}

/// Damages one message the way a bad or foreign server might.
fn damage(input: &mut Input<'_>, message: &mut v1::ViewUpdate) {
    let n = message.changes.len();
    match input.below(8) {
        0 => message.full = !message.full,
        1 => message.synced = !message.synced,
        2 => message.revision = input.u32().into(),
        3 if n > 0 => {
            message.changes.remove(input.below(n));
        }
        4 if n > 0 => {
            let copy = message.changes[input.below(n)].clone();
            message.changes.push(copy);
        }
        5 if input.one_in(4) => {
            // A release of any length, empty fields included.
            let field = |input: &mut Input<'_>| "9".repeat(input.below(200));
            message.kubernetes = Some(v1::KubernetesVersion {
                major: field(input),
                minor: field(input),
                git_version: field(input),
            });
        }
        _ => {
            let i = input.below(n);
            if let Some(change) = message.changes.get_mut(i) {
                damage_change(input, change);
            }
        }
    }
}

fn damage_change(input: &mut Input<'_>, change: &mut v1::Change) {
    use v1::change::Change as C;
    let bytes = |input: &mut Input<'_>| match input.below(3) {
        0 => vec![198, 18, 0],
        1 => vec![0; 16],
        _ => input.text(17).into_bytes(),
    };
    match change.change.as_mut() {
        None => change.change = None,
        Some(C::Node(node)) => match input.below(3) {
            0 => node.pod_cidrs.push(input.pick_str(objects::CIDRS)),
            1 => node.addresses.push(bytes(input)),
            _ => node.name = input.text(8),
        },
        Some(C::Service(svc)) => match input.below(5) {
            0 => svc.name = None,
            1 => svc.cluster_ips.push(bytes(input)),
            2 => svc.protocol = i32::from(input.byte()),
            3 => svc.port = input.u32(),
            _ => svc
                .load_balancer_source_ranges
                .push(input.pick_str(objects::CIDRS)),
        },
        Some(C::Endpoints(eps)) => match input.below(5) {
            0 => eps.name = None,
            1 => {
                let selection = eps.ipv4.get_or_insert_with(Default::default);
                selection.cluster.push(input.u32() % 8);
            }
            2 => eps.local.push(input.u32() % 8),
            3 => eps.serving.push(bytes(input)),
            _ => {
                if let Some(ep) = eps.endpoints.first_mut() {
                    ep.ip = bytes(input);
                }
            }
        },
        Some(C::Deleted(key)) => match input.below(2) {
            0 => key.kind = i32::from(input.byte()),
            _ => key.port = None,
        },
    }
}

/// Objects written at the API side, its syncs, updates delivered to the
/// node (split, damaged, replaced by arbitrary protobuf, cut off by a
/// reconnect), the node's syncs. The node must never hold a state that
/// its own fresh start from what it received would not give; with
/// nothing damaged, it must program what a proxy watching the API
/// server itself programs.
pub fn view_updates(data: &[u8]) {
    let mut input = Input::new(data);
    let settings = objects::settings(&mut input);
    let mut cluster = Cluster::new(SystemTime::UNIX_EPOCH);
    let mut stores = Stores::new(NO_NODE);
    let mut objects = Objects::default();
    for event in objects.snapshot().relist() {
        for change in stores.apply(event) {
            cluster.apply(&change);
        }
    }
    let mut node = ViewNode::new(settings.clone());
    // Where the API side's watch of the node stands.
    let mut walk = Position::Held(None);
    let mut damaged = false;
    let mut version = 0;
    for _ in 0..48 {
        if input.is_empty() {
            break;
        }
        version += 1;
        let event = match input.below(12) {
            0..=2 => Some(SourceEvent::Service(Event::Apply(
                objects.put_service(objects::service(&mut input, version)),
            ))),
            3..=4 => Some(SourceEvent::EndpointSlice(Event::Apply(
                objects.put_slice(objects::endpoint_slice(&mut input, version)),
            ))),
            5 => Some(SourceEvent::Node(Event::Apply(
                objects.put_node(objects::node(&mut input, version)),
            ))),
            6 => {
                let _ = cluster.sync(usize::MAX);
                None
            }
            7 | 8 => {
                // The API side sends a few messages of what the node
                // lacks, as its watch walks it; the walk goes on later.
                let size = 1 + input.below(3);
                for _ in 0..1 + input.below(3) {
                    let Some((part, next)) =
                        cluster.next_for(NODE, walk, false, size)
                    else {
                        break;
                    };
                    walk = next;
                    let mut message = wire::encode(&part, "fuzz");
                    if input.one_in(6) {
                        damage(&mut input, &mut message);
                        damaged = true;
                    }
                    node.receive(message);
                }
                None
            }
            9 => {
                let raw = input.text(64).into_bytes();
                if let Ok(message) = v1::ViewUpdate::decode(raw.as_slice()) {
                    damaged = true;
                    node.receive(message);
                }
                None
            }
            10 => {
                node.reconnect();
                if input.one_in(3) {
                    // A node that lost its state starts over.
                    node.revision = None;
                }
                walk = Position::Held(node.revision);
                None
            }
            _ => {
                node.state.sync();
                None
            }
        };
        if let Some(event) = event {
            for change in stores.apply(event) {
                cluster.apply(&change);
            }
        }
    }
    node.assert_as_fresh();
    if damaged {
        return;
    }
    // Undamaged and caught up, the node programs what a proxy watching
    // the API server itself does.
    let _ = cluster.sync(usize::MAX);
    node.reconnect();
    if let Some(update) = cluster.update_for(NODE, node.revision, false) {
        node.receive(wire::encode(&update, "fuzz"));
    }
    let held = node.assert_as_fresh();
    let direct = plan(&objects.snapshot(), NODE, &settings);
    assert_eq!(held, direct, "the split node and a direct proxy differ");
}
