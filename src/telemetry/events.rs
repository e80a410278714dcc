//! Typed internal events, in vector's shape: each observable outcome is a
//! struct whose `emit` writes the log line and changes the metric, so the
//! two cannot drift apart and callers cannot misspell a label.

use std::{
    collections::BTreeMap,
    fmt,
    sync::OnceLock,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use crate::model::IpFamily;

use super::{
    handles, CHANGE_STAGE_DURATION_SECONDS,
    CONNTRACK_RECONCILER_DELETED_ENTRIES_TOTAL,
    CONNTRACK_RECONCILER_SYNC_DURATION_SECONDS, INVALID_OBJECTS_TOTAL,
    KERNEL_OPERATIONS_TOTAL, NETWORK_PROGRAMMING_DURATION_SECONDS,
    PROXY_HEALTHZ_TOTAL, PROXY_LIVEZ_TOTAL, REPAIR_DURATION_SECONDS,
    SERVICE_HEALTH_LISTEN_FAILURES_TOTAL, SYNC_PROXY_RULES_DURATION_SECONDS,
    SYNC_PROXY_RULES_IPTABLES_RESTORE_FAILURES_TOTAL,
    SYNC_PROXY_RULES_LAST_QUEUED_TIMESTAMP_SECONDS,
    SYNC_PROXY_RULES_LAST_TIMESTAMP_SECONDS,
    SYNC_PROXY_RULES_NO_LOCAL_ENDPOINTS_TOTAL,
};
use crate::model::{Converted, InvalidObject, NamespacedName, ObjectKind};

pub trait InternalEvent {
    fn emit(self);
}

fn unix_seconds(at: SystemTime) -> f64 {
    // A clock before 1970 is a broken clock; 0 is as good as any value.
    at.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Object changes asked for a sync.
#[derive(Debug)]
pub struct SyncQueued<'a> {
    pub families: &'a [IpFamily],
    pub at: SystemTime,
}

impl InternalEvent for SyncQueued<'_> {
    fn emit(self) {
        let at = unix_seconds(self.at);
        for family in self.families {
            handles::gauge(
                SYNC_PROXY_RULES_LAST_QUEUED_TIMESTAMP_SECONDS,
                &[("ip_family", family.as_str())],
            )
            .set(at);
        }
    }
}

/// A sync reached the kernel.
#[derive(Debug)]
pub struct SyncCompleted<'a> {
    pub families: &'a [IpFamily],
    pub duration: Duration,
    pub at: SystemTime,
    pub changed_service_ports: usize,
}

impl InternalEvent for SyncCompleted<'_> {
    fn emit(self) {
        tracing::debug!(
            elapsed = ?self.duration,
            changed = self.changed_service_ports,
            "sync complete"
        );
        let seconds = self.duration.as_secs_f64();
        let at = unix_seconds(self.at);
        // One sync programs every family; each family's series sees it,
        // as each of upstream's per-family proxiers would.
        for family in self.families {
            handles::histogram(
                SYNC_PROXY_RULES_DURATION_SECONDS,
                &[("ip_family", family.as_str())],
            )
            .record(seconds);
            handles::gauge(
                SYNC_PROXY_RULES_LAST_TIMESTAMP_SECONDS,
                &[("ip_family", family.as_str())],
            )
            .set(at);
        }
    }
}

/// An EndpointSlice change reached the kernel, `latency` after its
/// trigger time.
#[derive(Debug)]
pub struct NetworkProgrammed {
    pub family: IpFamily,
    pub latency: Duration,
}

impl InternalEvent for NetworkProgrammed {
    fn emit(self) {
        handles::histogram(
            NETWORK_PROGRAMMING_DURATION_SECONDS,
            &[("ip_family", self.family.as_str())],
        )
        .record(self.latency.as_secs_f64());
    }
}

/// A stage of an object change's way to the kernel; see
/// [`super::CHANGE_STAGE_DURATION_SECONDS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Api,
    Queue,
    Pending,
    Sync,
    Total,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Api => "api",
            Stage::Queue => "queue",
            Stage::Pending => "pending",
            Stage::Sync => "sync",
            Stage::Total => "total",
        }
    }
}

/// One change spent `duration` in `stage`.
#[derive(Debug)]
pub struct StageTimed {
    pub stage: Stage,
    pub duration: Duration,
}

impl InternalEvent for StageTimed {
    fn emit(self) {
        handles::histogram(
            CHANGE_STAGE_DURATION_SECONDS,
            &[("stage", self.stage.as_str())],
        )
        .record(self.duration.as_secs_f64());
    }
}

/// Which part of a repair round took `duration`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairPart {
    /// The kernel read, beside the syncs.
    Read,
    /// One step, holding the sync loop.
    Step,
}

#[derive(Debug)]
pub struct RepairTimed {
    pub part: RepairPart,
    pub duration: Duration,
}

impl InternalEvent for RepairTimed {
    fn emit(self) {
        let part = match self.part {
            RepairPart::Read => "read",
            RepairPart::Step => "step",
        };
        metrics::histogram!(REPAIR_DURATION_SECONDS, "part" => part)
            .record(self.duration.as_secs_f64());
    }
}

/// Services with a Local traffic policy and no local endpoint, counted
/// after a sync.
#[derive(Debug)]
pub struct NoLocalEndpoints {
    pub family: IpFamily,
    pub internal: usize,
    pub external: usize,
}

impl InternalEvent for NoLocalEndpoints {
    fn emit(self) {
        for (policy, count) in
            [("internal", self.internal), ("external", self.external)]
        {
            handles::gauge(
                SYNC_PROXY_RULES_NO_LOCAL_ENDPOINTS_TOTAL,
                &[
                    ("ip_family", self.family.as_str()),
                    ("traffic_policy", policy),
                ],
            )
            .set(count as f64);
        }
    }
}

/// iptables-restore (or ip6tables-restore) failed.
#[derive(Debug)]
pub struct IptablesRestoreFailed<'a, E: fmt::Display> {
    pub family: IpFamily,
    pub error: &'a E,
}

impl<E: fmt::Display> InternalEvent for IptablesRestoreFailed<'_, E> {
    fn emit(self) {
        tracing::error!(
            ip_family = self.family.as_str(),
            error = %self.error,
            "iptables-restore failed"
        );
        metrics::counter!(
            SYNC_PROXY_RULES_IPTABLES_RESTORE_FAILURES_TOTAL,
            "ip_family" => self.family.as_str(),
        )
        .increment(1);
    }
}

/// A conntrack cleanup ran.
#[derive(Debug)]
pub struct ConntrackReconciled {
    pub family: IpFamily,
    pub duration: Duration,
    pub deleted: u64,
}

impl InternalEvent for ConntrackReconciled {
    fn emit(self) {
        tracing::debug!(
            ip_family = self.family.as_str(),
            deleted = self.deleted,
            elapsed = ?self.duration,
            "conntrack entries reconciled"
        );
        metrics::histogram!(
            CONNTRACK_RECONCILER_SYNC_DURATION_SECONDS,
            "ip_family" => self.family.as_str(),
        )
        .record(self.duration.as_secs_f64());
        metrics::counter!(
            CONNTRACK_RECONCILER_DELETED_ENTRIES_TOTAL,
            "ip_family" => self.family.as_str(),
        )
        .increment(self.deleted);
    }
}

/// Which probe of the healthz server answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    Healthz,
    Livez,
}

/// The healthz server answered a probe.
#[derive(Debug)]
pub struct ProbeAnswered {
    pub probe: Probe,
    pub healthy: bool,
}

impl InternalEvent for ProbeAnswered {
    fn emit(self) {
        let code = if self.healthy { "200" } else { "503" };
        // Each metric named where it is recorded, as the catalogue's test
        // reads the recording sites.
        let counter = match self.probe {
            Probe::Healthz => {
                metrics::counter!(PROXY_HEALTHZ_TOTAL, "code" => code)
            }
            Probe::Livez => {
                metrics::counter!(PROXY_LIVEZ_TOTAL, "code" => code)
            }
        };
        counter.increment(1);
    }
}

/// A health check node port could not be opened; the next sync retries.
#[derive(Debug)]
pub struct HealthCheckListenFailed<'a> {
    pub service: &'a NamespacedName,
    pub address: std::net::SocketAddr,
    pub error: &'a std::io::Error,
}

impl InternalEvent for HealthCheckListenFailed<'_> {
    fn emit(self) {
        tracing::error!(
            service = %self.service,
            address = %self.address,
            error = %self.error,
            "failed to start the service health check; retrying on the \
             next sync"
        );
        metrics::counter!(SERVICE_HEALTH_LISTEN_FAILURES_TOTAL).increment(1);
    }
}

/// The kernel facility an operation went to: the `facility` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Facility {
    Ipvs,
    Addresses,
    Ipsets,
}

impl Facility {
    pub fn as_str(self) -> &'static str {
        match self {
            Facility::Ipvs => "ipvs",
            Facility::Addresses => "addresses",
            Facility::Ipsets => "ipsets",
        }
    }
}

/// One sync's kernel operations, counted as they happen and emitted once
/// at the end: one counter update per distinct label set rather than one
/// per operation, which matters for a cold sync of 100k real servers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KernelOperations {
    counts: BTreeMap<(Facility, &'static str, &'static str), u64>,
}

impl KernelOperations {
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one operation (`op` as `add_service`, `del_dest`, ...)
    /// with its outcome: "ok", or the failure's error kind
    /// (`ErrorKind::metric_label`).
    pub fn record(
        &mut self,
        facility: Facility,
        op: &'static str,
        result: &'static str,
    ) {
        *self.counts.entry((facility, op, result)).or_default() += 1;
    }

    #[cfg(test)]
    pub fn count(
        &self,
        facility: Facility,
        op: &'static str,
        result: &'static str,
    ) -> u64 {
        self.counts
            .get(&(facility, op, result))
            .copied()
            .unwrap_or(0)
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

impl InternalEvent for KernelOperations {
    fn emit(self) {
        for ((facility, op, result), n) in self.counts {
            handles::counter(
                KERNEL_OPERATIONS_TOTAL,
                &[
                    ("facility", facility.as_str()),
                    ("op", op),
                    ("result", result),
                ],
            )
            .increment(n);
        }
    }
}

/// A problem a Service's author should see on the Service itself.
pub type ServiceWarning = dyn Fn(&NamespacedName, String) + Send + Sync;

/// Where [`ServiceWarning`]s go: set once by a proxy that records Events
/// (a node that watches the API server); elsewhere they are logged only.
static SERVICE_WARNINGS: OnceLock<Box<ServiceWarning>> = OnceLock::new();

/// Sends the Service problems an author can fix (its scheduling
/// annotations) to `record` as well, from now on.
pub fn record_service_warnings_to(record: Box<ServiceWarning>) {
    let _ = SERVICE_WARNINGS.set(record);
}

/// An object's problem, logged and counted together so that the log line
/// and the metric cannot drift apart.
impl InternalEvent for &InvalidObject {
    fn emit(self) {
        if self.kind == ObjectKind::Service && self.reason.is_scheduling() {
            if let Some(record) = SERVICE_WARNINGS.get() {
                record(&self.object, self.reason.to_string());
            }
        }
        // Namespace and name as fields of their own, for log pipelines.
        tracing::warn!(
            kind = self.kind.as_str(),
            namespace = %self.object.namespace,
            name = %self.object.name,
            reason = self.reason.metric_label(),
            "{self}"
        );
        metrics::counter!(
            INVALID_OBJECTS_TOTAL,
            "kind" => self.kind.as_str(),
            "reason" => self.reason.metric_label(),
        )
        .increment(1);
    }
}

/// Reports a conversion's problems and hands back its value.
pub trait ReportProblems<T> {
    fn report(self) -> T;
}

impl<T> ReportProblems<T> for Converted<T> {
    fn report(self) -> T {
        for problem in &self.problems {
            problem.emit();
        }
        self.value
    }
}
