//! `deploy/split/split.yaml` as the binaries will read it: the API side's and
//! the node proxies' command lines parse, and what they name (folders,
//! files, the token's audience and ServiceAccount) is what the manifest
//! mounts and grants.

use clap::Parser as _;
use kube_ipvs_proxy::{
    config::{Cli, Command},
    nodeview::endpoint::ApiEndpoint,
};
use serde_json::Value;

use super::{documents_of, object};

const MANIFEST: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/split/split.yaml");

fn documents() -> Vec<Value> {
    documents_of(MANIFEST)
}

fn pod_spec(workload: &Value) -> &Value {
    &workload["spec"]["template"]["spec"]
}

fn command(workload: &Value) -> Vec<String> {
    pod_spec(workload)["containers"][0]["command"]
        .as_array()
        .expect("a command")
        .iter()
        .map(|a| a.as_str().expect("strings").to_owned())
        .collect()
}

/// The value of `--flag=value` in `command`.
fn flag<'a>(command: &'a [String], flag: &str) -> &'a str {
    command
        .iter()
        .find_map(|a| a.strip_prefix(&format!("--{flag}=")))
        .unwrap_or_else(|| panic!("--{flag} in {command:?}"))
}

/// The volume mounted at `path`, or above it.
fn volume_at<'a>(spec: &'a Value, path: &str) -> &'a Value {
    let mounts = spec["containers"][0]["volumeMounts"].as_array().unwrap();
    let mount = mounts
        .iter()
        .find(|m| {
            let at = m["mountPath"].as_str().unwrap();
            path == at || path.starts_with(&format!("{at}/"))
        })
        .unwrap_or_else(|| panic!("nothing mounted at {path}"));
    spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap_or_else(|| panic!("no volume {}", mount["name"]))
}

#[test]
fn the_api_side_and_the_nodes_agree_on_addresses_files_and_tokens() {
    let docs = documents();
    let deployment = object(&docs, "Deployment");
    let daemonset = object(&docs, "DaemonSet");

    let api = command(deployment);
    let cli = Cli::try_parse_from(&api).expect("the API side's command parses");
    let Some(Command::ApiServer(args)) = cli.command else {
        panic!("{api:?} runs api-server");
    };
    assert!(matches!(
        ApiEndpoint::parse(&args.listen),
        Ok(ApiEndpoint::Tls { port: 9443, .. })
    ));
    let tls_dir = args.tls_dir.expect("--tls-dir");
    let tls = volume_at(pod_spec(deployment), tls_dir.to_str().unwrap());
    assert_eq!(tls["secret"]["secretName"], "kube-ipvs-proxy-api-side-tls");

    let node = command(daemonset)
        .into_iter()
        .map(|a| a.replace("$(NODE_NAME)", "node-a"))
        .collect::<Vec<_>>();
    let cli = Cli::try_parse_from(&node).expect("the node's command parses");
    assert!(cli.command.is_none());
    let endpoint = flag(&node, "api-endpoint");
    assert!(matches!(
        ApiEndpoint::parse(endpoint),
        Ok(ApiEndpoint::Tls { port: 9443, .. })
    ));
    let ca = volume_at(pod_spec(daemonset), flag(&node, "api-tls-dir"));
    assert_eq!(ca["configMap"]["name"], "kube-ipvs-proxy-api-side-ca");
    // The token: the projected file the flag names, for the audience the
    // API side checks, of the ServiceAccount it lets in.
    let token_file = flag(&node, "api-token-file");
    let token = &volume_at(pod_spec(daemonset), token_file)["projected"]
        ["sources"][0]["serviceAccountToken"];
    assert!(
        token_file.ends_with(&format!("/{}", token["path"].as_str().unwrap()))
    );
    assert_eq!(token["audience"], args.token_audience.as_deref().unwrap());
    let account = pod_spec(daemonset)["serviceAccountName"].as_str().unwrap();
    assert_eq!(
        args.token_service_account,
        format!(
            "{}/{account}",
            daemonset["metadata"]["namespace"].as_str().unwrap()
        )
    );
}

#[test]
fn the_api_side_may_read_what_it_serves_and_review_tokens() {
    let docs = documents();
    let rules = object(&docs, "ClusterRole")["rules"]
        .as_array()
        .unwrap()
        .clone();
    let grants = |group: &str, resource: &str, verb: &str| {
        rules.iter().any(|r| {
            r["apiGroups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g == group)
                && r["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x == resource)
                && r["verbs"].as_array().unwrap().iter().any(|v| v == verb)
        })
    };
    for (group, resource) in [
        ("", "services"),
        ("", "nodes"),
        ("discovery.k8s.io", "endpointslices"),
    ] {
        assert!(grants(group, resource, "watch"), "{resource}");
        assert!(grants(group, resource, "list"), "{resource}");
    }
    assert!(grants("authentication.k8s.io", "tokenreviews", "create"));
    let verbs: usize = rules
        .iter()
        .map(|r| r["verbs"].as_array().unwrap().len())
        .sum();
    assert_eq!(verbs, 5, "nothing more: {rules:?}");
    let binding = object(&docs, "ClusterRoleBinding");
    let deployment = object(&docs, "Deployment");
    assert_eq!(
        binding["subjects"][0]["name"],
        pod_spec(deployment)["serviceAccountName"]
    );
}

/// The split's DaemonSet is kube-ipvs-proxy.yaml's with a view source:
/// its proxies are judged alive the same way, with the same patience.
#[test]
fn the_nodes_liveness_probe_is_the_single_manifests() {
    let probe = |docs: &[Value]| {
        pod_spec(object(docs, "DaemonSet"))["containers"][0]["livenessProbe"]
            .clone()
    };
    let split = probe(&documents());
    assert!(split.is_object(), "the split's nodes have a liveness probe");
    assert_eq!(split, probe(&super::documents()));
}
