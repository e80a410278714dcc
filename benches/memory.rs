//! The proxy's heap at 1,000 and 10,000 ClusterIP services × 10 endpoints:
//! the daemon's whole pipeline (stores, trackers, desired state, the
//! proxier's ledger, the rules' facts) fed the objects as an API server
//! sends them, over a kernel that keeps nothing, so that every byte
//! counted is the proxy's own. A counting allocator gives the peak and
//! what stays after the first sync and after a burst of changes; the
//! ratio of the two sizes' bytes per service says whether memory follows
//! the cluster linearly (1.0) or worse. Then changes synced one at a time
//! give the CPU a one-change sync costs at each size: the ratio says
//! whether a sync follows what changed (1.0) or the cluster's size.
//!
//! `cargo bench --bench memory`; for a breakdown by call site, run the
//! built binary under `heaptrack` (docs/benchmarks.md, "Memory").

use std::{
    future::Future,
    net::IpAddr,
    sync::{atomic::Ordering, Arc},
    time::{Duration, SystemTime},
};

use bench_support::counting::{mib, process_cpu, Counting, LIVE, PEAK};
use futures::{channel::mpsc, StreamExt};
use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube::runtime::watcher::Event;
use kube_ipvs_proxy::{
    config::Config,
    daemon::{self, LoopSettings},
    kernel::{
        addresses::{AddressOp, Addresses},
        conntrack::{Conntrack, Flow},
        ipsets::{IpsetOp, Ipsets, SetState},
        iptables::{IpFamily, Iptables},
        ipvs::{
            DestKey, DestState, Ipvs, IpvsOp, IpvsTable, ServiceEntry,
            VirtualServerKey,
        },
        KernelError,
    },
    proxier::{
        conntrack::WithConntrack,
        iptables::{RulesSettings, WithIptables},
        Proxier, ProxierConfig,
    },
    server::{ProxyHealth, SyncReporter},
    source::SourceEvent,
    sync::{NodeSettings, SyncState},
};
use serde_json::json;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const ENDPOINTS: usize = 10;
const NODE: &str = "node-a";

fn ip(base: [u8; 2], n: usize) -> String {
    let n = n % 65536;
    format!("{}.{}.{}.{}", base[0], base[1], n / 256, n % 256)
}

/// What kube-apiserver 1.34 returns for the benchmark's services: the
/// defaults it fills in, and the managed fields of a client's create.
fn service(i: usize) -> Service {
    let value = json!({
        "metadata": {
            "name": format!("svc-{i}"),
            "namespace": "bench",
            "uid": format!("3f1c2a6e-0000-4000-8000-{i:012}"),
            "resourceVersion": format!("{}", 1000 + i),
            "creationTimestamp": "2026-11-24T00:18:00Z",
            "managedFields": [{
                "manager": "vs_upstream",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-11-24T00:18:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {
                    "f:clusterIP": {}, "f:clusterIPs": {},
                    "f:internalTrafficPolicy": {},
                    "f:ports": {".": {}, "k:{\"port\":80,\"protocol\":\"TCP\"}": {
                        ".": {}, "f:name": {}, "f:port": {}, "f:protocol": {},
                        "f:targetPort": {}}},
                    "f:sessionAffinity": {}, "f:type": {}}}
            }]
        },
        "spec": {
            "clusterIP": ip([198, 18], i),
            "clusterIPs": [ip([198, 18], i)],
            "ports": [{"name": "http", "protocol": "TCP", "port": 80,
                       "targetPort": 80}],
            "type": "ClusterIP",
            "sessionAffinity": "None",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster"
        },
        "status": {"loadBalancer": {}}
    });
    serde_json::from_value(value).expect("a valid Service")
}

/// The service's slice as the API server returns it; `version` makes
/// each change a new object with a new address for its last endpoint.
fn slice(i: usize, version: usize) -> EndpointSlice {
    let endpoints: Vec<serde_json::Value> = (0..ENDPOINTS)
        .map(|j| {
            let address = match (j, version) {
                (j, v) if j == ENDPOINTS - 1 && v > 0 => {
                    ip([198, 18], 40000 + v)
                }
                _ => ip([198, 19], i * ENDPOINTS + j),
            };
            json!({"addresses": [address], "conditions": {"ready": true},
                   "nodeName": format!("node-{}", j % 3)})
        })
        .collect();
    let value = json!({
        "metadata": {
            "name": format!("svc-{i}-abcde"),
            "namespace": "bench",
            "uid": format!("7a9b1c2d-0000-4000-8000-{i:012}"),
            "resourceVersion": format!("{}", 20000 + i + version),
            "generation": 1 + version,
            "creationTimestamp": "2026-11-24T00:18:00Z",
            "labels": {"kubernetes.io/service-name": format!("svc-{i}")},
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time":
                            "2026-11-24T00:18:00.123456Z"},
            "managedFields": [{
                "manager": "vs_upstream",
                "operation": "Update",
                "apiVersion": "discovery.k8s.io/v1",
                "time": "2026-11-24T00:18:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:addressType": {}, "f:endpoints": {},
                    "f:metadata": {
                        "f:annotations": {".": {},
                            "f:endpoints.kubernetes.io/last-change-trigger-time": {}},
                        "f:labels": {".": {}, "f:kubernetes.io/service-name": {}}},
                    "f:ports": {}}
            }]
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}]
    });
    serde_json::from_value(value).expect("a valid EndpointSlice")
}

/// A kernel that takes every operation and keeps nothing: what is counted
/// is the proxy's memory only.
#[derive(Default)]
struct Nothing;

fn ok<T>(ops: &[T]) -> Vec<Result<(), KernelError>> {
    ops.iter().map(|_| Ok(())).collect()
}

impl Ipvs for Nothing {
    async fn dump(&mut self) -> Result<IpvsTable, KernelError> {
        Ok(IpvsTable::default())
    }
    fn dump_detached(
        &self,
    ) -> impl Future<Output = Result<IpvsTable, KernelError>> + Send + 'static + use<>
    {
        std::future::ready(Ok(IpvsTable::default()))
    }
    async fn service(
        &mut self,
        _: &VirtualServerKey,
    ) -> Result<Option<ServiceEntry>, KernelError> {
        Ok(None)
    }
    async fn dests(
        &mut self,
        _: &VirtualServerKey,
    ) -> Result<std::collections::BTreeMap<DestKey, DestState>, KernelError>
    {
        Ok(Default::default())
    }
    async fn apply(&mut self, ops: &[IpvsOp]) -> Vec<Result<(), KernelError>> {
        ok(ops)
    }
}

impl Addresses for Nothing {
    async fn ensure_dummy(&mut self, _: &str) -> Result<(), KernelError> {
        Ok(())
    }
    async fn delete_link(&mut self, _: &str) -> Result<(), KernelError> {
        Ok(())
    }
    async fn list(
        &mut self,
        _: &str,
    ) -> Result<std::collections::BTreeSet<IpAddr>, KernelError> {
        Ok(Default::default())
    }
    async fn local_addresses(
        &mut self,
        _: &str,
    ) -> Result<Vec<IpAddr>, KernelError> {
        Ok(vec!["198.18.100.1".parse().expect("an address")])
    }
    fn list_detached(
        &self,
        _: &str,
    ) -> impl Future<
        Output = Result<std::collections::BTreeSet<IpAddr>, KernelError>,
    >
           + Send
           + 'static
           + use<> {
        std::future::ready(Ok(Default::default()))
    }
    fn local_addresses_detached(
        &self,
        _: &str,
    ) -> impl Future<Output = Result<Vec<IpAddr>, KernelError>>
           + Send
           + 'static
           + use<> {
        std::future::ready(Ok(vec!["198.18.100.1"
            .parse()
            .expect("an address")]))
    }
    async fn apply(
        &mut self,
        _: &str,
        ops: &[AddressOp],
    ) -> Vec<Result<(), KernelError>> {
        ok(ops)
    }
    fn apply_detached(
        &mut self,
        _: &str,
        ops: Vec<AddressOp>,
    ) -> impl Future<Output = Vec<Result<(), KernelError>>> + Send + 'static + use<>
    {
        std::future::ready(ok(&ops))
    }
}

impl Ipsets for Nothing {
    async fn dump(
        &mut self,
        _: &str,
    ) -> Result<std::collections::BTreeMap<String, SetState>, KernelError> {
        Ok(Default::default())
    }
    fn dump_detached(
        &self,
        _: &str,
    ) -> impl Future<
        Output = Result<
            std::collections::BTreeMap<String, SetState>,
            KernelError,
        >,
    >
           + Send
           + 'static
           + use<> {
        std::future::ready(Ok(Default::default()))
    }
    async fn apply(&mut self, ops: &[IpsetOp]) -> Vec<Result<(), KernelError>> {
        ok(ops)
    }
}

impl Iptables for Nothing {
    async fn save(
        &mut self,
        _: IpFamily,
        _: &str,
    ) -> Result<String, KernelError> {
        Ok(String::new())
    }
    fn save_detached(
        &self,
        _: IpFamily,
        _: &str,
    ) -> impl Future<Output = Result<String, KernelError>> + Send + 'static + use<>
    {
        std::future::ready(Ok(String::new()))
    }
    async fn restore(
        &mut self,
        _: IpFamily,
        _: &str,
    ) -> Result<(), KernelError> {
        Ok(())
    }
}

impl Conntrack for Nothing {
    async fn dump_udp(&mut self) -> Result<Vec<Flow>, KernelError> {
        Ok(Vec::new())
    }
    async fn delete(&mut self, flows: &[Flow]) -> Vec<Result<(), KernelError>> {
        ok(flows)
    }
}

struct Measured {
    peak: usize,
    after_sync: usize,
    after_churn: usize,
    /// Process CPU per change when each change is synced on its own, as
    /// under the benchmark's steady churn.
    cpu_per_change: Duration,
}

/// Changes timed one at a time after the burst, unless
/// BENCH_MEMORY_TIMED says how many (more, to profile them).
fn timed_changes() -> usize {
    std::env::var("BENCH_MEMORY_TIMED")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(300)
}

/// Runs the daemon on `n` services until its first sync, then `changes`
/// slice updates; the heap is counted from an empty start.
async fn measure(n: usize, changes: usize) -> Measured {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let config = Config::default();
    let proxier = Proxier::new(
        Nothing,
        Nothing,
        Nothing,
        ProxierConfig::from_config(&config),
    );
    let backend = WithConntrack::new(
        WithIptables::new(
            proxier,
            Nothing,
            RulesSettings::from_config(&config, true),
        ),
        Nothing,
    );
    let health = Arc::new(ProxyHealth::new(Duration::from_secs(60)));
    let reporter = SyncReporter::new(Arc::clone(&health), None);
    let state =
        SyncState::new(NODE, NodeSettings::default(), None, SystemTime::now());
    let (events, source) = mpsc::channel::<SourceEvent>(64);
    let settings = LoopSettings {
        min_sync_period: Duration::ZERO,
        sync_period: Duration::from_secs(3600),
    };
    let feed = daemon::Feed::start(
        daemon::Source::objects(source),
        NODE,
        &tokio::runtime::Handle::current(),
    );
    let daemon =
        tokio::spawn(daemon::run(feed, state, backend, settings, reporter));
    let synced = |health: &ProxyHealth| {
        health
            .health()
            .status
            .get(&IpFamily::V4)
            .map(|s| s.last_updated)
    };
    // As the watchers deliver them: created one at a time, never all at
    // once.
    let mut events = events;
    let feed =
        futures::stream::iter(
            [SourceEvent::Service(Event::Init)]
                .into_iter()
                .chain((0..n).map(|i| {
                    SourceEvent::Service(Event::InitApply(service(i)))
                }))
                .chain([
                    SourceEvent::Service(Event::InitDone),
                    SourceEvent::EndpointSlice(Event::Init),
                ])
                .chain((0..n).map(|i| {
                    SourceEvent::EndpointSlice(Event::InitApply(slice(i, 0)))
                }))
                .chain([SourceEvent::EndpointSlice(Event::InitDone)]),
        )
        .map(Ok);
    // `send_all`, not `forward`: the watch stays open after the list.
    futures::SinkExt::send_all(&mut events, &mut std::pin::pin!(feed))
        .await
        .expect("the daemon runs");
    while synced(&health).is_none() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after_sync = LIVE.load(Ordering::Relaxed) - base;
    for c in 1..=changes {
        let event = SourceEvent::EndpointSlice(Event::Apply(slice(c % n, c)));
        futures::SinkExt::send(&mut events, event)
            .await
            .expect("the daemon runs");
    }
    // Let the last changes be synced.
    let before = synced(&health);
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if synced(&health) != before {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after_churn = LIVE.load(Ordering::Relaxed) - base;
    let peak = PEAK.load(Ordering::Relaxed) - base;
    // One change, then its sync, then the next: the cost of a sync that
    // carries one change, which should not grow with the cluster.
    let timed = timed_changes();
    let cpu_before = process_cpu();
    for c in changes + 1..=changes + timed {
        let before = synced(&health);
        let event = SourceEvent::EndpointSlice(Event::Apply(slice(c % n, c)));
        futures::SinkExt::send(&mut events, event)
            .await
            .expect("the daemon runs");
        while synced(&health) == before {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    }
    let cpu_per_change = (process_cpu() - cpu_before) / timed as u32;
    daemon.abort();
    let _ = daemon.await;
    Measured {
        peak,
        after_sync,
        after_churn,
        cpu_per_change,
    }
}

fn main() {
    let sizes: Vec<usize> = std::env::var("BENCH_MEMORY_SIZES")
        .ok()
        .map(|v| {
            v.split_whitespace()
                .filter_map(|s| s.parse().ok())
                .collect()
        })
        .unwrap_or_else(|| vec![1000, 10_000]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    println!(
        "memory: the pipeline's heap, ClusterIP services x {ENDPOINTS} endpoints"
    );
    let mut per_service = Vec::new();
    let mut per_change = Vec::new();
    for &n in &sizes {
        let m = runtime.block_on(measure(n, 2000));
        println!(
            "{n:>6} services: peak {:7.1} MiB, after the first sync {:7.1} MiB, \
             after 2000 changes {:7.1} MiB ({:.0} bytes per service)",
            mib(m.peak),
            mib(m.after_sync),
            mib(m.after_churn),
            m.after_churn as f64 / n as f64,
        );
        println!(
            "{n:>6} services: {:.0} µs of CPU per change synced on its own \
             (building the slice object included)",
            m.cpu_per_change.as_secs_f64() * 1e6
        );
        per_service.push((n, m.after_churn as f64 / n as f64));
        per_change.push((n, m.cpu_per_change.as_secs_f64()));
    }
    if let [(small, a), .., (large, b)] = per_change[..] {
        println!("CPU per change, {large} / {small} services: {:.2}", b / a);
    }
    if let [(small, a), .., (large, b)] = per_service[..] {
        println!(
            "bytes per service, {large} / {small} services: {:.2}",
            b / a
        );
    }
}
