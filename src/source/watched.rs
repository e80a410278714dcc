//! The three kinds as the watches decode them: only the fields the proxy
//! reads, into the generated types, so that everything after the source
//! (the stores' conversion, the recorder, the API side) sees the objects
//! it always saw.
//!
//! Decoding is the proxy's largest cost under churn after the sync loop,
//! and most of an object is what no proxy reads: `managedFields` (as large
//! as the rest of a slice, decoded by the generated type into a tree of
//! JSON values), owner references, a Node's images, conditions and
//! capacity. Unknown fields are skipped in the stream, unallocated.
//!
//! What is skipped cannot fail the decode either: the API server stores
//! some fields without enforcing the generated schema (Kubernetes' own e2e
//! suite writes a Service condition with a null lastTransitionTime), and
//! one such object would otherwise fail every list and watch of its kind,
//! cluster-wide, for as long as it exists.

#[cfg(test)]
mod tests;

use std::{borrow::Cow, collections::BTreeMap};

use ::kube::Resource;
use k8s_openapi::{
    api::{
        core::v1::{
            LoadBalancerStatus, Node, NodeAddress, NodeSpec, NodeStatus,
            Service, ServiceSpec, ServiceStatus,
        },
        discovery::v1::{Endpoint, EndpointPort, EndpointSlice},
    },
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
};
use serde::{Deserialize, Deserializer};

/// An object of kind `K` holding only what the proxy reads of it.
#[derive(Clone, Debug)]
pub struct Watched<K>(pub K);

impl<K: Resource<DynamicType = ()>> Resource for Watched<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

/// The metadata the proxy and the watcher read: the key, the
/// resourceVersion the watcher resumes from, the labels (a Node's zone),
/// the annotations (a Service's scheduler, a slice's trigger time) and a
/// Node's deletion.
fn read_meta<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Read {
        name: Option<String>,
        namespace: Option<String>,
        resource_version: Option<String>,
        labels: Option<BTreeMap<String, String>>,
        annotations: Option<BTreeMap<String, String>>,
        deletion_timestamp: Option<Time>,
    }
    let read = Read::deserialize(deserializer)?;
    Ok(ObjectMeta {
        name: read.name,
        namespace: read.namespace,
        resource_version: read.resource_version,
        labels: read.labels,
        annotations: read.annotations,
        deletion_timestamp: read.deletion_timestamp,
        ..ObjectMeta::default()
    })
}

/// Straight from the stream, no intermediate tree: a cold start decodes
/// every object of the cluster.
/// A Service's and a Node's shape, with the parts of `spec` and `status`
/// that kind reads.
#[derive(Deserialize)]
struct Parts<Spec, Status> {
    #[serde(default, deserialize_with = "read_meta")]
    metadata: ObjectMeta,
    spec: Option<Spec>,
    status: Option<Status>,
}

impl<'de> Deserialize<'de> for Watched<Service> {
    fn deserialize<D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Self, D::Error> {
        // Without `conditions`, which no proxy uses.
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct StatusFields {
            load_balancer: Option<LoadBalancerStatus>,
        }
        let Parts {
            metadata,
            spec,
            status,
        } = Parts::<ServiceSpec, StatusFields>::deserialize(deserializer)?;
        Ok(Watched(Service {
            metadata,
            spec,
            status: status.map(|s| ServiceStatus {
                load_balancer: s.load_balancer,
                conditions: None,
            }),
        }))
    }
}

impl<'de> Deserialize<'de> for Watched<EndpointSlice> {
    fn deserialize<D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Fields {
            #[serde(default, deserialize_with = "read_meta")]
            metadata: ObjectMeta,
            // Missing, an address type the proxy skips, as the generated
            // type reads it.
            #[serde(default)]
            address_type: String,
            endpoints: Option<Vec<Endpoint>>,
            ports: Option<Vec<EndpointPort>>,
        }
        let Fields {
            metadata,
            address_type,
            endpoints,
            ports,
        } = Fields::deserialize(deserializer)?;
        Ok(Watched(EndpointSlice {
            metadata,
            address_type,
            endpoints,
            ports,
        }))
    }
}

impl<'de> Deserialize<'de> for Watched<Node> {
    fn deserialize<D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Self, D::Error> {
        // Its addresses only: a Node's status is mostly images, conditions
        // and capacity, and the kubelet rewrites it.
        #[derive(Deserialize)]
        struct StatusFields {
            addresses: Option<Vec<NodeAddress>>,
        }
        let Parts {
            metadata,
            spec,
            status,
        } = Parts::<NodeSpec, StatusFields>::deserialize(deserializer)?;
        Ok(Watched(Node {
            metadata,
            spec,
            status: status.map(|s| NodeStatus {
                addresses: s.addresses,
                ..NodeStatus::default()
            }),
        }))
    }
}
