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

use std::{
    future::Future,
    time::{Duration, Instant},
};

use anyhow::Context;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};

use crate::{
    api,
    measurement::{median_ms, Results},
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
    let results = Results::new(proxy, n)?;
    let client = api::connected_client().await?;
    let (svc_api, slice_api) = (api::services(&client), api::slices(&client));
    let cm_api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
    let pp = PostParams::default();
    let (mut services, mut slices, mut config_maps) =
        (Vec::new(), Vec::new(), Vec::new());
    let made = n + OFFSET..n + OFFSET + REPS;
    for k in made.clone() {
        let service = objects::service_name(k);
        services.push(
            timed(svc_api.create(&pp, &objects::service(k)), &service).await?,
        );
        let slice = objects::slice_name(k);
        slices.push(
            timed(slice_api.create(&pp, &objects::slice(k, true)), &slice)
                .await?,
        );
        let cm = config_map_name(k);
        config_maps.push(timed(cm_api.create(&pp, &config_map(k)), &cm).await?);
        tokio::time::sleep(GAP).await;
    }
    let dp = DeleteParams::default();
    for k in made {
        slice_api.delete(&objects::slice_name(k), &dp).await?;
        svc_api.delete(&objects::service_name(k), &dp).await?;
        cm_api.delete(&config_map_name(k), &dp).await?;
    }
    results.print("api_alone_service_ms", median_ms(&mut services));
    results.print("api_alone_slice_ms", median_ms(&mut slices));
    results.print("api_alone_configmap_ms", median_ms(&mut config_maps));
    Ok(())
}

/// How long the API server took to answer one create.
async fn timed<T>(
    create: impl Future<Output = kube::Result<T>>,
    name: &str,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    create.await.with_context(|| format!("creating {name}"))?;
    Ok(start.elapsed())
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
