use k8s_openapi::{
    api::{
        core::v1::{Node, Service},
        discovery::v1::EndpointSlice,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::Watched;
use crate::model::{node_info, ServiceRecord, SliceRecord};

/// Metadata as the API server writes it, with what the proxy skips.
fn metadata(name: &str, namespace: Option<&str>) -> Value {
    let mut meta = json!({
        "name": name,
        "uid": "6a1f3c2e-0000-4000-8000-000000000001",
        "resourceVersion": "4711",
        "generation": 3,
        "creationTimestamp": "2026-11-28T10:00:00Z",
        "labels": {"app": name, "topology.kubernetes.io/zone": "zone-a"},
        "annotations": {
            "endpoints.kubernetes.io/last-change-trigger-time": "2026-11-28T10:00:01Z",
            "kube-ipvs-proxy.io/scheduler": "wrr"
        },
        "ownerReferences": [{
            "apiVersion": "v1", "kind": "Service", "name": name,
            "uid": "6a1f3c2e-0000-4000-8000-000000000002",
            "controller": true, "blockOwnerDeletion": true
        }],
        "finalizers": ["example.invalid/keep"],
        "managedFields": [{
            "manager": "kube-controller-manager",
            "operation": "Update",
            "apiVersion": "discovery.k8s.io/v1",
            "time": "2026-11-28T10:00:01Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                         "f:endpoints": {}, "f:ports": {}}
        }]
    });
    if let Some(ns) = namespace {
        meta["namespace"] = json!(ns);
    }
    meta
}

fn service_json() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata("web", Some("shop")),
        "spec": {
            "type": "LoadBalancer",
            "clusterIP": "198.18.0.30",
            "clusterIPs": ["198.18.0.30", "2001:db8:42::30"],
            "ipFamilies": ["IPv4", "IPv6"],
            "ipFamilyPolicy": "RequireDualStack",
            "externalIPs": ["198.18.201.1"],
            "externalTrafficPolicy": "Local",
            "internalTrafficPolicy": "Cluster",
            "healthCheckNodePort": 32000,
            "loadBalancerSourceRanges": ["198.18.0.0/24"],
            "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
            "selector": {"app": "web"},
            "ports": [
                {"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http", "nodePort": 30080},
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353}
            ]
        },
        "status": {"loadBalancer": {"ingress": [{"ip": "198.18.200.2", "ipMode": "VIP"}]}}
    })
}

fn slice_metadata() -> Value {
    let mut meta = metadata("web-abc12", Some("shop"));
    meta["labels"]["kubernetes.io/service-name"] = json!("web");
    meta
}

fn slice_json() -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": slice_metadata(),
        "addressType": "IPv4",
        "endpoints": [
            {
                "addresses": ["198.19.0.1"],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": "node-a",
                "zone": "zone-a",
                "hints": {"forZones": [{"name": "zone-a"}], "forNodes": [{"name": "node-a"}]},
                "targetRef": {"kind": "Pod", "namespace": "shop", "name": "web-1",
                              "uid": "6a1f3c2e-0000-4000-8000-000000000003"}
            },
            {
                "addresses": ["198.19.1.1"],
                "conditions": {"ready": false, "serving": true, "terminating": true},
                "nodeName": "node-b",
                "zone": "zone-b"
            }
        ],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
    })
}

fn node_json() -> Value {
    let mut meta = metadata("node-a", None);
    meta["deletionTimestamp"] = json!("2026-11-28T11:00:00Z");
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "spec": {
            "podCIDR": "198.19.0.0/24",
            "podCIDRs": ["198.19.0.0/24", "2001:db8:1::/64"],
            "taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]
        },
        "status": {
            "addresses": [
                {"type": "Hostname", "address": "node-a"},
                {"type": "InternalIP", "address": "198.18.128.11"},
                {"type": "ExternalIP", "address": "198.18.129.11"}
            ],
            "conditions": [{"type": "Ready", "status": "True",
                            "lastHeartbeatTime": "2026-11-28T10:59:00Z",
                            "lastTransitionTime": "2026-11-28T10:00:00Z",
                            "reason": "KubeletReady"}],
            "capacity": {"cpu": "2", "memory": "4Gi"},
            "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320368}],
            "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b",
                         "kernelVersion": "6.1.0", "osImage": "Debian",
                         "containerRuntimeVersion": "containerd://1.6.20",
                         "kubeletVersion": "v1.37.2", "kubeProxyVersion": "",
                         "operatingSystem": "linux", "architecture": "amd64"}
        }
    })
}

/// What the watches keep of the metadata, and nothing else of it.
fn assert_read_meta(ours: &ObjectMeta, generated: &ObjectMeta) {
    assert_eq!(ours.name, generated.name);
    assert_eq!(ours.namespace, generated.namespace);
    assert_eq!(ours.resource_version, generated.resource_version);
    assert_eq!(ours.labels, generated.labels);
    assert_eq!(ours.annotations, generated.annotations);
    assert_eq!(ours.deletion_timestamp, generated.deletion_timestamp);
    assert!(generated.managed_fields.is_some());
    assert_eq!(ours.managed_fields, None);
    assert_eq!(ours.owner_references, None);
    assert_eq!(ours.uid, None);
}

#[test]
fn a_service_converts_as_the_generated_type_does() {
    let generated: Service = serde_json::from_value(service_json()).unwrap();
    let Watched(ours) =
        serde_json::from_value::<Watched<Service>>(service_json()).unwrap();
    assert_read_meta(&ours.metadata, &generated.metadata);
    assert_eq!(ours.spec, generated.spec);
    assert_eq!(ours.status, generated.status);
    let (ours, generated) = (
        ServiceRecord::convert(&ours),
        ServiceRecord::convert(&generated),
    );
    assert!(!ours.value.ports.is_empty());
    assert_eq!(ours.value, generated.value);
    assert_eq!(ours.problems, generated.problems);
}

#[test]
fn a_slice_converts_as_the_generated_type_does() {
    let generated: EndpointSlice =
        serde_json::from_value(slice_json()).unwrap();
    let Watched(ours) =
        serde_json::from_value::<Watched<EndpointSlice>>(slice_json()).unwrap();
    assert_read_meta(&ours.metadata, &generated.metadata);
    assert_eq!(ours.endpoints, generated.endpoints);
    assert_eq!(ours.ports, generated.ports);
    for node in ["node-a", "node-b"] {
        let (ours, generated) = (
            SliceRecord::convert(&ours, node),
            SliceRecord::convert(&generated, node),
        );
        assert!(ours.value.info.is_some());
        assert!(ours.value.trigger_time.is_some());
        assert_eq!(ours.value, generated.value);
        assert_eq!(ours.problems, generated.problems);
    }
}

#[test]
fn a_node_converts_as_the_generated_type_does() {
    let generated: Node = serde_json::from_value(node_json()).unwrap();
    let Watched(ours) =
        serde_json::from_value::<Watched<Node>>(node_json()).unwrap();
    assert_read_meta(&ours.metadata, &generated.metadata);
    assert_eq!(ours.spec, generated.spec);
    let status = ours.status.as_ref().unwrap();
    assert_eq!(
        status.addresses,
        generated.status.as_ref().unwrap().addresses
    );
    assert_eq!(status.images, None);
    assert_eq!(status.conditions, None);
    let (ours, generated) = (node_info(&ours), node_info(&generated));
    assert_eq!(ours.value.addresses.len(), 2);
    assert!(!ours.value.eligible);
    assert_eq!(ours.value, generated.value);
    assert_eq!(ours.problems, generated.problems);
}

fn service_json_with_a_condition_without_time() -> Value {
    let mut json = service_json();
    json["status"]["conditions"] = json!([{
        "type": "StatusUpdate",
        "status": "True",
        "lastTransitionTime": null,
        "reason": "E2E",
        "message": "Set from e2e test"
    }]);
    json
}

#[test]
fn a_service_condition_without_a_time_decodes() {
    let json = service_json_with_a_condition_without_time();
    // The generated type refuses it, which stopped the whole Service
    // watch (relists included) for as long as the Service had it.
    assert!(serde_json::from_value::<Service>(json.clone()).is_err());
    let Watched(svc) =
        serde_json::from_value::<Watched<Service>>(json).unwrap();
    assert_eq!(svc.metadata.name.as_deref(), Some("web"));
    let ingress = svc.status.unwrap().load_balancer.unwrap().ingress.unwrap();
    assert_eq!(ingress[0].ip.as_deref(), Some("198.18.200.2"));
}

#[test]
fn what_the_proxy_reads_still_fails_to_decode_when_wrong() {
    let mut service = service_json_with_a_condition_without_time();
    service["spec"]["ports"] = json!("not a list");
    assert!(serde_json::from_value::<Watched<Service>>(service).is_err());
    let mut slice = slice_json();
    slice["endpoints"][0]["addresses"] = json!(42);
    assert!(serde_json::from_value::<Watched<EndpointSlice>>(slice).is_err());
    let mut node = node_json();
    node["metadata"]["labels"] = json!(["zone-a"]);
    assert!(serde_json::from_value::<Watched<Node>>(node).is_err());
}

#[test]
fn a_slice_without_endpoints_or_address_type_reads_as_the_generated_type() {
    let mut no_endpoints = slice_json();
    no_endpoints["endpoints"] = Value::Null;
    let mut no_type = slice_json();
    no_type.as_object_mut().unwrap().remove("addressType");
    for json in [no_endpoints, no_type] {
        let generated: EndpointSlice =
            serde_json::from_value(json.clone()).unwrap();
        let Watched(ours) =
            serde_json::from_value::<Watched<EndpointSlice>>(json).unwrap();
        assert_eq!(ours.endpoints, generated.endpoints);
        assert_eq!(
            SliceRecord::convert(&ours, "node-a"),
            SliceRecord::convert(&generated, "node-a")
        );
    }
}
