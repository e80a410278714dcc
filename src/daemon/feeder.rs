//! The feeding task: source events through the stores, the object
//! changes they make sent on to the sync loop.
//!
//! It runs apart from the loop so that decoding and relist diffs never
//! wait for a sync, and a sync never waits for them.

use std::{
    pin::pin,
    time::{Instant, SystemTime},
};

use futures::{Stream, StreamExt};
use tokio::sync::mpsc::UnboundedSender;
use tracing::info;

use crate::{
    nodeview::Update,
    source::{
        store::{RecordChange, Stores},
        SourceEvent,
    },
    telemetry::events::{InternalEvent, Stage, StageTimed},
};

/// What the feeder tells the loop.
#[derive(Debug)]
pub(super) enum Input {
    /// The changes one source event made, and when it arrived.
    Changes {
        changes: Vec<RecordChange>,
        received: Instant,
    },
    /// Services and EndpointSlices have both been listed once: from now
    /// on the picture is whole and may be programmed.
    Listed,
    /// A consistent update of the node's view from the API side; the
    /// first one is the whole picture.
    View { update: Update, received: Instant },
}

/// Feeds until the source ends or the loop is gone; the loop learns of
/// the end from the closed channel.
pub(super) async fn feed<S>(
    source: S,
    node_name: String,
    started: SystemTime,
    loop_input: UnboundedSender<Input>,
) where
    S: Stream<Item = SourceEvent> + Send,
{
    let mut stores = Stores::new(&node_name);
    let mut listed = false;
    let mut source = pin!(source);
    while let Some(event) = source.next().await {
        let received = Instant::now();
        let changes = stores.apply(event);
        if listed {
            time_api_stage(&changes, started);
        }
        if !changes.is_empty()
            && loop_input
                .send(Input::Changes { changes, received })
                .is_err()
        {
            return;
        }
        // Nothing is programmed before Services and EndpointSlices have
        // both been listed once, or a half-known cluster would be written
        // to the kernel.
        if !listed && stores.ready() {
            listed = true;
            info!("services and endpoint slices synced");
            if loop_input.send(Input::Listed).is_err() {
                return;
            }
        }
    }
}

/// Feeds the updates of the node's view until their source ends or the
/// loop is gone.
pub(super) async fn feed_view<S>(source: S, loop_input: UnboundedSender<Input>)
where
    S: Stream<Item = Update> + Send,
{
    let mut source = pin!(source);
    while let Some(update) = source.next().await {
        let received = Instant::now();
        if loop_input.send(Input::View { update, received }).is_err() {
            return;
        }
    }
}

/// The time from a slice's trigger (the change the controller saw) to
/// its event reaching us: the API server's and the controller's share of
/// the programming latency. Trigger times from before our start are the
/// initial state, not changes.
fn time_api_stage(changes: &[RecordChange], started: SystemTime) {
    let now = SystemTime::now();
    for change in changes {
        let RecordChange::EndpointSlice((_, Some(slice))) = change else {
            continue;
        };
        let Some(trigger) = slice.record.trigger_time else {
            continue;
        };
        if trigger > started {
            StageTimed {
                stage: Stage::Api,
                duration: now.duration_since(trigger).unwrap_or_default(),
            }
            .emit();
        }
    }
}
