//! The Prometheus recorder, built without the exporter's own listener:
//! `/metrics` on our metrics server renders its handle.

use metrics_exporter_prometheus::{
    BuildError, Matcher, PrometheusBuilder, PrometheusHandle,
};

use super::{
    network_programming_buckets,
    rest_client::{self, REQUESTS_TOTAL, REQUEST_DURATION_SECONDS},
    stage_buckets, sync_duration_buckets, API_SIDE_CHANGES_SENT_TOTAL,
    API_SIDE_SENT_BYTES_TOTAL, API_SIDE_SYNC_DURATION_SECONDS,
    API_SIDE_UPDATES_SENT_TOTAL, API_SIDE_VIEWS, API_SIDE_WATCHES,
    CHANGE_STAGE_DURATION_SECONDS, CONNTRACK_RECONCILER_DELETED_ENTRIES_TOTAL,
    CONNTRACK_RECONCILER_SYNC_DURATION_SECONDS, ENDPOINT_CHANGES_PENDING,
    ENDPOINT_CHANGES_TOTAL, INVALID_OBJECTS_TOTAL, INVALID_VIEW_CHANGES_TOTAL,
    KERNEL_OPERATIONS_TOTAL, NETWORK_PROGRAMMING_DURATION_SECONDS,
    PROXY_HEALTHZ_TOTAL, PROXY_LIVEZ_TOTAL, REPAIR_DURATION_SECONDS,
    SERVICE_CHANGES_PENDING, SERVICE_CHANGES_TOTAL,
    SERVICE_HEALTH_LISTEN_FAILURES_TOTAL, SYNC_PROXY_RULES_DURATION_SECONDS,
    SYNC_PROXY_RULES_IPTABLES_RESTORE_FAILURES_TOTAL,
    SYNC_PROXY_RULES_LAST_QUEUED_TIMESTAMP_SECONDS,
    SYNC_PROXY_RULES_LAST_TIMESTAMP_SECONDS,
    SYNC_PROXY_RULES_NO_LOCAL_ENDPOINTS_TOTAL,
};

#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    #[error("cannot build the Prometheus recorder: {0}")]
    Build(#[from] BuildError),
}

/// A builder whose histograms render as real Prometheus histograms with
/// upstream's buckets. Without explicit buckets the exporter would render
/// them as summaries, which kube-proxy's dashboards cannot use.
pub fn builder() -> Result<PrometheusBuilder, ExporterError> {
    let sync = sync_duration_buckets();
    Ok(PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(SYNC_PROXY_RULES_DURATION_SECONDS.to_owned()),
            &sync,
        )?
        .set_buckets_for_metric(
            Matcher::Full(
                CONNTRACK_RECONCILER_SYNC_DURATION_SECONDS.to_owned(),
            ),
            &sync,
        )?
        .set_buckets_for_metric(
            Matcher::Full(NETWORK_PROGRAMMING_DURATION_SECONDS.to_owned()),
            &network_programming_buckets(),
        )?
        .set_buckets_for_metric(
            Matcher::Full(CHANGE_STAGE_DURATION_SECONDS.to_owned()),
            &stage_buckets(),
        )?
        .set_buckets_for_metric(
            Matcher::Full(REPAIR_DURATION_SECONDS.to_owned()),
            &stage_buckets(),
        )?
        .set_buckets_for_metric(
            Matcher::Full(API_SIDE_SYNC_DURATION_SECONDS.to_owned()),
            &stage_buckets(),
        )?
        .set_buckets_for_metric(
            Matcher::Full(REQUEST_DURATION_SECONDS.to_owned()),
            &rest_client::DURATION_BUCKETS,
        )?)
}

/// A recorder not installed anywhere: for tests, which install it
/// thread-locally.
#[cfg(test)]
pub fn recorder(
) -> Result<metrics_exporter_prometheus::PrometheusRecorder, ExporterError> {
    Ok(builder()?.build_recorder())
}

/// Installs the process-wide recorder, describes our metrics and
/// creates the series upstream has from start-up. Call once, from
/// `main`; the handle renders `/metrics`.
pub fn install() -> Result<PrometheusHandle, ExporterError> {
    let handle = builder()?.install_recorder()?;
    describe();
    at_start_up(&crate::version::BUILD);
    Ok(handle)
}

/// The series kube-proxy exposes before anything happened: its metrics
/// without labels exist at zero from registration (client_golang), and
/// component-base sets `kubernetes_build_info` to 1. Labelled ones
/// appear with their first value, as upstream's.
pub fn at_start_up(build: &crate::version::BuildInfo) {
    metrics::counter!(ENDPOINT_CHANGES_TOTAL).increment(0);
    metrics::counter!(SERVICE_CHANGES_TOTAL).increment(0);
    metrics::gauge!(ENDPOINT_CHANGES_PENDING).set(0.0);
    metrics::gauge!(SERVICE_CHANGES_PENDING).set(0.0);
    metrics::gauge!(
        BUILD_INFO,
        "major" => build.major,
        "minor" => build.minor,
        "git_version" => build.git_version,
        "git_commit" => build.git_commit,
        // Not recorded at build time: a clean tree cannot be told from
        // edits made after the last commit without reading every file.
        "git_tree_state" => "",
        "build_date" => build.build_date,
        // Not Go: the compiler label names rustc and its version.
        "go_version" => "",
        "compiler" => build.compiler_version,
        "platform" => crate::version::platform(),
    )
    .set(1.0);
}

/// component-base's build information gauge.
pub const BUILD_INFO: &str = "kubernetes_build_info";

/// The `# HELP` lines, with upstream's texts for upstream's metrics.
/// Applies to the recorder in effect (global or thread-local).
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};

    describe_histogram!(
        SYNC_PROXY_RULES_DURATION_SECONDS,
        "SyncProxyRules latency in seconds"
    );
    describe_gauge!(
        SYNC_PROXY_RULES_LAST_TIMESTAMP_SECONDS,
        "The last time proxy rules were successfully synced"
    );
    describe_gauge!(
        SYNC_PROXY_RULES_LAST_QUEUED_TIMESTAMP_SECONDS,
        "The last time a sync of proxy rules was queued"
    );
    describe_histogram!(
        NETWORK_PROGRAMMING_DURATION_SECONDS,
        "In Cluster Network Programming Latency in seconds"
    );
    describe_gauge!(
        ENDPOINT_CHANGES_PENDING,
        "Pending proxy rules Endpoint changes"
    );
    describe_counter!(
        ENDPOINT_CHANGES_TOTAL,
        "Cumulative proxy rules Endpoint changes"
    );
    describe_gauge!(
        SERVICE_CHANGES_PENDING,
        "Pending proxy rules Service changes"
    );
    describe_counter!(
        SERVICE_CHANGES_TOTAL,
        "Cumulative proxy rules Service changes"
    );
    describe_counter!(
        SYNC_PROXY_RULES_IPTABLES_RESTORE_FAILURES_TOTAL,
        "Cumulative proxy iptables restore failures"
    );
    describe_counter!(
        PROXY_HEALTHZ_TOTAL,
        "Cumulative proxy healthz HTTP status"
    );
    describe_counter!(PROXY_LIVEZ_TOTAL, "Cumulative proxy livez HTTP status");
    describe_gauge!(
        SYNC_PROXY_RULES_NO_LOCAL_ENDPOINTS_TOTAL,
        "Number of services with a Local traffic policy and no endpoints"
    );
    describe_histogram!(
        CONNTRACK_RECONCILER_SYNC_DURATION_SECONDS,
        "ReconcileConntrackFlowsLatency latency in seconds"
    );
    describe_counter!(
        CONNTRACK_RECONCILER_DELETED_ENTRIES_TOTAL,
        "Cumulative conntrack flows deleted by conntrack reconciler"
    );
    describe_counter!(
        INVALID_OBJECTS_TOTAL,
        "Services, EndpointSlices and Nodes that could not be used"
    );
    describe_counter!(
        INVALID_VIEW_CHANGES_TOTAL,
        "Changes from the API side that could not be used"
    );
    describe_gauge!(API_SIDE_WATCHES, "Node watches open on the API side");
    describe_counter!(
        API_SIDE_UPDATES_SENT_TOTAL,
        "Updates the API side sent to nodes, full views or changes"
    );
    describe_counter!(
        API_SIDE_CHANGES_SENT_TOTAL,
        "Changes the API side sent to nodes"
    );
    describe_counter!(
        API_SIDE_SENT_BYTES_TOTAL,
        "Bytes of the messages the API side sent to nodes"
    );
    describe_histogram!(
        API_SIDE_SYNC_DURATION_SECONDS,
        "Time the API side took to bring the node views up to date"
    );
    describe_gauge!(API_SIDE_VIEWS, "Node views the API side keeps");
    describe_counter!(
        KERNEL_OPERATIONS_TOTAL,
        "Kernel operations by facility, operation and result"
    );
    describe_histogram!(
        CHANGE_STAGE_DURATION_SECONDS,
        "Time object changes spend in each stage on their way to the kernel"
    );
    describe_histogram!(
        REPAIR_DURATION_SECONDS,
        "Repair rounds: the kernel read, and each step's hold on the sync loop"
    );
    describe_counter!(
        SERVICE_HEALTH_LISTEN_FAILURES_TOTAL,
        "Health check node ports that could not be opened"
    );
    describe_counter!(
        REQUESTS_TOTAL,
        "Number of HTTP requests, partitioned by status code, method, and \
         host."
    );
    describe_histogram!(
        REQUEST_DURATION_SECONDS,
        "Request latency in seconds. Broken down by verb, and host."
    );
    describe_gauge!(
        BUILD_INFO,
        "A metric with a constant '1' value labeled by major, minor, git \
         version, git commit, git tree state, build date, Go version, and \
         compiler from which Kubernetes was built, and platform on which it \
         is running."
    );
}
