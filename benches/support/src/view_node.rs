//! A node fed by the API side as a proxy is: the node's own client
//! (`source::nodeview::watch`, with its reconnects) and the sync state
//! that takes what it receives. The split's benchmarks time theirs
//! against it.

use std::{path::PathBuf, time::SystemTime};

use futures::Stream;
use kube_ipvs_proxy::{
    nodeview::{
        endpoint::{ApiEndpoint, Credentials},
        Update,
    },
    source::nodeview,
    sync::{NodeSettings, SyncState},
};

/// Node `i`'s (`node-I`) watch of the views served on `socket`, and its
/// state, empty until the first update. Spawns the watch on the runtime
/// it is called in.
pub fn start(
    i: usize,
    socket: PathBuf,
) -> (impl Stream<Item = Update> + Unpin, SyncState) {
    let name = format!("node-{i}");
    let updates = nodeview::watch(
        &tokio::runtime::Handle::current(),
        ApiEndpoint::Unix(socket),
        Credentials::default(),
        name.clone(),
    );
    let state =
        SyncState::new(&name, NodeSettings::default(), None, SystemTime::now())
            .fed_by_view();
    (updates, state)
}
