//! The API/node split at cluster scale: one API side serving 10,000
//! services × 10 endpoints to N nodes (BENCH_SPLIT_NODES, 1,000 by
//! default; 5,000 is the size it is for).
//!
//! The API side is this bench re-executed as a child process
//! (BENCH_SPLIT_CHILD), so that its RSS, heap and CPU are its own: it
//! lists the cluster, serves the views on a Unix socket, and takes
//! commands on its stdin (a change, its figures). The nodes are in this
//! process, each over a connection of its own. FULL_NODES of them are
//! whole nodes (the node's own client, into the trackers and the desired
//! state, as a proxy is); the others speak the same protocol but only
//! decode, check and count what they receive: N full desired states would
//! not fit this machine.
//!
//! Measured: the API side before any node and once every node holds its
//! full state from a cold start (time, CPU, RSS, heap); one change's
//! fan-out to the last node under steady churn at 10 and at 100 changes
//! a second; a reconnect storm (the API side killed and started again
//! with every node connected) until every node holds the new one's full
//! state. Each figure is printed, and again as `RESULT split N MEASURE
//! VALUE`. Beside the fan-out's CPU, its floor on this transport: the
//! same writes to as many Unix sockets, bare, from one thread and from a
//! task per socket.
//!
//! `make bench-split` (BENCH_SPLIT_SERVICES, _NODES, _CHURN_SECONDS
//! override the sizes; BENCH_SPLIT_WRAP runs the API side under a
//! profiler).

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant, SystemTime},
};

use bench_support::{
    cluster::{env, listing, slice, ENDPOINTS, ZONES},
    counting::{
        cpu_of, mib, process_cpu, thread_cpu, threads_cpu, Counting, LIVE, PEAK,
    },
    result_line::ResultLine,
    view_node,
};
use futures::StreamExt;
use kube::runtime::watcher::Event;
use kube_ipvs_proxy::{
    apiside::{
        cluster::{Cluster, NO_NODE},
        serve_unix,
        server::{Access, Shared, ViewService},
    },
    source::{nodeview, store::Stores, SourceEvent},
    telemetry::{API_SIDE_MESSAGES_ENCODED_TOTAL, API_SIDE_SENT_BYTES_TOTAL},
};
use nodeview_protocol::v1;
use std::{
    io::{BufRead as _, BufReader, Lines},
    process::{Child, ChildStdin, ChildStdout},
};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Nodes that are whole proxies, into the trackers and desired state.
const FULL_NODES: usize = 3;
/// How long the nodes have to hold a full state, after a cold start or
/// a storm.
const SYNC_TIMEOUT: Duration = Duration::from_secs(1800);
const CHILD: &str = "BENCH_SPLIT_CHILD";

fn main() {
    let services = env("BENCH_SPLIT_SERVICES", 10_000);
    let nodes = env("BENCH_SPLIT_NODES", 1_000);
    match std::env::var(CHILD) {
        Ok(socket) => api_side(services, nodes, Path::new(&socket)),
        Err(_) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("the nodes' runtime");
            runtime.block_on(simulation(services, nodes));
        }
    }
}

// The API side: the child process.

/// Serves the views, then answers commands on stdin, one line each:
/// `change I VERSION` (moves service I's last endpoint; answers the
/// views' revision once synced) and `stats` (live heap, heap peak since
/// the last `stats`, bytes sent to the nodes, messages encoded).
fn api_side(services: usize, nodes: usize, socket: &Path) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("api-side")
        .enable_all()
        .build()
        .expect("the API side's runtime");
    let metrics = kube_ipvs_proxy::telemetry::exporter::install()
        .expect("the metrics recorder");
    let shared = Shared::new(Cluster::new(SystemTime::now()));
    let mut stores = Stores::new(NO_NODE);
    // The source's events into the cluster, then a sync: its revision.
    let mut feed = |events: Vec<SourceEvent>| {
        for event in events {
            shared
                .apply(stores.apply(event))
                .expect("the cluster's thread");
        }
        runtime
            .block_on(shared.sync())
            .expect("the cluster's thread")
    };
    let revision = feed(listing(services, nodes));
    let service = ViewService::new(shared.clone(), Access::Socket);
    let path = socket.to_owned();
    runtime.spawn(async move {
        serve_unix(&path, service, std::future::pending()).await
    });
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ready {revision}");
    for line in std::io::stdin().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["change", i, version] => {
                let (Ok(i), Ok(version)) = (i.parse(), version.parse()) else {
                    break;
                };
                let event = SourceEvent::EndpointSlice(Event::Apply(slice(
                    i, nodes, version,
                )));
                format!("changed {}", feed(vec![event]))
            }
            ["stats"] => {
                let live = LIVE.load(Ordering::Relaxed);
                let peak = PEAK.swap(live, Ordering::Relaxed);
                let sent = testkit::client::metric_sum(
                    &metrics.render(),
                    API_SIDE_SENT_BYTES_TOTAL,
                );
                let encoded = testkit::client::metric_sum(
                    &metrics.render(),
                    API_SIDE_MESSAGES_ENCODED_TOTAL,
                );
                format!("stats {live} {peak} {sent} {encoded}")
            }
            _ => break,
        };
        if writeln!(out, "{answer}").is_err() {
            break;
        }
    }
}

/// The API side as the simulation sees it: a child process and its
/// command pipe. Its commands block: the simulation asks from the
/// runtime's own thread, not from the workers the nodes run on.
struct ApiSide {
    child: Child,
    pid: u32,
    commands: ChildStdin,
    answers: Lines<BufReader<ChildStdout>>,
    /// The views' revision once it listed the cluster.
    listed_at: u64,
}

/// Figures of the API side's process at one moment.
#[derive(Debug, Clone, Copy)]
struct Stats {
    live: usize,
    peak: usize,
    sent: f64,
    encoded: f64,
    rss: usize,
    hwm: usize,
    cpu: Duration,
}

impl ApiSide {
    fn start(services: usize, nodes: usize, socket: &Path) -> Self {
        let _ = std::fs::remove_file(socket);
        let exe = std::env::current_exe().expect("the bench's path");
        // BENCH_SPLIT_WRAP runs the API side under a profiler, for example
        // `heaptrack -o FILE` (its figures are then the wrapper's).
        let wrap = std::env::var("BENCH_SPLIT_WRAP").unwrap_or_default();
        let mut words = wrap.split_whitespace();
        let mut command = match words.next() {
            Some(wrapper) => {
                let mut command = std::process::Command::new(wrapper);
                command.args(words).arg(exe);
                command
            }
            None => std::process::Command::new(exe),
        };
        let mut child = command
            .env(CHILD, socket)
            .env("BENCH_SPLIT_SERVICES", services.to_string())
            .env("BENCH_SPLIT_NODES", nodes.to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the API side starts");
        let pid = child.id();
        let commands = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut answers = BufReader::new(stdout).lines();
        // A wrapper may say something first.
        let listed_at = answers
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("ready ")?.parse().ok())
            .expect("the API side lists the cluster");
        Self {
            child,
            pid,
            commands,
            answers,
            listed_at,
        }
    }

    fn ask(&mut self, command: &str) -> String {
        writeln!(self.commands, "{command}")
            .expect("the API side takes commands");
        self.answers
            .next()
            .and_then(Result::ok)
            .expect("the API side answers")
    }

    fn stats(&mut self) -> Stats {
        let answer = self.ask("stats");
        let fields: Vec<f64> = answer
            .split_whitespace()
            .skip(1)
            .filter_map(|f| f.parse().ok())
            .collect();
        let (rss, hwm) = memory_of(self.pid);
        Stats {
            live: fields.first().copied().unwrap_or(0.0) as usize,
            peak: fields.get(1).copied().unwrap_or(0.0) as usize,
            sent: fields.get(2).copied().unwrap_or(0.0),
            encoded: fields.get(3).copied().unwrap_or(0.0),
            rss,
            hwm,
            cpu: cpu_of(self.pid),
        }
    }

    /// Starts the peak RSS over, so that the next `hwm` is one phase's.
    fn reset_peak_rss(&self) {
        let _ = std::fs::write(format!("/proc/{}/clear_refs", self.pid), "5");
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// VmRSS and VmHWM of `pid`, in bytes.
fn memory_of(pid: u32) -> (usize, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<usize>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

// The nodes: this process.

/// What each node holds, as the simulation reads it.
struct Seen {
    /// The revision of the last consistent state received.
    revision: Vec<AtomicU64>,
    /// How many full states it received.
    fulls: Vec<AtomicU64>,
    changes: AtomicU64,
}

impl Seen {
    fn new(nodes: usize) -> Arc<Self> {
        Arc::new(Self {
            revision: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
            fulls: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
            changes: AtomicU64::new(0),
        })
    }

    fn fulls(&self) -> Vec<u64> {
        self.fulls
            .iter()
            .map(|f| f.load(Ordering::Relaxed))
            .collect()
    }

    /// The lowest revision held by a node that received more full states
    /// than `fulls` says (every node, with none).
    fn lowest(&self, fulls: Option<&[u64]>) -> Option<u64> {
        let mut lowest = u64::MAX;
        for (i, revision) in self.revision.iter().enumerate() {
            let renewed = self.fulls[i].load(Ordering::Relaxed);
            if fulls.is_some_and(|f| renewed <= f[i]) || renewed == 0 {
                return None;
            }
            lowest = lowest.min(revision.load(Ordering::Relaxed));
        }
        Some(lowest)
    }

    fn behind(&self, fulls: &[u64], revision: u64) -> usize {
        (0..self.revision.len())
            .filter(|&i| {
                self.fulls[i].load(Ordering::Relaxed) <= fulls[i]
                    || self.revision[i].load(Ordering::Relaxed) < revision
            })
            .count()
    }
}

/// A whole node: the real node client (`source::nodeview::watch`, with
/// its reconnects), into the trackers and the desired state.
async fn whole_node(i: usize, socket: PathBuf, seen: Arc<Seen>) {
    let (mut updates, mut state) = view_node::start(i, socket);
    while let Some(update) = updates.next().await {
        let (full, revision) = (update.full, update.revision);
        seen.changes
            .fetch_add(update.changes.len() as u64, Ordering::Relaxed);
        state.apply_view(update);
        state.sync();
        seen.revision[i].store(revision, Ordering::Relaxed);
        if full {
            seen.fulls[i].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A light node: the protocol as a node speaks it (a watch that resumes
/// from what it holds, parts up to a synced one, growing and spread
/// pauses between attempts), but what it receives is only decoded from
/// the wire, checked and counted, not converted nor kept.
async fn light_node(i: usize, socket: PathBuf, seen: Arc<Seen>) {
    let name = format!("node-{i}");
    let mut held: Option<(String, u64)> = None;
    let mut pause = nodeview::FIRST_PAUSE;
    loop {
        let before = held.as_ref().map(|h| h.1);
        let _ = light_session(i, &socket, &name, &mut held, &seen).await;
        if held.as_ref().map(|h| h.1) != before {
            pause = nodeview::FIRST_PAUSE;
        }
        tokio::time::sleep(nodeview::spread(pause)).await;
        pause = (pause * 2).min(nodeview::LONGEST_PAUSE);
    }
}

async fn light_session(
    i: usize,
    socket: &Path,
    name: &str,
    held: &mut Option<(String, u64)>,
    seen: &Seen,
) -> anyhow::Result<()> {
    let mut client = nodeview::connect_unix(socket.to_owned()).await?;
    let (instance, revision) = held.clone().unwrap_or_default();
    let request = v1::WatchRequest {
        node_name: name.to_owned(),
        instance,
        revision,
    };
    let mut stream = client.watch(request).await?.into_inner();
    let mut full = false;
    while let Some(message) = stream.message().await? {
        full |= message.full;
        let empty = message.changes.iter().any(|c| c.change.is_none());
        anyhow::ensure!(!empty, "a change without a kind");
        seen.changes
            .fetch_add(message.changes.len() as u64, Ordering::Relaxed);
        if !message.synced {
            continue;
        }
        let resumed = held.as_ref().filter(|h| h.0 == message.instance);
        anyhow::ensure!(
            full || resumed.is_some_and(|h| h.1 <= message.revision),
            "changes on top of nothing, or going back"
        );
        seen.revision[i].store(message.revision, Ordering::Relaxed);
        if full {
            seen.fulls[i].fetch_add(1, Ordering::Relaxed);
        }
        *held = Some((message.instance, message.revision));
        full = false;
    }
    Ok(())
}

/// Waits until every node holds a full state received after `fulls`
/// (none: its first) at `revision` or later; returns how long it took.
async fn all_synced(
    seen: &Seen,
    fulls: Option<&[u64]>,
    revision: u64,
) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < SYNC_TIMEOUT {
        if seen.lowest(fulls).is_some_and(|r| r >= revision) {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// One change's fan-out to the last node, for `seconds` at `rate`
/// changes a second: the latencies, and the API side's figures before
/// and after.
async fn churn(
    api: &mut ApiSide,
    seen: &Arc<Seen>,
    services: usize,
    version: &mut usize,
    rate: usize,
    seconds: usize,
) -> (Vec<Duration>, Stats, Stats) {
    let before = api.stats();
    // When the last node got to each revision, watched on a worker of
    // its own while this thread paces the changes.
    let reached = Arc::new(std::sync::Mutex::new(Vec::<(u64, Instant)>::new()));
    let monitor = tokio::spawn({
        let (seen, reached) = (seen.clone(), reached.clone());
        async move {
            let mut last = 0;
            loop {
                if let Some(lowest) = seen.lowest(None).filter(|l| *l > last) {
                    last = lowest;
                    if let Ok(mut reached) = reached.lock() {
                        reached.push((lowest, Instant::now()));
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    });
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let count = rate * seconds;
    let started = Instant::now();
    let mut sent = Vec::with_capacity(count);
    for k in 0..count {
        tokio::time::sleep_until((started + period * k as u32).into()).await;
        *version += 1;
        let i = (*version * 7919) % services;
        let at = Instant::now();
        let answer = api.ask(&format!("change {i} {version}"));
        let revision: u64 = answer
            .strip_prefix("changed ")
            .and_then(|r| r.parse().ok())
            .expect("the API side changed");
        sent.push((at, revision));
    }
    let last = sent.last().map_or(0, |s| s.1);
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.lowest(None).is_none_or(|l| l < last)
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    monitor.abort();
    let after = api.stats();
    let reached = reached.lock().map(|r| r.clone()).unwrap_or_default();
    let mut latencies: Vec<Duration> = sent
        .iter()
        .filter_map(|(at, revision)| {
            let (_, when) = reached.iter().find(|(r, _)| r >= revision)?;
            Some(when.saturating_duration_since(*at))
        })
        .collect();
    latencies.sort();
    (latencies, before, after)
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * q) as usize).min(sorted.len() - 1);
    sorted[i].as_secs_f64() * 1e3
}

struct Report {
    nodes: usize,
}

impl Report {
    fn figure(&self, what: &str, measure: &str, value: f64, unit: &str) {
        self.print(what, measure, value, unit, 1);
    }

    /// The same, for a figure of a few units: two decimals.
    fn precise(&self, what: &str, measure: &str, value: f64, unit: &str) {
        self.print(what, measure, value, unit, 2);
    }

    fn print(
        &self,
        what: &str,
        measure: &str,
        value: f64,
        unit: &str,
        decimals: usize,
    ) {
        println!("{what:<62} {value:>12.decimals$} {unit}");
        ResultLine::new("split", self.nodes, measure, value, decimals).print();
    }
}

async fn simulation(services: usize, nodes: usize) {
    let churn_seconds = env("BENCH_SPLIT_CHURN_SECONDS", 30);
    println!(
        "api_split: {services} services × {ENDPOINTS} endpoints, {nodes} nodes in {ZONES} zones ({FULL_NODES} whole)"
    );
    let report = Report { nodes };
    let dir = std::env::temp_dir()
        .join(format!("kip-bench-split-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let socket = dir.join("views.sock");

    let mut api = ApiSide::start(services, nodes, &socket);
    while !socket.exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let alone = api.stats();
    api.reset_peak_rss();

    // Cold start: every node at once.
    let seen = Seen::new(nodes);
    let own_cpu = process_cpu();
    let tasks: Vec<_> = (0..nodes)
        .map(|i| {
            let (socket, seen) = (socket.clone(), seen.clone());
            if i < FULL_NODES {
                tokio::spawn(whole_node(i, socket, seen))
            } else {
                tokio::spawn(light_node(i, socket, seen))
            }
        })
        .collect();
    let cold = all_synced(&seen, None, api.listed_at).await;
    let cold_cpu = process_cpu() - own_cpu;
    let synced = api.stats();
    let Some(cold) = cold else {
        println!("not every node synced within {SYNC_TIMEOUT:?}");
        return;
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    report.figure(
        "API side RSS before any node, MiB",
        "api_side_rss_before_nodes_mib",
        mib(alone.rss),
        "MiB",
    );
    report.figure(
        "API side heap before any node, MiB",
        "api_side_heap_before_nodes_mib",
        mib(alone.live),
        "MiB",
    );
    report.figure(
        "cold start: every node holds its full state, s",
        "cold_start_s",
        cold.as_secs_f64(),
        "s",
    );
    report.figure(
        "cold start: API side CPU, s",
        "cold_start_api_side_cpu_s",
        (synced.cpu - alone.cpu).as_secs_f64(),
        "s",
    );
    report.figure(
        "cold start: the simulated nodes' CPU, s",
        "cold_start_nodes_cpu_s",
        cold_cpu.as_secs_f64(),
        "s",
    );
    report.figure(
        "cold start: API side peak RSS, MiB",
        "cold_start_peak_rss_mib",
        mib(synced.hwm),
        "MiB",
    );
    report.figure(
        "cold start: API side heap peak, MiB",
        "cold_start_heap_peak_mib",
        mib(synced.peak),
        "MiB",
    );
    report.figure(
        "API side RSS, every node synced, MiB",
        "api_side_rss_synced_mib",
        mib(synced.rss),
        "MiB",
    );
    report.figure(
        "API side heap, every node synced, MiB",
        "api_side_heap_synced_mib",
        mib(synced.live),
        "MiB",
    );
    report.figure(
        "API side heap per synced node, KiB",
        "heap_per_node_kib",
        (synced.live as f64 - alone.live as f64) / nodes as f64 / 1024.0,
        "KiB",
    );
    report.figure(
        "API side RSS per synced node, KiB",
        "rss_per_node_kib",
        (synced.rss as f64 - alone.rss as f64) / nodes as f64 / 1024.0,
        "KiB",
    );
    report.figure(
        "full state per node on the wire, KiB",
        "full_state_kib",
        (synced.sent - alone.sent) / nodes as f64 / 1024.0,
        "KiB",
    );

    // Steady churn, at 10 then 100 changes a second.
    let mut version = 0;
    // At 10 a second: the API side's CPU per node per change, in µs, and
    // the bytes a node receives per change.
    let mut fanout = (0.0, 0.0);
    for (rate, seconds, name) in [
        (10, churn_seconds, "fanout"),
        (100, churn_seconds / 3, "fanout100"),
    ] {
        let own_cpu = process_cpu();
        let (latencies, before, after) = churn(
            &mut api,
            &seen,
            services,
            &mut version,
            rate,
            seconds.max(1),
        )
        .await;
        let changes = (rate * seconds.max(1)) as f64;
        println!(
            "churn at {rate} a second for {} s: {} of {changes} changes reached every node",
            seconds.max(1),
            latencies.len()
        );
        for (q, label) in [(0.5, "p50"), (0.99, "p99"), (1.0, "max")] {
            report.figure(
                &format!("fan-out at {rate}/s to the last node, {label}, ms"),
                &format!("{name}_{label}_ms"),
                percentile(&latencies, q),
                "ms",
            );
        }
        let per_node =
            ms(after.cpu - before.cpu) / changes / (nodes as f64 / 1000.0);
        report.figure(
            &format!(
                "at {rate}/s: API side CPU per change per 1,000 nodes, ms"
            ),
            &format!("{name}_cpu_per_change_per_1000_nodes_ms"),
            per_node,
            "ms",
        );
        report.figure(
            &format!("at {rate}/s: the simulated nodes' CPU per change, ms"),
            &format!("{name}_nodes_cpu_per_change_ms"),
            ms(process_cpu() - own_cpu) / changes,
            "ms",
        );
        report.figure(
            &format!("at {rate}/s: messages encoded per change"),
            &format!("{name}_encodes_per_change"),
            (after.encoded - before.encoded) / changes,
            "",
        );
        let bytes = (after.sent - before.sent) / changes / nodes as f64;
        report.figure(
            &format!("at {rate}/s: bytes per change per node"),
            &format!("{name}_bytes_per_change_per_node"),
            bytes,
            "B",
        );
        if rate == 10 {
            fanout = (per_node, bytes);
        }
    }

    // The same number of writes of the same size, bare: what the kernel
    // and a task per node cost before any protocol. A message on the wire
    // is its bytes in a gRPC frame in an HTTP/2 DATA frame.
    const FRAMING: f64 = 5.0 + 9.0;
    let (per_node, bytes) = fanout;
    let len = (bytes + FRAMING).round().max(1.0) as usize;
    let floor =
        tokio::task::spawn_blocking(move || transport_floor(nodes, len))
            .await
            .expect("the floor's thread");
    report.precise(
        &format!("floor: one thread writing {len} B to each node's socket, µs"),
        "floor_one_thread_us_per_write",
        floor.one_thread,
        "µs",
    );
    report.precise(
        &format!("floor: a task per node's socket writing {len} B, µs"),
        "floor_tasks_us_per_write",
        floor.tasks,
        "µs",
    );
    report.precise(
        "at 10/s: API side CPU per node per change over the tasks' floor",
        "fanout_cpu_over_floor_tasks",
        per_node / floor.tasks,
        "x",
    );

    // The reconnect storm: the API side killed with every node connected,
    // and started again; every node must take the new one's full state.
    let fulls = seen.fulls();
    api.kill();
    let own_cpu = process_cpu();
    let started_storm = Instant::now();
    let mut api = ApiSide::start(services, nodes, &socket);
    let storm = all_synced(&seen, Some(&fulls), api.listed_at).await;
    let storm_cpu = process_cpu() - own_cpu;
    let stormed = api.stats();
    let behind = seen.behind(&fulls, api.listed_at);
    report.figure(
        "storm: every node holds the new API side's full state, s",
        "storm_s",
        storm.unwrap_or(SYNC_TIMEOUT).as_secs_f64(),
        "s",
    );
    report.figure(
        "storm: of which the API side's start and listing, s",
        "storm_listing_s",
        started_storm.elapsed().as_secs_f64()
            - storm.unwrap_or_default().as_secs_f64(),
        "s",
    );
    report.figure(
        "storm: nodes left behind",
        "storm_nodes_behind",
        behind as f64,
        "",
    );
    report.figure(
        "storm: API side CPU (its listing included), s",
        "storm_api_side_cpu_s",
        stormed.cpu.as_secs_f64(),
        "s",
    );
    report.figure(
        "storm: the simulated nodes' CPU, s",
        "storm_nodes_cpu_s",
        storm_cpu.as_secs_f64(),
        "s",
    );
    report.figure(
        "storm: API side peak RSS (its listing included), MiB",
        "storm_peak_rss_mib",
        mib(stormed.hwm),
        "MiB",
    );
    report.figure(
        "storm: API side heap peak, MiB",
        "storm_heap_peak_mib",
        mib(stormed.peak),
        "MiB",
    );
    let peak = synced.hwm.max(stormed.hwm);
    report.figure(
        "API side peak RSS, cold start and storm, MiB",
        "api_side_peak_rss_mib",
        mib(peak),
        "MiB",
    );
    report.figure(
        "the nodes' changes received, in all",
        "changes_received",
        seen.changes.load(Ordering::Relaxed) as f64,
        "",
    );
    println!(
        "this process's heap (the simulated nodes): {:.1} MiB",
        mib(LIVE.load(Ordering::Relaxed))
    );
    for task in tasks {
        task.abort();
    }
    api.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

// The transport's floor.

/// What writing one message to each of many Unix sockets costs the
/// writer, whatever the protocol above: the fan-out's CPU per node per
/// change is read against it. In µs of CPU per write.
#[derive(Debug, Clone, Copy)]
struct Floor {
    /// One thread writes every socket in turn: the kernel's part alone.
    one_thread: f64,
    /// A task per socket on a runtime of the API side's shape, each woken
    /// by a watch channel as the API side's watches are by a sync: what
    /// any server with a task per node pays before its own work.
    tasks: f64,
}

/// Writes measured per floor: about a second or two of CPU each.
const FLOOR_WRITES: usize = 1_000_000;

/// The floor at `peers` sockets for messages of `len` bytes. Each round
/// writes one message to every socket and waits until every reader has
/// it, so that each write finds its reader asleep, as a change finds the
/// nodes between changes.
fn transport_floor(peers: usize, len: usize) -> Floor {
    let rounds = (FLOOR_WRITES / peers.max(1)).max(10);
    let one_thread = {
        let (mut writers, readers) = socket_pairs(peers);
        let drained = Drained::start(readers, len);
        let message = vec![0x5a; len];
        // The writes' CPU alone: this thread waits for the readers too.
        let mut cpu = Duration::ZERO;
        for round in 1..=rounds {
            let before = thread_cpu();
            for writer in &mut writers {
                writer.write_all(&message).expect("a floor write");
            }
            cpu += thread_cpu() - before;
            drained.wait_for(round * peers);
        }
        drop(writers);
        drained.stop();
        cpu
    };
    let tasks = {
        let (writers, readers) = socket_pairs(peers);
        let drained = Drained::start(readers, len);
        const NAME: &str = "floor-tasks";
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(NAME)
            .enable_all()
            .build()
            .expect("the floor's runtime");
        let (wake, woken) = tokio::sync::watch::channel(0);
        let message: Arc<[u8]> = vec![0x5a; len].into();
        for writer in writers {
            let (mut woken, message) = (woken.clone(), message.clone());
            writer.set_nonblocking(true).expect("a non-blocking socket");
            runtime.spawn(async move {
                use tokio::io::AsyncWriteExt as _;
                let mut writer = tokio::net::UnixStream::from_std(writer)
                    .expect("a socket in the runtime");
                while woken.changed().await.is_ok() {
                    if writer.write_all(&message).await.is_err() {
                        return;
                    }
                }
            });
        }
        let before = threads_cpu(NAME);
        for round in 1..=rounds {
            wake.send_replace(round);
            drained.wait_for(round * peers);
        }
        let cpu = threads_cpu(NAME) - before;
        drop(wake);
        runtime.shutdown_background();
        drained.stop();
        cpu
    };
    let per_write =
        |cpu: Duration| cpu.as_secs_f64() * 1e6 / (rounds * peers) as f64;
    Floor {
        one_thread: per_write(one_thread),
        tasks: per_write(tasks),
    }
}

type Pair = std::os::unix::net::UnixStream;

fn socket_pairs(n: usize) -> (Vec<Pair>, Vec<Pair>) {
    (0..n).map(|_| Pair::pair().expect("a socket pair")).unzip()
}

/// The floor's readers: a thread of their own reading every socket, and
/// the count of whole messages read.
struct Drained {
    messages: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl Drained {
    fn start(readers: Vec<Pair>, len: usize) -> Self {
        let messages = Arc::new(AtomicU64::new(0));
        let counted = messages.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the readers' runtime");
            runtime.block_on(async move {
                let mut reading = tokio::task::JoinSet::new();
                for reader in readers {
                    let counted = counted.clone();
                    reader.set_nonblocking(true).expect("non-blocking");
                    let mut reader = tokio::net::UnixStream::from_std(reader)
                        .expect("a socket in the runtime");
                    reading.spawn(async move {
                        use tokio::io::AsyncReadExt as _;
                        let mut buffer = vec![0; 64 * 1024];
                        let mut held = 0;
                        while let Ok(read @ 1..) =
                            reader.read(&mut buffer).await
                        {
                            held += read;
                            counted.fetch_add(
                                (held / len) as u64,
                                Ordering::Relaxed,
                            );
                            held %= len;
                        }
                    });
                }
                while reading.join_next().await.is_some() {}
            });
        });
        Self { messages, thread }
    }

    /// Until `messages` have been read in all; a writer or reader that
    /// failed would keep that from ever happening, so not forever.
    fn wait_for(&self, messages: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.messages.load(Ordering::Relaxed) < messages as u64 {
            assert!(
                Instant::now() < deadline,
                "the floor's readers got {} of {messages} messages",
                self.messages.load(Ordering::Relaxed)
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Once the writers are gone: the readers end at their sockets' end.
    fn stop(self) {
        let _ = self.thread.join();
    }
}
