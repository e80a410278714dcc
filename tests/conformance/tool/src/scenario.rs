//! A scenario file, split into what the runner applies at each step.
//!
//! One multi-document YAML file:
//! - at most one `KubeProxyConfiguration`: the fields the scenario
//!   changes, merged over the runner's base configuration;
//! - at most one `Guest` document: shell commands run in the guest before
//!   each proxy starts (`setup`) and after it is cleaned up (`teardown`),
//!   for kernel state that is not the proxy's (a foreign virtual server, an
//!   address on the node), and `families: 1` for a node whose IPv6 the
//!   setup turns off (both proxies then sync IPv4 only);
//! - at most one `Traffic` document: the virtual server a takeover run
//!   sends traffic through (`target`, IP:port) and the pods that serve it
//!   (`pods`, IP:port each, started in network namespaces of the guest);
//! - the initial objects (Services, EndpointSlices, Pods);
//! - then any number of `Step` documents, each followed by the objects it
//!   applies (created or updated with `kubectl apply`). A step may also
//!   `patch` objects (the Node included), `delete` them (a Pod deleted this
//!   way stays terminating: no kubelet confirms it) or `forceDelete` them,
//!   and, for our proxy only, `restart` it (`term` or `kill`: stopped
//!   before the step's changes, started after) or kill it with SIGKILL
//!   `killAfterMs` after the step's request (or, with `killInSync: true`,
//!   after ours starts its first sync of the step) and start it again;
//!   `restartUpstream` does the same to upstream only (for what upstream
//!   reads only at start-up).
//!
//! An object's `status` is applied through the status subresource, and a
//! Pod annotated `conformance/delete: "true"` is deleted once applied.
//! Both proxies live through the same steps, one after the other, from the
//! same initial objects: so every Service of a scenario with steps must fix
//! what the API server would otherwise allocate at random (its cluster IPs,
//! node ports, health check node port).

use std::{fmt::Write as _, fs, path::Path};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Map, Value};

pub const STEP_KIND: &str = "Step";
const CONFIG_KIND: &str = "KubeProxyConfiguration";
const GUEST_KIND: &str = "Guest";
const TRAFFIC_KIND: &str = "Traffic";
const DELETE_ANNOTATION: &str = "conformance/delete";

/// One kubectl patch.
#[derive(Debug, Clone, PartialEq)]
pub struct Patch {
    /// kubectl's resource name (`service`, `pod`, `endpointslice`, `node`).
    pub kind: String,
    pub name: String,
    /// merge, strategic or json.
    pub patch_type: String,
    pub subresource: Option<String>,
    pub patch: Value,
}

/// How our proxy is interrupted around a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    Term,
    Kill,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    pub name: String,
    pub apply: Vec<Value>,
    pub patch: Vec<Patch>,
    pub delete: Vec<String>,
    pub force_delete: Vec<String>,
    pub restart: Option<Restart>,
    pub restart_upstream: Option<Restart>,
    pub kill_after_ms: Option<u64>,
    /// `kill_after_ms` counts from ours' first sync of the step.
    pub kill_in_sync: bool,
}

impl Step {
    /// Whether the step changes the Node, which the runner cannot see
    /// through its marker (a Node change is on a watch of its own).
    pub fn touches_node(&self) -> bool {
        self.patch.iter().any(|p| p.kind == "node")
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Traffic {
    pub target: String,
    pub pods: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scenario {
    /// The configuration fields the scenario sets.
    pub config: Map<String, Value>,
    pub setup: Vec<String>,
    pub teardown: Vec<String>,
    /// How many IP families both proxies sync (IPv4 first): 2 unless the
    /// Guest document says 1.
    pub families: Option<u8>,
    pub traffic: Option<Traffic>,
    /// Step 0: the initial objects (and their deletions).
    pub initial: Step,
    pub steps: Vec<Step>,
}

fn kind_of(doc: &Value) -> &str {
    doc.get("kind").and_then(Value::as_str).unwrap_or("")
}

fn name_of(doc: &Value) -> &str {
    doc.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn strings(doc: &Map<String, Value>, field: &str) -> Result<Vec<String>> {
    match doc.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str().map(str::to_owned).ok_or_else(|| {
                    anyhow!("{field}: every entry must be a string")
                })
            })
            .collect(),
        Some(_) => bail!("{field} must be a list of strings"),
    }
}

/// Checks that a document has only the fields named.
fn only_fields(
    doc: &Map<String, Value>,
    what: &str,
    known: &[&str],
) -> Result<()> {
    for key in doc.keys() {
        if !known.contains(&key.as_str()) {
            bail!(
                "{what}: unknown field {key:?} (known: {})",
                known.join(", ")
            );
        }
    }
    Ok(())
}

/// "kind/name" as kubectl takes it, checked.
fn object_ref(text: &str, field: &str) -> Result<String> {
    match text.split_once('/') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {
            Ok(format!("{}/{name}", kind.to_ascii_lowercase()))
        }
        _ => bail!("{field}: {text:?} is not KIND/NAME"),
    }
}

fn parse_patch(item: &Value) -> Result<Patch> {
    let map = item
        .as_object()
        .ok_or_else(|| anyhow!("patch: every entry must be a mapping"))?;
    only_fields(
        map,
        "patch",
        &["kind", "name", "type", "subresource", "patch"],
    )?;
    let text = |field: &str| map.get(field).and_then(Value::as_str);
    let kind = text("kind")
        .ok_or_else(|| anyhow!("patch: kind is required"))?
        .to_ascii_lowercase();
    let name = text("name")
        .ok_or_else(|| anyhow!("patch of a {kind}: name is required"))?
        .to_owned();
    let patch_type = text("type").unwrap_or("merge").to_owned();
    if !["merge", "strategic", "json"].contains(&patch_type.as_str()) {
        bail!("patch of {kind}/{name}: type must be merge, strategic or json");
    }
    let patch = map
        .get("patch")
        .cloned()
        .ok_or_else(|| anyhow!("patch of {kind}/{name}: patch is required"))?;
    Ok(Patch {
        kind,
        name,
        patch_type,
        subresource: text("subresource").map(str::to_owned),
        patch,
    })
}

fn parse_step(doc: &Map<String, Value>) -> Result<Step> {
    only_fields(
        doc,
        "Step",
        &[
            "kind",
            "name",
            "patch",
            "delete",
            "forceDelete",
            "restart",
            "restartUpstream",
            "killAfterMs",
            "killInSync",
        ],
    )?;
    let name = doc
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| anyhow!("a Step needs a name"))?
        .to_owned();
    let in_step = |e: anyhow::Error| e.context(format!("step {name:?}"));
    let patch = match doc.get("patch") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(parse_patch)
            .collect::<Result<_>>()
            .map_err(in_step)?,
        Some(_) => return Err(in_step(anyhow!("patch must be a list"))),
    };
    let refs = |field| -> Result<Vec<String>> {
        strings(doc, field)?
            .iter()
            .map(|r| object_ref(r, field))
            .collect()
    };
    let delete = refs("delete").map_err(in_step)?;
    let force_delete = refs("forceDelete").map_err(in_step)?;
    let restart_field = |field: &str| match doc.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) if v == "term" => Ok(Some(Restart::Term)),
        Some(v) if v == "kill" => Ok(Some(Restart::Kill)),
        Some(other) => Err(in_step(anyhow!(
            "{field} must be term or kill, not {other}"
        ))),
    };
    let restart = restart_field("restart")?;
    let restart_upstream = restart_field("restartUpstream")?;
    let kill_after_ms = match doc.get("killAfterMs") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            in_step(anyhow!("killAfterMs must be a number of milliseconds"))
        })?),
    };
    let kill_in_sync = match doc.get("killInSync") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(in_step(anyhow!("killInSync must be true or false")))
        }
    };
    if kill_in_sync && kill_after_ms.is_none() {
        return Err(in_step(anyhow!("killInSync needs killAfterMs")));
    }
    if restart.is_some() && kill_after_ms.is_some() {
        return Err(in_step(anyhow!(
            "restart and killAfterMs exclude each other"
        )));
    }
    Ok(Step {
        name,
        apply: Vec::new(),
        patch,
        delete,
        force_delete,
        restart,
        restart_upstream,
        kill_after_ms,
        kill_in_sync,
    })
}

/// Parses a scenario's text.
pub fn parse(text: &str) -> Result<Scenario> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| anyhow!("{e}"))?;
    let mut scenario = Scenario::default();
    let mut current: Option<Step> = None;
    let mut seen_config = false;
    for doc in docs {
        if doc.is_null() {
            continue;
        }
        let Value::Object(map) = &doc else {
            bail!("every document must be a mapping");
        };
        match kind_of(&doc) {
            CONFIG_KIND => {
                if seen_config || current.is_some() {
                    bail!("one KubeProxyConfiguration, before the first Step");
                }
                seen_config = true;
                scenario.config = map
                    .iter()
                    .filter(|(k, _)| *k != "apiVersion" && *k != "kind")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
            }
            GUEST_KIND => {
                only_fields(
                    map,
                    "Guest",
                    &["kind", "setup", "teardown", "families"],
                )?;
                scenario.setup = strings(map, "setup")?;
                scenario.teardown = strings(map, "teardown")?;
                scenario.families = match map.get("families") {
                    None => None,
                    Some(Value::Number(n))
                        if matches!(n.as_u64(), Some(1 | 2)) =>
                    {
                        n.as_u64().map(|n| n as u8)
                    }
                    Some(other) => {
                        bail!("Guest: families must be 1 or 2, not {other}")
                    }
                };
            }
            TRAFFIC_KIND => {
                only_fields(map, "Traffic", &["kind", "target", "pods"])?;
                let target = map
                    .get("target")
                    .and_then(Value::as_str)
                    .ok_or_else(|| anyhow!("Traffic needs a target IP:PORT"))?;
                let pods = strings(map, "pods")?;
                if pods.is_empty() {
                    bail!("Traffic needs pods to serve it");
                }
                scenario.traffic = Some(Traffic {
                    target: target.to_owned(),
                    pods,
                });
            }
            STEP_KIND => {
                if let Some(step) = current.take() {
                    scenario.steps.push(step);
                }
                current = Some(parse_step(map)?);
            }
            "Node" | "Namespace" => bail!(
                "{} {:?}: the runner owns the Node and the namespace; \
                 change the Node with a step's patch",
                kind_of(&doc),
                name_of(&doc)
            ),
            "" => bail!("a document without kind"),
            _ => {
                if name_of(&doc).is_empty() {
                    bail!("a {} without metadata.name", kind_of(&doc));
                }
                let step = current.as_mut().unwrap_or(&mut scenario.initial);
                step.apply.push(doc);
            }
        }
    }
    scenario.steps.extend(current);
    for doc in &scenario.initial.apply {
        let marked = doc
            .pointer(&format!(
                "/metadata/annotations/{}",
                DELETE_ANNOTATION.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            == Some("true");
        if marked && kind_of(doc) == "Pod" {
            scenario
                .initial
                .delete
                .push(format!("pod/{}", name_of(doc)));
        }
    }
    if !scenario.steps.is_empty() {
        for step in std::iter::once(&scenario.initial).chain(&scenario.steps) {
            for doc in &step.apply {
                check_replayable(doc)
                    .with_context(|| format!("step {:?}", step.name))?;
            }
        }
    }
    Ok(scenario)
}

/// A Service whose addresses and ports the API server would pick at
/// random would differ between the two proxies' runs.
fn check_replayable(doc: &Value) -> Result<()> {
    if kind_of(doc) != "Service" {
        return Ok(());
    }
    let name = name_of(doc);
    let spec = |field: &str| doc.pointer(&format!("/spec/{field}"));
    let text = |field: &str| spec(field).and_then(Value::as_str).unwrap_or("");
    let service_type = match text("type") {
        "" => "ClusterIP",
        t => t,
    };
    if service_type == "ExternalName" {
        return Ok(());
    }
    if text("clusterIP").is_empty() {
        bail!(
            "Service {name}: a scenario with steps replays its objects for \
             each proxy, so it must fix spec.clusterIP (and clusterIPs when \
             dual-stack)"
        );
    }
    let family_count = spec("ipFamilies")
        .and_then(Value::as_array)
        .map_or(1, Vec::len);
    let ips = spec("clusterIPs")
        .and_then(Value::as_array)
        .map_or(1, Vec::len);
    if family_count > ips && text("clusterIP") != "None" {
        bail!("Service {name}: fix every family's address in spec.clusterIPs");
    }
    let node_ports = service_type == "NodePort"
        || (service_type == "LoadBalancer"
            && spec("allocateLoadBalancerNodePorts").and_then(Value::as_bool)
                != Some(false));
    if node_ports {
        let ports = spec("ports")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if ports.iter().any(|p| p.get("nodePort").is_none()) {
            bail!("Service {name}: fix every port's nodePort");
        }
    }
    if service_type == "LoadBalancer"
        && text("externalTrafficPolicy") == "Local"
        && spec("healthCheckNodePort").is_none()
    {
        bail!("Service {name}: fix spec.healthCheckNodePort");
    }
    Ok(())
}

/// Deep merge: mappings merge key by key, anything else replaces.
pub fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            for (key, value) in over {
                match base.get_mut(key) {
                    Some(slot) => merge(slot, value),
                    None => {
                        base.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (base, over) => *base = over.clone(),
    }
}

fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

/// The part of an object that the status subresource takes.
fn status_of(doc: &Value) -> Option<Value> {
    let status = doc.get("status")?;
    if status.is_null() || status.as_object().is_some_and(Map::is_empty) {
        return None;
    }
    Some(json!({
        "apiVersion": doc.get("apiVersion").cloned().unwrap_or(Value::Null),
        "kind": kind_of(doc),
        "metadata": {"name": name_of(doc)},
        "status": status,
    }))
}

/// A step as the runner's host side applies it.
pub fn step_json(step: &Step) -> Value {
    let apply: Vec<Value> = step
        .apply
        .iter()
        .map(|doc| {
            let mut doc = doc.clone();
            if let Some(map) = doc.as_object_mut() {
                map.remove("status");
            }
            doc
        })
        .collect();
    let status: Vec<Value> = step.apply.iter().filter_map(status_of).collect();
    let patches: Vec<Value> = step
        .patch
        .iter()
        .map(|p| {
            json!({
                "kind": p.kind,
                "name": p.name,
                "type": p.patch_type,
                "subresource": p.subresource,
                "patch": p.patch.to_string(),
            })
        })
        .collect();
    json!({
        "name": step.name,
        "apply": list(apply),
        "status": list(status),
        "patch": patches,
        "delete": step.delete,
        "forceDelete": step.force_delete,
    })
}

/// One line per step for the guest: index, our restart and upstream's
/// (-, term, kill), milliseconds before a kill (- for none; `sN` counts
/// from ours' first sync of the step), whether the Node changes, and the
/// step's name.
pub fn steps_table(scenario: &Scenario) -> String {
    let word = |restart: Option<Restart>| match restart {
        None => "-",
        Some(Restart::Term) => "term",
        Some(Restart::Kill) => "kill",
    };
    let mut out = String::new();
    for (i, step) in scenario.steps.iter().enumerate() {
        let restart = word(step.restart);
        let restart_upstream = word(step.restart_upstream);
        let kill = match (step.kill_after_ms, step.kill_in_sync) {
            (None, _) => "-".to_owned(),
            (Some(ms), false) => ms.to_string(),
            (Some(ms), true) => format!("s{ms}"),
        };
        let node = if step.touches_node() { "node" } else { "-" };
        let name = step.name.replace(['\t', '\n'], " ");
        let _ = writeln!(
            out,
            "{}\t{restart}\t{restart_upstream}\t{kill}\t{node}\t{name}",
            i + 1
        );
    }
    out
}

/// Writes the scenario's parts into `dir`: `config.yaml` (the base
/// configuration with the scenario's fields merged in), `step-0.json`
/// (the initial objects) to `step-N.json`, `steps.tsv`, `setup.sh`,
/// `teardown.sh`, `traffic.env` and, when the scenario sets it, `families`.
pub fn split(scenario: &Scenario, base: &Value, dir: &Path) -> Result<()> {
    fs::create_dir_all(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        fs::write(&path, text)
            .with_context(|| format!("writing {}", path.display()))
    };
    let mut config = base.clone();
    merge(&mut config, &Value::Object(scenario.config.clone()));
    write(
        "config.yaml",
        serde_saphyr::to_string(&config).map_err(|e| anyhow!("{e}"))?,
    )?;
    for (i, step) in std::iter::once(&scenario.initial)
        .chain(&scenario.steps)
        .enumerate()
    {
        write(&format!("step-{i}.json"), step_json(step).to_string())?;
    }
    write("steps.tsv", steps_table(scenario))?;
    let script = |commands: &[String]| {
        let mut text = String::from("set -euo pipefail\n");
        for command in commands {
            text.push_str(command);
            text.push('\n');
        }
        text
    };
    write("setup.sh", script(&scenario.setup))?;
    write("teardown.sh", script(&scenario.teardown))?;
    if let Some(families) = scenario.families {
        write("families", format!("{families}\n"))?;
    }
    let traffic = match &scenario.traffic {
        Some(t) => format!(
            "traffic_target={}\ntraffic_pods=\"{}\"\n",
            t.target,
            t.pods.join(" ")
        ),
        None => String::new(),
    };
    write("traffic.env", traffic)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const WITH_STEPS: &str = r#"
# a comment before the first document
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
ipvs: {scheduler: wrr}
---
kind: Guest
setup: ["ip addr add 198.18.100.1/32 dev lo"]
teardown: ["ip addr del 198.18.100.1/32 dev lo"]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 198.18.7.1
  type: NodePort
  ports: [{name: http, port: 80, nodePort: 30001}]
status:
  loadBalancer: {}
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, annotations: {conformance/delete: "true"}}
spec: {containers: [{name: c, image: x}]}
status: {podIP: 198.19.0.1}
---
kind: Step
name: back to ClusterIP
delete: [Pod/web-0]
restart: kill
patch:
- {kind: Node, name: node-a, patch: {metadata: {labels: {a: b}}}}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 198.18.7.1
  ports: [{name: http, port: 80}]
---
kind: Step
name: nothing but a kill
killAfterMs: 250
---
kind: Step
name: a kill in a sync
killAfterMs: 20
killInSync: true
"#;

    #[test]
    fn a_guest_may_sync_one_family() {
        let with = |families: &str| {
            parse(&format!("kind: Guest\nsetup: []\n{families}\n"))
        };
        assert_eq!(with("").unwrap().families, None);
        assert_eq!(with("families: 1").unwrap().families, Some(1));
        assert_eq!(parse(WITH_STEPS).unwrap().families, None);
        let refused = with("families: 3").unwrap_err().to_string();
        assert!(refused.contains("families must be 1 or 2"), "{refused}");
        assert!(with("families: one").is_err());
    }

    #[test]
    fn splits_initial_objects_and_steps() {
        let s = parse(WITH_STEPS).unwrap();
        assert_eq!(s.config["ipvs"]["scheduler"], "wrr");
        assert_eq!(s.setup, ["ip addr add 198.18.100.1/32 dev lo"]);
        assert_eq!(s.initial.apply.len(), 2);
        assert_eq!(s.initial.delete, ["pod/web-0"]);
        assert_eq!(s.steps.len(), 3);
        assert_eq!(s.steps[0].name, "back to ClusterIP");
        assert_eq!(s.steps[0].apply.len(), 1);
        assert_eq!(s.steps[0].delete, ["pod/web-0"]);
        assert_eq!(s.steps[0].restart, Some(Restart::Kill));
        assert!(s.steps[0].touches_node());
        assert_eq!(s.steps[1].kill_after_ms, Some(250));
        assert!(s.steps[1].apply.is_empty());
        assert_eq!(
            steps_table(&s),
            "1\tkill\t-\t-\tnode\tback to ClusterIP\n2\t-\t-\t250\t-\tnothing but a kill\n\
             3\t-\t-\ts20\t-\ta kill in a sync\n"
        );
    }

    #[test]
    fn status_goes_apart_and_only_when_set() {
        let s = parse(WITH_STEPS).unwrap();
        let step = step_json(&s.initial);
        let applied = step["apply"]["items"].as_array().unwrap();
        assert!(applied.iter().all(|d| d.get("status").is_none()));
        // The Service's status is an empty loadBalancer: still sent, since
        // that is how a step clears an ingress.
        let status = step["status"]["items"].as_array().unwrap();
        assert_eq!(status.len(), 2);
        assert_eq!(status[1]["metadata"]["name"], "web-0");
        assert_eq!(status[1]["status"]["podIP"], "198.19.0.1");
    }

    #[test]
    fn steps_need_fixed_addresses() {
        let unfixed =
            WITH_STEPS.replace("  clusterIP: 198.18.7.1\n  type", "  type");
        let err = parse(&unfixed).unwrap_err();
        assert!(format!("{err:#}").contains("spec.clusterIP"), "{err:#}");
        let no_node_port = WITH_STEPS.replace(", nodePort: 30001", "");
        let err = parse(&no_node_port).unwrap_err();
        assert!(format!("{err:#}").contains("nodePort"), "{err:#}");
        // Without steps nothing is replayed, so nothing needs fixing.
        let static_only = unfixed.split("---\nkind: Step").next().unwrap();
        parse(static_only).unwrap();
    }

    #[test]
    fn rejects_what_it_does_not_know() {
        for (text, expected) in [
            ("kind: Step\nname: x\nrestrat: term\n", "unknown field"),
            ("kind: Step\n", "needs a name"),
            ("kind: Step\nname: x\ndelete: [web]\n", "KIND/NAME"),
            ("kind: Step\nname: x\nrestart: later\n", "term or kill"),
            ("kind: Step\nname: x\nrestartUpstream: 1\n", "term or kill"),
            (
                "kind: Step\nname: x\nkillInSync: true\n",
                "needs killAfterMs",
            ),
            (
                "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n",
                "owns the Node",
            ),
            ("kind: Traffic\ntarget: 1.2.3.4:80\n", "needs pods"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(format!("{err:#}").contains(expected), "{text}: {err:#}");
        }
    }

    #[test]
    fn merges_the_configuration_over_the_base() {
        let mut base = json!({"mode": "ipvs", "ipvs": {"scheduler": "rr", "syncPeriod": "30s"}});
        merge(
            &mut base,
            &json!({"ipvs": {"scheduler": "mh"}, "bindAddress": "1.2.3.4"}),
        );
        assert_eq!(
            base,
            json!({"mode": "ipvs", "ipvs": {"scheduler": "mh", "syncPeriod": "30s"}, "bindAddress": "1.2.3.4"})
        );
    }

    #[test]
    fn split_writes_a_configuration_that_reads_back() {
        let dir = std::env::temp_dir()
            .join(format!("conformance-split-{}", std::process::id()));
        let s = parse(WITH_STEPS).unwrap();
        let base = json!({"mode": "ipvs", "conntrack": {"maxPerCore": null},
                          "metricsBindAddress": "127.0.0.1:10249"});
        split(&s, &base, &dir).unwrap();
        let config: Value = serde_saphyr::from_str(
            &fs::read_to_string(dir.join("config.yaml")).unwrap(),
        )
        .unwrap();
        assert_eq!(config["ipvs"]["scheduler"], "wrr");
        assert_eq!(config["metricsBindAddress"], "127.0.0.1:10249");
        assert!(config["conntrack"]["maxPerCore"].is_null());
        for i in 0..=2 {
            assert!(dir.join(format!("step-{i}.json")).is_file());
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
