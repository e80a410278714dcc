//! One test per default the module lists, each from a manifest as a
//! person writes it for `kubectl apply`.

use k8s_openapi::{
    api::{core::v1::Service, discovery::v1::EndpointSlice},
    apimachinery::pkg::util::intstr::IntOrString,
};
use serde_json::{json, Value};

use super::*;

/// A ClusterIP Service with `spec` merged over a minimal one.
fn service(spec: Value) -> Service {
    let mut base = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"clusterIP": "198.18.0.10", "ports": [{"port": 80}]},
    });
    if let (Some(base), Some(extra)) =
        (base["spec"].as_object_mut(), spec.as_object())
    {
        for (key, value) in extra {
            base.insert(key.clone(), value.clone());
        }
    }
    serde_json::from_value(base).expect("a Service")
}

fn defaulted(spec: Value) -> Service {
    let mut svc = service(spec);
    super::service(&mut svc).expect("valid");
    svc
}

fn rejected(spec: Value) -> String {
    let mut svc = service(spec);
    super::service(&mut svc).expect_err("rejected")
}

fn spec(svc: &Service) -> &k8s_openapi::api::core::v1::ServiceSpec {
    svc.spec.as_ref().expect("spec")
}

#[test]
fn session_affinity_defaults_to_none() {
    let svc = defaulted(json!({}));
    assert_eq!(spec(&svc).session_affinity.as_deref(), Some("None"));
}

#[test]
fn session_affinity_none_drops_its_config() {
    let svc = defaulted(json!({
        "sessionAffinity": "None",
        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
    }));
    assert_eq!(spec(&svc).session_affinity_config, None);
}

#[test]
fn client_ip_affinity_gets_three_hours() {
    let svc = defaulted(json!({"sessionAffinity": "ClientIP"}));
    let timeout = spec(&svc)
        .session_affinity_config
        .as_ref()
        .and_then(|c| c.client_ip.as_ref())
        .and_then(|c| c.timeout_seconds);
    assert_eq!(timeout, Some(10_800));
    // A timeout that is there stays.
    let svc = defaulted(json!({
        "sessionAffinity": "ClientIP",
        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
    }));
    let timeout = spec(&svc)
        .session_affinity_config
        .as_ref()
        .and_then(|c| c.client_ip.as_ref())
        .and_then(|c| c.timeout_seconds);
    assert_eq!(timeout, Some(60));
}

#[test]
fn type_defaults_to_cluster_ip() {
    let svc = defaulted(json!({}));
    assert_eq!(spec(&svc).type_.as_deref(), Some("ClusterIP"));
}

#[test]
fn port_protocol_defaults_to_tcp() {
    let svc = defaulted(json!({
        "ports": [{"port": 53}, {"port": 53, "protocol": "UDP"}],
    }));
    let protocols: Vec<Option<&str>> = spec(&svc)
        .ports
        .iter()
        .flatten()
        .map(|p| p.protocol.as_deref())
        .collect();
    assert_eq!(protocols, vec![Some("TCP"), Some("UDP")]);
}

#[test]
fn target_port_defaults_to_the_port() {
    let svc = defaulted(json!({
        "ports": [
            {"name": "a", "port": 80},
            {"name": "b", "port": 81, "targetPort": 0},
            {"name": "c", "port": 82, "targetPort": ""},
            {"name": "d", "port": 83, "targetPort": "http"},
            {"name": "e", "port": 84, "targetPort": 8084},
        ],
    }));
    let targets: Vec<Option<IntOrString>> = spec(&svc)
        .ports
        .iter()
        .flatten()
        .map(|p| p.target_port.clone())
        .collect();
    assert_eq!(
        targets,
        vec![
            Some(IntOrString::Int(80)),
            Some(IntOrString::Int(81)),
            Some(IntOrString::Int(82)),
            Some(IntOrString::String("http".into())),
            Some(IntOrString::Int(8084)),
        ]
    );
}

#[test]
fn external_traffic_policy_defaults_to_cluster_where_external() {
    let etp = |spec_json: Value| {
        spec(&defaulted(spec_json)).external_traffic_policy.clone()
    };
    assert_eq!(etp(json!({})), None, "not externally accessible");
    assert_eq!(
        etp(json!({"externalIPs": ["198.18.5.5"]})).as_deref(),
        Some("Cluster")
    );
    assert_eq!(
        etp(json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}))
            .as_deref(),
        Some("Cluster")
    );
    assert_eq!(
        etp(json!({
            "type": "LoadBalancer",
            "externalTrafficPolicy": "Local",
            "healthCheckNodePort": 32000,
            "ports": [{"port": 80, "nodePort": 30080}],
        }))
        .as_deref(),
        Some("Local")
    );
}

#[test]
fn internal_traffic_policy_defaults_to_cluster() {
    let svc = defaulted(json!({}));
    assert_eq!(
        spec(&svc).internal_traffic_policy.as_deref(),
        Some("Cluster")
    );
    let svc = defaulted(json!({"internalTrafficPolicy": "Local"}));
    assert_eq!(spec(&svc).internal_traffic_policy.as_deref(), Some("Local"));
    // Not for ExternalName, which the API leaves alone.
    let svc = defaulted(json!({
        "type": "ExternalName",
        "externalName": "example.invalid",
        "clusterIP": null,
    }));
    assert_eq!(spec(&svc).internal_traffic_policy, None);
}

fn load_balancer(extra: Value) -> Value {
    let mut spec = json!({
        "type": "LoadBalancer",
        "ports": [{"port": 80, "nodePort": 30080}],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object())
    {
        for (key, value) in extra {
            spec.insert(key.clone(), value.clone());
        }
    }
    spec
}

#[test]
fn load_balancers_allocate_node_ports_by_default() {
    let svc = defaulted(load_balancer(json!({})));
    assert_eq!(spec(&svc).allocate_load_balancer_node_ports, Some(true));
    // Without allocation the node ports may be missing.
    let svc = defaulted(load_balancer(json!({
        "allocateLoadBalancerNodePorts": false,
        "ports": [{"port": 80}],
    })));
    assert_eq!(spec(&svc).allocate_load_balancer_node_ports, Some(false));
}

#[test]
fn load_balancer_ingress_ips_are_vip_mode() {
    let mut svc = service(load_balancer(json!({})));
    svc.status = serde_json::from_value(json!({"loadBalancer": {"ingress": [
        {"ip": "198.18.9.9"},
        {"ip": "198.18.9.10", "ipMode": "Proxy"},
        {"hostname": "lb.example.invalid"},
    ]}}))
    .expect("status");
    super::service(&mut svc).expect("valid");
    let modes: Vec<Option<String>> = svc
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|lb| lb.ingress)
        .unwrap_or_default()
        .into_iter()
        .map(|i| i.ip_mode)
        .collect();
    assert_eq!(modes, vec![Some("VIP".into()), Some("Proxy".into()), None]);
}

#[test]
fn cluster_ips_default_to_the_cluster_ip() {
    let svc = defaulted(json!({}));
    assert_eq!(
        spec(&svc).cluster_ips.as_deref(),
        Some(&["198.18.0.10".to_owned()][..])
    );
    let svc = defaulted(json!({
        "clusterIPs": ["198.18.0.10", "2001:db8:42::10"],
        "ipFamilyPolicy": "RequireDualStack",
    }));
    assert_eq!(spec(&svc).cluster_ips.as_ref().map(Vec::len), Some(2));
}

#[test]
fn a_cluster_ip_must_be_written_where_the_api_server_allocates_one() {
    let missing_cluster_ip = rejected(json!({"clusterIP": null}));
    assert!(missing_cluster_ip.starts_with("spec.clusterIP is required"));
    let empty_cluster_ip = rejected(json!({"clusterIP": ""}));
    assert!(empty_cluster_ip.starts_with("spec.clusterIP is required"));
    let mismatch = rejected(json!({"clusterIPs": ["198.18.0.11"]}));
    assert!(mismatch.contains("must be spec.clusterIP"), "{mismatch}");
    // Allocated ports a file leaves out stay out: no node port is
    // programmed for them.
    let svc = defaulted(json!({"type": "NodePort"}));
    let port = spec(&svc).ports.as_ref().and_then(|p| p.first()).cloned();
    assert_eq!(port.and_then(|p| p.node_port), None);
    // Headless and ExternalName Services have nothing to allocate.
    defaulted(json!({"clusterIP": "None"}));
    defaulted(json!({"type": "ExternalName", "clusterIP": null}));
}

fn slice(extra: Value) -> EndpointSlice {
    let mut base = json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "web-1",
            "namespace": "shop",
            "labels": {"kubernetes.io/service-name": "web"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["198.19.0.2"]}],
    });
    if let (Some(base), Some(extra)) = (base.as_object_mut(), extra.as_object())
    {
        for (key, value) in extra {
            base.insert(key.clone(), value.clone());
        }
    }
    serde_json::from_value(base).expect("an EndpointSlice")
}

/// (name, protocol) of each port of a slice with `ports`, defaulted.
fn defaulted_ports(ports: Value) -> Vec<(Option<String>, Option<String>)> {
    let mut s = slice(json!({ "ports": ports }));
    endpoint_slice(&mut s).expect("valid");
    s.ports
        .into_iter()
        .flatten()
        .map(|p| (p.name, p.protocol))
        .collect()
}

#[test]
fn endpoint_port_name_defaults_to_the_unnamed_port() {
    let names: Vec<Option<String>> =
        defaulted_ports(json!([{"port": 8080}, {"name": "m", "port": 9090}]))
            .into_iter()
            .map(|(name, _)| name)
            .collect();
    assert_eq!(names, vec![Some(String::new()), Some("m".into())]);
}

#[test]
fn endpoint_port_protocol_defaults_to_tcp() {
    let protocols: Vec<Option<String>> =
        defaulted_ports(json!([{"port": 53}, {"port": 53, "protocol": "UDP"}]))
            .into_iter()
            .map(|(_, protocol)| protocol)
            .collect();
    assert_eq!(protocols, vec![Some("TCP".into()), Some("UDP".into())]);
}

#[test]
fn address_type_has_no_default() {
    let mut base = serde_json::to_value(slice(json!({}))).expect("json");
    if let Some(map) = base.as_object_mut() {
        map.remove("addressType");
    }
    let mut s: EndpointSlice = serde_json::from_value(base).expect("parses");
    let error = endpoint_slice(&mut s).expect_err("rejected");
    assert!(error.starts_with("addressType is required"), "{error}");
}
