//! The proxy's own pipeline in this process, fed watch events the way the
//! API-server source delivers them (one event per changed object), on the
//! same kernel stack the binary opens. This is the path a cluster uses;
//! the state file, by contrast, relists everything on every edit.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context};
use bench_support::{
    fixtures::{self, ENDPOINTS_PER_SERVICE},
    ipvs,
};
use futures::channel::mpsc;
use ipvs_sys::{Destination, Handle};
use kube::runtime::watcher::Event;
use kube_ipvs_proxy::{
    config::Config,
    daemon,
    model::IpFamily,
    proxier::stack,
    server::{ProxyHealth, SyncReporter},
    source::SourceEvent,
    sync::{NodeSettings, SyncState},
};

use crate::{
    change::{all_serving, median, Flip, POLL},
    kernel,
    settings::Settings,
    state,
};

/// How the in-process proxy talks to IPVS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpvsPath {
    /// As the binary does: IPv4 writes and the reads before removals by
    /// IPVS's socket options.
    AsShipped,
    /// Every read and write over generic netlink, as where the socket
    /// options are refused: the same-process baseline for the above.
    NetlinkOnly,
}

pub struct EventsSide {
    /// From the first event to the first sync applied.
    pub cold: Duration,
    pub endpoint: Duration,
    pub new_service: Duration,
}

struct Pipeline {
    events: mpsc::UnboundedSender<SourceEvent>,
    health: Arc<ProxyHealth>,
}

impl Pipeline {
    fn send(&self, event: SourceEvent) -> anyhow::Result<()> {
        self.events
            .unbounded_send(event)
            .context("the in-process daemon stopped")
    }

    fn last_sync(&self) -> Option<SystemTime> {
        self.health
            .health()
            .status
            .get(&IpFamily::V4)
            .map(|s| s.last_updated)
    }
}

/// Waits until `vip`'s real servers satisfy `shown`; the time since
/// `start`.
async fn until_shown(
    handle: &Handle,
    vip: std::net::IpAddr,
    start: Instant,
    shown: impl Fn(&[Destination]) -> bool,
) -> anyhow::Result<Duration> {
    loop {
        let dests = ipvs::real_servers(handle, vip, 80).await?;
        if shown(&dests) {
            return Ok(start.elapsed());
        }
        if start.elapsed() > Duration::from_secs(120) {
            bail!("{vip} did not show the change within 120 s: {dests:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

pub async fn run(
    settings: &Settings,
    ipvs_path: IpvsPath,
) -> anyhow::Result<EventsSide> {
    // The previous side's virtual servers stay in the IPVS table the
    // namespaces share (before Linux 6.2) unless flushed.
    let previous = ipvs::connect()?;
    previous.flush().execute().await.context("IPVS flush")?;
    drop(previous);
    kernel::fresh_netns(state::NODE_IP)?;
    tokio::time::sleep(settings.settle).await;
    eprintln!(
        "guest_sync: the pipeline in process, fed watch events ({ipvs_path:?})"
    );

    let config = Config {
        hostname_override: Some(state::NODE.to_string()),
        ..Config::default()
    };
    let backend = match ipvs_path {
        IpvsPath::AsShipped => stack::open(&config).await?,
        IpvsPath::NetlinkOnly => stack::open_over_netlink(&config).await?,
    };
    let health = Arc::new(ProxyHealth::new(2 * config.ipvs.sync_period));
    let reporter = SyncReporter::new(Arc::clone(&health), None);
    let sync_state = SyncState::new(
        state::NODE,
        NodeSettings::from_config(&config),
        None,
        SystemTime::now(),
    );
    let (events, source) = mpsc::unbounded();
    let pipeline = Pipeline { events, health };
    let feed = daemon::Feed::start(
        daemon::Source::objects(source),
        state::NODE,
        // Where the binary decodes its watch events.
        kube_ipvs_proxy::source::thread::handle()
            .map_err(|e| anyhow::anyhow!(e))?,
    );
    tokio::spawn(daemon::run(
        feed,
        sync_state,
        backend,
        daemon::LoopSettings {
            min_sync_period: config.ipvs.min_sync_period,
            // No repair round inside the measurements.
            sync_period: Duration::from_secs(600),
        },
        reporter,
    ));

    let started = SystemTime::now();
    let start = Instant::now();
    pipeline.send(SourceEvent::Node(Event::Init))?;
    pipeline.send(SourceEvent::Node(Event::InitApply(state::node())))?;
    pipeline.send(SourceEvent::Node(Event::InitDone))?;
    pipeline.send(SourceEvent::Service(Event::Init))?;
    for i in 0..settings.services {
        pipeline.send(SourceEvent::Service(Event::InitApply(
            fixtures::service(i),
        )))?;
    }
    pipeline.send(SourceEvent::Service(Event::InitDone))?;
    pipeline.send(SourceEvent::EndpointSlice(Event::Init))?;
    for i in 0..settings.services {
        pipeline.send(SourceEvent::EndpointSlice(Event::InitApply(
            fixtures::slice(i, ENDPOINTS_PER_SERVICE),
        )))?;
    }
    pipeline.send(SourceEvent::EndpointSlice(Event::InitDone))?;
    while pipeline.last_sync().is_none_or(|t| t <= started) {
        if start.elapsed() > Duration::from_secs(1800) {
            bail!("the in-process pipeline did not sync within 30 minutes");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cold = start.elapsed();
    let handle = ipvs::connect()?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let flip = Flip::new(settings.services)?;
    let mut endpoint = Vec::new();
    for k in 0..settings.reps {
        let ready = if Flip::ready(k) {
            ENDPOINTS_PER_SERVICE
        } else {
            ENDPOINTS_PER_SERVICE - 1
        };
        let start = Instant::now();
        pipeline.send(SourceEvent::EndpointSlice(Event::Apply(
            fixtures::slice(flip.service, ready),
        )))?;
        let took =
            until_shown(&handle, flip.vip, start, |d| flip.shown(k, d)).await?;
        eprintln!(
            "guest_sync: event endpoint change {k} ({ipvs_path:?}): {took:?}"
        );
        endpoint.push(took);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut new_service = Vec::new();
    for k in 0..settings.reps {
        let i = settings.services + k;
        let vip = state::cluster_ip(i)?;
        let start = Instant::now();
        pipeline
            .send(SourceEvent::Service(Event::Apply(fixtures::service(i))))?;
        pipeline.send(SourceEvent::EndpointSlice(Event::Apply(
            fixtures::slice(i, ENDPOINTS_PER_SERVICE),
        )))?;
        let took = until_shown(&handle, vip, start, all_serving).await?;
        eprintln!(
            "guest_sync: event new service {k} ({ipvs_path:?}): {took:?}"
        );
        new_service.push(took);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The daemon stops with its source; the next side starts clean.
    drop(pipeline);
    let _ = handle.flush().execute().await;
    Ok(EventsSide {
        cold,
        endpoint: median(endpoint),
        new_service: median(new_service),
    })
}
