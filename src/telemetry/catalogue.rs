//! Every metric the proxy exposes, listed once. The exporter takes its
//! `# HELP` texts and histogram buckets from this list, `docs/metrics.md`
//! is rendered from it, and tests hold the page and every recording site
//! in the code to it: a metric, a label or a bucket changed in one place
//! and not the other fails a test.

use super::{
    network_programming_buckets,
    rest_client::{self, REQUESTS_TOTAL, REQUEST_DURATION_SECONDS},
    stage_buckets, sync_duration_buckets, API_SIDE_CHANGES_SENT_TOTAL,
    API_SIDE_MESSAGES_ENCODED_TOTAL, API_SIDE_REFUSED_TOTAL,
    API_SIDE_SENT_BYTES_TOTAL, API_SIDE_SYNC_DURATION_SECONDS,
    API_SIDE_UPDATES_SENT_TOTAL, API_SIDE_VIEWS, API_SIDE_WATCHES, BUILD_INFO,
    CHANGE_STAGE_DURATION_SECONDS, CONNTRACK_RECONCILER_DELETED_ENTRIES_TOTAL,
    CONNTRACK_RECONCILER_SYNC_DURATION_SECONDS, ENDPOINT_CHANGES_PENDING,
    ENDPOINT_CHANGES_TOTAL, INVALID_OBJECTS_TOTAL, INVALID_VIEW_CHANGES_TOTAL,
    KERNEL_OPERATIONS_TOTAL, NETWORK_PROGRAMMING_DURATION_SECONDS,
    OWN_BUILD_INFO, PROXY_HEALTHZ_TOTAL, PROXY_LIVEZ_TOTAL,
    REPAIR_DURATION_SECONDS, SERVICE_CHANGES_PENDING, SERVICE_CHANGES_TOTAL,
    SERVICE_HEALTH_LISTEN_FAILURES_TOTAL, SYNC_PROXY_RULES_DURATION_SECONDS,
    SYNC_PROXY_RULES_IPTABLES_RESTORE_FAILURES_TOTAL,
    SYNC_PROXY_RULES_LAST_QUEUED_TIMESTAMP_SECONDS,
    SYNC_PROXY_RULES_LAST_TIMESTAMP_SECONDS,
    SYNC_PROXY_RULES_NO_LOCAL_ENDPOINTS_TOTAL,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    #[cfg(test)]
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Whose the name is: kube-proxy's (and client-go's, component-base's),
/// kept letter for letter so that dashboards keep working, or ours.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Upstream,
    Ours,
}

#[derive(Debug, Clone)]
pub struct Metric {
    /// The Rust constant that names it where it is recorded.
    #[cfg(test)]
    pub constant: &'static str,
    pub name: &'static str,
    pub kind: Kind,
    #[cfg(test)]
    pub origin: Origin,
    #[cfg(test)]
    pub labels: &'static [&'static str],
    pub buckets: Option<Vec<f64>>,
    /// The `# HELP` text: upstream's own for upstream's metrics.
    pub help: &'static str,
}

macro_rules! metric {
    ($constant:ident, $kind:ident, $origin:ident, [$($label:literal),*],
     $buckets:expr, $help:expr) => {
        Metric {
            #[cfg(test)]
            constant: stringify!($constant),
            name: $constant,
            kind: Kind::$kind,
            #[cfg(test)]
            origin: Origin::$origin,
            #[cfg(test)]
            labels: &[$($label),*],
            buckets: $buckets,
            help: $help,
        }
    };
}

/// The metrics the recorder holds, in the order of the page.
pub fn recorded() -> Vec<Metric> {
    let sync = Some(sync_duration_buckets());
    let stage = Some(stage_buckets());
    vec![
        metric!(
            SYNC_PROXY_RULES_DURATION_SECONDS,
            Histogram,
            Upstream,
            ["ip_family"],
            sync.clone(),
            "SyncProxyRules latency in seconds"
        ),
        metric!(
            SYNC_PROXY_RULES_LAST_TIMESTAMP_SECONDS,
            Gauge,
            Upstream,
            ["ip_family"],
            None,
            "The last time proxy rules were successfully synced"
        ),
        metric!(
            SYNC_PROXY_RULES_LAST_QUEUED_TIMESTAMP_SECONDS,
            Gauge,
            Upstream,
            ["ip_family"],
            None,
            "The last time a sync of proxy rules was queued"
        ),
        metric!(
            NETWORK_PROGRAMMING_DURATION_SECONDS,
            Histogram,
            Upstream,
            ["ip_family"],
            Some(network_programming_buckets()),
            "In Cluster Network Programming Latency in seconds"
        ),
        metric!(
            ENDPOINT_CHANGES_PENDING,
            Gauge,
            Upstream,
            [],
            None,
            "Pending proxy rules Endpoint changes"
        ),
        metric!(
            ENDPOINT_CHANGES_TOTAL,
            Counter,
            Upstream,
            [],
            None,
            "Cumulative proxy rules Endpoint changes"
        ),
        metric!(
            SERVICE_CHANGES_PENDING,
            Gauge,
            Upstream,
            [],
            None,
            "Pending proxy rules Service changes"
        ),
        metric!(
            SERVICE_CHANGES_TOTAL,
            Counter,
            Upstream,
            [],
            None,
            "Cumulative proxy rules Service changes"
        ),
        metric!(
            SYNC_PROXY_RULES_IPTABLES_RESTORE_FAILURES_TOTAL,
            Counter,
            Upstream,
            ["ip_family"],
            None,
            "Cumulative proxy iptables restore failures"
        ),
        metric!(
            PROXY_HEALTHZ_TOTAL,
            Counter,
            Upstream,
            ["code"],
            None,
            "Cumulative proxy healthz HTTP status"
        ),
        metric!(
            PROXY_LIVEZ_TOTAL,
            Counter,
            Upstream,
            ["code"],
            None,
            "Cumulative proxy livez HTTP status"
        ),
        metric!(
            SYNC_PROXY_RULES_NO_LOCAL_ENDPOINTS_TOTAL,
            Gauge,
            Upstream,
            ["ip_family", "traffic_policy"],
            None,
            "Number of services with a Local traffic policy and no endpoints"
        ),
        metric!(
            CONNTRACK_RECONCILER_SYNC_DURATION_SECONDS,
            Histogram,
            Upstream,
            ["ip_family"],
            sync,
            "ReconcileConntrackFlowsLatency latency in seconds"
        ),
        metric!(
            CONNTRACK_RECONCILER_DELETED_ENTRIES_TOTAL,
            Counter,
            Upstream,
            ["ip_family"],
            None,
            "Cumulative conntrack flows deleted by conntrack reconciler"
        ),
        metric!(
            REQUESTS_TOTAL,
            Counter,
            Upstream,
            ["code", "method", "host"],
            None,
            "Number of HTTP requests, partitioned by status code, method, \
             and host."
        ),
        metric!(
            REQUEST_DURATION_SECONDS,
            Histogram,
            Upstream,
            ["verb", "host"],
            Some(rest_client::DURATION_BUCKETS.to_vec()),
            "Request latency in seconds. Broken down by verb, and host."
        ),
        metric!(
            BUILD_INFO,
            Gauge,
            Upstream,
            [
                "major",
                "minor",
                "git_version",
                "git_commit",
                "git_tree_state",
                "build_date",
                "go_version",
                "compiler",
                "platform"
            ],
            None,
            "A metric with a constant '1' value labeled by major, minor, git \
             version, git commit, git tree state, build date, Go version, \
             and compiler from which Kubernetes was built, and platform on \
             which it is running."
        ),
        metric!(
            OWN_BUILD_INFO,
            Gauge,
            Ours,
            [
                "version",
                "git_commit",
                "build_date",
                "compiler",
                "platform"
            ],
            None,
            "A metric with a constant '1' value labeled by the version of \
             kube-ipvs-proxy, the commit and date it was built from, the \
             compiler that built it, and the platform on which it is running."
        ),
        metric!(
            INVALID_OBJECTS_TOTAL,
            Counter,
            Ours,
            ["kind", "reason"],
            None,
            "Services, EndpointSlices and Nodes that could not be used"
        ),
        metric!(
            INVALID_VIEW_CHANGES_TOTAL,
            Counter,
            Ours,
            ["field"],
            None,
            "Changes from the API side that could not be used"
        ),
        metric!(
            KERNEL_OPERATIONS_TOTAL,
            Counter,
            Ours,
            ["facility", "op", "result"],
            None,
            "Kernel operations by facility, operation and result"
        ),
        metric!(
            CHANGE_STAGE_DURATION_SECONDS,
            Histogram,
            Ours,
            ["stage"],
            stage.clone(),
            "Time object changes spend in each stage on their way to the \
             kernel"
        ),
        metric!(
            REPAIR_DURATION_SECONDS,
            Histogram,
            Ours,
            ["part"],
            stage.clone(),
            "Repair rounds: the kernel read, and each step's hold on the \
             sync loop"
        ),
        metric!(
            SERVICE_HEALTH_LISTEN_FAILURES_TOTAL,
            Counter,
            Ours,
            [],
            None,
            "Health check node ports that could not be opened"
        ),
        metric!(
            API_SIDE_WATCHES,
            Gauge,
            Ours,
            [],
            None,
            "Node watches open on the API side"
        ),
        metric!(
            API_SIDE_VIEWS,
            Gauge,
            Ours,
            [],
            None,
            "Node views the API side keeps"
        ),
        metric!(
            API_SIDE_UPDATES_SENT_TOTAL,
            Counter,
            Ours,
            ["kind"],
            None,
            "Updates the API side sent to nodes, full views or changes"
        ),
        metric!(
            API_SIDE_CHANGES_SENT_TOTAL,
            Counter,
            Ours,
            [],
            None,
            "Changes the API side sent to nodes"
        ),
        metric!(
            API_SIDE_SENT_BYTES_TOTAL,
            Counter,
            Ours,
            [],
            None,
            "Bytes of the messages the API side sent to nodes"
        ),
        metric!(
            API_SIDE_MESSAGES_ENCODED_TOTAL,
            Counter,
            Ours,
            [],
            None,
            "Messages the API side encoded for nodes: once for all the \
             nodes of a zone that receive the same, else once per node"
        ),
        metric!(
            API_SIDE_REFUSED_TOTAL,
            Counter,
            Ours,
            ["reason"],
            None,
            "Clients the API side refused, and watches it ended because \
             their node did not read"
        ),
        metric!(
            API_SIDE_SYNC_DURATION_SECONDS,
            Histogram,
            Ours,
            [],
            stage,
            "Time the API side took to bring the node views up to date"
        ),
    ]
}

#[cfg(test)]
mod tests;
