//! Change trackers, as kube-proxy's: they accumulate what changed between
//! two syncs and hand exactly that over at checkout, so that a sync's cost
//! follows the change and not the size of the cluster.

pub mod endpoints;
pub mod node;
pub mod services;

#[cfg(test)]
pub(crate) mod proptests;
