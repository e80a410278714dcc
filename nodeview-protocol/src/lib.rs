//! The protocol between kube-ipvs-proxy's API side and its nodes, from
//! `proto/nodeview.proto`: each node watches its own view, a full state
//! then the changes, with revisions to resume from.

pub mod encoded;

/// Version 1 of the protocol.
pub mod v1 {
    tonic::include_proto!("kubeipvsproxy.nodeview.v1");
}

/// The message trait, for sizes and encoding without a direct dependency.
pub use prost;
