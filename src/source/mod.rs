//! Sources of API objects. Each yields kube-runtime watcher events per
//! kind; the store turns them, relists included, into (previous, current)
//! pairs for the trackers.
//!
//! Both sources speak the watcher's vocabulary (`Apply`, `Delete`, and a
//! relist as `Init`, `InitApply`…, `InitDone`), so that everything after
//! them is the same whether the objects come from an API server or a file.

pub mod client_metrics;
pub mod defaults;
pub mod file;
pub mod kube;
pub mod listwatch;
pub mod nodeview;
pub mod protobuf;
pub mod recorder;
pub mod snapshot;
pub mod store;
pub mod thread;
pub mod watched;

use ::kube::runtime::watcher::Event;
use k8s_openapi::api::{
    core::v1::{Node, Service},
    discovery::v1::EndpointSlice,
};

/// One watcher event for one of the kinds the proxy reads.
// Unboxed on purpose: each event is moved once from source to store, and
// matching on it should look like matching on the watcher's own events.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum SourceEvent {
    Service(Event<Service>),
    EndpointSlice(Event<EndpointSlice>),
    Node(Event<Node>),
}
