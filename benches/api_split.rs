//! The API/node split at 10,000 services × 10 endpoints with N nodes in
//! one process, each a real gRPC client of one API side over a Unix
//! socket: what it costs the API side (heap, CPU) and each node (bytes
//! received, heap of what it holds), and how long a change takes from
//! the API side's input to every node's view. The baseline is a proxy
//! that watches the API server itself: its trackers' heap for the same
//! cluster on one node. Only what is measured is printed: a figure for
//! one node is not multiplied into one for N.
//!
//! `cargo bench --bench api_split` (BENCH_SPLIT_SERVICES, _NODES,
//! _CHANGES override the sizes).

use std::{
    sync::{atomic::Ordering, Arc},
    time::{Duration, Instant, SystemTime},
};

use kube::runtime::watcher::Event;
use kube_ipvs_proxy::{
    apiside::{
        cluster::{Cluster, NO_NODE},
        serve_unix,
        server::{Access, Shared, ViewService},
    },
    nodeview::{wire, Received},
    source::{nodeview::connect_unix, store::Stores, SourceEvent},
    sync::{NodeSettings, SyncState},
};
use nodeview_protocol::prost::Message;
use nodeview_protocol::v1;

mod cluster;
mod counting;

use cluster::{env, listing, slice, ENDPOINTS, ZONES};
use counting::{mib, process_cpu, Counting, LIVE};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The heap a proxy watching the API server holds for the cluster,
/// trackers and desired state, on one node.
fn direct_proxy_heap(services: usize, nodes: usize) -> usize {
    let before = LIVE.load(Ordering::Relaxed);
    let mut stores = Stores::new("node-0");
    let mut state = SyncState::new(
        "node-0",
        NodeSettings::default(),
        None,
        SystemTime::now(),
    );
    for event in listing(services, nodes) {
        for change in stores.apply(event) {
            state.apply(&change);
        }
    }
    state.sync();
    let held = LIVE.load(Ordering::Relaxed).saturating_sub(before);
    drop((stores, state));
    held
}

/// The heap the views of `nodes` nodes take on the API side, counted
/// without any connection, and the CPU to make them.
fn views_heap(services: usize, nodes: usize) -> (usize, Duration) {
    let mut stores = Stores::new(NO_NODE);
    let mut cluster = Cluster::new(SystemTime::now());
    for event in listing(services, nodes) {
        for change in stores.apply(event) {
            cluster.apply(&change);
        }
    }
    cluster.sync();
    let before = LIVE.load(Ordering::Relaxed);
    let cpu = process_cpu();
    for i in 0..nodes {
        let _ = cluster.update_for(&format!("node-{i}"), None, false);
    }
    let held = LIVE.load(Ordering::Relaxed).saturating_sub(before);
    (held, process_cpu() - cpu)
}

/// One simulated node: a real client, what it holds, what it received.
struct NodeClient {
    received: Received,
    bytes: usize,
    /// The messages of the first full view, kept to measure what a node
    /// holds on its own.
    first: Vec<v1::ViewUpdate>,
    synced_once: bool,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let services = env("BENCH_SPLIT_SERVICES", 10_000);
    let nodes = env("BENCH_SPLIT_NODES", 100);
    let changes = env("BENCH_SPLIT_CHANGES", 50);
    println!("api_split: {services} services × {ENDPOINTS} endpoints, {nodes} nodes in {ZONES} zones");

    let direct = direct_proxy_heap(services, nodes);
    let (views_alone, view_cpu) = views_heap(services, nodes);

    let base = LIVE.load(Ordering::Relaxed);
    let cpu = process_cpu();
    let shared = Shared::new(Cluster::new(SystemTime::now()));
    let mut stores = Stores::new(NO_NODE);
    for event in listing(services, nodes) {
        shared
            .apply(stores.apply(event))
            .expect("the cluster's thread");
    }
    shared.sync().await.expect("the cluster's thread");
    let cluster_heap = LIVE.load(Ordering::Relaxed) - base;

    let dir = std::env::temp_dir()
        .join(format!("kip-bench-split-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let socket = dir.join("views.sock");
    let service = ViewService::new(shared.clone(), Access::Socket);
    let path = socket.clone();
    tokio::spawn(async move {
        serve_unix(&path, service, std::future::pending()).await
    });
    while !socket.exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Every node connects and receives its full view.
    let started = Instant::now();
    let (tx, mut rx) =
        tokio::sync::mpsc::unbounded_channel::<(usize, usize, usize)>();
    let clients: Vec<Arc<tokio::sync::Mutex<NodeClient>>> = (0..nodes)
        .map(|_| {
            Arc::new(tokio::sync::Mutex::new(NodeClient {
                received: Received::default(),
                bytes: 0,
                first: Vec::new(),
                synced_once: false,
            }))
        })
        .collect();
    let mut tasks = Vec::with_capacity(nodes);
    for (i, client) in clients.iter().enumerate() {
        let client = client.clone();
        let socket = socket.clone();
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let mut grpc = connect_unix(socket).await.expect("connects");
            let mut stream = grpc
                .watch(v1::WatchRequest {
                    node_name: format!("node-{i}"),
                    ..Default::default()
                })
                .await
                .expect("watches")
                .into_inner();
            while let Ok(Some(message)) = stream.message().await {
                let size = message.encoded_len();
                let synced = message.synced;
                let revision = message.revision;
                let update = wire::decode(message).expect("decodes");
                let mut c = client.lock().await;
                c.bytes += size;
                if i == 0 && !c.synced_once {
                    c.first.push(wire::encode(&update, ""));
                }
                c.synced_once |= synced;
                c.received.apply(update);
                if synced {
                    let _ = tx.send((i, c.bytes, revision as usize));
                }
            }
        }));
    }
    let mut full_bytes = 0;
    for _ in 0..nodes {
        let (_, bytes, _) = rx.recv().await.expect("a node synced");
        full_bytes += bytes;
    }
    let connect_all = started.elapsed();
    // The nodes live in this process too: what one holds is measured
    // apart, by receiving its first view again.
    let node_heap = {
        let first = std::mem::take(&mut clients[0].lock().await.first);
        let before = LIVE.load(Ordering::Relaxed);
        let mut copy = Received::default();
        for message in first {
            copy.apply(wire::decode(message).expect("decodes"));
        }
        let held = LIVE.load(Ordering::Relaxed).saturating_sub(before);
        drop(copy);
        held
    };
    // Read after node-0's first view, kept only to be received again
    // above, is freed: it belongs to neither end.
    let with_views = LIVE.load(Ordering::Relaxed) - base;
    let bytes_before: usize = {
        let mut total = 0;
        for c in &clients {
            total += c.lock().await.bytes;
        }
        total
    };

    // Changes, one at a time: the time until every node has it.
    let mut latencies = Vec::with_capacity(changes);
    let cpu_before_churn = process_cpu();
    for version in 1..=changes {
        let i = (version * 7919) % services;
        let t = Instant::now();
        shared
            .apply(stores.apply(SourceEvent::EndpointSlice(Event::Apply(
                slice(i, nodes, version),
            ))))
            .expect("the cluster's thread");
        shared.sync().await.expect("the cluster's thread");
        for _ in 0..nodes {
            rx.recv().await.expect("a node synced");
        }
        latencies.push(t.elapsed());
    }
    let churn_cpu = process_cpu() - cpu_before_churn;
    let bytes_after: usize = {
        let mut total = 0;
        for c in &clients {
            total += c.lock().await.bytes;
        }
        total
    };
    latencies.sort();
    let p = |q: f64| {
        latencies
            [((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)]
    };

    println!(
        "API side heap: cluster {:.1} MiB; {nodes} views counted alone {:.1} MiB \
         ({:.2} MiB and {:.0} ms of CPU per view on average)",
        mib(cluster_heap),
        mib(views_alone),
        mib(views_alone) / nodes as f64,
        view_cpu.as_secs_f64() * 1e3 / nodes as f64,
    );
    println!(
        "heap with the {nodes} nodes connected and synced, the API side and \
         the nodes together in this process: {:.1} MiB",
        mib(with_views),
    );
    println!(
        "node-0 holds {:.2} MiB (a proxy watching the API server for node-0: {:.1} MiB; ratio {:.3})",
        mib(node_heap),
        mib(direct),
        node_heap as f64 / direct as f64
    );
    println!(
        "full view per node: {:.0} KiB on the wire on average; all {nodes} connected and synced in {:.2} s",
        full_bytes as f64 / nodes as f64 / 1024.0,
        connect_all.as_secs_f64()
    );
    println!(
        "per change per node: {:.0} bytes on the wire on average",
        (bytes_after - bytes_before) as f64 / (changes * nodes) as f64
    );
    println!(
        "change to every node's view: p50 {:.1} ms, p99 {:.1} ms; API side CPU per change {:.2} ms",
        p(0.5).as_secs_f64() * 1e3,
        p(0.99).as_secs_f64() * 1e3,
        churn_cpu.as_secs_f64() * 1e3 / changes as f64
    );
    println!(
        "CPU to list and serve: {:.1} s",
        (process_cpu() - cpu).as_secs_f64()
    );

    // The nodes go: what the API side keeps is its cluster and the views.
    // (What the connections held is the clients' side: an api-server
    // process's RSS grows by about its views' size per node, 0.8 MiB
    // here, and keeps nothing per connection once the node is gone.)
    for task in tasks {
        task.abort();
    }
    drop(clients);
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!(
        "API side heap after the nodes left: {:.1} MiB",
        mib(LIVE.load(Ordering::Relaxed).saturating_sub(base))
    );
    let _ = std::fs::remove_dir_all(&dir);
}
