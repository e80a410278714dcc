//! Change trackers, as kube-proxy's: they accumulate what changed between
//! two syncs and hand exactly that over at checkout, so that a sync's cost
//! follows the change and not the size of the cluster.

pub mod endpoints;
pub mod node;
pub mod services;

use crate::source::store::{record, RecordChange};
use endpoints::EndpointsChangeTracker;
use services::ServiceChangeTracker;

/// Hands a Service's or an EndpointSlice's change to its tracker: whether
/// it left something for the next checkout. A Node's change is not
/// theirs (false): each caller takes it its own way.
pub fn track(
    services: &mut ServiceChangeTracker,
    endpoints: &mut EndpointsChangeTracker,
    change: &RecordChange,
) -> bool {
    match change {
        RecordChange::Service((previous, current)) => {
            let Some(name) =
                record(current).or(record(previous)).map(|r| &r.name)
            else {
                return false;
            };
            services.update(
                name,
                record(previous).map(|r| &r.ports),
                record(current).map(|r| &r.ports),
            )
        }
        RecordChange::EndpointSlice((previous, current)) => {
            let (previous, current) = (record(previous), record(current));
            // A slice that now names another service, or that became one
            // kube-proxy cannot use, no longer holds what it held: a
            // fresh start would not have it.
            let mut changed = false;
            if let Some(slice) = previous.filter(|p| {
                p.info.is_some()
                    && !current
                        .is_some_and(|c| c.keys == p.keys && c.info.is_some())
            }) {
                changed |= endpoints.endpoint_slice_update(slice, true);
            }
            if let Some(slice) = current {
                changed |= endpoints.endpoint_slice_update(slice, false);
            }
            changed
        }
        RecordChange::Node(_) => false,
    }
}

#[cfg(test)]
pub(crate) mod proptests;
