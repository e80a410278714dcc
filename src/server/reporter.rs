//! What the daemon reports around each sync: queued and applied updates
//! for the health servers, the sync metrics, and the health check node
//! ports of the current services.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use super::{
    health::ProxyHealth, no_local::NoLocalEndpointsTracker,
    service_health::HealthCheckIndex, ServiceHealthServer,
};
use crate::{
    sync::{SyncOutcome, SyncState},
    telemetry::events::{
        InternalEvent, NetworkProgrammed, SyncCompleted, SyncQueued,
    },
};

/// Cheap to clone: the feeding task reports queued updates, the sync
/// loop applied ones.
#[derive(Debug, Clone)]
pub struct SyncReporter {
    health: Arc<ProxyHealth>,
    service_health: Option<ServiceHealthServer>,
    health_checks: Arc<Mutex<HealthCheckIndex>>,
    no_local: Arc<Mutex<NoLocalEndpointsTracker>>,
}

impl Default for SyncReporter {
    /// Health kept but served nowhere, no health check ports: for runs
    /// and tests without servers.
    fn default() -> Self {
        Self::new(Arc::new(ProxyHealth::new(Duration::from_secs(60))), None)
    }
}

impl SyncReporter {
    pub fn new(
        health: Arc<ProxyHealth>,
        service_health: Option<ServiceHealthServer>,
    ) -> Self {
        Self {
            health,
            service_health,
            health_checks: Arc::default(),
            no_local: Arc::default(),
        }
    }

    #[cfg(test)]
    pub fn health(&self) -> &Arc<ProxyHealth> {
        &self.health
    }

    /// Object changes asked for a sync.
    pub fn queued(&self) {
        self.health.queued_update();
        SyncQueued {
            families: &self.health.families(),
            at: self.health.now(),
        }
        .emit();
    }

    /// A sync reached the kernel, `duration` after it started.
    pub fn synced(
        &self,
        state: &SyncState,
        outcome: &SyncOutcome,
        duration: Duration,
    ) {
        let families = state.desired().context().families();
        self.health.set_families(&families);
        self.health.updated();
        self.health
            .set_node_eligible(state.node().is_none_or(|n| n.eligible));
        let now = self.health.now();
        // The end of a sync, for whoever reads the log to know whether a
        // crash came in the middle of one (tests/conformance's SIGKILLs).
        tracing::debug!(?duration, "sync done");
        SyncCompleted {
            families: &families,
            duration,
            at: now,
            changed_service_ports: outcome.deltas.len(),
        }
        .emit();
        // Trigger times carry no family; on a dual-stack node they are
        // reported under the first one.
        if let Some(&family) = families.first() {
            for times in outcome.endpoints.last_change_trigger_times.values() {
                // A trigger time ahead of our clock (another node's clock,
                // or a time rounded up to the second) still counts as one
                // change programmed: as upstream, which observes it as is,
                // it lands in the lowest bucket.
                for t in times {
                    let latency = now.duration_since(*t).unwrap_or_default();
                    NetworkProgrammed { family, latency }.emit();
                }
            }
        }
    }

    /// A sync checked changes out of the trackers: the state derived from
    /// them (no-local-endpoints counts, health check ports) follows here,
    /// from the changed ports only, whether or not the kernel apply then
    /// succeeds: these describe the cluster, not the kernel, and changes
    /// not seen now would never be seen again.
    pub fn changed(&self, state: &SyncState, outcome: &SyncOutcome) {
        self.count_no_local_endpoints(state, outcome);
        self.sync_health_checks(state, outcome);
    }

    /// Only the ports this sync changed are looked at again.
    fn count_no_local_endpoints(
        &self,
        state: &SyncState,
        outcome: &SyncOutcome,
    ) {
        // The tracker takes each port once.
        let changed = outcome
            .services
            .changed_ports
            .iter()
            .chain(&outcome.endpoints.changed_ports)
            .chain(outcome.deltas.iter().map(|d| &d.service));
        // A panic midway could leave one service's count off until its
        // ports change again: better than no metric from then on.
        let mut tracker =
            self.no_local.lock().unwrap_or_else(PoisonError::into_inner);
        tracker.update(
            changed,
            state.service_map(),
            state.endpoints(),
            state.desired().context(),
        );
        tracker.emit();
    }

    /// Health check ports follow the services: the index takes the
    /// changed ports, and the servers are touched only when it moved or
    /// an earlier listen failed.
    fn sync_health_checks(&self, state: &SyncState, outcome: &SyncOutcome) {
        let Some(server) = &self.service_health else {
            return;
        };
        let mut index = self
            .health_checks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let moved = index.update(
            outcome
                .services
                .changed_ports
                .iter()
                .chain(&outcome.endpoints.changed_ports),
            state.service_map(),
            state.endpoints(),
        );
        if moved || server.retry_pending() {
            server.sync_services(&index.wanted());
            server.sync_endpoints(&index.local_counts());
        }
    }

    /// The time the health state reads: the injected clock in tests.
    #[cfg(test)]
    pub fn now(&self) -> std::time::SystemTime {
        self.health.now()
    }
}
