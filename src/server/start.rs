//! Starting the servers a process runs for its life: the node proxy's
//! healthz, metrics and health check node ports, and the API side's
//! metrics. A port that is taken is retried in the background
//! ([`super::spawn_forever`]), never fatal.

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use super::{
    healthz, metrics, spawn_forever, ProxyHealth, ServerError,
    ServiceHealthServer, SyncReporter,
};
use crate::{
    config::Config,
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
/// (`/metrics`, `/healthz`, `/proxyMode`).
pub fn metrics(address: SocketAddr) -> Result<(), ExporterError> {
    let handle = exporter::install()?;
    metrics::spawn_upkeep(handle.clone(), METRICS_UPKEEP);
    spawn_forever("metrics", address, metrics::router(handle));
    Ok(())
}

/// The node proxy's servers: healthz and metrics where the configuration
/// puts them (no address: not served), and the health check node ports
/// on `health_addresses`. `events`, when the proxy records Events, hears
/// of the health check servers' failures.
pub fn node(
    config: &Config,
    health_addresses: Vec<IpAddr>,
    events: Option<EventSink>,
) -> Result<SyncReporter, StartError> {
    // Upstream's health timeout: a queued update may wait two periods.
    let health = Arc::new(ProxyHealth::new(2 * config.ipvs.sync_period));
    if let Some(address) = config.healthz_bind_address {
        spawn_forever("healthz", address, healthz::router(Arc::clone(&health)));
    }
    if let Some(address) = config.metrics_bind_address {
        metrics(address)?;
    }
    let service_health =
        ServiceHealthServer::new(health_addresses, Arc::clone(&health))?;
    if let Some(events) = events {
        service_health.record_events_to(events);
    }
    Ok(SyncReporter::new(health, Some(service_health)))
}
