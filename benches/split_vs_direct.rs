//! The API/node split against proxies that each watch the API server,
//! measured at a real kube-apiserver (the loopback control plane that
//! tests/e2e/control-plane.sh starts), N nodes each way in one run:
//!
//! - direct: N nodes in this process, each with a client of its own (its
//!   own connections) watching Services, EndpointSlices and its Node, as
//!   a proxy does, into the trackers and the desired state;
//! - split: one `kube-ipvs-proxy api-server` process watching the API
//!   server, and N nodes in this process, each a real gRPC client of it
//!   over a Unix socket, into the same trackers and desired state,
//!   started once the API side has made its first sync. The split goes
//!   first, so that what the API server kept of the direct watches is
//!   not charged to it.
//!
//! Both sides stop short of the kernel, which would be the same on both.
//! Measured at the API server: watches open, bytes its watches sent per
//! change and node (`apiserver_watch_events_sizes`), its CPU during the
//! changes and its RSS; at the API side: its CPU and RSS, bytes it sent;
//! and for the N nodes: the time from a slice's write to every node's
//! desired state, their heap and CPU.
//!
//! `make bench-split-vs-direct` (tests/e2e/bench-split-vs-direct.sh)
//! starts the control plane and runs this with KUBECONFIG,
//! BENCH_APISERVER_PID and BENCH_PROXY_BIN set; BENCH_SPLIT_SERVICES
//! (10,000), BENCH_SPLIT_NODES (100) and BENCH_SPLIT_CHANGES (50) set
//! the sizes.

use std::{
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::atomic::Ordering,
    time::{Duration, Instant, SystemTime},
};

use anyhow::{bail, ensure, Context};
use bench_support::{
    counting::{mib, process_cpu, Counting, LIVE},
    view_node,
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::{
    core::v1::{Namespace, Node, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    api::{Api, Patch, PatchParams, PostParams},
    runtime::watcher::Event,
    Client,
};
use kube_ipvs_proxy::{
    nodeview::Change,
    source::{kube::watch, listwatch::Accept, store::Stores, SourceEvent},
    sync::{NodeSettings, SyncState},
};
use serde_json::json;
use testkit::client::{http_get, metric_sum};
use tokio::sync::mpsc;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const NAMESPACE: &str = "bench";
const ENDPOINTS: usize = 10;
const ZONES: usize = 3;
/// Service `k`'s cluster IP is 198.18.0.0 + FIRST + k: clear of the
/// `kubernetes` service and of the control plane's node (198.18.100.1)
/// up to 20,000 services.
const FIRST: u32 = 4096;
/// Requests in flight while populating: enough to keep the API server
/// busy, few enough not to time out on two cores.
const POPULATE_CONCURRENCY: usize = 32;
/// How long every node may take to have one change, or to sync at first.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(60);
const SYNC_TIMEOUT: Duration = Duration::from_secs(1800);

fn setting(name: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(name) {
        Ok(v) => v.parse().with_context(|| format!("{name}={v}")),
        Err(_) => Ok(default),
    }
}

fn ipv4(base: [u8; 4], n: u32) -> String {
    Ipv4Addr::from(u32::from(Ipv4Addr::from(base)) + n).to_string()
}

fn service_name(k: usize) -> String {
    format!("svc-{k}")
}

fn service(k: usize) -> anyhow::Result<Service> {
    let ip = ipv4([198, 18, 0, 0], FIRST + k as u32);
    Ok(serde_json::from_value(json!({
        "metadata": {"name": service_name(k), "namespace": NAMESPACE},
        "spec": {
            "clusterIP": ip,
            "clusterIPs": [ip],
            "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
            "type": "ClusterIP"
        }
    }))?)
}

/// The address of the `c`th change: 198.18.128.0/17, clear of the
/// services and the nodes.
fn churn_address(c: usize) -> String {
    ipv4([198, 18, 128, 0], (c % 32_768) as u32)
}

/// Service `k`'s slice, its endpoints spread over the nodes; the `c`th
/// change moves its last endpoint to an address of its own, as a pod
/// replaced by another would.
fn slice(
    k: usize,
    nodes: usize,
    change: Option<usize>,
) -> anyhow::Result<EndpointSlice> {
    let endpoints: Vec<serde_json::Value> = (0..ENDPOINTS)
        .map(|j| {
            let address = match change {
                Some(c) if j == ENDPOINTS - 1 => churn_address(c),
                _ => ipv4([198, 19, 0, 0], (k * ENDPOINTS + j) as u32),
            };
            let node = (k + j) % nodes;
            json!({"addresses": [address], "conditions": {"ready": true},
                   "nodeName": format!("node-{node}"),
                   "zone": format!("zone-{}", node % ZONES)})
        })
        .collect();
    Ok(serde_json::from_value(json!({
        "metadata": {
            "name": format!("{}-abcde", service_name(k)),
            "namespace": NAMESPACE,
            "labels": {"kubernetes.io/service-name": service_name(k)}
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}]
    }))?)
}

fn node(i: usize) -> anyhow::Result<Node> {
    Ok(serde_json::from_value(json!({
        "metadata": {
            "name": format!("node-{i}"),
            "labels": {"topology.kubernetes.io/zone": format!("zone-{}", i % ZONES)}
        },
        "status": {"addresses": [{"type": "InternalIP",
                                  "address": ipv4([198, 18, 224, 0], i as u32)}]}
    }))?)
}

/// The namespace, `nodes` Nodes, `services` services and their slices.
async fn populate(
    client: &Client,
    services: usize,
    nodes: usize,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let pp = PostParams::default();
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&pp, &ns)
        .await
        .context("creating namespace bench")?;
    let node_api = Api::<Node>::all(client.clone());
    futures::stream::iter(0..nodes)
        .map(|i| {
            let (api, pp) = (node_api.clone(), pp.clone());
            async move {
                api.create(&pp, &node(i)?)
                    .await
                    .with_context(|| format!("creating node-{i}"))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(POPULATE_CONCURRENCY)
        .try_collect::<()>()
        .await?;
    let svc_api = Api::<Service>::namespaced(client.clone(), NAMESPACE);
    let slice_api = Api::<EndpointSlice>::namespaced(client.clone(), NAMESPACE);
    futures::stream::iter(0..services)
        .map(|k| {
            let (svc_api, slice_api, pp) =
                (svc_api.clone(), slice_api.clone(), pp.clone());
            async move {
                svc_api
                    .create(&pp, &service(k)?)
                    .await
                    .with_context(|| format!("creating {}", service_name(k)))?;
                slice_api
                    .create(&pp, &slice(k, nodes, None)?)
                    .await
                    .with_context(|| {
                        format!("creating {}'s slice", service_name(k))
                    })?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(POPULATE_CONCURRENCY)
        .try_collect::<()>()
        .await?;
    println!(
        "populated {nodes} nodes, {services} services and slices in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Another process's CPU so far, from /proc.
fn cpu_of(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("process {pid}"))?;
    // After the command's closing parenthesis: state is field 3, utime
    // and stime fields 14 and 15.
    let rest = stat.rsplit_once(')').context("/proc stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<u64> {
        Ok(fields.get(i).context("/proc stat field")?.parse()?)
    };
    // SAFETY: sysconf only reads.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let total = ticks(11)? + ticks(12)?;
    Ok(Duration::from_micros(total * 1_000_000 / hz))
}

/// A process's resident memory, and its peak, from /proc.
fn rss_of(pid: u32) -> anyhow::Result<(usize, usize)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("process {pid}"))?;
    let kib = |name: &str| -> anyhow::Result<usize> {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .with_context(|| format!("{name} of process {pid}"))?;
        let value = line.split_whitespace().nth(1).context("a value")?;
        Ok(value.parse::<usize>()? * 1024)
    };
    Ok((kib("VmRSS:")?, kib("VmHWM:")?))
}

/// What the API server's own metrics say.
struct ApiServerMetrics {
    watches: f64,
    watch_bytes: f64,
}

async fn apiserver_metrics(
    client: &Client,
) -> anyhow::Result<ApiServerMetrics> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await.context("/metrics")?;
    let mut metrics = ApiServerMetrics {
        watches: 0.0,
        watch_bytes: 0.0,
    };
    for line in text.lines() {
        let value = || -> f64 {
            line.rsplit_once(' ')
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0.0)
        };
        if line.starts_with("apiserver_longrunning_requests{")
            && line.contains("verb=\"WATCH\"")
        {
            metrics.watches += value();
        }
    }
    metrics.watch_bytes = metric_sum(&text, "apiserver_watch_events_sizes_sum");
    Ok(metrics)
}

/// One of the API side's own metrics, summed over its label sets.
async fn api_side_metric(
    address: SocketAddr,
    name: &str,
) -> anyhow::Result<f64> {
    let (status, text) = tokio::task::spawn_blocking(move || {
        http_get(address, "/metrics", Duration::from_secs(10))
    })
    .await??;
    ensure!(status == 200, "the API side's /metrics answered {status}");
    Ok(metric_sum(&text, name))
}

/// What a node tells the bench.
enum Seen {
    Synced,
    /// Node, service: the node's desired state has the service's change.
    Changed(usize, usize),
    Failed(usize, String),
}

fn service_index(name: &str) -> Option<usize> {
    name.strip_prefix("svc-")?.parse().ok()
}

fn new_state(name: &str) -> SyncState {
    SyncState::new(name, NodeSettings::default(), None, SystemTime::now())
}

/// A proxy's input half watching the API server itself.
async fn direct_node(
    i: usize,
    tx: mpsc::UnboundedSender<Seen>,
) -> anyhow::Result<()> {
    let name = format!("node-{i}");
    // A client of its own: its own connections, as a process has.
    let client = Client::try_default().await.context("KUBECONFIG")?;
    let events = watch(client, Accept::protobuf(), &name, None)?;
    futures::pin_mut!(events);
    let mut stores = Stores::new(name.as_str());
    let mut state = new_state(&name);
    let mut inits = 0;
    while let Some(event) = events.next().await {
        let changed = match &event {
            SourceEvent::EndpointSlice(Event::Apply(s)) => s
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("kubernetes.io/service-name"))
                .and_then(|n| service_index(n)),
            _ => None,
        };
        let init_done = matches!(
            event,
            SourceEvent::Service(Event::InitDone)
                | SourceEvent::EndpointSlice(Event::InitDone)
                | SourceEvent::Node(Event::InitDone)
        );
        for change in stores.apply(event) {
            state.apply(&change);
        }
        if init_done {
            inits += 1;
            if inits == 3 {
                state.sync();
                let _ = tx.send(Seen::Synced);
            }
        } else if let Some(k) = changed {
            state.sync();
            let _ = tx.send(Seen::Changed(i, k));
        }
    }
    bail!("the watch ended")
}

/// A node fed by the API side.
async fn split_node(
    i: usize,
    socket: PathBuf,
    tx: mpsc::UnboundedSender<Seen>,
) -> anyhow::Result<()> {
    let (mut updates, mut state) = view_node::start(i, socket);
    let mut synced = false;
    while let Some(update) = updates.next().await {
        let full = update.full;
        let changed: Vec<usize> = update
            .changes
            .iter()
            .filter_map(|c| match c {
                Change::Endpoints(port, _) => service_index(&port.service.name),
                _ => None,
            })
            .collect();
        state.apply_view(update);
        state.sync();
        if !synced {
            synced = true;
            let _ = tx.send(Seen::Synced);
        } else if !full {
            for k in changed {
                let _ = tx.send(Seen::Changed(i, k));
            }
        }
    }
    bail!("the view ended")
}

/// What one way of feeding the nodes measured.
struct Figures {
    watches: f64,
    synced_in: Duration,
    nodes_heap: usize,
    nodes_cpu_synced: Duration,
    latencies: Vec<Duration>,
    missed: usize,
    apiserver_cpu: Duration,
    apiserver_bytes: f64,
    /// The API server's RSS once the nodes synced. Go gives memory back
    /// lazily, so this is after the other way's run too: the split goes
    /// first.
    apiserver_rss: usize,
    /// The API side's RSS before any node connected: its cluster alone.
    side_rss_alone: usize,
    nodes_cpu_changes: Duration,
    /// The API side's: CPU during the changes, RSS, bytes sent to the
    /// nodes during the changes.
    api_side: Option<(Duration, usize, f64)>,
}

struct Run<'a> {
    admin: &'a Client,
    apiserver_pid: u32,
    nodes: usize,
    services: usize,
    changes: usize,
}

impl Run<'_> {
    /// Writes the `c`th change; the service it changed.
    async fn change(&self, c: usize) -> anyhow::Result<usize> {
        let k = (c * 7919) % self.services;
        let name = format!("{}-abcde", service_name(k));
        Api::<EndpointSlice>::namespaced(self.admin.clone(), NAMESPACE)
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&slice(k, self.nodes, Some(c))?),
            )
            .await
            .with_context(|| format!("patching {name}"))?;
        Ok(k)
    }

    /// What a change costs the API server with no proxy watching (its
    /// own controllers' watches, the write itself): watch bytes and CPU
    /// per change.
    async fn baseline(
        &self,
        first_change: usize,
    ) -> anyhow::Result<(f64, Duration)> {
        let before = apiserver_metrics(self.admin).await?.watch_bytes;
        let cpu = cpu_of(self.apiserver_pid)?;
        for c in first_change..first_change + self.changes {
            self.change(c).await?;
        }
        // As in a measured run, up to the last write; the controllers'
        // watches are served in the background, and counted a moment
        // after (not longer: the node controller updates the Nodes).
        let cpu = cpu_of(self.apiserver_pid)? - cpu;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let bytes = apiserver_metrics(self.admin).await?.watch_bytes - before;
        Ok((bytes / self.changes as f64, cpu / self.changes as u32))
    }

    /// Starts the nodes, waits for all of them to sync, then makes the
    /// changes one at a time, each seen by every node before the next.
    async fn measure<F>(
        &self,
        first_change: usize,
        node: impl Fn(usize, mpsc::UnboundedSender<Seen>) -> F,
        api_side: Option<(u32, SocketAddr)>,
    ) -> anyhow::Result<Figures>
    where
        F: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let side_rss_alone = match api_side {
            Some((pid, _)) => rss_of(pid)?.0,
            None => 0,
        };
        let heap_before = LIVE.load(Ordering::Relaxed);
        let cpu_before = process_cpu();
        let started = Instant::now();
        let tasks: Vec<_> = (0..self.nodes)
            .map(|i| {
                let (running, tx) = (node(i, tx.clone()), tx.clone());
                tokio::spawn(async move {
                    if let Err(e) = running.await {
                        let _ = tx.send(Seen::Failed(i, format!("{e:#}")));
                    }
                })
            })
            .collect();
        let mut synced = 0;
        while synced < self.nodes {
            match tokio::time::timeout(SYNC_TIMEOUT, rx.recv()).await {
                Ok(Some(Seen::Synced)) => synced += 1,
                Ok(Some(Seen::Changed(..))) => {}
                Ok(Some(Seen::Failed(i, e))) => bail!("node-{i}: {e}"),
                Ok(None) | Err(_) => {
                    bail!("{synced} of {} nodes synced", self.nodes)
                }
            }
        }
        let synced_in = started.elapsed();
        let nodes_cpu_synced = process_cpu() - cpu_before;
        let nodes_heap =
            LIVE.load(Ordering::Relaxed).saturating_sub(heap_before);
        let watches = apiserver_metrics(self.admin).await?.watches;
        let apiserver_rss = rss_of(self.apiserver_pid)?.0;

        let before = apiserver_metrics(self.admin).await?;
        let apiserver_cpu = cpu_of(self.apiserver_pid)?;
        let side_before = match api_side {
            Some((pid, address)) => Some((
                cpu_of(pid)?,
                api_side_metric(
                    address,
                    "kube_ipvs_proxy_api_side_sent_bytes_total",
                )
                .await?,
            )),
            None => None,
        };
        let cpu_before = process_cpu();
        let mut latencies = Vec::with_capacity(self.changes);
        let mut missed = 0;
        for c in first_change..first_change + self.changes {
            let started = Instant::now();
            let k = self.change(c).await?;
            let mut seen = vec![false; self.nodes];
            let mut left = self.nodes;
            let deadline = started + CHANGE_TIMEOUT;
            while left > 0 {
                let now = Instant::now();
                let wait = deadline.saturating_duration_since(now);
                match tokio::time::timeout(wait, rx.recv()).await {
                    Ok(Some(Seen::Changed(i, kk))) if kk == k && !seen[i] => {
                        seen[i] = true;
                        left -= 1;
                    }
                    Ok(Some(Seen::Failed(i, e))) => bail!("node-{i}: {e}"),
                    Ok(Some(_)) => {}
                    Ok(None) => bail!("every node ended"),
                    Err(_) => break,
                }
            }
            if left > 0 {
                missed += 1;
                eprintln!("change {c} (svc-{k}): {left} of {} nodes did not see it in {CHANGE_TIMEOUT:?}", self.nodes);
            } else {
                latencies.push(started.elapsed());
            }
        }
        let nodes_cpu_changes = process_cpu() - cpu_before;
        let apiserver_cpu = cpu_of(self.apiserver_pid)? - apiserver_cpu;
        let after = apiserver_metrics(self.admin).await?;
        let api_side = match (api_side, side_before) {
            (Some((pid, address)), Some((cpu, bytes))) => Some((
                cpu_of(pid)? - cpu,
                rss_of(pid)?.0,
                api_side_metric(
                    address,
                    "kube_ipvs_proxy_api_side_sent_bytes_total",
                )
                .await?
                    - bytes,
            )),
            _ => None,
        };
        for task in tasks {
            task.abort();
        }
        latencies.sort();
        Ok(Figures {
            watches,
            synced_in,
            nodes_heap,
            nodes_cpu_synced,
            latencies,
            missed,
            apiserver_cpu,
            apiserver_bytes: after.watch_bytes - before.watch_bytes,
            apiserver_rss,
            side_rss_alone,
            nodes_cpu_changes,
            api_side,
        })
    }
}

fn percentile_ms(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * q) as usize).min(sorted.len() - 1);
    sorted[i].as_secs_f64() * 1e3
}

/// Starts the API side on a Unix socket and its metrics on a free port.
fn start_api_side(
    bin: &Path,
    dir: &Path,
) -> anyhow::Result<(Child, PathBuf, SocketAddr)> {
    let socket = dir.join("views.sock");
    // A free port: bound, read, let go for the API side to take.
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let log = std::fs::File::create(dir.join("api-side.log"))?;
    let child = Command::new(bin)
        .arg("api-server")
        .arg("--kubeconfig")
        .arg(std::env::var("KUBECONFIG").context("KUBECONFIG")?)
        .arg("--listen")
        .arg(format!("unix://{}", socket.display()))
        .arg("--metrics-bind-address")
        .arg(metrics.to_string())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    Ok((child, socket, metrics))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let services = setting("BENCH_SPLIT_SERVICES", 10_000)?;
    let nodes = setting("BENCH_SPLIT_NODES", 100)?;
    let changes = setting("BENCH_SPLIT_CHANGES", 50)?;
    ensure!(
        services > 0 && nodes > 0 && changes > 0,
        "sizes must be positive"
    );
    ensure!(
        services <= 20_000,
        "at most 20,000 services fit the addresses"
    );
    let apiserver_pid: u32 = std::env::var("BENCH_APISERVER_PID")
        .context("BENCH_APISERVER_PID (make bench-split-vs-direct sets it)")?
        .parse()?;
    let bin = PathBuf::from(
        std::env::var("BENCH_PROXY_BIN").context("BENCH_PROXY_BIN")?,
    );
    let admin = Client::try_default().await.context("KUBECONFIG")?;
    println!(
        "split_vs_direct: {services} services × {ENDPOINTS} endpoints, {nodes} nodes in {ZONES} zones, {changes} changes, at kube-apiserver (pid {apiserver_pid})"
    );
    populate(&admin, services, nodes).await?;
    let idle = apiserver_metrics(&admin).await?.watches;
    let run = Run {
        admin: &admin,
        apiserver_pid,
        nodes,
        services,
        changes,
    };
    let (idle_bytes, idle_cpu) = run.baseline(2 * changes).await?;

    let dir = std::env::temp_dir()
        .join(format!("kip-split-vs-direct-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (mut child, socket, metrics) = start_api_side(&bin, &dir)?;
    let side_pid = child.id();
    // Listening, and its first sync made, so that the nodes' figures and
    // its RSS before them leave its own listing out.
    let waited = Instant::now();
    loop {
        let synced = api_side_metric(
            metrics,
            "kube_ipvs_proxy_api_side_sync_duration_seconds_count",
        )
        .await
        .unwrap_or(0.0);
        if synced > 0.0 && socket.exists() {
            break;
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "the API side exited ({status}); see {}",
                dir.join("api-side.log").display()
            );
        }
        ensure!(waited.elapsed() < SYNC_TIMEOUT, "the API side did not sync");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let split = run
        .measure(
            0,
            |i, tx| split_node(i, socket.clone(), tx),
            Some((side_pid, metrics)),
        )
        .await;
    let side_peak = rss_of(side_pid).map(|r| r.1).unwrap_or(0);
    let _ = child.kill();
    let _ = child.wait();
    let split = split?;
    let _ = std::fs::remove_dir_all(&dir);
    // The split goes first, so that what the API server kept of the
    // direct watches is not charged to it; its watches close with the
    // API side, and the API server's gauge follows within moments.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let direct = run.measure(changes, direct_node, None).await?;

    // Each row: what N direct proxies cost, what the split costs (NaN
    // where the direct way has no such part), and their ratio.
    let row = |what: &str, d: f64, s: f64, digits: usize| {
        let shown = |v: f64| {
            if v.is_nan() {
                "-".to_owned()
            } else {
                format!("{v:.digits$}")
            }
        };
        let ratio = if d.is_nan() || s.is_nan() || s == 0.0 {
            String::new()
        } else {
            format!("{:.1}x", d / s)
        };
        println!("{what:<54} {:>12} {:>12} {ratio:>9}", shown(d), shown(s));
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (n, c) = (nodes as f64, changes as f64);
    println!();
    println!(
        "{:<54} {:>12} {:>12} {:>9}",
        "",
        format!("{nodes} direct"),
        "split",
        "ratio"
    );
    row(
        "watches on the API server (less idle)",
        direct.watches - idle,
        split.watches - idle,
        0,
    );
    row(
        "all nodes synced from their start (s)",
        direct.synced_in.as_secs_f64(),
        split.synced_in.as_secs_f64(),
        1,
    );
    row(
        "node heap, each (MiB)",
        mib(direct.nodes_heap) / n,
        mib(split.nodes_heap) / n,
        2,
    );
    row(
        "node CPU to sync, each (ms)",
        ms(direct.nodes_cpu_synced) / n,
        ms(split.nodes_cpu_synced) / n,
        0,
    );
    for (what, q) in [("p50", 0.5), ("p99", 0.99)] {
        row(
            &format!("write to every node's desired state, {what} (ms)"),
            percentile_ms(&direct.latencies, q),
            percentile_ms(&split.latencies, q),
            1,
        );
    }
    row(
        "changes not seen by every node in 60 s",
        direct.missed as f64,
        split.missed as f64,
        0,
    );
    row(
        &format!(
            "API server watch bytes per change (no proxy: {idle_bytes:.0})"
        ),
        direct.apiserver_bytes / c,
        split.apiserver_bytes / c,
        0,
    );
    let side_bytes = split.api_side.map_or(f64::NAN, |s| s.2);
    row(
        "bytes a node receives per change",
        (direct.apiserver_bytes / c - idle_bytes) / n,
        side_bytes / (c * n),
        0,
    );
    row(
        &format!(
            "API server CPU per change, ms (no proxy: {:.1})",
            ms(idle_cpu)
        ),
        ms(direct.apiserver_cpu) / c,
        ms(split.apiserver_cpu) / c,
        1,
    );
    row(
        "API side CPU per change (ms)",
        f64::NAN,
        split.api_side.map_or(f64::NAN, |s| ms(s.0) / c),
        1,
    );
    row(
        "nodes' CPU per change, all nodes (ms)",
        ms(direct.nodes_cpu_changes) / c,
        ms(split.nodes_cpu_changes) / c,
        1,
    );
    row(
        "API server RSS, nodes synced (MiB)",
        mib(direct.apiserver_rss),
        mib(split.apiserver_rss),
        0,
    );
    row(
        "API side RSS, no node yet (MiB)",
        f64::NAN,
        mib(split.side_rss_alone),
        0,
    );
    row(
        "API side RSS, nodes synced (MiB)",
        f64::NAN,
        mib(split.api_side.map_or(0, |s| s.1)),
        0,
    );
    row("API side peak RSS (MiB)", f64::NAN, mib(side_peak), 0);
    ensure!(
        direct.missed == 0 && split.missed == 0,
        "some changes did not reach every node"
    );
    Ok(())
}
