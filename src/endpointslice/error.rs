//! What can go wrong while reconciling: each error names the objects
//! involved, and the offending object is left out while the rest is still
//! reconciled.

/// A problem met while reconciling one Service. `service` and `pod` are
/// `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReconcileError {
    /// The controller skips such a pod (and retries later) so that a pod
    /// referring to a deleted node cannot keep a slice stuck; it publishes
    /// it anyway when the Service asks for not-ready addresses.
    #[error(
        "skipping Pod {pod} for Service {service}: Node {node:?} not found"
    )]
    NodeNotFound {
        service: String,
        pod: String,
        node: String,
    },
    #[error(
        "skipping address {ip:?} of Pod {pod} for Service {service}: not an \
         IP address"
    )]
    InvalidPodIp {
        service: String,
        pod: String,
        ip: String,
    },
    #[error("ignoring an EndpointSlice without a name for Service {service}")]
    UnnamedSlice { service: String },
}

impl ReconcileError {
    /// A short, fixed label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::NodeNotFound { .. } => "node_not_found",
            Self::InvalidPodIp { .. } => "invalid_pod_ip",
            Self::UnnamedSlice { .. } => "unnamed_slice",
        }
    }
}
