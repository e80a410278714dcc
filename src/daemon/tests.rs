//! The sync loop against a recording backend, on a paused clock: what each
//! sync hands over, when repair rounds run and that they never hold up a
//! sync, retries, the poller.

use std::{
    collections::VecDeque,
    future::Future,
    net::IpAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use kube::runtime::watcher::Event;
use pretty_assertions::assert_eq;
use tokio::time::Instant;

use super::*;
use crate::{
    backend::BackendError,
    model::fixtures,
    runner::SyncReason,
    sync::{NodeSettings, SyncState},
};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Sync {
        reason: SyncReason,
        deltas: usize,
        node_ports: Vec<IpAddr>,
        /// Each virtual server's service port and scheduler, after it.
        schedulers: Vec<(String, String)>,
    },
    /// Asked whether the kernel has a scheduler.
    Probed(String),
    RepairBegun,
    RepairStep,
    Poll,
    /// Handed a batch of the list before the first sync: its deltas.
    Ahead(usize),
}

/// Records what the loop asks of it, with the (paused) time in whole
/// seconds since the test began.
#[derive(Clone)]
struct Recording {
    start: Instant,
    seen: Arc<Mutex<Vec<(u64, Seen)>>>,
    /// How many of the first applies fail.
    fail_first: Arc<Mutex<u32>>,
    /// Then, applies that fail (true) or succeed, in order; all succeed
    /// once it is empty.
    script: Arc<Mutex<VecDeque<bool>>>,
    /// Steps a repair round takes, each a second long.
    steps: usize,
    /// What a repair round reads as the node's addresses.
    local: Vec<IpAddr>,
    /// How long an apply takes.
    apply_time: Duration,
}

struct Read {
    local: Vec<IpAddr>,
    steps_left: usize,
}

impl crate::backend::Observation for Read {
    fn local_addresses(&self) -> Option<&[IpAddr]> {
        Some(&self.local)
    }
}

impl Recording {
    fn new(steps: usize) -> Self {
        Self {
            start: Instant::now(),
            seen: Arc::default(),
            fail_first: Arc::default(),
            script: Arc::default(),
            steps,
            local: vec![ip("198.18.100.1")],
            apply_time: Duration::from_millis(10),
        }
    }

    fn record(&self, seen: Seen) {
        let at = self.start.elapsed().as_secs();
        self.seen.lock().unwrap().push((at, seen));
    }

    fn seen(&self) -> Vec<(u64, Seen)> {
        self.seen.lock().unwrap().clone()
    }

    fn syncs(&self) -> Vec<(u64, SyncReason, usize)> {
        self.seen()
            .into_iter()
            .filter_map(|(at, seen)| match seen {
                Seen::Sync { reason, deltas, .. } => Some((at, reason, deltas)),
                _ => None,
            })
            .collect()
    }
}

impl Backend for Recording {
    type Observed = Read;

    async fn apply(
        &mut self,
        batch: SyncBatch<'_>,
    ) -> Result<(), BackendError> {
        // A sync takes a little time, with the loop waiting on it.
        tokio::time::sleep(self.apply_time).await;
        self.record(Seen::Sync {
            reason: batch.trigger.reason,
            deltas: batch.outcome.deltas.len(),
            node_ports: batch
                .state
                .desired()
                .context()
                .node_port_addresses
                .clone(),
            schedulers: (batch.state.desired().snapshot().virtual_servers)
                .iter()
                .map(|vs| (vs.service.to_string(), vs.scheduling.to_string()))
                .collect(),
        });
        let mut fail = self.fail_first.lock().unwrap();
        if *fail > 0 {
            *fail -= 1;
            return Err(BackendError::KernelOperations {
                failed: 1,
                attempted: 1,
            });
        }
        if self.script.lock().unwrap().pop_front() == Some(true) {
            return Err(BackendError::KernelOperations {
                failed: 1,
                attempted: 1,
            });
        }
        Ok(())
    }

    fn begin_repair(
        &mut self,
    ) -> impl Future<Output = Read> + Send + 'static + use<> {
        self.record(Seen::RepairBegun);
        let read = Read {
            local: self.local.clone(),
            steps_left: self.steps,
        };
        async move {
            // The read takes two seconds, beside the syncs.
            tokio::time::sleep(Duration::from_secs(2)).await;
            read
        }
    }

    async fn repair_step(&mut self, read: &mut Read) -> RepairStep {
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.record(Seen::RepairStep);
        read.steps_left = read.steps_left.saturating_sub(1);
        match read.steps_left {
            0 => RepairStep::Done,
            _ => RepairStep::Continue,
        }
    }

    async fn ahead_of_first_sync(
        &mut self,
        deltas: &[crate::desired::ServiceDelta],
    ) {
        if !deltas.is_empty() {
            self.record(Seen::Ahead(deltas.len()));
        }
    }

    async fn has_scheduler(&mut self, scheduler: &str) -> bool {
        self.record(Seen::Probed(scheduler.to_owned()));
        scheduler != "twos"
    }

    fn poll_interval(&self) -> Option<Duration> {
        Some(Duration::from_secs(2))
    }

    async fn poll(&mut self) {
        self.record(Seen::Poll);
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn service(i: u8) -> k8s_openapi::api::core::v1::Service {
    fixtures::service("ns", &format!("svc-{i}"), |s| {
        fixtures::set_cluster_ips(s, &[&format!("198.18.0.{}", i + 1)]);
        fixtures::add_port(s, "http", 80, "TCP")
    })
}

/// Services and slices listed once (one service); then a new service at
/// each of `at` (seconds); then silence.
fn source(
    at: &'static [u64],
) -> impl futures::Stream<Item = SourceEvent> + Send + 'static {
    let start = Instant::now();
    futures::stream::iter(vec![
        SourceEvent::Service(Event::Init),
        SourceEvent::Service(Event::InitApply(service(0))),
        SourceEvent::Service(Event::InitDone),
        SourceEvent::EndpointSlice(Event::Init),
        SourceEvent::EndpointSlice(Event::InitDone),
    ])
    .chain(futures::stream::iter(at.iter().enumerate()).then(
        move |(i, at)| async move {
            tokio::time::sleep_until(start + Duration::from_secs(*at)).await;
            SourceEvent::Service(Event::Apply(service(i as u8 + 1)))
        },
    ))
    .chain(futures::stream::pending())
}

async fn run_for(
    backend: Recording,
    source: impl futures::Stream<Item = SourceEvent> + Send + 'static,
    for_: Duration,
) {
    run_source_for(backend, Source::objects(source), for_).await;
}

/// Runs the loop on `source` for `for_`, a second's minSyncPeriod and
/// half a minute's syncPeriod.
async fn run_source_for(backend: Recording, source: Source, for_: Duration) {
    let state = SyncState::new(
        "node-a",
        NodeSettings::default(),
        Some(vec![ip("198.18.100.1")]),
        std::time::SystemTime::now(),
    );
    let settings = LoopSettings {
        min_sync_period: Duration::from_secs(1),
        sync_period: Duration::from_secs(30),
    };
    let feed = Feed::start(source, "node-a", &Handle::current());
    let run = run(feed, state, backend, settings, SyncReporter::default());
    assert!(tokio::time::timeout(for_, run).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn changes_reach_the_backend_as_deltas_and_quiet_periods_still_sync() {
    let backend = Recording::new(1);
    run_for(backend.clone(), source(&[10]), Duration::from_secs(65)).await;
    assert_eq!(
        backend.syncs(),
        [
            (0, SyncReason::Requested, 1),
            (10, SyncReason::Requested, 1),
            // syncPeriod after the last sync, with nothing to do.
            (40, SyncReason::Periodic, 0),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn repair_rounds_follow_the_sync_period_and_step_between_syncs() {
    let backend = Recording::new(3);
    run_for(backend.clone(), source(&[]), Duration::from_secs(75)).await;
    let rounds: Vec<(u64, Seen)> = backend
        .seen()
        .into_iter()
        .filter(|(_, s)| matches!(s, Seen::RepairBegun | Seen::RepairStep))
        .collect();
    assert_eq!(
        rounds,
        [
            // syncPeriod after the first sync; a 2 s read; 1 s steps.
            (30, Seen::RepairBegun),
            (33, Seen::RepairStep),
            (34, Seen::RepairStep),
            (35, Seen::RepairStep),
            // syncPeriod after the round ended.
            (65, Seen::RepairBegun),
            (68, Seen::RepairStep),
            (69, Seen::RepairStep),
            (70, Seen::RepairStep),
        ]
    );
}

/// A change during a long repair round is synced at once: the round
/// waits, the change does not.
#[tokio::test(start_paused = true)]
async fn a_sync_never_waits_for_a_repair_round() {
    let backend = Recording::new(20);
    run_for(backend.clone(), source(&[40]), Duration::from_secs(60)).await;
    let seen = backend.seen();
    let sync_at = seen
        .iter()
        .position(|(at, s)| *at == 40 && matches!(s, Seen::Sync { .. }))
        .expect("the change at 40 s was synced at 40 s");
    let steps = |range: &[(u64, Seen)]| {
        range.iter().filter(|(_, s)| *s == Seen::RepairStep).count()
    };
    // Some of the round's steps ran before the sync, and the rest after.
    assert!(steps(&seen[..sync_at]) > 0, "{seen:?}");
    assert!(steps(&seen[sync_at..]) > 0, "{seen:?}");
}

/// Changes every 100 ms and syncs of 200 ms leave the loop no idle
/// time; the round still ends, a step after each sync.
#[tokio::test(start_paused = true)]
async fn a_round_ends_while_syncs_keep_the_loop_busy() {
    let mut backend = Recording::new(5);
    backend.apply_time = Duration::from_millis(200);
    let start = Instant::now();
    let busy = source(&[]).take(5).chain(
        futures::stream::iter(0..400u32)
            .then(move |i| async move {
                let at =
                    Duration::from_secs(25) + Duration::from_millis(100) * i;
                tokio::time::sleep_until(start + at).await;
                SourceEvent::Service(Event::Apply(service((i % 200) as u8)))
            })
            .chain(futures::stream::pending()),
    );
    run_for(backend.clone(), busy, Duration::from_secs(60)).await;
    let seen = backend.seen();
    let steps: Vec<u64> = seen
        .iter()
        .filter(|(_, s)| *s == Seen::RepairStep)
        .map(|(at, _)| *at)
        .collect();
    assert_eq!(steps.len(), 5, "{seen:?}");
    // All within the busy stretch (25 s to 65 s), right after the read.
    assert!(steps.iter().all(|at| (32..=45).contains(at)), "{steps:?}");
}

#[tokio::test(start_paused = true)]
async fn a_failed_sync_is_retried_after_a_second() {
    let backend = Recording::new(1);
    *backend.fail_first.lock().unwrap() = 1;
    run_for(backend.clone(), source(&[]), Duration::from_secs(5)).await;
    assert_eq!(
        backend.syncs(),
        [(0, SyncReason::Requested, 1), (1, SyncReason::Retry, 0)]
    );
}

#[tokio::test(start_paused = true)]
async fn retries_back_off_while_the_backend_keeps_failing() {
    let backend = Recording::new(1);
    *backend.fail_first.lock().unwrap() = 4;
    run_for(backend.clone(), source(&[]), Duration::from_secs(20)).await;
    let at: Vec<u64> = backend.syncs().iter().map(|(at, ..)| *at).collect();
    // 1, 2, 4 and 8 s after each failure; then fine.
    assert_eq!(at, [0, 1, 3, 7, 15]);
}

/// A success ends the run of failures: the next failure, however many
/// came before it over the process's life, is retried after a second.
#[tokio::test(start_paused = true)]
async fn a_successful_sync_resets_the_backoff() {
    let backend = Recording::new(1);
    *backend.script.lock().unwrap() =
        VecDeque::from([true, true, false, true, false]);
    run_for(backend.clone(), source(&[20]), Duration::from_secs(25)).await;
    let at: Vec<u64> = backend.syncs().iter().map(|(at, ..)| *at).collect();
    // Two failures (1 s, 2 s), fine at 3 s; the change at 20 s fails and
    // is retried 1 s later, not 4 s.
    assert_eq!(at, [0, 1, 3, 20, 21]);
}

/// The node's addresses come with each repair round's read: a new one
/// reaches the desired state (its NodePorts) at once.
#[tokio::test(start_paused = true)]
async fn node_addresses_read_by_a_repair_round_reach_the_next_sync() {
    let mut backend = Recording::new(1);
    backend.local = vec![ip("198.18.100.1"), ip("198.18.100.2")];
    run_for(backend.clone(), source(&[]), Duration::from_secs(35)).await;
    let node_ports: Vec<(u64, Vec<IpAddr>)> = backend
        .seen()
        .into_iter()
        .filter_map(|(at, s)| match s {
            Seen::Sync { node_ports, .. } => Some((at, node_ports)),
            _ => None,
        })
        .collect();
    assert_eq!(
        node_ports,
        [
            (0, vec![ip("198.18.100.1")]),
            // The runner's periodic sync.
            (30, vec![ip("198.18.100.1")]),
            // Read at 30..32 s, synced at once.
            (32, vec![ip("198.18.100.1"), ip("198.18.100.2")]),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_poller_runs_every_interval() {
    let backend = Recording::new(1);
    run_for(backend.clone(), source(&[]), Duration::from_secs(21)).await;
    let polls = backend
        .seen()
        .iter()
        .filter(|(_, s)| *s == Seen::Poll)
        .count();
    // Every 2 s for 21 s, the first tick at once.
    assert_eq!(polls, 11);
}

/// A list that takes seconds goes into the desired state as it comes;
/// the first sync, once both kinds are listed, hands over every listed
/// port once.
#[tokio::test(start_paused = true)]
async fn a_list_taken_in_as_it_arrives_is_synced_once_whole() {
    let backend = Recording::new(1);
    let slow = futures::stream::iter(vec![
        SourceEvent::Service(Event::Init),
        SourceEvent::EndpointSlice(Event::Init),
        SourceEvent::Service(Event::InitApply(service(0))),
        SourceEvent::Service(Event::InitApply(service(1))),
        SourceEvent::Service(Event::InitApply(service(2))),
        SourceEvent::Service(Event::InitDone),
        SourceEvent::EndpointSlice(Event::InitDone),
    ])
    .then(|event| async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        event
    })
    .chain(futures::stream::pending());
    run_for(backend.clone(), slow, Duration::from_secs(20)).await;
    assert_eq!(backend.syncs(), [(7, SyncReason::Requested, 3)]);
    // Each listed port was handed to the backend as it came, before the
    // first sync; nothing after.
    let ahead: Vec<(u64, Seen)> = backend
        .seen()
        .into_iter()
        .filter(|(_, s)| matches!(s, Seen::Ahead(_)))
        .collect();
    assert_eq!(
        ahead,
        [
            (3, Seen::Ahead(1)),
            (4, Seen::Ahead(1)),
            (5, Seen::Ahead(1))
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn nothing_syncs_before_both_kinds_are_listed() {
    let backend = Recording::new(1);
    let half = futures::stream::iter(vec![
        SourceEvent::Service(Event::Init),
        SourceEvent::Service(Event::InitApply(service(0))),
        SourceEvent::Service(Event::InitDone),
    ])
    .chain(futures::stream::pending());
    run_for(backend.clone(), half, Duration::from_secs(65)).await;
    assert_eq!(backend.syncs(), []);
}

#[tokio::test(start_paused = true)]
async fn the_end_of_the_source_ends_the_loop() {
    let backend = Recording::new(1);
    let state = SyncState::new(
        "node-a",
        NodeSettings::default(),
        None,
        std::time::SystemTime::now(),
    );
    let settings = LoopSettings {
        min_sync_period: Duration::ZERO,
        sync_period: Duration::from_secs(30),
    };
    let ended = run(
        Feed::start(
            Source::objects(futures::stream::empty()),
            "node-a",
            &Handle::current(),
        ),
        state,
        backend,
        settings,
        SyncReporter::default(),
    )
    .await;
    assert!(matches!(ended, Err(DaemonError::SourceEnded)), "{ended:?}");
}

/// The views a node would receive for the objects of [`source`]: the
/// whole view once listed, then each new service as one update.
fn view_source(
    at: &'static [u64],
) -> impl futures::Stream<Item = crate::nodeview::Update> + Send + 'static {
    use crate::{
        apiside::cluster::{Cluster, NO_NODE},
        source::store::Stores,
    };
    let mut stores = Stores::new(NO_NODE);
    let mut cluster = Cluster::new(std::time::SystemTime::now());
    let listed = [
        SourceEvent::Service(Event::Init),
        SourceEvent::Service(Event::InitApply(service(0))),
        SourceEvent::Service(Event::InitDone),
    ];
    for event in listed {
        for change in stores.apply(event) {
            cluster.apply(&change);
        }
    }
    let _ = cluster.sync(usize::MAX);
    let first = cluster.full("node-a");
    let mut held = first.revision;
    let mut updates = vec![(0, first)];
    for (i, at) in at.iter().enumerate() {
        let event = SourceEvent::Service(Event::Apply(service(i as u8 + 1)));
        for change in stores.apply(event) {
            cluster.apply(&change);
        }
        let _ = cluster.sync(usize::MAX);
        let update = cluster.update_for("node-a", Some(held), true).unwrap();
        held = update.revision;
        updates.push((*at, update));
    }
    let start = Instant::now();
    futures::stream::iter(updates)
        .then(move |(at, update)| async move {
            tokio::time::sleep_until(start + Duration::from_secs(at)).await;
            update
        })
        .chain(futures::stream::pending())
}

async fn run_view_for(
    backend: Recording,
    source: impl futures::Stream<Item = crate::nodeview::Update> + Send + 'static,
    for_: Duration,
) {
    run_source_for(backend, Source::View(Box::pin(source)), for_).await;
}

/// Fed by the API side, the loop syncs as it does for API objects.
#[tokio::test(start_paused = true)]
async fn a_node_fed_by_its_view_syncs_as_one_fed_by_objects() {
    let objects = Recording::new(1);
    run_for(objects.clone(), source(&[10]), Duration::from_secs(65)).await;
    let view = Recording::new(1);
    run_view_for(view.clone(), view_source(&[10]), Duration::from_secs(65))
        .await;
    assert_eq!(view.syncs().len(), 3, "{:?}", view.syncs());
    assert_eq!(view.syncs(), objects.syncs());
}

/// No view yet (the API side is unreachable): nothing is programmed, so
/// the kernel keeps what it has.
#[tokio::test(start_paused = true)]
async fn without_a_view_nothing_is_synced() {
    let backend = Recording::new(1);
    run_view_for(
        backend.clone(),
        futures::stream::pending(),
        Duration::from_secs(65),
    )
    .await;
    assert_eq!(backend.syncs(), []);
}

/// A Service's annotated scheduler is asked of the kernel once, before a
/// virtual server uses it; one the kernel lacks is replaced by the
/// node's in the same sync, and not asked again.
#[tokio::test(start_paused = true)]
async fn annotated_schedulers_are_probed_once_and_a_missing_one_falls_back() {
    use crate::model::ANNOTATION_SCHEDULER;
    let annotated = |i: u8, scheduler: &'static str| {
        let mut svc = service(i);
        svc.metadata.annotations = Some(
            [(ANNOTATION_SCHEDULER.to_owned(), scheduler.to_owned())].into(),
        );
        svc
    };
    let start = Instant::now();
    let source = futures::stream::iter(vec![
        SourceEvent::Service(Event::Init),
        SourceEvent::Service(Event::InitApply(annotated(0, "sh"))),
        SourceEvent::Service(Event::InitApply(annotated(1, "twos"))),
        SourceEvent::Service(Event::InitDone),
        SourceEvent::EndpointSlice(Event::Init),
        SourceEvent::EndpointSlice(Event::InitDone),
    ])
    .chain(futures::stream::once(async move {
        tokio::time::sleep_until(start + Duration::from_secs(5)).await;
        SourceEvent::Service(Event::Apply(annotated(2, "twos")))
    }))
    .chain(futures::stream::pending());
    let backend = Recording::new(1);
    run_for(backend.clone(), source, Duration::from_secs(20)).await;
    let probed: Vec<String> = backend
        .seen()
        .into_iter()
        .filter_map(|(_, seen)| match seen {
            Seen::Probed(name) => Some(name),
            _ => None,
        })
        .collect();
    assert_eq!(probed, ["sh", "twos"], "each once, the node's never");
    let last = backend
        .seen()
        .into_iter()
        .rev()
        .find_map(|(_, seen)| match seen {
            Seen::Sync { schedulers, .. } => Some(schedulers),
            _ => None,
        })
        .expect("synced");
    let of = |name: &str| {
        last.iter()
            .find(|(service, _)| service.starts_with(name))
            .map(|(_, scheduler)| scheduler.as_str())
    };
    assert_eq!(of("ns/svc-0:"), Some("sh"));
    assert_eq!(of("ns/svc-1:"), Some("rr"), "the kernel has no twos");
    assert_eq!(
        of("ns/svc-2:"),
        Some("rr"),
        "known missing, not asked again"
    );
}
