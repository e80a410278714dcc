//! The API server alone, before any proxy runs: the answers to a new
//! service's two writes, made from the host over one connection, with no
//! guest and no proxy taking the host's CPUs, and a ConfigMap's create
//! beside them as the control (no allocator behind it).
//!
//! The new service's line in the guest times these same writes and then
//! the proxy; whatever of their growth with the cluster shows here too is
//! the API server's. kube-apiserver 1.34's ClusterIP allocator lists
//! every IPAddress object twice on each Service create (its metrics'
//! `Used()` and `Free()`), so a Service create grows with the cluster
//! where the slice and the ConfigMap do not.

use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    api::{Api, DeleteParams, ObjectMeta, PostParams},
    Client,
};

use crate::{
    api,
    objects::{self, NAMESPACE},
};

/// Past the guest's own new services (`n + rep`), below the room that
/// objects::MAX_SERVICES leaves.
const OFFSET: usize = 100;
const REPS: usize = 20;
/// Between samples, so that one create's watch fan-out is done before
/// the next.
const GAP: Duration = Duration::from_millis(200);

/// Prints `RESULT proxy n api_alone_*_ms` medians and deletes what it
/// made, so the proxy then meets the cluster as populated.
pub async fn run(proxy: &str, n: usize) -> anyhow::Result<()> {
    let client = Client::try_default().await.context("KUBECONFIG")?;
    let (svc_api, slice_api) = (api::services(&client), api::slices(&client));
    let cm_api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
    let pp = PostParams::default();
    let (mut services, mut slices, mut config_maps) =
        (Vec::new(), Vec::new(), Vec::new());
    let made = n + OFFSET..n + OFFSET + REPS;
    for k in made.clone() {
        let start = Instant::now();
        svc_api
            .create(&pp, &objects::service(k))
            .await
            .with_context(|| {
                format!("creating {}", objects::service_name(k))
            })?;
        services.push(start.elapsed());
        let start = Instant::now();
        slice_api
            .create(&pp, &objects::slice(k, true))
            .await
            .with_context(|| format!("creating {}", objects::slice_name(k)))?;
        slices.push(start.elapsed());
        let start = Instant::now();
        cm_api
            .create(&pp, &config_map(k))
            .await
            .with_context(|| format!("creating config map {k}"))?;
        config_maps.push(start.elapsed());
        tokio::time::sleep(GAP).await;
    }
    let dp = DeleteParams::default();
    for k in made {
        slice_api.delete(&objects::slice_name(k), &dp).await?;
        svc_api.delete(&objects::service_name(k), &dp).await?;
        cm_api.delete(&config_map_name(k), &dp).await?;
    }
    for (measure, samples) in [
        ("service", &mut services),
        ("slice", &mut slices),
        ("configmap", &mut config_maps),
    ] {
        samples.sort();
        let median = samples[samples.len() / 2].as_secs_f64() * 1e3;
        println!("RESULT {proxy} {n} api_alone_{measure}_ms {median:.3}");
    }
    Ok(())
}

fn config_map_name(k: usize) -> String {
    format!("api-alone-{}", objects::FIRST + k)
}

fn config_map(k: usize) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_map_name(k)),
            ..Default::default()
        },
        data: Some([("k".to_string(), k.to_string())].into()),
        ..Default::default()
    }
}
