//! The long-running proxy: one task feeds source events through the
//! stores into the trackers, and the bounded-frequency runner syncs the
//! checked-out changes into a backend.

use std::{
    future::Future,
    net::IpAddr,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use futures::{Stream, StreamExt};
use tracing::{error, info, info_span, warn, Instrument};

use crate::{
    desired::DesiredState,
    kernel::conntrack::UdpServing,
    runner::{BoundedFrequencyRunner, SyncReason, SyncTrigger},
    server::SyncReporter,
    source::{store::Stores, SourceEvent},
    sync::{ChangeOutcome, SyncOutcome, SyncState},
};

#[cfg(test)]
mod backend_tests;

/// Where the desired state goes. The kernel backend programs IPVS,
/// kube-ipvs0, ipsets and iptables; the log backend only reports.
pub trait Backend: Send + 'static {
    /// Applies one sync's changes. An error asks for a retry; the
    /// deltas are not re-sent, but the retry carries the whole desired
    /// state, so a backend that fails repairs then (or at the next
    /// periodic full reconcile).
    fn apply(
        &mut self,
        batch: &SyncBatch,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// The node's addresses on every interface but the proxy's own,
    /// read before each full sync so that NodePorts and the external IPs
    /// not to bind follow the node; `None` keeps what the state has.
    fn local_addresses(
        &mut self,
    ) -> impl Future<Output = Option<Vec<IpAddr>>> + Send {
        std::future::ready(None)
    }

    /// How often [`Backend::poll`] should run; `None` never.
    fn poll_interval(&self) -> Option<Duration> {
        None
    }

    /// Periodic work between syncs (graceful termination of real
    /// servers).
    fn poll(&mut self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }
}

/// One sync's input to the backend, taken out of the shared state so
/// that no lock is held while the backend awaits the kernel.
#[derive(Debug)]
pub struct SyncBatch {
    pub trigger: SyncTrigger,
    pub outcome: SyncOutcome,
    /// How many service ports the desired state holds.
    pub service_ports: usize,
    /// The whole desired state, on the syncs that must compare all of it
    /// with the kernel: the first, the periodic ones (every syncPeriod)
    /// and retries after a failure. `None` on incremental syncs.
    pub desired: Option<DesiredState>,
    /// Every UDP service's serving endpoints, on the syncs after which
    /// stale UDP conntrack entries must go: those that changed UDP
    /// endpoints or removed a UDP service, and the retry of such a sync.
    /// `None` otherwise, so that other syncs build nothing.
    pub udp_serving: Option<UdpServing>,
}

/// Whether the sync changed what UDP clients may be stuck on: upstream
/// cleans conntrack after every sync; the trackers tell us when it can
/// matter.
fn needs_conntrack_cleanup(outcome: &SyncOutcome) -> bool {
    outcome.endpoints.conntrack_cleanup_required
        || !outcome.services.deleted_udp_cluster_ips.is_empty()
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BackendError(pub String);

/// Logs what each sync would change: the backend of a proxy run without
/// a kernel to program.
#[derive(Debug, Default)]
pub struct LogBackend;

impl Backend for LogBackend {
    fn apply(
        &mut self,
        batch: &SyncBatch,
    ) -> impl Future<Output = Result<(), BackendError>> + Send {
        let outcome = &batch.outcome;
        for delta in &outcome.deltas {
            let vs = |s: &Option<Arc<crate::desired::ServiceState>>| {
                s.as_ref().map_or(0, |s| s.virtual_servers.len())
            };
            let rs = |s: &Option<Arc<crate::desired::ServiceState>>| {
                s.as_ref().map_or(0, |s| {
                    s.virtual_servers.iter().map(|v| v.real_servers.len()).sum()
                })
            };
            info!(
                service = %delta.service,
                virtual_servers = vs(&delta.current),
                real_servers = rs(&delta.current),
                previous_real_servers = rs(&delta.previous),
                "service changed"
            );
        }
        info!(
            changed = outcome.deltas.len(),
            service_ports = batch.service_ports,
            full = batch.desired.is_some(),
            "desired state updated"
        );
        std::future::ready(Ok(()))
    }
}

/// When the backend gets the whole desired state.
#[derive(Debug, Default)]
struct FullReconcile {
    last: Option<tokio::time::Instant>,
    forced: bool,
}

impl FullReconcile {
    /// Whether this sync is a full one; if so, it counts as done.
    fn take(&mut self, reason: SyncReason, period: Duration) -> bool {
        let now = tokio::time::Instant::now();
        let full = std::mem::take(&mut self.forced)
            || reason != SyncReason::Requested
            || self.last.is_none_or(|last| now >= last + period);
        if full {
            self.last = Some(now);
        }
        full
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{0}")]
    Restart(String),
    #[error("the object source ended")]
    SourceEnded,
}

/// Runs until the source ends or a change requires a restart. `reporter`
/// hears of queued and applied updates (health, sync metrics, health
/// check node ports).
pub async fn run<S, B>(
    source: S,
    state: SyncState,
    backend: B,
    min_sync_period: Duration,
    sync_period: Duration,
    reporter: SyncReporter,
) -> Result<(), DaemonError>
where
    S: Stream<Item = SourceEvent> + Send + 'static,
    B: Backend,
{
    let (runner, handle) = BoundedFrequencyRunner::new(
        "sync-proxy-rules",
        min_sync_period,
        sync_period,
    );
    // The state is shared by the feeding task and the sync; each holds the
    // lock only for in-memory work, never across an await.
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let state = Arc::new(Mutex::new(state));

    let feeder = {
        let state = Arc::clone(&state);
        let ready = Arc::clone(&ready);
        let handle = handle.clone();
        let reporter = reporter.clone();
        async move {
            let mut stores = Stores::new();
            let mut source = std::pin::pin!(source);
            while let Some(event) = source.next().await {
                let mut needs_sync = false;
                {
                    let mut state =
                        state.lock().unwrap_or_else(PoisonError::into_inner);
                    for change in stores.apply(event) {
                        match state.apply(&change) {
                            ChangeOutcome::Unchanged => {}
                            ChangeOutcome::NeedsSync => needs_sync = true,
                            ChangeOutcome::Restart(why) => {
                                return DaemonError::Restart(why);
                            }
                        }
                    }
                }
                // Nothing is programmed before Services and EndpointSlices
                // have both been listed once, or a half-known cluster would
                // be written to the kernel.
                if stores.ready()
                    && !ready.swap(true, std::sync::atomic::Ordering::SeqCst)
                {
                    info!("services and endpoint slices synced");
                    needs_sync = true;
                }
                if needs_sync && ready.load(std::sync::atomic::Ordering::SeqCst)
                {
                    reporter.queued();
                    handle.run();
                }
            }
            DaemonError::SourceEnded
        }
        .instrument(info_span!("source"))
    };

    // The backend is shared by the sync loop and the poller; a tokio
    // mutex, because each holds it across the backend's awaits.
    let backend = Arc::new(tokio::sync::Mutex::new(backend));
    // The first sync compares everything with the kernel, and so do the
    // retry after a failure and any sync once a syncPeriod has passed
    // since the last full one: the runner's periodic sync alone would
    // never come while changes keep arriving.
    let full_due = Arc::new(Mutex::new(FullReconcile::default()));
    // A cleanup asked for by a sync whose apply failed is owed to the
    // next one: the retry's outcome no longer says that UDP changed.
    let cleanup_owed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sync_loop = {
        let backend = Arc::clone(&backend);
        runner.run_loop(move |trigger: SyncTrigger| {
            let span = info_span!(
                "sync",
                seq = trigger.seq,
                reason = trigger.reason.as_str()
            );
            let state = Arc::clone(&state);
            let ready = Arc::clone(&ready);
            let backend = Arc::clone(&backend);
            let full_due = Arc::clone(&full_due);
            let cleanup_owed = Arc::clone(&cleanup_owed);
            let handle = handle.clone();
            let reporter = reporter.clone();
            async move {
                if !ready.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let started = std::time::Instant::now();
                let full = full_due
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take(trigger.reason, sync_period);
                let mut backend = backend.lock().await;
                let local = match full {
                    true => backend.local_addresses().await,
                    false => None,
                };
                let batch = {
                    let mut state =
                        state.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(local) = local {
                        state.set_local_addresses(local);
                    }
                    let outcome = state.sync();
                    reporter.changed(&state, &outcome);
                    let owed = cleanup_owed
                        .swap(false, std::sync::atomic::Ordering::SeqCst);
                    let udp_serving = (owed
                        || needs_conntrack_cleanup(&outcome))
                    .then(|| {
                        UdpServing::from_maps(
                            state.service_map(),
                            state.endpoints_map(),
                        )
                    });
                    SyncBatch {
                        trigger,
                        outcome,
                        service_ports: state.desired().len(),
                        desired: full.then(|| state.desired().clone()),
                        udp_serving,
                    }
                };
                let result = backend.apply(&batch).await;
                if result.is_ok() {
                    let state =
                        state.lock().unwrap_or_else(PoisonError::into_inner);
                    reporter.synced(&state, &batch.outcome, started.elapsed());
                }
                if let Err(e) = result {
                    warn!(error = %e, "sync failed; retrying");
                    if batch.udp_serving.is_some() {
                        cleanup_owed
                            .store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                    full_due
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .forced = true;
                    handle.retry_after(Duration::from_secs(1));
                }
            }
            .instrument(span)
        })
    };

    let poller = async move {
        let interval = backend.lock().await.poll_interval();
        let Some(interval) = interval else {
            return std::future::pending().await;
        };
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            backend.lock().await.poll().await;
        }
    }
    .instrument(info_span!("poll"));

    tokio::select! {
        err = feeder => {
            error!(error = %err, "stopping");
            Err(err)
        }
        () = sync_loop => Ok(()),
        () = poller => Ok(()),
    }
}
