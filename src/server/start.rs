//! Starting the servers a process runs for its life: the node proxy's
//! healthz, metrics and health check node ports, and the API side's
//! metrics. A port that is taken is retried in the background
//! ([`super::spawn_forever`]), unless `bindAddressHardFail` makes it
//! fatal ([`super::spawn_bound`]), as upstream.

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use metrics_exporter_prometheus::PrometheusHandle;

use super::{
    healthz, metrics, spawn_bound, spawn_forever, ProxyHealth, ServerError,
    ServiceHealthServer, SyncReporter,
};
use crate::{
    config::Config,
    model::IpFamily,
    source::recorder::EventSink,
    telemetry::exporter::{self, ExporterError},
};

/// How often histogram samples are folded in when nobody scrapes.
const METRICS_UPKEEP: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Metrics(#[from] ExporterError),
    #[error(transparent)]
    Server(#[from] ServerError),
}

/// Installs the process's metrics recorder and serves it on `address`
/// (`/metrics`, `/healthz`, `/proxyMode`, and the `pages` given); with
/// `hard_fail`, a port that cannot be bound is an error instead of
/// retried.
pub fn metrics(
    address: SocketAddr,
    hard_fail: bool,
    pages: metrics::Pages,
) -> Result<(), StartError> {
    serve_metrics(exporter::install()?, address, hard_fail, pages)
}

/// The node proxy's metrics recorder, installed when its configuration
/// serves metrics: before anything else starts, so that the watches'
/// first requests and the release they read are counted too.
pub fn recorder(
    config: &Config,
) -> Result<Option<PrometheusHandle>, StartError> {
    Ok(match config.metrics_bind_address {
        Some(_) => Some(exporter::install()?),
        None => None,
    })
}

/// Serves `handle`'s metrics on `address`, as [`metrics`] does.
fn serve_metrics(
    handle: PrometheusHandle,
    address: SocketAddr,
    hard_fail: bool,
    pages: metrics::Pages,
) -> Result<(), StartError> {
    metrics::spawn_upkeep(handle.clone(), METRICS_UPKEEP);
    serve(
        "metrics",
        address,
        metrics::router(handle, pages),
        hard_fail,
    )
}

fn serve(
    name: &'static str,
    address: SocketAddr,
    router: axum::Router,
    hard_fail: bool,
) -> Result<(), StartError> {
    if hard_fail {
        spawn_bound(name, address, router)?;
    } else {
        spawn_forever(name, address, router);
    }
    Ok(())
}

/// The node proxy's servers: healthz and metrics where the configuration
/// puts them (no address: not served; metrics from the `recorder`
/// installed earlier), and the health check node ports on
/// `health_addresses`, or on each of `families`' wildcard address.
/// `events`, when the proxy records Events, hears of the health check
/// servers' failures.
pub fn node(
    config: &Config,
    recorder: Option<PrometheusHandle>,
    health_addresses: Vec<IpAddr>,
    families: Vec<IpFamily>,
    events: Option<EventSink>,
) -> Result<SyncReporter, StartError> {
    // Upstream's health timeout: a queued update may wait two periods.
    let health = Arc::new(ProxyHealth::new(2 * config.ipvs.sync_period));
    let hard_fail = config.bind_address_hard_fail;
    if let Some(address) = config.healthz_bind_address {
        let router = healthz::router(Arc::clone(&health));
        serve("healthz", address, router, hard_fail)?;
    }
    if let (Some(address), Some(handle)) =
        (config.metrics_bind_address, recorder)
    {
        let pages = metrics::Pages {
            configz: Some(crate::config::to_configz(config)),
            flagz: config.component_flagz.then(|| config.flags.clone()),
            statusz: config.component_statusz,
        };
        serve_metrics(handle, address, hard_fail, pages)?;
    }
    let service_health = ServiceHealthServer::new(
        health_addresses,
        families,
        Arc::clone(&health),
    )?;
    if let Some(events) = events {
        service_health.record_events_to(events);
    }
    Ok(SyncReporter::new(health, Some(service_health)))
}
