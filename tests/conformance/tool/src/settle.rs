//! Whether the real EndpointSlice controller has caught up with a step.
//!
//! A step changes Pods and Services; the controller (in the control
//! plane's kube-controller-manager) then rewrites the Services' slices,
//! and a Service's deletion leaves its slices to the garbage collector.
//! The runner must not let a proxy sync the step before that has
//! happened, or the two proxies would see different sequences. So for
//! every Service with a selector, the endpoints the controller would write
//! (its rules, read from kubernetes/endpointslice v0.34: which Pods, their
//! conditions, node and ports) are compared with the controller's slices;
//! and no controller slice may be left for a Service that is gone. Not
//! their zone: the controller copies it from the Node when it writes a
//! Pod's endpoint, but a Node's new zone does not make it write again.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
const CONTROLLER: &str = "endpointslice-controller.k8s.io";

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn items<'a>(
    list: &'a Value,
    kind: &'a str,
) -> impl Iterator<Item = &'a Value> {
    list.get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(move |item| text(item, "/kind") == kind)
}

fn label<'a>(v: &'a Value, name: &str) -> Option<&'a str> {
    v.pointer("/metadata/labels")
        .and_then(|labels| labels.get(name))
        .and_then(Value::as_str)
}

fn is_ipv6(ip: &str) -> bool {
    ip.contains(':')
}

/// One endpoint with what a proxy reads of it, as one comparable line.
fn endpoint_line(
    family: &str,
    ip: &str,
    conditions: [bool; 3],
    node: &str,
    ports: &BTreeSet<String>,
) -> String {
    let [ready, serving, terminating] = conditions;
    let ports: Vec<&str> = ports.iter().map(String::as_str).collect();
    format!(
        "{family} {ip} ready={ready} serving={serving} terminating={terminating} \
         node={node} ports={}",
        ports.join(",")
    )
}

fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| text(c, "/type") == "Ready" && text(c, "/status") == "True")
}

fn pod_ips(pod: &Value) -> Vec<String> {
    let listed: Vec<String> = pod
        .pointer("/status/podIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|ip| text(ip, "/ip").to_owned())
        .filter(|ip| !ip.is_empty())
        .collect();
    if listed.is_empty() {
        Some(text(pod, "/status/podIP").to_owned())
            .filter(|ip| !ip.is_empty())
            .into_iter()
            .collect()
    } else {
        listed
    }
}

/// The port a service port reaches on a pod, as the controller's
/// FindPort resolves it: a number as is, a name through the pod's
/// container ports of the same protocol.
fn find_port(pod: &Value, service_port: &Value) -> Option<i64> {
    let protocol = match text(service_port, "/protocol") {
        "" => "TCP",
        p => p,
    };
    match service_port.get("targetPort") {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(name)) => pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .flat_map(|c| {
                c.get("ports")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
            })
            .find(|p| {
                text(p, "/name") == name
                    && match text(p, "/protocol") {
                        "" => "TCP",
                        other => other,
                    } == protocol
            })
            .and_then(|p| p.get("containerPort").and_then(Value::as_i64)),
        _ => service_port.get("port").and_then(Value::as_i64),
    }
}

fn port_line(name: &str, port: i64, protocol: &str) -> String {
    let protocol = if protocol.is_empty() { "TCP" } else { protocol };
    format!("{name}:{port}/{protocol}")
}

/// What the controller would write for one Service, per endpoint.
fn expected(
    service: &Value,
    pods: &[&Value],
    nodes: &BTreeMap<String, &Value>,
) -> Vec<String> {
    let selector =
        match service.pointer("/spec/selector").and_then(Value::as_object) {
            Some(s) if !s.is_empty() => s,
            _ => return Vec::new(),
        };
    let publish_not_ready = service
        .pointer("/spec/publishNotReadyAddresses")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let families: Vec<&str> = service
        .pointer("/spec/ipFamilies")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let service_ports: Vec<&Value> = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let mut out = Vec::new();
    for pod in pods {
        let selected =
            selector.iter().all(|(k, v)| label(pod, k) == v.as_str());
        let phase = text(pod, "/status/phase");
        if !selected || phase == "Succeeded" || phase == "Failed" {
            continue;
        }
        let ips = pod_ips(pod);
        if ips.is_empty() {
            continue;
        }
        let node_name = text(pod, "/spec/nodeName");
        let node = nodes.get(node_name);
        if node.is_none() && !publish_not_ready {
            // The controller skips a Pod whose Node does not exist.
            continue;
        }
        let serving = is_ready(pod);
        let terminating = pod
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null());
        let ready = publish_not_ready || (serving && !terminating);
        let ports: BTreeSet<String> = service_ports
            .iter()
            .filter_map(|sp| {
                find_port(pod, sp).map(|port| {
                    port_line(text(sp, "/name"), port, text(sp, "/protocol"))
                })
            })
            .collect();
        for family in &families {
            let want_v6 = *family == "IPv6";
            if let Some(ip) = ips.iter().find(|ip| is_ipv6(ip) == want_v6) {
                out.push(endpoint_line(
                    family,
                    ip,
                    [ready, serving, terminating],
                    node_name,
                    &ports,
                ));
            }
        }
    }
    out.sort();
    out
}

fn actual(slices: &[&Value]) -> Vec<String> {
    let mut out = Vec::new();
    for slice in slices {
        let family = text(slice, "/addressType");
        let ports: BTreeSet<String> = slice
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|p| {
                port_line(
                    text(p, "/name"),
                    p.get("port").and_then(Value::as_i64).unwrap_or(0),
                    text(p, "/protocol"),
                )
            })
            .collect();
        for endpoint in slice
            .get("endpoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let condition = |name: &str| {
                endpoint
                    .pointer(&format!("/conditions/{name}"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            };
            out.push(endpoint_line(
                family,
                text(endpoint, "/addresses/0"),
                [
                    condition("ready"),
                    condition("serving"),
                    condition("terminating"),
                ],
                text(endpoint, "/nodeName"),
                &ports,
            ));
        }
    }
    out.sort();
    out
}

/// What is not settled yet, one line each; empty once the controller's
/// slices are what it would write for the namespace's Pods and Services.
/// `objects` is a List of the namespace's Services, Pods and
/// EndpointSlices, `nodes` a List of the Nodes.
pub fn unsettled(objects: &Value, nodes: &Value) -> Vec<String> {
    let nodes: BTreeMap<String, &Value> = items(nodes, "Node")
        .map(|n| (text(n, "/metadata/name").to_owned(), n))
        .collect();
    let pods: Vec<&Value> = items(objects, "Pod").collect();
    let services: BTreeMap<&str, &Value> = items(objects, "Service")
        .map(|s| (text(s, "/metadata/name"), s))
        .collect();
    let mut managed: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for slice in items(objects, "EndpointSlice") {
        if label(slice, MANAGED_BY_LABEL) == Some(CONTROLLER) {
            let service = label(slice, SERVICE_NAME_LABEL).unwrap_or("");
            managed.entry(service).or_default().push(slice);
        }
    }
    let mut problems = Vec::new();
    for (name, service) in &services {
        if text(service, "/spec/type") == "ExternalName" {
            continue;
        }
        let has_selector = service
            .pointer("/spec/selector")
            .and_then(Value::as_object)
            .is_some_and(|s| !s.is_empty());
        if !has_selector {
            continue;
        }
        let want = expected(service, &pods, &nodes);
        let have =
            actual(managed.get(name).map(Vec::as_slice).unwrap_or_default());
        if want != have {
            problems.push(format!(
                "Service {name}: the controller's slices have [{}], the Pods make [{}]",
                have.join("; "),
                want.join("; ")
            ));
        }
    }
    for (name, slices) in &managed {
        if !services.contains_key(name) {
            problems.push(format!(
                "{} controller slice(s) of the deleted Service {name} not yet collected",
                slices.len()
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(name: &str, zone: &str) -> Value {
        json!({"kind": "Node", "metadata": {"name": name,
               "labels": {"topology.kubernetes.io/zone": zone}}})
    }

    fn service(name: &str, families: &[&str]) -> Value {
        json!({"kind": "Service", "metadata": {"name": name}, "spec": {
            "selector": {"app": name}, "ipFamilies": families,
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                      {"name": "named", "port": 81, "targetPort": "web", "protocol": "TCP"}]}})
    }

    fn pod(
        name: &str,
        app: &str,
        ips: &[&str],
        ready: bool,
        node: &str,
    ) -> Value {
        let ips: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip})).collect();
        json!({"kind": "Pod", "metadata": {"name": name, "labels": {"app": app}},
               "spec": {"nodeName": node, "containers": [{"name": "c",
                        "ports": [{"name": "web", "containerPort": 9090}]}]},
               "status": {"phase": "Running", "podIPs": ips,
                          "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}})
    }

    fn slice(service: &str, family: &str, endpoints: Value) -> Value {
        json!({"kind": "EndpointSlice", "addressType": family,
               "metadata": {"labels": {SERVICE_NAME_LABEL: service, MANAGED_BY_LABEL: CONTROLLER}},
               "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                         {"name": "named", "port": 9090, "protocol": "TCP"}],
               "endpoints": endpoints})
    }

    fn endpoint(ip: &str, ready: bool, node: &str, zone: &str) -> Value {
        json!({"addresses": [ip], "nodeName": node, "zone": zone,
               "conditions": {"ready": ready, "serving": ready, "terminating": false}})
    }

    fn list(items: Vec<Value>) -> Value {
        json!({"kind": "List", "items": items})
    }

    #[test]
    fn settled_when_the_slices_follow_the_pods() {
        let nodes = list(vec![node("node-a", "zone-a")]);
        let objects = list(vec![
            service("web", &["IPv4", "IPv6"]),
            pod(
                "web-0",
                "web",
                &["198.19.0.1", "2001:db8::1"],
                true,
                "node-a",
            ),
            pod("other", "db", &["198.19.0.9"], true, "node-a"),
            // On a Node that does not exist: the controller leaves it out.
            pod("web-1", "web", &["198.19.0.2"], true, "node-x"),
            slice(
                "web",
                "IPv4",
                json!([endpoint("198.19.0.1", true, "node-a", "zone-a")]),
            ),
            slice(
                "web",
                "IPv6",
                json!([endpoint("2001:db8::1", true, "node-a", "zone-a")]),
            ),
        ]);
        assert_eq!(unsettled(&objects, &nodes), Vec::<String>::new());
    }

    #[test]
    fn unsettled_while_a_readiness_flip_is_not_written() {
        let nodes = list(vec![node("node-a", "zone-a")]);
        let objects = list(vec![
            service("web", &["IPv4"]),
            pod("web-0", "web", &["198.19.0.1"], false, "node-a"),
            slice(
                "web",
                "IPv4",
                json!([endpoint("198.19.0.1", true, "node-a", "zone-a")]),
            ),
        ]);
        let problems = unsettled(&objects, &nodes);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("ready=true"), "{problems:?}");
    }

    #[test]
    fn unsettled_while_a_port_change_is_not_written_but_a_zone_change_never_is()
    {
        let objects = list(vec![
            service("web", &["IPv4"]),
            pod("web-0", "web", &["198.19.0.1"], true, "node-a"),
            slice(
                "web",
                "IPv4",
                json!([endpoint("198.19.0.1", true, "node-a", "zone-a")]),
            ),
        ]);
        assert_eq!(
            unsettled(&objects, &list(vec![node("node-a", "zone-b")])),
            Vec::<String>::new()
        );
        let mut renumbered = objects.clone();
        renumbered["items"][0]["spec"]["ports"][0]["targetPort"] = json!(8081);
        assert_eq!(
            unsettled(&renumbered, &list(vec![node("node-a", "zone-a")])).len(),
            1
        );
    }

    #[test]
    fn terminating_pods_stay_serving_but_not_ready() {
        let nodes = list(vec![node("node-a", "zone-a")]);
        let mut terminating =
            pod("web-0", "web", &["198.19.0.1"], true, "node-a");
        terminating["metadata"]["deletionTimestamp"] =
            json!("2026-01-01T00:00:00Z");
        let mut written = endpoint("198.19.0.1", false, "node-a", "zone-a");
        written["conditions"] =
            json!({"ready": false, "serving": true, "terminating": true});
        let objects = list(vec![
            service("web", &["IPv4"]),
            terminating,
            slice("web", "IPv4", json!([written])),
        ]);
        assert_eq!(unsettled(&objects, &nodes), Vec::<String>::new());
    }

    #[test]
    fn waits_for_the_slices_of_a_deleted_service() {
        let objects = list(vec![slice("gone", "IPv4", json!([]))]);
        let problems = unsettled(&objects, &list(vec![]));
        assert!(problems[0].contains("gone"), "{problems:?}");
    }

    #[test]
    fn ignores_hand_written_slices_and_services_without_selector() {
        let mut by_hand = slice(
            "manual",
            "IPv4",
            json!([endpoint("198.19.0.5", true, "", "")]),
        );
        by_hand["metadata"]["labels"] = json!({SERVICE_NAME_LABEL: "manual"});
        let mut manual = service("manual", &["IPv4"]);
        manual["spec"]["selector"] = Value::Null;
        let objects = list(vec![manual, by_hand]);
        assert_eq!(unsettled(&objects, &list(vec![])), Vec::<String>::new());
    }
}
