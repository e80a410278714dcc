//! The protocol between kube-ipvs-proxy's API side and its nodes, from
//! `proto/nodeview.proto`: each node watches its own view, a full state
//! then the changes, with revisions to resume from.

pub mod encoded;
pub mod v1;

/// The message trait, for sizes and encoding without a direct dependency.
pub use prost;
