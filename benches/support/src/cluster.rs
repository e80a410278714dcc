//! The cluster the API side's benchmarks serve: Services of one port
//! with ENDPOINTS endpoints each, spread over Nodes in ZONES zones, all in
//! RFC 2544 addresses.

use k8s_openapi::api::{
    core::v1::{Node, Service},
    discovery::v1::EndpointSlice,
};
use kube::runtime::watcher::Event;
use kube_ipvs_proxy::source::SourceEvent;
use serde_json::json;

pub const ENDPOINTS: usize = 10;
pub const ZONES: usize = 3;

pub fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn address(base: u8, n: usize) -> String {
    format!("198.{base}.{}.{}", (n / 256) % 256, n % 256)
}

pub fn node(i: usize) -> Node {
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("node-{i}"),
            "labels": {"topology.kubernetes.io/zone": format!("zone-{}", i % ZONES)}
        },
        "status": {"addresses": [{"type": "InternalIP", "address": address(18, 60000 + i)}]}
    }))
    .expect("a valid Node")
}

pub fn service(i: usize) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": format!("svc-{i}"), "namespace": "bench"},
        "spec": {
            "clusterIP": address(18, i),
            "clusterIPs": [address(18, i)],
            "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
            "type": "ClusterIP"
        }
    }))
    .expect("a valid Service")
}

/// Service `i`'s slice; `version` moves its last endpoint elsewhere.
pub fn slice(i: usize, nodes: usize, version: usize) -> EndpointSlice {
    let endpoints: Vec<serde_json::Value> = (0..ENDPOINTS)
        .map(|j| {
            let n = if j == ENDPOINTS - 1 && version > 0 {
                (1 << 20) + version
            } else {
                i * ENDPOINTS + j
            };
            json!({"addresses": [address(19, n)], "conditions": {"ready": true},
                   "nodeName": format!("node-{}", (i + j) % nodes)})
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("svc-{i}-abcde"),
            "namespace": "bench",
            "labels": {"kubernetes.io/service-name": format!("svc-{i}")}
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}]
    }))
    .expect("a valid EndpointSlice")
}

/// The events of a first listing of the whole cluster.
pub fn listing(services: usize, nodes: usize) -> Vec<SourceEvent> {
    let mut events = vec![SourceEvent::Node(Event::Init)];
    events.extend(
        (0..nodes).map(|i| SourceEvent::Node(Event::InitApply(node(i)))),
    );
    events.push(SourceEvent::Node(Event::InitDone));
    events.push(SourceEvent::Service(Event::Init));
    events.extend(
        (0..services)
            .map(|i| SourceEvent::Service(Event::InitApply(service(i)))),
    );
    events.push(SourceEvent::Service(Event::InitDone));
    events.push(SourceEvent::EndpointSlice(Event::Init));
    events.extend((0..services).map(|i| {
        SourceEvent::EndpointSlice(Event::InitApply(slice(i, nodes, 0)))
    }));
    events.push(SourceEvent::EndpointSlice(Event::InitDone));
    events
}
