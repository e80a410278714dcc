//! kubernetes-mixin's kube-proxy dashboard and alerts against the proxy,
//! through a real Prometheus (Debian's), in the guest (`make e2e`).
//!
//! Prometheus finds the proxy as kube-prometheus' PodMonitor would:
//! deploy/monitoring/podmonitor.yaml's selector (namespace kube-system,
//! `k8s-app: kube-proxy`) lists the Pods through the API server, its
//! jobLabel names the job, its relabelings give the address (the pod's IP,
//! port 10249) and the instance (the node). Debian's Prometheus is built
//! without Kubernetes discovery, so the test does that listing and hands
//! Prometheus the targets as a file (file_sd), as the operator's
//! discovery would. With no kubelet here, the test binds deploy/'s
//! DaemonSet Pod to the guest's node and reports it running on the node's
//! address, where the proxy serves its metrics.
//!
//! The proxy then lives through what fills the dashboard: services and
//! readiness changes (syncs, network programming), a health check node
//! port it cannot open (upstream's Warning Event: a POST), an API server
//! restart while its RBAC binding is gone (403s, relists). Every
//! dashboard query of `mixin/kube-proxy.yaml` is run and printed and must
//! return data, but the 3xx and 5xx request rates, which only an API
//! server failing in ways this run cannot cause for real would fill
//! (`NO_DATA_HERE` says why); every alert must fire once the proxy is
//! stopped.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::{
    core::v1::{Pod, Service},
    events::v1::Event,
    rbac::v1::ClusterRoleBinding,
};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{control, Guest, GuestCluster, NODE, NODE_IP};
use crate::scenarios::{expect_serving, programming, Cluster, Node};

const FIXTURE: &str = include_str!("../mixin/kube-proxy.yaml");
/// Prometheus' API inside the guest.
const PROMETHEUS: &str = "127.0.0.1:19090";
/// Health check node ports the test holds, so the proxy cannot open them.
const TAKEN_PORTS: [u16; 2] = [31990, 31992];
/// The queries this run cannot fill, and why: they count answers the API
/// server gives only when something is wrong on its side.
const NO_DATA_HERE: [(&str, &str); 2] = [
    (
        "Kube API Request Rate (3xx)",
        "the API server never answers the proxy's requests with a redirect",
    ),
    (
        "Kube API Request Rate (5xx)",
        "no 5xx could be caused for real: with etcd stopped the API \
         server holds the service account's requests until its 60 s \
         handler timeout and then resets the HTTP/2 stream (the client \
         counts <error>), where an HTTP/1.1 client would get a 504",
    ),
];

#[derive(Debug, Deserialize)]
struct Mixin {
    dashboard: Vec<Query>,
    alerts: Vec<Alert>,
}

#[derive(Debug, Deserialize)]
struct Query {
    panel: String,
    expr: String,
}

#[derive(Debug, Deserialize)]
struct Alert {
    alert: String,
    expr: String,
}

/// The dashboard's variables for this cluster: no `cluster` label (one
/// Prometheus, one cluster), the guest's node as the instance.
fn fill(expr: &str) -> String {
    expr.replace("$cluster", "").replace("$instance", NODE)
}

/// A Prometheus server in the guest, stopped when dropped.
struct Prometheus {
    child: Child,
    dir: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const POD_MONITOR: &str =
    include_str!("../../../deploy/monitoring/podmonitor.yaml");

/// The targets deploy/'s PodMonitor selects, as Prometheus' file_sd reads
/// them: its namespace and label selector listed through the API, the
/// job from its jobLabel, address and instance from its relabelings.
fn pod_monitor_targets(cluster: &GuestCluster) -> Result<Value> {
    let monitor: Value = serde_saphyr::from_str(POD_MONITOR)?;
    let spec = &monitor["spec"];
    let namespace = spec["namespaceSelector"]["matchNames"][0]
        .as_str()
        .context("the PodMonitor's namespace")?;
    let selector: Vec<String> = spec["selector"]["matchLabels"]
        .as_object()
        .context("the PodMonitor's matchLabels")?
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    let job_label = spec["jobLabel"].as_str().context("jobLabel")?;
    let relabelings = spec["podMetricsEndpoints"][0]["relabelings"]
        .as_array()
        .context("relabelings")?;
    let address = relabelings
        .iter()
        .find(|r| r["targetLabel"] == "__address__")
        .and_then(|r| r["replacement"].as_str())
        .context("the address relabeling")?;
    let api: Api<Pod> = Api::namespaced(cluster.api.client.clone(), namespace);
    let pods = cluster.api.rt.block_on(
        api.list(&ListParams::default().labels(&selector.join(","))),
    )?;
    let targets: Vec<Value> = pods
        .items
        .iter()
        .filter_map(|pod| {
            let ip = pod.status.as_ref()?.pod_ip.as_deref()?;
            let node = pod.spec.as_ref()?.node_name.as_deref()?;
            let job = pod.metadata.labels.as_ref()?.get(job_label)?;
            Some(json!({
                "targets": [address.replace("$1", ip)],
                "labels": {"job": job, "instance": node},
            }))
        })
        .collect();
    Ok(Value::Array(targets))
}

fn scrape_config(targets: &Path) -> String {
    format!(
        "global: {{scrape_interval: 1s, scrape_timeout: 1s}}\n\
         scrape_configs:\n\
         - job_name: podMonitor/monitoring/kube-ipvs-proxy/0\n  \
           honor_labels: true\n  \
           file_sd_configs:\n  \
           - files: [{}]\n    refresh_interval: 1s\n",
        targets.display()
    )
}

fn start_prometheus(targets: &Value) -> Result<Prometheus> {
    let dir = std::env::temp_dir().join("prometheus-e2e");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data"))?;
    let file = dir.join("targets.json");
    std::fs::write(&file, serde_json::to_vec(targets)?)?;
    let config = dir.join("prometheus.yml");
    std::fs::write(&config, scrape_config(&file))?;
    let log = std::fs::File::create(dir.join("prometheus.log"))?;
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={PROMETHEUS}"))
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context(
            "starting prometheus (Debian's package; tests/vm/deps.sh \
             installs it)",
        )?;
    Ok(Prometheus { child, dir })
}

impl Prometheus {
    /// Its log, for a failure's message.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log"))
            .unwrap_or_default()
    }

    /// Fails with the log if the server exited.
    fn running(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("prometheus exited ({status}):\n{}", self.log());
        }
        Ok(())
    }
}

/// The characters a query needs escaped in a URL's query string.
fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(byte as char);
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// An instant query's result vector.
fn query(expr: &str) -> Result<Vec<Value>> {
    let addr: SocketAddr = PROMETHEUS.parse()?;
    let path = format!("/api/v1/query?query={}", url_encode(expr));
    let (status, body) =
        testkit::http_get(addr, &path, Duration::from_secs(10))?;
    let answer: Value = serde_json::from_str(&body)
        .with_context(|| format!("{status}: {body}"))?;
    if answer["status"] != "success" {
        bail!("{expr}: {body}");
    }
    Ok(answer["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// `{labels} value` for each sample, as the run prints it.
fn show(result: &[Value]) -> String {
    if result.is_empty() {
        return "(no data)".to_owned();
    }
    // A variable's query lists every bucket: the first few say enough.
    const SHOWN: usize = 4;
    let more = result.len().saturating_sub(SHOWN);
    let shown = result
        .iter()
        .take(SHOWN)
        .map(|sample| {
            let labels = sample["metric"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            let value = sample["value"][1].as_str().unwrap_or("?");
            format!("{{{labels}}} {value}")
        })
        .collect::<Vec<_>>()
        .join("; ");
    if more > 0 {
        format!("{shown}; ... ({} series)", result.len())
    } else {
        shown
    }
}

fn wait_until(
    what: &str,
    limit: Duration,
    mut done: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let start = Instant::now();
    loop {
        match done() {
            Ok(true) => {
                println!(
                    "  {what}: after {:.1}s",
                    start.elapsed().as_secs_f64()
                );
                return Ok(());
            }
            Ok(false) | Err(_) if start.elapsed() < limit => {
                thread::sleep(Duration::from_millis(500))
            }
            Ok(false) => bail!("timed out after {limit:?} waiting for {what}"),
            Err(e) => return Err(e.context(format!("waiting for {what}"))),
        }
    }
}

/// The sum of the proxy's `rest_client_requests_total` samples whose
/// code starts with `class` (`"4"`, `"5"`).
fn requests_with_code(class: &str) -> Result<f64> {
    let text = Guest.metrics()?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("rest_client_requests_total{"))
        .filter(|l| l.contains(&format!("code=\"{class}")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// What a scheduler and a kubelet would do for the DaemonSet's Pod on the
/// guest's node: bind it there, then report it running on the node's
/// address (host network).
fn run_daemonset_pod(cluster: &GuestCluster) -> Result<String> {
    let api: Api<Pod> =
        Api::namespaced(cluster.api.client.clone(), "kube-system");
    let rt = &cluster.api.rt;
    let mut name = None;
    wait_until("the DaemonSet's Pod", Duration::from_secs(60), || {
        let pods = rt.block_on(
            api.list(
                &ListParams::default()
                    .labels("app.kubernetes.io/name=kube-ipvs-proxy"),
            ),
        )?;
        name = pods.items.into_iter().find_map(|p| p.metadata.name);
        Ok(name.is_some())
    })?;
    let name = name.context("no DaemonSet Pod")?;
    let pod = rt.block_on(api.get(&name))?;
    let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    if bound != Some(NODE) {
        let binding = json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
        });
        rt.block_on(api.create_subresource::<Value, Value>(
            "binding",
            &name,
            &PostParams::default(),
            &binding,
        ))?;
    }
    let status = json!({"status": {
        "phase": "Running",
        "hostIP": NODE_IP,
        "hostIPs": [{"ip": NODE_IP}],
        "podIP": NODE_IP,
        "podIPs": [{"ip": NODE_IP}],
        "conditions": [{"type": "Ready", "status": "True"}],
    }});
    rt.block_on(api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(status),
    ))?;
    Ok(name)
}

/// An `externalTrafficPolicy: Local` load balancer whose health check
/// node port the test holds.
fn local_load_balancer(
    cluster: &GuestCluster,
    name: &str,
    health_port: u16,
) -> Result<()> {
    let api: Api<Service> =
        Api::namespaced(cluster.api.client.clone(), &cluster.api.ns);
    let body = json!({
        "metadata": {"name": name},
        "spec": {
            "type": "LoadBalancer",
            "externalTrafficPolicy": "Local",
            "healthCheckNodePort": health_port,
            "selector": {"app": name},
            "ports": [{"port": 80, "targetPort": 8080}],
        },
    });
    cluster.api.rt.block_on(
        api.create(&PostParams::default(), &serde_json::from_value(body)?),
    )?;
    Ok(())
}

/// Events of `namespace` with `reason`, as `reporting controller/regarding
/// kind/name` lines.
fn events(
    cluster: &GuestCluster,
    namespace: &str,
    reason: &str,
) -> Result<Vec<String>> {
    let api: Api<Event> =
        Api::namespaced(cluster.api.client.clone(), namespace);
    let list = cluster.api.rt.block_on(api.list(&ListParams::default()))?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| {
            let regarding = e.regarding.unwrap_or_default();
            format!(
                "{}/{}/{}",
                e.reporting_controller.unwrap_or_default(),
                regarding.kind.unwrap_or_default(),
                regarding.name.unwrap_or_default()
            )
        })
        .collect())
}

/// The proxy's binding removed, the API server restarted so that the
/// watches must list again (403), the binding back: the proxy recovers.
fn revoke_rbac_across_a_restart(cluster: &GuestCluster) -> Result<()> {
    let api: Api<ClusterRoleBinding> = Api::all(cluster.api.client.clone());
    let rt = &cluster.api.rt;
    let mut binding = rt.block_on(api.get("kube-ipvs-proxy"))?;
    rt.block_on(api.delete("kube-ipvs-proxy", &Default::default()))?;
    let before = requests_with_code("4")?;
    control("apiserver-stop")?;
    control("apiserver-start")?;
    let forbidden = wait_until(
        "the proxy's relists answered 403",
        Duration::from_secs(90),
        || Ok(requests_with_code("4")? > before),
    );
    binding.metadata = kube::api::ObjectMeta {
        name: binding.metadata.name.clone(),
        labels: binding.metadata.labels.clone(),
        ..Default::default()
    };
    rt.block_on(api.create(&PostParams::default(), &binding))?;
    forbidden
}

#[test]
#[cfg_attr(
    not(all(feature = "kernel-tests", feature = "e2e-tests")),
    ignore = "needs the guest and the control plane: run `make e2e`"
)]
fn the_kube_proxy_dashboard_and_alerts_have_data() -> Result<()> {
    let mixin: Mixin = serde_saphyr::from_str(FIXTURE)?;
    // Taken before the proxy starts, so its first sync already fails.
    let _held: Vec<TcpListener> = TAKEN_PORTS
        .iter()
        .map(|p| TcpListener::bind(("0.0.0.0", *p)))
        .collect::<Result<_, _>>()?;
    let mut c = GuestCluster::with_proxy_args(
        "e2e-dashboards",
        44,
        &["--metrics-bind-address=0.0.0.0:10249"],
    )?;
    let pod = run_daemonset_pod(&c)?;
    println!(
        "  the DaemonSet's Pod kube-system/{pod} runs on {NODE} ({NODE_IP})"
    );
    let targets = pod_monitor_targets(&c)?;
    println!("  the PodMonitor's targets: {targets}");
    let mut prometheus = start_prometheus(&targets)?;
    let scraping = wait_until(
        "Prometheus scrapes the proxy as job=\"kube-proxy\"",
        Duration::from_secs(180),
        || {
            prometheus.running()?;
            Ok(!query("up{job=\"kube-proxy\"} == 1")?.is_empty())
        },
    );
    if let Err(e) = scraping {
        bail!("{e:#}\nprometheus log:\n{}", prometheus.log());
    }

    // A health check port the proxy cannot open: upstream's Warning Event.
    local_load_balancer(&c, "held-1", TAKEN_PORTS[0])?;
    revoke_rbac_across_a_restart(&c)?;

    // A second Warning Event after the outages: a POST inside the rate
    // window.
    local_load_balancer(&c, "held-2", TAKEN_PORTS[1])?;
    // Syncs and network programming: a service, its pods, readiness.
    let ports = json!([{"name": "http", "port": 80, "targetPort": 8080}]);
    let ip = c.service("dash", ports)?;
    let vs = format!("{ip}:80");
    let before = programming(&Guest)?;
    let one =
        format!("{}:8080", c.add_pod("dash-1", "dash", &[("http", 8080)])?);
    expect_serving(&c, "one pod", &vs, &[&one], before)?;
    let before = programming(&Guest)?;
    let two =
        format!("{}:8080", c.add_pod("dash-2", "dash", &[("http", 8080)])?);
    expect_serving(&c, "two pods", &vs, &[&one, &two], before)?;
    let before = programming(&Guest)?;
    c.set_ready("dash-1", false)?;
    expect_serving(&c, "dash-1 not ready", &vs, &[&two], before)?;
    // Two scrapes after the last change, for every rate.
    thread::sleep(Duration::from_secs(3));

    println!(
        "kubernetes-mixin kube-proxy dashboard ({} queries):",
        mixin.dashboard.len()
    );
    let mut empty = Vec::new();
    let mut results = BTreeMap::new();
    for q in &mixin.dashboard {
        let expr = fill(&q.expr);
        let result = query(&expr)?;
        println!("  {}: {expr}\n    = {}", q.panel, show(&result));
        if result.is_empty() {
            empty.push(q.panel.clone());
        }
        results.insert(q.panel.clone(), result);
    }
    let unexpected: Vec<&String> = empty
        .iter()
        .filter(|p| !NO_DATA_HERE.iter().any(|(panel, _)| p == panel))
        .collect();
    if !unexpected.is_empty() {
        bail!("queries without data: {unexpected:?}\n{}", c.proxy_log());
    }

    // The start-up Event on the Node, and the Warning on the Service.
    let starting = events(&c, "default", "Starting")?;
    assert!(
        starting.contains(&format!("kube-proxy/Node/{NODE}")),
        "{starting:?}"
    );
    let failed = events(&c, &c.api.ns, "FailedToStartServiceHealthcheck")?;
    assert!(
        failed.contains(&"kube-proxy/Service/held-1".to_owned()),
        "{failed:?}"
    );
    println!("  events: Starting {starting:?}, FailedToStartServiceHealthcheck {failed:?}");

    // The alerts: quiet while the proxy answers, firing once it is gone.
    println!(
        "kubernetes-mixin kube-proxy alerts ({}):",
        mixin.alerts.len()
    );
    for a in &mixin.alerts {
        let result = query(&a.expr)?;
        println!(
            "  {} (proxy up): {}\n    = {}",
            a.alert,
            a.expr,
            show(&result)
        );
        assert!(result.is_empty(), "{} fires while the proxy is up", a.alert);
    }
    c.stop_proxy();
    wait_until(
        "Prometheus sees the proxy down",
        Duration::from_secs(30),
        || Ok(!query("up{job=\"kube-proxy\"} == 0")?.is_empty()),
    )?;
    for a in &mixin.alerts {
        let result = query(&a.expr)?;
        println!(
            "  {} (proxy stopped): {}\n    = {}",
            a.alert,
            a.expr,
            show(&result)
        );
        assert!(
            !result.is_empty(),
            "{} does not fire with the proxy gone",
            a.alert
        );
    }
    println!(
        "  {} of {} dashboard queries returned data",
        mixin.dashboard.len() - empty.len(),
        mixin.dashboard.len()
    );
    for (panel, why) in NO_DATA_HERE {
        println!("  {panel}: {} ({why})", show(&results[panel]));
    }
    Ok(())
}
