//! The API server's protobuf encoding of the three kinds, read into the
//! same generated types, and as little of them, as [`super::watched`]
//! reads from JSON. Pure functions of bytes: the list and watch requests
//! that fetch them are elsewhere.
//!
//! An object, and a list, is the magic `k8s\0` followed by a
//! `runtime.Unknown` whose `raw` holds the object's message; a watch
//! stream is a sequence of frames, each a four-byte big-endian length and
//! a `metav1.WatchEvent` (without the magic), whose object is encoded as
//! above. The messages below declare only the fields the proxy reads, with
//! the tags of k8s.io/api's and k8s.io/apimachinery's `generated.proto`;
//! every other field is skipped unread.

#[cfg(test)]
mod tests;

/// Bytes as the API server encodes them, for the tests of what reads them.
#[cfg(test)]
pub(crate) mod testing {
    use prost::Message as _;

    use super::{wire, MAGIC};

    /// `message` in the envelope of an object or a list.
    pub fn enveloped(message: &impl prost::Message) -> Vec<u8> {
        let unknown = wire::Unknown {
            raw: Some(message.encode_to_vec()),
            content_encoding: None,
        };
        [MAGIC, &unknown.encode_to_vec()].concat()
    }

    fn service_message(name: &str, version: &str) -> wire::Service {
        wire::Service {
            metadata: Some(wire::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                resource_version: Some(version.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A Service `default/name` at `version`.
    pub fn service(name: &str, version: &str) -> Vec<u8> {
        enveloped(&service_message(name, version))
    }

    /// A page of Services `(name, version)`.
    pub fn services(
        items: &[(&str, &str)],
        version: &str,
        continue_token: &str,
    ) -> Vec<u8> {
        enveloped(&wire::ServiceList {
            metadata: Some(wire::ListMeta {
                resource_version: Some(version.into()),
                r#continue: Some(continue_token.into()),
            }),
            items: items
                .iter()
                .map(|(name, version)| service_message(name, version))
                .collect(),
        })
    }

    pub fn status(code: i32, reason: &str, message: &str) -> Vec<u8> {
        enveloped(&wire::Status {
            status: Some("Failure".into()),
            message: Some(message.into()),
            reason: Some(reason.into()),
            code: Some(code),
        })
    }

    /// One framed watch event.
    pub fn event(kind: &str, object: Vec<u8>) -> Vec<u8> {
        let event = wire::WatchEvent {
            r#type: Some(kind.into()),
            object: Some(wire::RawExtension { raw: Some(object) }),
        }
        .encode_to_vec();
        let len = u32::try_from(event.len()).unwrap_or(u32::MAX);
        [&len.to_be_bytes()[..], &event].concat()
    }
}

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        core::v1::{
            ClientIPConfig, LoadBalancerIngress, LoadBalancerStatus, Node,
            NodeAddress, NodeSpec, NodeStatus, PortStatus, Service,
            ServicePort, ServiceSpec, ServiceStatus, SessionAffinityConfig,
            Taint,
        },
        discovery::v1::{
            Endpoint, EndpointConditions, EndpointHints, EndpointPort,
            EndpointSlice, ForNode, ForZone,
        },
    },
    apimachinery::pkg::{
        apis::meta::v1::{ObjectMeta, Time},
        util::intstr::IntOrString,
    },
    jiff::Timestamp,
};
use kube::Resource;
use prost::Message;

/// What starts every object and list the API server encodes.
pub const MAGIC: &[u8] = b"k8s\0";

/// The media type of the encoding, as `Accept` and `Content-Type` name it.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// No frame of a watch is larger: the API server refuses objects above
/// 1.5 MiB (etcd's request limit), and a length beyond this one is a
/// stream out of step, which must not become an allocation.
pub const MAX_FRAME: usize = 64 << 20;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtobufError {
    #[error("not a protobuf-encoded object: it does not start with k8s\\0")]
    NoMagic,
    #[error("malformed {what}: {reason}")]
    Malformed { what: &'static str, reason: String },
    #[error("a watch frame of {0} bytes, more than any object")]
    FrameTooLarge(usize),
}

fn malformed(
    what: &'static str,
) -> impl FnOnce(prost::DecodeError) -> ProtobufError {
    move |err| ProtobufError::Malformed {
        what,
        reason: err.to_string(),
    }
}

/// The messages, declared as far as the proxy reads them.
mod wire {
    use std::collections::BTreeMap;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Unknown {
        #[prost(bytes = "vec", optional, tag = "2")]
        pub raw: Option<Vec<u8>>,
        #[prost(string, optional, tag = "3")]
        pub content_encoding: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct WatchEvent {
        #[prost(string, optional, tag = "1")]
        pub r#type: Option<String>,
        #[prost(message, optional, tag = "2")]
        pub object: Option<RawExtension>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RawExtension {
        #[prost(bytes = "vec", optional, tag = "1")]
        pub raw: Option<Vec<u8>>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Status {
        #[prost(string, optional, tag = "2")]
        pub status: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub message: Option<String>,
        #[prost(string, optional, tag = "4")]
        pub reason: Option<String>,
        #[prost(int32, optional, tag = "6")]
        pub code: Option<i32>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListMeta {
        #[prost(string, optional, tag = "2")]
        pub resource_version: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub r#continue: Option<String>,
    }

    /// `ServiceList` and the others: the same two fields.
    macro_rules! list {
        ($name:ident, $item:ty) => {
            #[derive(Clone, PartialEq, prost::Message)]
            pub struct $name {
                #[prost(message, optional, tag = "1")]
                pub metadata: Option<ListMeta>,
                #[prost(message, repeated, tag = "2")]
                pub items: Vec<$item>,
            }

            impl super::ListMessage for $name {
                type Item = $item;

                fn into_parts(self) -> (Option<ListMeta>, Vec<$item>) {
                    (self.metadata, self.items)
                }
            }
        };
    }
    list!(ServiceList, Service);
    list!(EndpointSliceList, EndpointSlice);
    list!(NodeList, Node);

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ObjectMeta {
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub namespace: Option<String>,
        #[prost(string, optional, tag = "6")]
        pub resource_version: Option<String>,
        #[prost(message, optional, tag = "9")]
        pub deletion_timestamp: Option<Time>,
        #[prost(btree_map = "string, string", tag = "11")]
        pub labels: BTreeMap<String, String>,
        #[prost(btree_map = "string, string", tag = "12")]
        pub annotations: BTreeMap<String, String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Time {
        #[prost(int64, optional, tag = "1")]
        pub seconds: Option<i64>,
        #[prost(int32, optional, tag = "2")]
        pub nanos: Option<i32>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Service {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<ObjectMeta>,
        #[prost(message, optional, tag = "2")]
        pub spec: Option<ServiceSpec>,
        #[prost(message, optional, tag = "3")]
        pub status: Option<ServiceStatus>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ServiceSpec {
        #[prost(message, repeated, tag = "1")]
        pub ports: Vec<ServicePort>,
        #[prost(btree_map = "string, string", tag = "2")]
        pub selector: BTreeMap<String, String>,
        #[prost(string, optional, tag = "3")]
        pub cluster_ip: Option<String>,
        #[prost(string, optional, tag = "4")]
        pub r#type: Option<String>,
        #[prost(string, repeated, tag = "5")]
        pub external_ips: Vec<String>,
        #[prost(string, optional, tag = "7")]
        pub session_affinity: Option<String>,
        #[prost(string, optional, tag = "8")]
        pub load_balancer_ip: Option<String>,
        #[prost(string, repeated, tag = "9")]
        pub load_balancer_source_ranges: Vec<String>,
        #[prost(string, optional, tag = "10")]
        pub external_name: Option<String>,
        #[prost(string, optional, tag = "11")]
        pub external_traffic_policy: Option<String>,
        #[prost(int32, optional, tag = "12")]
        pub health_check_node_port: Option<i32>,
        #[prost(bool, optional, tag = "13")]
        pub publish_not_ready_addresses: Option<bool>,
        #[prost(message, optional, tag = "14")]
        pub session_affinity_config: Option<SessionAffinityConfig>,
        #[prost(string, optional, tag = "17")]
        pub ip_family_policy: Option<String>,
        #[prost(string, repeated, tag = "18")]
        pub cluster_ips: Vec<String>,
        #[prost(string, repeated, tag = "19")]
        pub ip_families: Vec<String>,
        #[prost(bool, optional, tag = "20")]
        pub allocate_load_balancer_node_ports: Option<bool>,
        #[prost(string, optional, tag = "21")]
        pub load_balancer_class: Option<String>,
        #[prost(string, optional, tag = "22")]
        pub internal_traffic_policy: Option<String>,
        #[prost(string, optional, tag = "23")]
        pub traffic_distribution: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ServicePort {
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
        #[prost(string, optional, tag = "2")]
        pub protocol: Option<String>,
        #[prost(int32, optional, tag = "3")]
        pub port: Option<i32>,
        #[prost(message, optional, tag = "4")]
        pub target_port: Option<IntOrString>,
        #[prost(int32, optional, tag = "5")]
        pub node_port: Option<i32>,
        #[prost(string, optional, tag = "6")]
        pub app_protocol: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct IntOrString {
        #[prost(int64, optional, tag = "1")]
        pub r#type: Option<i64>,
        #[prost(int32, optional, tag = "2")]
        pub int_val: Option<i32>,
        #[prost(string, optional, tag = "3")]
        pub str_val: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SessionAffinityConfig {
        #[prost(message, optional, tag = "1")]
        pub client_ip: Option<ClientIpConfig>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ClientIpConfig {
        #[prost(int32, optional, tag = "1")]
        pub timeout_seconds: Option<i32>,
    }

    /// Without `conditions`, as from JSON.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ServiceStatus {
        #[prost(message, optional, tag = "1")]
        pub load_balancer: Option<LoadBalancerStatus>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LoadBalancerStatus {
        #[prost(message, repeated, tag = "1")]
        pub ingress: Vec<LoadBalancerIngress>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LoadBalancerIngress {
        #[prost(string, optional, tag = "1")]
        pub ip: Option<String>,
        #[prost(string, optional, tag = "2")]
        pub hostname: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub ip_mode: Option<String>,
        #[prost(message, repeated, tag = "4")]
        pub ports: Vec<PortStatus>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PortStatus {
        #[prost(int32, optional, tag = "1")]
        pub port: Option<i32>,
        #[prost(string, optional, tag = "2")]
        pub protocol: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub error: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct EndpointSlice {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<ObjectMeta>,
        #[prost(message, repeated, tag = "2")]
        pub endpoints: Vec<Endpoint>,
        #[prost(message, repeated, tag = "3")]
        pub ports: Vec<EndpointPort>,
        #[prost(string, optional, tag = "4")]
        pub address_type: Option<String>,
    }

    /// Without `targetRef` and `deprecatedTopology`, which no proxy reads.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Endpoint {
        #[prost(string, repeated, tag = "1")]
        pub addresses: Vec<String>,
        #[prost(message, optional, tag = "2")]
        pub conditions: Option<EndpointConditions>,
        #[prost(string, optional, tag = "3")]
        pub hostname: Option<String>,
        #[prost(string, optional, tag = "6")]
        pub node_name: Option<String>,
        #[prost(string, optional, tag = "7")]
        pub zone: Option<String>,
        #[prost(message, optional, tag = "8")]
        pub hints: Option<EndpointHints>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct EndpointConditions {
        #[prost(bool, optional, tag = "1")]
        pub ready: Option<bool>,
        #[prost(bool, optional, tag = "2")]
        pub serving: Option<bool>,
        #[prost(bool, optional, tag = "3")]
        pub terminating: Option<bool>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct EndpointHints {
        #[prost(message, repeated, tag = "1")]
        pub for_zones: Vec<Named>,
        #[prost(message, repeated, tag = "2")]
        pub for_nodes: Vec<Named>,
    }

    /// `ForZone` and `ForNode`, which hold a name each.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Named {
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct EndpointPort {
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
        #[prost(string, optional, tag = "2")]
        pub protocol: Option<String>,
        #[prost(int32, optional, tag = "3")]
        pub port: Option<i32>,
        #[prost(string, optional, tag = "4")]
        pub app_protocol: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Node {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<ObjectMeta>,
        #[prost(message, optional, tag = "2")]
        pub spec: Option<NodeSpec>,
        #[prost(message, optional, tag = "3")]
        pub status: Option<NodeStatus>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NodeSpec {
        #[prost(string, optional, tag = "1")]
        pub pod_cidr: Option<String>,
        #[prost(message, repeated, tag = "5")]
        pub taints: Vec<Taint>,
        #[prost(string, repeated, tag = "7")]
        pub pod_cidrs: Vec<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Taint {
        #[prost(string, optional, tag = "1")]
        pub key: Option<String>,
        #[prost(string, optional, tag = "2")]
        pub value: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub effect: Option<String>,
    }

    /// Its addresses only, as from JSON.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NodeStatus {
        #[prost(message, repeated, tag = "5")]
        pub addresses: Vec<NodeAddress>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NodeAddress {
        #[prost(string, optional, tag = "1")]
        pub r#type: Option<String>,
        #[prost(string, optional, tag = "2")]
        pub address: Option<String>,
    }
}

/// A list message's metadata and items.
#[doc(hidden)]
pub trait ListMessage: Message + Default {
    type Item;

    fn into_parts(self) -> (Option<wire::ListMeta>, Vec<Self::Item>);
}

/// A kind the proxy reads in protobuf.
pub trait FromProtobuf: Sized {
    #[doc(hidden)]
    type Message: Message + Default;
    #[doc(hidden)]
    type List: ListMessage<Item = Self::Message>;

    #[doc(hidden)]
    fn from_message(message: Self::Message) -> Self;

    /// The kind's name, for errors.
    const KIND: &'static str;
}

/// An empty repeated field is absent in protobuf; the JSON decoder and
/// the generated types hold an absent list as `None`, and so does this.
fn listed<T, U>(items: Vec<T>, f: impl FnMut(T) -> U) -> Option<Vec<U>> {
    (!items.is_empty()).then(|| items.into_iter().map(f).collect())
}

/// Go's encoder writes a field that is not a pointer even when it is
/// empty, where its JSON omits it (`omitempty`): such a field reads as
/// absent when empty, as from JSON. Pointer fields keep an explicit
/// empty value in both encodings, and are read as they come.
fn text(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

fn nonzero(value: Option<i32>) -> Option<i32> {
    value.filter(|v| *v != 0)
}

fn mapped(map: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!map.is_empty()).then_some(map)
}

fn meta(meta: Option<wire::ObjectMeta>) -> ObjectMeta {
    let meta = meta.unwrap_or_default();
    ObjectMeta {
        name: text(meta.name),
        namespace: text(meta.namespace),
        resource_version: text(meta.resource_version),
        labels: mapped(meta.labels),
        annotations: mapped(meta.annotations),
        // Only its presence is read; a time past what a timestamp holds
        // is still a deletion.
        deletion_timestamp: meta.deletion_timestamp.map(|t| {
            Time(
                Timestamp::new(
                    t.seconds.unwrap_or_default(),
                    t.nanos.unwrap_or_default(),
                )
                .unwrap_or(Timestamp::UNIX_EPOCH),
            )
        }),
        ..ObjectMeta::default()
    }
}

fn int_or_string(value: wire::IntOrString) -> IntOrString {
    // Go's intstr: type 1 is a string, anything else the integer.
    if value.r#type == Some(1) {
        IntOrString::String(value.str_val.unwrap_or_default())
    } else {
        IntOrString::Int(value.int_val.unwrap_or_default())
    }
}

impl FromProtobuf for Service {
    type Message = wire::Service;
    type List = wire::ServiceList;
    const KIND: &'static str = "Service";

    fn from_message(svc: wire::Service) -> Self {
        Service {
            metadata: meta(svc.metadata),
            spec: svc.spec.map(|spec| ServiceSpec {
                ports: listed(spec.ports, |port| ServicePort {
                    name: text(port.name),
                    protocol: text(port.protocol),
                    port: port.port.unwrap_or_default(),
                    target_port: port.target_port.map(int_or_string),
                    node_port: nonzero(port.node_port),
                    app_protocol: port.app_protocol,
                }),
                selector: mapped(spec.selector),
                cluster_ip: text(spec.cluster_ip),
                cluster_ips: listed(spec.cluster_ips, |ip| ip),
                type_: text(spec.r#type),
                external_ips: listed(spec.external_ips, |ip| ip),
                session_affinity: text(spec.session_affinity),
                load_balancer_ip: text(spec.load_balancer_ip),
                load_balancer_source_ranges: listed(
                    spec.load_balancer_source_ranges,
                    |range| range,
                ),
                external_name: text(spec.external_name),
                external_traffic_policy: text(spec.external_traffic_policy),
                health_check_node_port: nonzero(spec.health_check_node_port),
                publish_not_ready_addresses: spec
                    .publish_not_ready_addresses
                    .filter(|publish| *publish),
                session_affinity_config: spec.session_affinity_config.map(
                    |config| SessionAffinityConfig {
                        client_ip: config.client_ip.map(|c| ClientIPConfig {
                            timeout_seconds: c.timeout_seconds,
                        }),
                    },
                ),
                ip_families: listed(spec.ip_families, |family| family),
                ip_family_policy: spec.ip_family_policy,
                allocate_load_balancer_node_ports: spec
                    .allocate_load_balancer_node_ports,
                load_balancer_class: spec.load_balancer_class,
                internal_traffic_policy: spec.internal_traffic_policy,
                traffic_distribution: spec.traffic_distribution,
            }),
            status: svc.status.map(|status| ServiceStatus {
                load_balancer: status.load_balancer.map(|lb| {
                    LoadBalancerStatus {
                        ingress: listed(lb.ingress, |ingress| {
                            LoadBalancerIngress {
                                ip: text(ingress.ip),
                                hostname: text(ingress.hostname),
                                ip_mode: ingress.ip_mode,
                                ports: listed(ingress.ports, |port| {
                                    PortStatus {
                                        port: port.port.unwrap_or_default(),
                                        protocol: port
                                            .protocol
                                            .unwrap_or_default(),
                                        error: port.error,
                                    }
                                }),
                            }
                        }),
                    }
                }),
                conditions: None,
            }),
        }
    }
}

impl FromProtobuf for EndpointSlice {
    type Message = wire::EndpointSlice;
    type List = wire::EndpointSliceList;
    const KIND: &'static str = "EndpointSlice";

    fn from_message(slice: wire::EndpointSlice) -> Self {
        EndpointSlice {
            metadata: meta(slice.metadata),
            address_type: slice.address_type.unwrap_or_default(),
            endpoints: listed(slice.endpoints, |ep| Endpoint {
                addresses: ep.addresses,
                conditions: ep.conditions.map(|c| EndpointConditions {
                    ready: c.ready,
                    serving: c.serving,
                    terminating: c.terminating,
                }),
                hostname: ep.hostname,
                node_name: ep.node_name,
                zone: ep.zone,
                hints: ep.hints.map(|hints| EndpointHints {
                    for_zones: listed(hints.for_zones, |zone| ForZone {
                        name: zone.name.unwrap_or_default(),
                    }),
                    for_nodes: listed(hints.for_nodes, |node| ForNode {
                        name: node.name.unwrap_or_default(),
                    }),
                }),
                ..Endpoint::default()
            }),
            ports: listed(slice.ports, |port| EndpointPort {
                name: port.name,
                protocol: port.protocol,
                port: port.port,
                app_protocol: port.app_protocol,
            }),
        }
    }
}

impl FromProtobuf for Node {
    type Message = wire::Node;
    type List = wire::NodeList;
    const KIND: &'static str = "Node";

    fn from_message(node: wire::Node) -> Self {
        Node {
            metadata: meta(node.metadata),
            spec: node.spec.map(|spec| NodeSpec {
                pod_cidr: text(spec.pod_cidr),
                pod_cidrs: listed(spec.pod_cidrs, |cidr| cidr),
                taints: listed(spec.taints, |taint| Taint {
                    key: taint.key.unwrap_or_default(),
                    value: text(taint.value),
                    effect: taint.effect.unwrap_or_default(),
                    time_added: None,
                }),
                ..NodeSpec::default()
            }),
            status: node.status.map(|status| NodeStatus {
                addresses: listed(status.addresses, |address| NodeAddress {
                    type_: address.r#type.unwrap_or_default(),
                    address: address.address.unwrap_or_default(),
                }),
                ..NodeStatus::default()
            }),
        }
    }
}

/// The message inside the envelope every object and list comes in.
fn unwrap_envelope(bytes: &[u8]) -> Result<Vec<u8>, ProtobufError> {
    let body = bytes.strip_prefix(MAGIC).ok_or(ProtobufError::NoMagic)?;
    let unknown =
        wire::Unknown::decode(body).map_err(malformed("runtime.Unknown"))?;
    if let Some(encoding) = unknown.content_encoding.filter(|e| !e.is_empty()) {
        return Err(ProtobufError::Malformed {
            what: "runtime.Unknown",
            reason: format!("content encoding {encoding:?}"),
        });
    }
    Ok(unknown.raw.unwrap_or_default())
}

/// One object, as a GET or a watch event carries it.
pub fn object<K: FromProtobuf>(bytes: &[u8]) -> Result<K, ProtobufError> {
    let raw = unwrap_envelope(bytes)?;
    let message =
        K::Message::decode(raw.as_slice()).map_err(malformed(K::KIND))?;
    Ok(K::from_message(message))
}

/// One page of a list.
#[derive(Debug, PartialEq)]
pub struct Page<K> {
    pub resource_version: Option<String>,
    /// The next page's token; `None` on the last page.
    pub continue_token: Option<String>,
    pub items: Vec<K>,
}

pub fn list<K: FromProtobuf>(bytes: &[u8]) -> Result<Page<K>, ProtobufError> {
    let raw = unwrap_envelope(bytes)?;
    let (metadata, items) = K::List::decode(raw.as_slice())
        .map_err(malformed(K::KIND))?
        .into_parts();
    let metadata = metadata.unwrap_or_default();
    Ok(Page {
        resource_version: metadata.resource_version,
        continue_token: metadata.r#continue.filter(|token| !token.is_empty()),
        items: items.into_iter().map(K::from_message).collect(),
    })
}

/// What the API server reports in place of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: i32,
    pub reason: String,
    pub message: String,
}

pub fn status(bytes: &[u8]) -> Result<Status, ProtobufError> {
    let raw = unwrap_envelope(bytes)?;
    let status =
        wire::Status::decode(raw.as_slice()).map_err(malformed("Status"))?;
    Ok(Status {
        code: status.code.unwrap_or_default(),
        reason: status.reason.unwrap_or_default(),
        message: status.message.unwrap_or_default(),
    })
}

/// One event of a watch stream.
#[derive(Debug, PartialEq)]
pub enum WatchEvent<K> {
    Added(K),
    Modified(K),
    Deleted(K),
    /// The resourceVersion the watch has reached.
    Bookmark(Option<String>),
    Error(Status),
}

/// Decodes one frame's event.
pub fn watch_event<K: FromProtobuf + Resource>(
    frame: &[u8],
) -> Result<WatchEvent<K>, ProtobufError> {
    let event =
        wire::WatchEvent::decode(frame).map_err(malformed("WatchEvent"))?;
    let raw = event.object.and_then(|o| o.raw).unwrap_or_default();
    let kind = event.r#type.unwrap_or_default();
    Ok(match kind.as_str() {
        "ADDED" => WatchEvent::Added(object(&raw)?),
        "MODIFIED" => WatchEvent::Modified(object(&raw)?),
        "DELETED" => WatchEvent::Deleted(object(&raw)?),
        "BOOKMARK" => WatchEvent::Bookmark(
            object::<K>(&raw)?.meta().resource_version.clone(),
        ),
        "ERROR" => WatchEvent::Error(status(&raw)?),
        _ => {
            return Err(ProtobufError::Malformed {
                what: "WatchEvent",
                reason: format!("event type {kind:?}"),
            })
        }
    })
}

/// Splits a watch stream into its frames, however the bytes arrive.
#[derive(Debug, Default)]
pub struct Frames {
    buffer: Vec<u8>,
    /// Where the next frame starts: frames are taken from the front
    /// without moving what follows, which a relist's burst of thousands
    /// would otherwise pay once per frame.
    start: usize,
}

impl Frames {
    /// Takes the next bytes of the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start * 2 >= self.buffer.len() {
            self.buffer.drain(..self.start);
            self.start = 0;
        }
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole frame, if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<&[u8]>, ProtobufError> {
        let rest = &self.buffer[self.start..];
        let Some(header) = rest.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*header) as usize;
        if len > MAX_FRAME {
            return Err(ProtobufError::FrameTooLarge(len));
        }
        if rest.len() < 4 + len {
            return Ok(None);
        }
        let frame = self.start + 4..self.start + 4 + len;
        self.start = frame.end;
        Ok(Some(&self.buffer[frame]))
    }

    /// Bytes of a frame not yet whole.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.buffer.len() - self.start
    }
}
