//! Builders for test objects: a minimal valid object, adjusted by a
//! closure, so each test states only what it is about.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::{
    api::{
        core::v1::{Node, NodeSpec, Service, ServicePort, ServiceSpec},
        discovery::v1::{
            Endpoint, EndpointConditions, EndpointPort, EndpointSlice,
        },
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

use super::{convert::LABEL_SERVICE_NAME, EndpointInfo};

pub fn meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    }
}

/// A ClusterIP service with cluster IP 198.18.0.1 and no ports.
pub fn service(
    namespace: &str,
    name: &str,
    f: impl FnOnce(&mut Service),
) -> Service {
    let mut svc = Service {
        metadata: meta(namespace, name),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            cluster_ip: Some("198.18.0.1".to_owned()),
            cluster_ips: Some(vec!["198.18.0.1".to_owned()]),
            ..ServiceSpec::default()
        }),
        status: None,
    };
    f(&mut svc);
    svc
}

/// The spec of a service built by [`service`].
pub fn spec(svc: &mut Service) -> &mut ServiceSpec {
    svc.spec.get_or_insert_with(ServiceSpec::default)
}

pub fn set_cluster_ips(svc: &mut Service, ips: &[&str]) {
    let spec = spec(svc);
    spec.cluster_ip = ips.first().map(|ip| (*ip).to_owned());
    spec.cluster_ips = Some(ips.iter().map(|ip| (*ip).to_owned()).collect());
}

pub fn add_port(svc: &mut Service, name: &str, port: i32, protocol: &str) {
    spec(svc)
        .ports
        .get_or_insert_with(Vec::new)
        .push(ServicePort {
            name: (!name.is_empty()).then(|| name.to_owned()),
            port,
            protocol: Some(protocol.to_owned()),
            ..ServicePort::default()
        });
}

/// An IPv4 slice of `service`, without endpoints or ports.
pub fn slice(
    namespace: &str,
    name: &str,
    service: &str,
    f: impl FnOnce(&mut EndpointSlice),
) -> EndpointSlice {
    let mut meta = meta(namespace, name);
    meta.labels = Some(BTreeMap::from([(
        LABEL_SERVICE_NAME.to_owned(),
        service.to_owned(),
    )]));
    let mut slice = EndpointSlice {
        metadata: meta,
        address_type: "IPv4".to_owned(),
        endpoints: Vec::new(),
        ports: None,
    };
    f(&mut slice);
    slice
}

pub fn add_slice_port(
    slice: &mut EndpointSlice,
    name: &str,
    port: i32,
    protocol: &str,
) {
    slice.ports.get_or_insert_with(Vec::new).push(EndpointPort {
        name: Some(name.to_owned()),
        port: Some(port),
        protocol: Some(protocol.to_owned()),
        app_protocol: None,
    });
}

/// An endpoint with conditions left nil (ready, serving, not
/// terminating).
pub fn endpoint(address: &str, f: impl FnOnce(&mut Endpoint)) -> Endpoint {
    let mut endpoint = Endpoint {
        addresses: vec![address.to_owned()],
        ..Endpoint::default()
    };
    f(&mut endpoint);
    endpoint
}

pub fn conditions(
    ready: Option<bool>,
    serving: Option<bool>,
    terminating: Option<bool>,
) -> Option<EndpointConditions> {
    Some(EndpointConditions {
        ready,
        serving,
        terminating,
    })
}

pub fn node(name: &str, f: impl FnOnce(&mut Node)) -> Node {
    let mut node = Node {
        metadata: meta("", name),
        spec: Some(NodeSpec::default()),
        status: None,
    };
    f(&mut node);
    node
}

/// A ready, serving, remote endpoint.
pub fn ep(
    ip: &str,
    port: u16,
    f: impl FnOnce(&mut EndpointInfo),
) -> Arc<EndpointInfo> {
    let mut info = EndpointInfo {
        ip: ip.parse().unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into()),
        port,
        is_local: false,
        ready: true,
        serving: true,
        terminating: false,
        zone_hints: Default::default(),
        node_hints: Default::default(),
    };
    f(&mut info);
    Arc::new(info)
}
