//! Clients of the API server, as every mode that talks to it builds them.

use std::path::Path;

use anyhow::Context;

use crate::source::client_metrics::RestClientMetricsLayer;

/// A client of the API server `kubeconfig` names (the in-cluster or
/// default configuration without one), or `master` names over it, its
/// tasks on the current runtime.
pub(super) async fn kube_client(
    kubeconfig: Option<&Path>,
    master: Option<&str>,
) -> anyhow::Result<kube::Client> {
    client_from(kube_config(kubeconfig, master).await?)
}

/// As upstream's `createClient`: `--master` replaces the server of the
/// kubeconfig, whose credentials and CA still apply; `--master` alone is
/// that address with no credentials, as client-go builds it from an
/// empty kubeconfig.
pub(super) async fn kube_config(
    kubeconfig: Option<&Path>,
    master: Option<&str>,
) -> anyhow::Result<kube::Config> {
    let Some(master) = master else {
        return from_kubeconfig(kubeconfig).await;
    };
    let mut config = match kubeconfig {
        Some(_) => from_kubeconfig(kubeconfig).await?,
        None => kube::Config::new(master_url(master, false)?),
    };
    config.cluster_url = master_url(master, kubeconfig.is_some())?;
    Ok(config)
}

/// client-go's reading of a server without a scheme: `https://` when the
/// connection has TLS settings (a kubeconfig's), `http://` otherwise.
pub(super) fn master_url(master: &str, tls: bool) -> anyhow::Result<http::Uri> {
    let text = if master.contains("://") {
        master.to_owned()
    } else if tls {
        format!("https://{master}")
    } else {
        format!("http://{master}")
    };
    text.parse::<http::Uri>()
        .ok()
        .filter(|uri| uri.host().is_some())
        .with_context(|| format!("--master {master:?} is not a URL"))
}

async fn from_kubeconfig(
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
