//! The proxy's own view of the API objects: only the fields kube-proxy reads,
//! flattened per service port, so that trackers can compare them cheaply and
//! the desired state can be computed without touching `k8s-openapi` types.

pub mod convert;
mod endpoint;
#[cfg(test)]
pub(crate) mod fixtures;
mod ip_family;
mod node;
mod protocol;
mod records;
mod scheduling;
mod service;

#[cfg(test)]
pub(crate) use convert::{endpoint_slice_info, service_ports};
pub use convert::{
    node_info, Converted, EndpointSliceInfo, InvalidObject, InvalidReason,
    ObjectKind,
};
pub use endpoint::{EndpointInfo, EndpointsMap};
pub use ip_family::IpFamily;
pub use node::NodeInfo;
pub use protocol::Protocol;
pub use records::{ServicePorts, ServiceRecord, SliceRecord};
pub use scheduling::{
    FlagChoice, SchedulerFlags, Scheduling, ServiceScheduling,
    STANDARD_SCHEDULERS,
};
#[cfg(test)]
pub use scheduling::{
    ANNOTATION_SCHEDULER, ANNOTATION_SCHEDULER_FLAGS, SERVICE_ANNOTATIONS,
};
pub use service::{
    NamespacedName, ServicePortInfo, ServicePortMap, ServicePortName,
};
