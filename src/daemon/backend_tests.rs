//! The daemon's contract with its backend: what each sync hands over,
//! when the whole desired state comes along, and the poller.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use kube::runtime::watcher::Event;

use super::*;
use crate::{
    model::fixtures,
    runner::SyncReason,
    sync::{NodeSettings, SyncState},
};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    reason: SyncReason,
    full: bool,
    deltas: usize,
}

#[derive(Clone, Default)]
struct Recording {
    seen: Arc<Mutex<Vec<Seen>>>,
    polls: Arc<Mutex<u32>>,
    /// How many of the first applies fail.
    fail_first: Arc<Mutex<u32>>,
    /// The node-port addresses of each full sync's desired state.
    node_ports: Arc<Mutex<Vec<Vec<std::net::IpAddr>>>>,
    /// Per sync: `None` without UDP serving endpoints, else whether they
    /// make [`udp_probe`] stale.
    udp: Arc<Mutex<Vec<Option<bool>>>>,
}

/// A flow to the UDP service of [`udp_source`] answered by a pod that
/// never served it: stale once the service's endpoints are known.
fn udp_probe() -> crate::kernel::conntrack::Flow {
    crate::kernel::conntrack::contract::nat_flow(
        "198.18.9.1:4000",
        "198.18.0.5:53",
        "198.19.0.99:53",
    )
}

impl Backend for Recording {
    async fn apply(&mut self, batch: &SyncBatch) -> Result<(), BackendError> {
        // Awaiting here is the point: no lock on the sync state may be
        // held across it.
        tokio::task::yield_now().await;
        if let Some(desired) = &batch.desired {
            let addrs = desired.context().node_port_addresses.clone();
            self.node_ports.lock().unwrap().push(addrs);
        }
        let udp = batch.udp_serving.as_ref().map(|u| u.is_stale(&udp_probe()));
        self.udp.lock().unwrap().push(udp);
        self.seen.lock().unwrap().push(Seen {
            reason: batch.trigger.reason,
            full: batch.desired.is_some(),
            deltas: batch.outcome.deltas.len(),
        });
        let mut fail = self.fail_first.lock().unwrap();
        if *fail > 0 {
            *fail -= 1;
            return Err(BackendError("injected".into()));
        }
        Ok(())
    }

    async fn local_addresses(&mut self) -> Option<Vec<std::net::IpAddr>> {
        // The node gains an address after the first sync.
        let n = self.node_ports.lock().unwrap().len();
        let mut local = vec!["198.18.100.1".parse().unwrap()];
        if n > 0 {
            local.push("198.18.100.2".parse().unwrap());
        }
        Some(local)
    }

    fn poll_interval(&self) -> Option<Duration> {
        Some(Duration::from_secs(2))
    }

    async fn poll(&mut self) {
        *self.polls.lock().unwrap() += 1;
    }
}

/// Services and slices listed once (one service); then every ten
/// seconds a new service, `changes` times; then silence.
fn source(
    changes: u8,
) -> impl futures::Stream<Item = SourceEvent> + Send + 'static {
    let svc = fixtures::service("ns", "web", |s| {
        fixtures::add_port(s, "http", 80, "TCP")
    });
    let later = move |i: u8| {
        fixtures::service("ns", &format!("api-{i}"), |s| {
            fixtures::set_cluster_ips(s, &[&format!("198.18.0.{}", i + 2)]);
            fixtures::add_port(s, "http", 80, "TCP")
        })
    };
    futures::stream::iter(vec![
        SourceEvent::Service(Event::Init),
        SourceEvent::Service(Event::InitApply(svc)),
        SourceEvent::Service(Event::InitDone),
        SourceEvent::EndpointSlice(Event::Init),
        SourceEvent::EndpointSlice(Event::InitDone),
    ])
    .chain(futures::stream::iter(0..changes).then(move |i| async move {
        tokio::time::sleep(Duration::from_secs(10)).await;
        SourceEvent::Service(Event::Apply(later(i)))
    }))
    .chain(futures::stream::pending())
}

fn udp_service() -> k8s_openapi::api::core::v1::Service {
    fixtures::service("ns", "dns", |s| {
        fixtures::set_cluster_ips(s, &["198.18.0.5"]);
        fixtures::add_port(s, "dns", 53, "UDP")
    })
}

fn udp_slice() -> k8s_openapi::api::discovery::v1::EndpointSlice {
    fixtures::slice("ns", "dns-1", "dns", |s| {
        fixtures::add_slice_port(s, "dns", 53, "UDP");
        s.endpoints.push(fixtures::endpoint("198.19.0.7", |_| {}));
    })
}

/// The lists of [`source`], then every ten seconds one of `later`.
fn udp_source(
    later: Vec<SourceEvent>,
) -> impl futures::Stream<Item = SourceEvent> + Send + 'static {
    source(0).take(5).chain(
        futures::stream::iter(later)
            .then(|event| async move {
                tokio::time::sleep(Duration::from_secs(10)).await;
                event
            })
            .chain(futures::stream::pending()),
    )
}

async fn run_source(
    backend: Recording,
    source: impl futures::Stream<Item = SourceEvent> + Send + 'static,
    for_: Duration,
) {
    let state = SyncState::new(
        "node-a",
        NodeSettings::default(),
        Some(vec!["198.18.100.1".parse().unwrap()]),
        std::time::SystemTime::now(),
    );
    let run = run(
        source,
        state,
        backend,
        Duration::from_secs(1),
        Duration::from_secs(30),
        SyncReporter::default(),
    );
    assert!(tokio::time::timeout(for_, run).await.is_err());
}

async fn run_for(backend: Recording, changes: u8, for_: Duration) {
    let state = SyncState::new(
        "node-a",
        NodeSettings::default(),
        Some(vec!["198.18.100.1".parse().unwrap()]),
        std::time::SystemTime::now(),
    );
    let run = run(
        source(changes),
        state,
        backend,
        Duration::from_secs(1),
        Duration::from_secs(30),
        SyncReporter::default(),
    );
    assert!(tokio::time::timeout(for_, run).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn first_and_periodic_syncs_carry_the_whole_desired_state() {
    let backend = Recording::default();
    run_for(backend.clone(), 1, Duration::from_secs(65)).await;
    let seen = backend.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            Seen {
                reason: SyncReason::Requested,
                full: true,
                deltas: 1
            },
            // A change: only its deltas.
            Seen {
                reason: SyncReason::Requested,
                full: false,
                deltas: 1
            },
            // syncPeriod after the last sync, at 40 s.
            Seen {
                reason: SyncReason::Periodic,
                full: true,
                deltas: 0
            },
        ]
    );
    // Full syncs read the node's addresses first.
    let ip = |s: &str| -> std::net::IpAddr { s.parse().unwrap() };
    assert_eq!(
        *backend.node_ports.lock().unwrap(),
        [
            vec![ip("198.18.100.1")],
            vec![ip("198.18.100.1"), ip("198.18.100.2")],
        ]
    );
    // Every 2 s for 65 s, the first tick at once.
    let polls = *backend.polls.lock().unwrap();
    assert!((32..=34).contains(&polls), "{polls} polls");
}

#[tokio::test(start_paused = true)]
async fn a_failed_sync_is_retried_with_the_whole_desired_state() {
    let backend = Recording::default();
    *backend.fail_first.lock().unwrap() = 1;
    run_for(backend.clone(), 0, Duration::from_secs(5)).await;
    let seen = backend.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            Seen {
                reason: SyncReason::Requested,
                full: true,
                deltas: 1
            },
            Seen {
                reason: SyncReason::Retry,
                full: true,
                deltas: 0
            },
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_busy_cluster_still_gets_a_full_reconcile_every_sync_period() {
    let backend = Recording::default();
    // A change every 10 s keeps the runner from ever syncing for its
    // period alone.
    run_for(backend.clone(), 6, Duration::from_secs(65)).await;
    let seen = backend.seen.lock().unwrap().clone();
    let full: Vec<bool> = seen.iter().map(|s| s.full).collect();
    assert!(seen.iter().all(|s| s.reason == SyncReason::Requested));
    // t = 0 (first), 10, 20, 30 (a period since t = 0), 40, 50, 60.
    assert_eq!(full, [true, false, false, true, false, false, true]);
}

#[tokio::test(start_paused = true)]
async fn only_syncs_that_change_udp_services_carry_their_serving_endpoints() {
    let backend = Recording::default();
    let tcp = SourceEvent::Service(Event::Apply(fixtures::service(
        "ns",
        "api",
        |s| {
            fixtures::set_cluster_ips(s, &["198.18.0.6"]);
            fixtures::add_port(s, "http", 80, "TCP")
        },
    )));
    let later = vec![
        SourceEvent::Service(Event::Apply(udp_service())),
        SourceEvent::EndpointSlice(Event::Apply(udp_slice())),
        tcp,
    ];
    run_source(backend.clone(), udp_source(later), Duration::from_secs(35))
        .await;
    assert_eq!(
        *backend.udp.lock().unwrap(),
        [
            None,
            // A UDP service without endpoints changes no flow's fate.
            None,
            // Its endpoints arrive: every UDP service's serving endpoints
            // come along.
            Some(true),
            None,
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_retry_of_a_failed_udp_sync_still_carries_the_cleanup() {
    let backend = Recording::default();
    *backend.fail_first.lock().unwrap() = 1;
    let source = source(0).take(2).chain(
        futures::stream::iter([
            SourceEvent::Service(Event::InitApply(udp_service())),
            SourceEvent::Service(Event::InitDone),
            SourceEvent::EndpointSlice(Event::Init),
            SourceEvent::EndpointSlice(Event::InitApply(udp_slice())),
            SourceEvent::EndpointSlice(Event::InitDone),
        ])
        .chain(futures::stream::pending()),
    );
    run_source(backend.clone(), source, Duration::from_secs(5)).await;
    let seen = backend.seen.lock().unwrap().clone();
    let reasons: Vec<SyncReason> = seen.iter().map(|s| s.reason).collect();
    assert_eq!(reasons, [SyncReason::Requested, SyncReason::Retry]);
    assert_eq!(*backend.udp.lock().unwrap(), [Some(true), Some(true)]);
}
