//! Telemetry: metric names, the typed events that log and count, and the
//! Prometheus exporter. The names are kube-proxy's, letter for letter, so
//! dashboards and alerts written for kube-proxy keep working; ours carry
//! the `kube_ipvs_proxy_` prefix. (Not `metrics`: that is the crate whose
//! macros record them.)
//!
//! Observable outcomes are emitted as typed events ([`events`]), so that
//! the log line and the metric change in one place. [`exporter`] builds
//! the Prometheus recorder with upstream's histogram buckets.

pub mod catalogue;
pub mod events;
pub mod exporter;
pub mod handles;
pub mod process;
pub mod rest_client;
#[cfg(test)]
pub(crate) mod tests;

pub const ENDPOINT_CHANGES_TOTAL: &str =
    "kubeproxy_sync_proxy_rules_endpoint_changes_total";
pub const ENDPOINT_CHANGES_PENDING: &str =
    "kubeproxy_sync_proxy_rules_endpoint_changes_pending";
pub const SERVICE_CHANGES_TOTAL: &str =
    "kubeproxy_sync_proxy_rules_service_changes_total";
pub const SERVICE_CHANGES_PENDING: &str =
    "kubeproxy_sync_proxy_rules_service_changes_pending";
/// Ours: objects from the API or the state file that could not be used.
/// Labelled by `kind` (Service, EndpointSlice, Node) and `reason`.
pub const INVALID_OBJECTS_TOTAL: &str = "kube_ipvs_proxy_invalid_objects_total";
/// Ours: changes from the API side (`--api-endpoint`) that could not be
/// used, labelled by the `field` at fault.
pub const INVALID_VIEW_CHANGES_TOTAL: &str =
    "kube_ipvs_proxy_invalid_view_changes_total";

/// Ours, on the API side: node watches open now.
pub const API_SIDE_WATCHES: &str = "kube_ipvs_proxy_api_side_watches";
/// Ours, on the API side: updates sent to nodes, by `kind` (`full`: a
/// whole view, to a node that starts or comes back too late to resume;
/// `changes`).
pub const API_SIDE_UPDATES_SENT_TOTAL: &str =
    "kube_ipvs_proxy_api_side_updates_sent_total";
/// Ours, on the API side: changes (a service port's or its endpoints' set
/// or delete, a node's) sent to nodes.
pub const API_SIDE_CHANGES_SENT_TOTAL: &str =
    "kube_ipvs_proxy_api_side_changes_sent_total";
/// Ours, on the API side: bytes of the messages sent to nodes (their
/// protobuf encoding, before gRPC framing and TLS).
pub const API_SIDE_SENT_BYTES_TOTAL: &str =
    "kube_ipvs_proxy_api_side_sent_bytes_total";
/// Ours, on the API side: messages encoded for nodes. What the nodes of
/// a zone that kept up receive alike after a sync is encoded once for
/// them all; the rest once per node.
pub const API_SIDE_MESSAGES_ENCODED_TOTAL: &str =
    "kube_ipvs_proxy_api_side_messages_encoded_total";
/// Ours, on the API side: how long bringing the views up to date with
/// one batch of changes took.
pub const API_SIDE_SYNC_DURATION_SECONDS: &str =
    "kube_ipvs_proxy_api_side_sync_duration_seconds";
/// Ours, on the API side: nodes whose view is kept (made on a node's
/// first watch).
pub const API_SIDE_VIEWS: &str = "kube_ipvs_proxy_api_side_views";
/// Ours, on the API side: clients refused and watches ended, by `reason`
/// (`connections_per_peer`, `token_review_rate`, `unauthenticated`,
/// `permission_denied`, `invalid_request`, `stalled`: a node that did not
/// read its messages in time).
pub const API_SIDE_REFUSED_TOTAL: &str =
    "kube_ipvs_proxy_api_side_refused_total";

/// Histogram of one sync's duration, labelled by `ip_family`.
pub const SYNC_PROXY_RULES_DURATION_SECONDS: &str =
    "kubeproxy_sync_proxy_rules_duration_seconds";
/// Gauge: when rules were last synced successfully (Unix seconds),
/// labelled by `ip_family`.
pub const SYNC_PROXY_RULES_LAST_TIMESTAMP_SECONDS: &str =
    "kubeproxy_sync_proxy_rules_last_timestamp_seconds";
/// Gauge: when a sync was last asked for (Unix seconds), labelled by
/// `ip_family`. Much later than the last timestamp means a hung sync.
pub const SYNC_PROXY_RULES_LAST_QUEUED_TIMESTAMP_SECONDS: &str =
    "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds";
/// Histogram of the time from an EndpointSlice change (its
/// `endpoints.kubernetes.io/last-change-trigger-time`) to the kernel,
/// labelled by `ip_family`.
pub const NETWORK_PROGRAMMING_DURATION_SECONDS: &str =
    "kubeproxy_network_programming_duration_seconds";
/// Gauge (despite the name, as upstream): services with a Local traffic
/// policy and no local endpoint, by `ip_family` and `traffic_policy`
/// (`internal`, `external`).
pub const SYNC_PROXY_RULES_NO_LOCAL_ENDPOINTS_TOTAL: &str =
    "kubeproxy_sync_proxy_rules_no_local_endpoints_total";
/// Counter of failed iptables-restore runs, by `ip_family`.
pub const SYNC_PROXY_RULES_IPTABLES_RESTORE_FAILURES_TOTAL: &str =
    "kubeproxy_sync_proxy_rules_iptables_restore_failures_total";
/// Counter of `/healthz` answers on the healthz server, by `code`.
pub const PROXY_HEALTHZ_TOTAL: &str = "kubeproxy_proxy_healthz_total";
/// Counter of `/livez` answers on the healthz server, by `code`.
pub const PROXY_LIVEZ_TOTAL: &str = "kubeproxy_proxy_livez_total";
/// Histogram of one conntrack cleanup's duration, by `ip_family`.
pub const CONNTRACK_RECONCILER_SYNC_DURATION_SECONDS: &str =
    "kubeproxy_conntrack_reconciler_sync_duration_seconds";
/// Counter of conntrack flows the cleanup deleted, by `ip_family`.
pub const CONNTRACK_RECONCILER_DELETED_ENTRIES_TOTAL: &str =
    "kubeproxy_conntrack_reconciler_deleted_entries_total";

/// Ours: kernel operations, by `facility` (ipvs, addresses, ipsets,
/// iptables, sysctl, conntrack), `op` and `result` (`ok` or the error
/// kind's label).
pub const KERNEL_OPERATIONS_TOTAL: &str =
    "kube_ipvs_proxy_kernel_operations_total";
/// Ours: health check node ports that could not be opened (retried on
/// the next sync).
pub const SERVICE_HEALTH_LISTEN_FAILURES_TOTAL: &str =
    "kube_ipvs_proxy_service_health_listen_failures_total";

/// Ours: how long object changes spend in each stage on their way to the
/// kernel, by `stage`: `api` (the slice's last-change trigger time to our
/// receiving the watch event: the API server's and the controller's
/// share), `queue` (received to applied to the trackers), `pending`
/// (tracked to the start of the sync that checks it out: the
/// bounded-frequency runner and the syncs before it), `sync` (that sync's
/// start to the kernel applied) and `total` (received to applied).
/// Millisecond buckets, where upstream's programming latency starts at
/// 250 ms.
pub const CHANGE_STAGE_DURATION_SECONDS: &str =
    "kube_ipvs_proxy_change_stage_duration_seconds";
/// component-base's build information gauge, which monitoring reads as
/// the component's Kubernetes release: kubernetes-mixin's
/// `KubeVersionMismatch` counts the distinct `vX.Y` of its `git_version`
/// across a cluster's components. Ours says the release the proxy behaves
/// as (the API server's), so that a one-release cluster stays quiet.
pub const BUILD_INFO: &str = "kubernetes_build_info";
/// Ours: this binary's own version and build.
pub const OWN_BUILD_INFO: &str = "kube_ipvs_proxy_build_info";
/// Ours: how long each repair round's kernel read took, and each of its
/// steps held the sync loop, by `part` (`read`, `step`).
pub const REPAIR_DURATION_SECONDS: &str =
    "kube_ipvs_proxy_repair_duration_seconds";

/// Half a millisecond to about 65 s, doubling: fine enough for one
/// change's sync on a quiet node, wide enough for a stalled one.
pub fn stage_buckets() -> Vec<f64> {
    (0..18).map(|i| 0.0005 * f64::from(1u32 << i)).collect()
}

/// Upstream's `ExponentialBuckets(0.001, 2, 15)`: 1 ms to 16.384 s, used
/// by the sync and conntrack duration histograms.
pub fn sync_duration_buckets() -> Vec<f64> {
    let mut buckets = Vec::with_capacity(15);
    let mut bound = 0.001;
    for _ in 0..15 {
        buckets.push(bound);
        bound *= 2.0;
    }
    buckets
}

/// Upstream's network programming buckets: its merge helper starts from a
/// single 0, then 0.25 s and 0.5 s, every second up to 59 s, every 5 s up
/// to 115 s, and every 30 s from 2 to 5 minutes.
pub fn network_programming_buckets() -> Vec<f64> {
    let mut buckets = vec![0.0, 0.25, 0.5];
    buckets.extend((1..=59).map(f64::from));
    buckets.extend((0..12).map(|i| 60.0 + 5.0 * f64::from(i)));
    buckets.extend((0..7).map(|i| 120.0 + 30.0 * f64::from(i)));
    buckets
}
