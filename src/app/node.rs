//! The node proxy: the host checked, its source opened (the watches go
//! first), the host prepared and the kernel's facilities opened, then its
//! servers and the sync loop.

use std::time::SystemTime;

use anyhow::Context;
use futures::StreamExt;
use metrics_exporter_prometheus::PrometheusHandle;

use super::{clients, hostname, Failure, Source, STATE_FILE_POLL};
use crate::{
    backend::Backend,
    config::Config,
    daemon::{self, LoopSettings},
    oom,
    proxier::{host, stack},
    server::{service_health, start},
    source::{
        self,
        kube::{Admission, Release},
        listwatch::Accept,
        recorder::EventSink,
    },
    sync::{self, NodeSettings, SyncState},
    version::BUILD,
};

/// How far the node proxy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Until it is stopped or a step fails.
    Run,
    /// `--init-only`: the privileged start-up steps (the kernel's check,
    /// sysctls, IPVS timeouts), then stop.
    InitOnly,
}

/// Runs the node proxy on this host's kernel. Must run inside a tokio
/// runtime; the proxy's sync loop runs on it.
pub async fn run(
    config: Config,
    source: Source,
    mode: Mode,
) -> Result<(), Failure> {
    let node_name = config.node_name(&hostname());
    tracing::info!(
        node = %node_name,
        version = BUILD.git_version,
        commit = BUILD.git_commit,
        "starting"
    );
    host::check_kernel(&config).await.map_err(Failure::from)?;
    if mode == Mode::InitOnly {
        host::prepare(&config).await;
        tracing::info!("system initialized and --init-only specified");
        return Ok(());
    }
    // The watches first: at scale the first list takes seconds, and the
    // host's preparation and the kernel's facilities need not precede it.
    let opened = open(&config, source, &node_name).await?;
    host::prepare(&config).await;
    if let Err(error) = oom::apply_score_adj(config.oom_score_adj) {
        tracing::debug!(value = config.oom_score_adj, %error, "oomScoreAdj not applied");
    }
    let backend = stack::open(&config)
        .await
        .context("opening the kernel facilities")?;
    serve_opened(&config, opened, node_name, backend).await
}

/// A source being fed to the loop, and the events' sink when the source
/// is the API server.
struct Opened {
    feed: daemon::Feed,
    events: Option<EventSink>,
    recorder: Option<PrometheusHandle>,
}

/// The proxy on `backend`, as node `node_name`: the source watched, the
/// servers started, the sync loop run until it stops. (The proxy itself
/// opens its source before its kernel's facilities: [`run`].)
#[cfg(test)]
pub async fn serve<B: Backend>(
    config: &Config,
    source: Source,
    node_name: String,
    backend: B,
) -> Result<(), Failure> {
    let opened = open(config, source, &node_name).await?;
    serve_opened(config, opened, node_name, backend).await
}

/// Opens `source` and starts feeding it, on the sources' thread.
async fn open(
    config: &Config,
    source: Source,
    node_name: &str,
) -> Result<Opened, Failure> {
    let recorder = start::recorder(config).map_err(anyhow::Error::from)?;
    // Where the sources are read and decoded (source/thread.rs).
    let sources = source::thread::handle().map_err(anyhow::Error::msg)?;
    let source = match source {
        Source::ApiSide {
            endpoint,
            credentials,
        } => daemon::Source::View(
            source::nodeview::watch(
                &tokio::runtime::Handle::current(),
                endpoint,
                credentials,
                node_name.to_owned(),
            )
            .boxed(),
        ),
        Source::StateFile(path) => {
            Release::NEWEST.report_without_api_server();
            daemon::Source::objects(source::file::watch(
                path,
                STATE_FILE_POLL,
                Admission::newest(config.service_proxy_name.as_deref()),
            ))
        }
        Source::ApiServer { kubeconfig, master } => {
            let started = std::time::Instant::now();
            let kube_config =
                clients::kube_config(kubeconfig.as_deref(), master.as_deref())
                    .await?;
            // The watches' client is built on the sources' runtime, so
            // that its connections (TLS, HTTP) are driven there, beside
            // the sync loop rather than on its thread; the events' client
            // stays here.
            let watch_client = {
                let _sources = sources.enter();
                clients::client_from(kube_config.clone())?
            };
            let watch = source::kube::watch(
                watch_client,
                Accept::configured(&config.api_content_types),
                node_name,
                config.service_proxy_name.as_deref(),
            )
            .map_err(anyhow::Error::from)?
            .boxed();
            let feed = daemon::Feed::start(
                daemon::Source::Objects(watch),
                node_name,
                sources,
            );
            // Upstream's birth cry, once its informers are started.
            let sink =
                EventSink::spawn(clients::client_from(kube_config)?, node_name);
            sink.starting();
            let warnings = sink.clone();
            crate::telemetry::events::record_service_warnings_to(Box::new(
                move |service, why| warnings.scheduling_not_used(service, &why),
            ));
            tracing::debug!(elapsed = ?started.elapsed(), "the API server's clients built");
            return Ok(Opened {
                feed,
                events: Some(sink),
                recorder,
            });
        }
    };
    Ok(Opened {
        feed: daemon::Feed::start(source, node_name, sources),
        events: None,
        recorder,
    })
}

/// The proxy on `backend`, its source opened: the servers started, the
/// sync loop run until it stops.
async fn serve_opened<B: Backend>(
    config: &Config,
    opened: Opened,
    node_name: String,
    mut backend: B,
) -> Result<(), Failure> {
    let local = backend.local_addresses().await.unwrap_or_default();
    let health_addresses =
        service_health::listen_addresses(&config.node_port_addresses, &local);
    let families = sync::families_of(&local);
    let started = std::time::Instant::now();
    let reporter = start::node(
        config,
        opened.recorder,
        health_addresses,
        families,
        opened.events,
    )
    .map_err(anyhow::Error::from)?;
    tracing::debug!(elapsed = ?started.elapsed(), "servers started");
    let state = SyncState::new(
        node_name,
        NodeSettings::from_config(config),
        None,
        SystemTime::now(),
    );
    let settings = LoopSettings {
        min_sync_period: config.ipvs.min_sync_period,
        sync_period: config.ipvs.sync_period,
    };
    daemon::run(opened.feed, state, backend, settings, reporter)
        .await
        .map_err(anyhow::Error::from)?;
    Ok(())
}
