//! The benchmark's writes through the API server, with the admin's
//! kubeconfig (`KUBECONFIG`).

use std::time::Instant;

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::{
    core::v1::{Namespace, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    api::{Api, ListParams, Patch, PatchParams, PostParams},
    Client,
};

use crate::objects::{self, NAMESPACE};

/// Requests in flight while populating: enough to keep the API server
/// busy, few enough not to time out on two cores.
const POPULATE_CONCURRENCY: usize = 32;

/// The admin's client (`KUBECONFIG`), already connected: it connects on
/// its first request, and made here, the TCP and TLS handshakes (slow
/// under TCG) are not timed as part of the first measured write.
pub async fn connected_client() -> anyhow::Result<Client> {
    let client = Client::try_default().await.context("KUBECONFIG")?;
    client
        .apiserver_version()
        .await
        .context("the API server's version")?;
    Ok(client)
}

pub fn services(client: &Client) -> Api<Service> {
    Api::namespaced(client.clone(), NAMESPACE)
}

pub fn slices(client: &Client) -> Api<EndpointSlice> {
    Api::namespaced(client.clone(), NAMESPACE)
}

/// Creates namespace `bench` with `n` services and their slices, and
/// checks that the API server lists them all.
pub async fn populate(n: usize) -> anyhow::Result<()> {
    let client = Client::try_default().await.context("KUBECONFIG")?;
    let start = Instant::now();
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(NAMESPACE.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .context("creating namespace bench")?;
    let (svc_api, slice_api) = (services(&client), slices(&client));
    futures::stream::iter(0..n)
        .map(|k| {
            let (svc_api, slice_api) = (svc_api.clone(), slice_api.clone());
            async move { create_service(&svc_api, &slice_api, k).await }
        })
        .buffer_unordered(POPULATE_CONCURRENCY)
        .try_collect::<()>()
        .await?;
    let listed = |what: usize, kind: &str| -> anyhow::Result<()> {
        anyhow::ensure!(what == n, "{kind}: {what} listed, {n} created");
        Ok(())
    };
    let lp = ListParams::default();
    listed(svc_api.list(&lp).await?.items.len(), "services")?;
    listed(slice_api.list(&lp).await?.items.len(), "endpointslices")?;
    eprintln!(
        "populated {n} services and slices in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Service `k` and its slice, every endpoint ready.
pub async fn create_service(
    svc_api: &Api<Service>,
    slice_api: &Api<EndpointSlice>,
    k: usize,
) -> anyhow::Result<()> {
    let pp = PostParams::default();
    svc_api
        .create(&pp, &objects::service(k))
        .await
        .with_context(|| format!("creating {}", objects::service_name(k)))?;
    slice_api
        .create(&pp, &objects::slice(k, true))
        .await
        .with_context(|| format!("creating {}", objects::slice_name(k)))?;
    Ok(())
}

/// Rewrites service `k`'s slice with the flipping endpoint ready or not,
/// and a fresh trigger time.
pub async fn set_ready(
    slice_api: &Api<EndpointSlice>,
    k: usize,
    all_ready: bool,
) -> anyhow::Result<()> {
    write_slice(slice_api, k, &objects::slice(k, all_ready)).await
}

pub async fn write_slice(
    slice_api: &Api<EndpointSlice>,
    k: usize,
    slice: &EndpointSlice,
) -> anyhow::Result<()> {
    slice_api
        .patch(
            &objects::slice_name(k),
            &PatchParams::default(),
            &Patch::Merge(slice),
        )
        .await
        .with_context(|| format!("patching {}", objects::slice_name(k)))?;
    Ok(())
}
