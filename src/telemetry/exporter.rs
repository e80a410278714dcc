//! The Prometheus recorder, built without the exporter's own listener:
//! `/metrics` on our metrics server renders its handle.

use metrics_exporter_prometheus::{
    BuildError, Matcher, PrometheusBuilder, PrometheusHandle,
};

use super::{
    catalogue::{self, Kind},
    ENDPOINT_CHANGES_PENDING, ENDPOINT_CHANGES_TOTAL, SERVICE_CHANGES_PENDING,
    SERVICE_CHANGES_TOTAL,
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
    let mut builder = PrometheusBuilder::new();
    for metric in catalogue::recorded() {
        if let Some(buckets) = &metric.buckets {
            builder = builder.set_buckets_for_metric(
                Matcher::Full(metric.name.to_owned()),
                buckets,
            )?;
        }
    }
    Ok(builder)
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
    for metric in catalogue::recorded() {
        match metric.kind {
            Kind::Counter => {
                metrics::describe_counter!(metric.name, metric.help)
            }
            Kind::Gauge => metrics::describe_gauge!(metric.name, metric.help),
            Kind::Histogram => {
                metrics::describe_histogram!(metric.name, metric.help)
            }
        }
    }
}
