//! The API/node split from the command line: `api-server` serves node
//! views read from a state file on a Unix socket, and
//! `plan --api-endpoint` prints what a node fed by it programs, which
//! must be what `plan --state` prints for that node.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

const PROXY: &str = env!("CARGO_BIN_EXE_kube-ipvs-proxy");
const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");

/// A scratch folder, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir()
            .join(format!("kip-split-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch folder");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `api-server` on a socket in `dir`, killed when dropped.
struct ApiSide {
    child: Child,
    endpoint: String,
}

impl ApiSide {
    /// Without a metrics server: tests run side by side.
    fn start(state: &Path, dir: &Path) -> Self {
        Self::start_with(state, dir, "--metrics-bind-address=")
    }

    fn start_with(state: &Path, dir: &Path, metrics: &str) -> Self {
        let socket = dir.join("views.sock");
        let endpoint = format!("unix://{}", socket.display());
        let child = Command::new(PROXY)
            .args(["api-server", "--listen", &endpoint, metrics, "--state"])
            .arg(state)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("api-server starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "no socket at {socket:?}");
            thread::sleep(Duration::from_millis(20));
        }
        ApiSide { child, endpoint }
    }
}

impl Drop for ApiSide {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn plan(args: &[&str]) -> String {
    let out = Command::new(PROXY)
        .arg("plan")
        .args(args)
        .args(["--output", "json"])
        .output()
        .expect("plan runs");
    assert!(
        out.status.success(),
        "plan {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn a_node_fed_by_the_api_side_plans_what_a_proxy_on_it_plans() {
    for file in [
        "topology-hints.yaml",
        "loadbalancer-local.yaml",
        "dual-stack.yaml",
    ] {
        let scratch = Scratch::new(file);
        let state = Path::new(EXAMPLES).join("plan").join(file);
        let api = ApiSide::start(&state, &scratch.0);
        for node in ["node-a", "node-b"] {
            let direct =
                plan(&["--state", state.to_str().unwrap(), "--node", node]);
            let fed = plan(&["--api-endpoint", &api.endpoint, "--node", node]);
            assert!(direct.contains("virtualServers"), "{direct}");
            assert_eq!(fed, direct, "{file}, {node}");
        }
    }
}

/// `explain`'s answer. Where it reads a kernel (root and IPVS: the
/// guest), the example's Services are not in it, which it must say and
/// exit 2 for; elsewhere it says the kernel was not read and exits 0.
fn explain(args: &[&str]) -> serde_json::Value {
    let out = Command::new(PROXY)
        .arg("explain")
        .args(args)
        .args(["--output", "json"])
        .output()
        .expect("explain runs");
    let answer: serde_json::Value =
        serde_json::from_str(&String::from_utf8_lossy(&out.stdout))
            .unwrap_or_else(|e| {
                panic!(
                    "explain {args:?}: {e}: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
    let kernel_read = answer.get("kernelNotRead").is_none();
    if kernel_read {
        let checks = answer["kernel"].as_array().cloned().unwrap_or_default();
        assert!(!checks.is_empty(), "{answer:#}");
        for check in checks {
            assert_eq!(
                check["differences"],
                serde_json::json!(["missing from the kernel"]),
                "{answer:#}"
            );
        }
    }
    assert_eq!(
        out.status.code(),
        Some(if kernel_read { 2 } else { 0 }),
        "explain {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    answer
}

/// Each frontend with the endpoints it uses, and whether every other
/// endpoint shown has a reason.
fn used_by_frontend(answer: &serde_json::Value) -> Vec<(String, Vec<String>)> {
    let mut used = Vec::new();
    for port in answer["ports"].as_array().into_iter().flatten() {
        for f in port["frontends"].as_array().into_iter().flatten() {
            let name = format!("{} {}:{}", f["kind"], f["address"], f["port"]);
            let mut addresses = Vec::new();
            for e in f["endpoints"].as_array().into_iter().flatten() {
                if e["used"] == true {
                    addresses.push(e["address"].to_string());
                } else {
                    assert!(e["reason"].is_string(), "{e}");
                }
            }
            used.push((name, addresses));
        }
    }
    used
}

/// Through the API side, `explain` knows only the node's view, and says
/// so; what each frontend uses is what it uses from the objects.
#[test]
fn explain_through_the_api_side_uses_what_the_objects_give() {
    for file in ["topology-hints.yaml", "loadbalancer-local.yaml"] {
        let scratch = Scratch::new(&format!("explain-{file}"));
        let state = Path::new(EXAMPLES).join("plan").join(file);
        let service = match file {
            "topology-hints.yaml" => "default/api",
            _ => "default/shop",
        };
        let api = ApiSide::start(&state, &scratch.0);
        let path = state.to_str().unwrap();
        let direct = explain(&["--state", path, "--node", "node-a", service]);
        let fed = explain(&[
            "--api-endpoint",
            &api.endpoint,
            "--node",
            "node-a",
            service,
        ]);
        assert_eq!(direct["allEndpointsKnown"], true, "{direct:#}");
        assert_eq!(fed["allEndpointsKnown"], false, "{fed:#}");
        assert_eq!(used_by_frontend(&fed), used_by_frontend(&direct), "{file}");
        assert!(!used_by_frontend(&direct).is_empty(), "{direct:#}");
    }
}

/// A state file in `scratch` with the NodePort example (node port
/// 30080), and its text, for a test to edit.
fn nodeport_state(scratch: &Scratch) -> (PathBuf, String) {
    let state = scratch.0.join("state.yaml");
    let original =
        fs::read_to_string(Path::new(EXAMPLES).join("plan/nodeport.yaml"))
            .expect("example");
    fs::write(&state, &original).unwrap();
    (state, original)
}

#[test]
fn the_api_side_follows_its_state_file() {
    let scratch = Scratch::new("follows");
    let (state, original) = nodeport_state(&scratch);
    let api = ApiSide::start(&state, &scratch.0);
    let fed =
        |node: &str| plan(&["--api-endpoint", &api.endpoint, "--node", node]);
    let before = fed("node-a");
    let port = "30080";
    assert!(before.contains(port), "{before}");

    fs::write(&state, original.replace(port, "30099")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = fed("node-a");
        if now.contains("30099") {
            let direct =
                plan(&["--state", state.to_str().unwrap(), "--node", "node-a"]);
            assert_eq!(now, direct);
            break;
        }
        assert!(Instant::now() < deadline, "the edit never showed: {now}");
        thread::sleep(Duration::from_millis(200));
    }
}

/// Without `--node`, the node the proxy would be (`--hostname-override`),
/// named when its view cannot be read; plain TCP is refused.
#[test]
fn plan_from_the_api_side_names_its_node_and_needs_tls_over_tcp() {
    let out = Command::new(PROXY)
        .args(["plan", "--api-endpoint", "unix:///nowhere.sock"])
        .args(["--hostname-override", "node-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("node-q") && said.contains("unix:///nowhere.sock"),
        "{said}"
    );
    let out = Command::new(PROXY)
        .args(["plan", "--api-endpoint", "198.18.0.1:9000", "--node", "a"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TLS"));
}

/// The API side killed and started again: a node's watch yields nothing
/// meanwhile (its kernel keeps what it has), then resumes on its own with
/// a full state from the new process, which has what changed meanwhile.
#[tokio::test]
async fn a_node_catches_up_with_an_api_side_killed_and_started_again() {
    use futures::StreamExt;
    use kube_ipvs_proxy::{
        nodeview::endpoint::{ApiEndpoint, Credentials},
        nodeview::Change,
        source::nodeview::watch,
    };

    let scratch = Scratch::new("restart");
    let (state, original) = nodeport_state(&scratch);
    let api = ApiSide::start(&state, &scratch.0);
    let socket = scratch.0.join("views.sock");
    let mut view = watch(
        &tokio::runtime::Handle::current(),
        ApiEndpoint::Unix(socket.clone()),
        Credentials::default(),
        "node-a".to_owned(),
    );
    let wait = Duration::from_secs(30);
    let first = tokio::time::timeout(wait, view.next())
        .await
        .expect("a view")
        .expect("the stream goes on");
    assert!(first.full);

    drop(api);
    let quiet = tokio::time::timeout(Duration::from_secs(2), view.next()).await;
    assert!(
        quiet.is_err(),
        "nothing while the API side is gone: {quiet:?}"
    );

    fs::write(&state, original.replace("30080", "30099")).unwrap();
    let _again = ApiSide::start(&state, &scratch.0);
    let update = tokio::time::timeout(wait, view.next())
        .await
        .expect("a view")
        .expect("the stream goes on");
    assert!(update.full, "another process: a full state");
    let node_ports: Vec<u16> = update
        .changes
        .iter()
        .filter_map(|c| match c {
            Change::Service(_, svc) => Some(svc.node_port),
            _ => None,
        })
        .collect();
    assert!(node_ports.contains(&30099), "{node_ports:?}");
    assert!(!node_ports.contains(&30080), "{node_ports:?}");
}

/// What the API side sent, as its /metrics counts it: one full view to
/// one node with as many changes as the node received, and the watch
/// counted as open only while the node watches.
#[tokio::test]
async fn the_api_side_counts_the_views_it_sends() {
    use futures::StreamExt;
    use kube_ipvs_proxy::{
        nodeview::endpoint::{ApiEndpoint, Credentials},
        source::nodeview::watch,
    };

    let scratch = Scratch::new("metrics");
    let (state, _) = nodeport_state(&scratch);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let _api = ApiSide::start_with(
        &state,
        &scratch.0,
        &format!("--metrics-bind-address={addr}"),
    );
    let metrics = || async move {
        tokio::task::spawn_blocking(move || {
            testkit::http_get(addr, "/metrics", Duration::from_secs(2))
        })
        .await
        .expect("the request runs")
    };
    let wait = Duration::from_secs(30);
    let metric = |body: &str, name: &str| testkit::metric_sum(body, name);

    let mut view = watch(
        &tokio::runtime::Handle::current(),
        ApiEndpoint::Unix(scratch.0.join("views.sock")),
        Credentials::default(),
        "node-a".to_owned(),
    );
    let first = tokio::time::timeout(wait, view.next())
        .await
        .expect("a view")
        .expect("the stream goes on");
    assert!(first.full);
    let body = metrics().await.expect("/metrics answers").1;
    assert_eq!(metric(&body, "kube_ipvs_proxy_api_side_watches"), 1.0);
    assert_eq!(metric(&body, "kube_ipvs_proxy_api_side_views"), 1.0);
    assert!(
        body.contains(
            "kube_ipvs_proxy_api_side_updates_sent_total{kind=\"full\"} 1"
        ),
        "{body}"
    );
    assert_eq!(
        metric(&body, "kube_ipvs_proxy_api_side_changes_sent_total"),
        first.changes.len() as f64
    );
    assert!(metric(&body, "kube_ipvs_proxy_api_side_sent_bytes_total") > 0.0);
    assert!(
        metric(
            &body,
            "kube_ipvs_proxy_api_side_sync_duration_seconds_count"
        ) >= 1.0
    );

    drop(view);
    let deadline = Instant::now() + wait;
    loop {
        let body = metrics().await.expect("/metrics answers").1;
        if metric(&body, "kube_ipvs_proxy_api_side_watches") == 0.0 {
            // The view stays: a node that comes back resumes from it.
            assert_eq!(metric(&body, "kube_ipvs_proxy_api_side_views"), 1.0);
            break;
        }
        assert!(Instant::now() < deadline, "the watch still counted: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
