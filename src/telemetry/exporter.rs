//! The Prometheus recorder, built without the exporter's own listener:
//! `/metrics` on our metrics server renders its handle.

use metrics_exporter_prometheus::{
    BuildError, Matcher, PrometheusBuilder, PrometheusHandle,
};

use super::{
    catalogue::{self, Kind},
    BUILD_INFO, ENDPOINT_CHANGES_PENDING, ENDPOINT_CHANGES_TOTAL,
    OWN_BUILD_INFO, SERVICE_CHANGES_PENDING, SERVICE_CHANGES_TOTAL,
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
    super::handles::global_recorder_installed();
    describe();
    at_start_up(&crate::version::BUILD);
    Ok(handle)
}

/// The series kube-proxy exposes before anything happened: its metrics
/// without labels exist at zero from registration (client_golang). This
/// binary's own version goes to [`OWN_BUILD_INFO`];
/// `kubernetes_build_info` waits for [`behaving_as`]. Labelled ones
/// appear with their first value, as upstream's.
pub fn at_start_up(build: &crate::version::BuildInfo) {
    metrics::counter!(ENDPOINT_CHANGES_TOTAL).increment(0);
    metrics::counter!(SERVICE_CHANGES_TOTAL).increment(0);
    metrics::gauge!(ENDPOINT_CHANGES_PENDING).set(0.0);
    metrics::gauge!(SERVICE_CHANGES_PENDING).set(0.0);
    metrics::gauge!(
        OWN_BUILD_INFO,
        "version" => build.git_version,
        "git_commit" => build.git_commit,
        "build_date" => build.build_date,
        "compiler" => build.compiler_version,
        "platform" => crate::version::platform(),
    )
    .set(1.0);
}

/// `kubernetes_build_info` for the Kubernetes release the proxy behaves
/// as: `major`, `minor` and `git_version` the API server's (`/version`),
/// the labels that describe a build this binary's. Called once, where
/// the release is read (once per process, as the selectors are chosen),
/// so that the metric is one series.
pub fn behaving_as(
    kubernetes: &crate::version::Kubernetes,
    build: &crate::version::BuildInfo,
) {
    let _ = BEHAVING_AS.set(kubernetes.clone());
    metrics::gauge!(
        BUILD_INFO,
        "major" => kubernetes.major.clone(),
        "minor" => kubernetes.minor.clone(),
        "git_version" => kubernetes.git_version.clone(),
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

/// The release [`behaving_as`] reported first: also what `/statusz`
/// names as the version emulated.
static BEHAVING_AS: std::sync::OnceLock<crate::version::Kubernetes> =
    std::sync::OnceLock::new();

/// The Kubernetes release this process behaves as, once known.
pub fn behaving_as_release() -> Option<&'static crate::version::Kubernetes> {
    BEHAVING_AS.get()
}

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
