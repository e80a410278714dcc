//! The long-running proxy: one task feeds source events through the
//! stores into the trackers, and the bounded-frequency runner syncs the
//! checked-out changes into a backend.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use futures::{Stream, StreamExt};
use tracing::{error, info, info_span, warn, Instrument};

use crate::{
    desired::DesiredState,
    runner::{BoundedFrequencyRunner, SyncTrigger},
    server::SyncReporter,
    source::{store::Stores, SourceEvent},
    sync::{ChangeOutcome, SyncOutcome, SyncState},
};

/// Where the desired state goes. The kernel backend programs IPVS,
/// kube-ipvs0, ipsets and iptables; the log backend only reports.
pub trait Backend: Send + 'static {
    /// Applies one sync's changes. An error asks for a retry; the
    /// deltas are not re-sent, so a backend that fails must repair on
    /// its next full reconcile.
    fn apply(
        &mut self,
        outcome: &SyncOutcome,
        desired: &DesiredState,
    ) -> Result<(), BackendError>;
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
        outcome: &SyncOutcome,
        desired: &DesiredState,
    ) -> Result<(), BackendError> {
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
            service_ports = desired.len(),
            "desired state updated"
        );
        Ok(())
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
    mut state: SyncState,
    mut backend: B,
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
    state.sync(); // nothing yet; primes the desired state's context
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

    let sync_loop = runner.run_loop(move |trigger: SyncTrigger| {
        let span = info_span!(
            "sync",
            seq = trigger.seq,
            reason = trigger.reason.as_str()
        );
        let _enter = span.enter();
        if !ready.load(std::sync::atomic::Ordering::SeqCst) {
            return std::future::ready(());
        }
        let started = std::time::Instant::now();
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        let outcome = state.sync();
        match backend.apply(&outcome, state.desired()) {
            Ok(()) => reporter.synced(&state, &outcome, started.elapsed()),
            Err(e) => {
                warn!(error = %e, "sync failed; retrying");
                handle.retry_after(Duration::from_secs(1));
            }
        }
        std::future::ready(())
    });

    tokio::select! {
        err = feeder => {
            error!(error = %err, "stopping");
            Err(err)
        }
        () = sync_loop => Ok(()),
    }
}
