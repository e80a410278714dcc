//! Clients of the API server, as every mode that talks to it builds them.

use std::path::Path;

use anyhow::Context;

use crate::source::client_metrics::RestClientMetricsLayer;

/// A client of the API server `kubeconfig` names (the in-cluster or
/// default configuration without one), its tasks on the current runtime.
pub(super) async fn kube_client(
    kubeconfig: Option<&Path>,
) -> anyhow::Result<kube::Client> {
    client_from(kube_config(kubeconfig).await?)
}

pub(super) async fn kube_config(
    kubeconfig: Option<&Path>,
) -> anyhow::Result<kube::Config> {
    Ok(match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("--kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .with_context(|| format!("--kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no --kubeconfig, and no in-cluster or default config")?,
    })
}

/// A client whose tasks run on the runtime this is called in.
pub(super) fn client_from(
    config: kube::Config,
) -> anyhow::Result<kube::Client> {
    // Every request counted and timed for the rest_client_* metrics.
    let metrics = RestClientMetricsLayer::for_url(&config.cluster_url);
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&metrics)
        .build())
}
