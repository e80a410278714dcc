//! `deploy/kube-ipvs-proxy.yaml` (and `deploy/split/`, in `split`) as the
//! proxy itself will read it: the
//! ConfigMap's `KubeProxyConfiguration` and the DaemonSet's command line go
//! through the same resolution as at start-up, and the paths and ports the
//! manifest wires together must agree. (The API server validates the
//! manifest itself: `tests/e2e/control-plane.sh start` applies it with a
//! server-side dry run first.)

use std::path::{Path, PathBuf};

use clap::Parser as _;
use kube_ipvs_proxy::config::{self, Cli};
use serde_json::Value;

const MANIFEST: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kube-ipvs-proxy.yaml");

fn documents() -> Vec<Value> {
    documents_of(MANIFEST)
}

fn documents_of(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("manifest readable");
    serde_saphyr::from_multiple(&text).expect("manifest is valid YAML")
}

fn object<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> =
        docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "exactly one {kind} in the manifest");
    found[0]
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{pointer} is a string"))
}

fn container(docs: &[Value]) -> &Value {
    &object(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
}

/// The container's command with `$(NODE_NAME)` expanded as the kubelet
/// does from `spec.nodeName`.
fn command_line(docs: &[Value], node: &str) -> Vec<String> {
    let container = container(docs);
    assert_eq!(
        str_at(container, "/env/0/name"),
        "NODE_NAME",
        "NODE_NAME comes from the Pod's node"
    );
    assert_eq!(
        str_at(container, "/env/0/valueFrom/fieldRef/fieldPath"),
        "spec.nodeName"
    );
    container["command"]
        .as_array()
        .expect("a command")
        .iter()
        .map(|a| a.as_str().expect("string arguments"))
        .map(|a| a.replace("$(NODE_NAME)", node))
        .collect()
}

/// Where the container sees the file at `path`, if a ConfigMap volume
/// holds it: (ConfigMap name, key).
fn config_map_key(docs: &[Value], path: &Path) -> Option<(String, String)> {
    let pod = &object(docs, "DaemonSet")["spec"]["template"]["spec"];
    let mounts = container(docs)["volumeMounts"].as_array()?;
    mounts.iter().find_map(|m| {
        let key = path.strip_prefix(m["mountPath"].as_str()?).ok()?;
        let volume = pod["volumes"]
            .as_array()?
            .iter()
            .find(|v| v["name"] == m["name"])?;
        let name = volume["configMap"]["name"].as_str()?;
        Some((name.to_owned(), key.to_str()?.to_owned()))
    })
}

fn config_map_data<'a>(docs: &'a [Value], name: &str, key: &str) -> &'a str {
    let cm = object(docs, "ConfigMap");
    assert_eq!(cm["metadata"]["name"], name, "the mounted ConfigMap");
    str_at(cm, &format!("/data/{}", key.replace('/', "~1")))
}

#[test]
fn the_daemonset_command_and_configmap_resolve_without_warnings() {
    let docs = documents();
    let cli = Cli::try_parse_from(command_line(&docs, "node-a"))
        .expect("the proxy accepts the DaemonSet's flags");
    assert!(cli.command.is_none(), "the DaemonSet runs the proxy");
    let args = cli.run.config;
    let path = args.config.clone().expect("--config is given");
    let (cm, key) = config_map_key(&docs, &path)
        .expect("--config is a file of a mounted ConfigMap");
    let text = config_map_data(&docs, &cm, &key);

    let resolved =
        config::resolve(&args, Some(text)).expect("the configuration is valid");

    assert_eq!(
        resolved.warnings,
        vec![],
        "kubeadm's format, nothing unused"
    );
    let config = resolved.config;
    assert_eq!(config.node_name("some-hostname"), "node-a");
    assert_eq!(config.state_file, None, "reads the API server");

    // The liveness probe asks the healthz server the configuration opens.
    let healthz = config.healthz_bind_address.expect("healthz server on");
    let probe = &container(&docs)["livenessProbe"]["httpGet"];
    assert_eq!(probe["path"], "/livez");
    assert_eq!(probe["port"], healthz.port());
    // Long enough for a busy node: /livez, not the probe, judges the
    // proxy's syncs.
    let timeout = &container(&docs)["livenessProbe"]["timeoutSeconds"];
    assert!(timeout.as_u64().is_some_and(|s| s >= 5), "{timeout}");
}

/// The configuration the DaemonSet's proxy runs with on `node-a`.
fn node_config(docs: &[Value]) -> config::Config {
    let args = Cli::try_parse_from(command_line(docs, "node-a"))
        .expect("flags")
        .run
        .config;
    let path = args.config.clone().expect("--config");
    let (cm, key) = config_map_key(docs, &path).expect("mounted");
    config::resolve(&args, Some(config_map_data(docs, &cm, &key)))
        .expect("valid")
        .config
}

#[test]
fn the_kubeconfig_is_mounted_and_uses_the_service_account() {
    let docs = documents();
    let config = node_config(&docs);
    let kubeconfig_path: PathBuf = config
        .kubeconfig
        .expect("clientConnection.kubeconfig is set");
    let (cm, key) = config_map_key(&docs, &kubeconfig_path)
        .expect("the kubeconfig is in the mounted ConfigMap");

    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(config_map_data(&docs, &cm, &key))
            .expect("a kubeconfig kube-rs reads");

    let user = kubeconfig.auth_infos[0].auth_info.as_ref().expect("a user");
    assert_eq!(
        user.token_file.as_deref(),
        Some("/var/run/secrets/kubernetes.io/serviceaccount/token"),
        "the Pod's own ServiceAccount token, refreshed by the kubelet"
    );
}

#[test]
fn the_daemonset_runs_as_its_service_account_on_every_node() {
    let docs = documents();
    let sa = object(&docs, "ServiceAccount");
    let pod = &object(&docs, "DaemonSet")["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], sa["metadata"]["name"]);
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    assert_eq!(
        pod["tolerations"],
        serde_json::json!([{"operator": "Exists"}]),
        "tolerates every taint, as kube-proxy"
    );
    let binding = object(&docs, "ClusterRoleBinding");
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{
            "kind": "ServiceAccount",
            "name": sa["metadata"]["name"],
            "namespace": sa["metadata"]["namespace"],
        }])
    );
    assert_eq!(
        binding["roleRef"]["name"],
        object(&docs, "ClusterRole")["metadata"]["name"]
    );
}

#[test]
fn the_cluster_role_grants_what_the_proxy_uses_and_nothing_more() {
    let docs = documents();
    let rules = &object(&docs, "ClusterRole")["rules"];
    assert_eq!(
        rules,
        &serde_json::json!([
            {"apiGroups": [""], "resources": ["services"],
             "verbs": ["list", "watch"]},
            {"apiGroups": [""], "resources": ["nodes"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
             "verbs": ["list", "watch"]},
            // kube-rs' recorder: events.k8s.io only, create then patch.
            {"apiGroups": ["events.k8s.io"], "resources": ["events"],
             "verbs": ["create", "patch"]},
        ])
    );
}

const POD_MONITOR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/monitoring/podmonitor.yaml"
);

/// What kube-prometheus' kube-proxy PodMonitor and the kubernetes-mixin
/// queries need of the DaemonSet: its pods in kube-system labelled
/// `k8s-app: kube-proxy` (the job name), metrics on port 10249.
#[test]
fn kube_prometheus_finds_the_pods_as_kube_proxys() {
    let docs = documents();
    let ds = object(&docs, "DaemonSet");
    assert_eq!(ds["metadata"]["namespace"], "kube-system");
    let labels = &ds["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["k8s-app"], "kube-proxy");
    // Not in the selector, which kube-proxy's own DaemonSet uses.
    assert!(ds["spec"]["selector"]["matchLabels"]["k8s-app"].is_null());

    let text = std::fs::read_to_string(POD_MONITOR).expect("readable");
    let monitor: Value = serde_saphyr::from_str(&text).expect("YAML");
    assert_eq!(monitor["kind"], "PodMonitor");
    let spec = &monitor["spec"];
    assert_eq!(spec["namespaceSelector"]["matchNames"][0], "kube-system");
    let selector = spec["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    for (key, value) in selector {
        assert_eq!(&labels[key], value, "the pods carry {key}");
    }
    // The job label is the value of the pods' k8s-app label.
    let job_label = spec["jobLabel"].as_str().expect("jobLabel");
    assert_eq!(labels[job_label], "kube-proxy");
    let relabelings = &spec["podMetricsEndpoints"][0]["relabelings"];
    let address = relabelings
        .as_array()
        .and_then(|r| r.iter().find(|r| r["targetLabel"] == "__address__"))
        .expect("the address relabeling");
    assert_eq!(
        address["replacement"],
        format!(
            "$1:{}",
            node_config(&docs)
                .metrics_bind_address
                .expect("metrics server on")
                .port()
        ),
        "the port the configured proxy serves metrics on"
    );
}

/// The DaemonSet's containers as kube-proxy's `--init-only` split them:
/// the init container privileged, running the proxy's own command with
/// `--init-only` and the configuration alone; the proxy itself not
/// privileged, with the three capabilities it was measured to need.
fn assert_init_container_then_unprivileged(docs: &[Value], what: &str) {
    let pod = &object(docs, "DaemonSet")["spec"]["template"]["spec"];
    let inits = pod["initContainers"].as_array().expect("init containers");
    assert_eq!(inits.len(), 1, "{what}: one init container");
    let init = &inits[0];
    let main = &pod["containers"][0];
    assert_eq!(init["image"], main["image"], "{what}: the proxy's image");
    assert_eq!(
        init["securityContext"],
        serde_json::json!({"privileged": true}),
        "{what}"
    );
    assert_eq!(init["env"], main["env"], "{what}: NODE_NAME as the proxy's");
    let strings = |c: &Value| -> Vec<String> {
        c["command"]
            .as_array()
            .expect("a command")
            .iter()
            .map(|a| a.as_str().expect("strings").to_owned())
            .collect()
    };
    let init_command = strings(init);
    assert_eq!(
        init_command.last().map(String::as_str),
        Some("--init-only"),
        "{what}"
    );
    // The same program and configuration as the proxy, nothing of its
    // source: it reads no Service.
    assert_eq!(
        init_command[..init_command.len() - 1],
        strings(main)[..3],
        "{what}"
    );
    let cli = Cli::try_parse_from(&init_command)
        .expect("the init container's flags parse");
    assert!(cli.run.init_only(), "{what}");
    let mounts: Vec<&Value> = init["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .collect();
    assert_eq!(mounts.len(), 1, "{what}: the configuration alone");
    assert_eq!(mounts[0]["mountPath"], "/var/lib/kube-proxy", "{what}");

    assert_eq!(
        main["securityContext"],
        serde_json::json!({
            "privileged": false,
            "capabilities": {"add": ["NET_ADMIN", "NET_RAW", "SYS_RESOURCE"]},
        }),
        "{what}: the proxy's own container"
    );
    let main_mounts = main["volumeMounts"].as_array().expect("mounts");
    assert!(
        main_mounts
            .iter()
            .any(|m| m["mountPath"] == "/run/xtables.lock"),
        "{what}: the node's xtables lock"
    );
}

#[test]
fn the_privileged_steps_are_an_init_container_s() {
    assert_init_container_then_unprivileged(
        &documents(),
        "kube-ipvs-proxy.yaml",
    );
    let split = documents_of(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/split/split.yaml"
    ));
    assert_init_container_then_unprivileged(&split, "split.yaml");
}

#[path = "deploy_manifests/split.rs"]
mod split;
