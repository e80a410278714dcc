//! What the proxy keeps of each API object: its converted form, made once
//! when the object arrives, its problems reported then. The stores and the
//! trackers hold these and never the objects themselves, whose managed
//! fields, annotations and unused fields are most of their size.

use std::{collections::HashMap, sync::Arc, time::SystemTime};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};

use super::{
    convert::{
        endpoint_slice_info, last_change_trigger_time, object_name,
        service_ports, slice_keys, Converted, EndpointSliceInfo,
    },
    NamespacedName, ServicePortInfo, ServicePortName,
};

/// The ports of one service, keyed as in
/// [`ServicePortMap`](super::ServicePortMap), whose values they share.
pub type ServicePorts = HashMap<ServicePortName, Arc<ServicePortInfo>>;

/// A Service as the trackers take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRecord {
    pub name: NamespacedName,
    pub ports: ServicePorts,
}

impl ServiceRecord {
    /// Converts `svc`; its problems come back to be reported (or not, for
    /// an object already reported when it arrived).
    pub fn convert(svc: &Service) -> Converted<Self> {
        let Converted { value, problems } = service_ports(svc);
        Converted {
            value: Self {
                name: object_name(&svc.metadata),
                ports: value
                    .into_iter()
                    .map(|(key, info)| (key, Arc::new(info)))
                    .collect(),
            },
            problems,
        }
    }
}

/// An EndpointSlice as the trackers take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceRecord {
    /// The slice's service and its own name; `None` when it names no
    /// service (so it was never tracked, and its deletion is no change).
    pub keys: Option<(NamespacedName, String)>,
    /// Its ports and endpoints; `None` for a slice kube-proxy does not use:
    /// an address type other than IPv4 and IPv6, or no service name.
    pub info: Option<Arc<EndpointSliceInfo>>,
    /// Its `last-change-trigger-time`, if set and well-formed.
    pub trigger_time: Option<SystemTime>,
}

impl SliceRecord {
    /// Converts `slice` for the proxy on `node_name` (its endpoints are
    /// local); problems come back as with [`ServiceRecord::convert`].
    pub fn convert(slice: &EndpointSlice, node_name: &str) -> Converted<Self> {
        let supported = matches!(slice.address_type.as_str(), "IPv4" | "IPv6");
        if !supported {
            tracing::debug!(
                slice = ?slice.metadata.name,
                address_type = slice.address_type,
                "EndpointSlice address type not supported by kube-proxy"
            );
            return Converted {
                value: Self {
                    keys: None,
                    info: None,
                    trigger_time: None,
                },
                problems: Vec::new(),
            };
        }
        let info = endpoint_slice_info(slice, node_name);
        let trigger = last_change_trigger_time(slice);
        let mut problems = info.problems;
        problems.extend(trigger.problems);
        Converted {
            value: Self {
                keys: slice_keys(slice).ok(),
                info: info.value.ok().map(Arc::new),
                trigger_time: trigger.value,
            },
            problems,
        }
    }
}
