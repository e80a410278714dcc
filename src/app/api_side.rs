//! `api-server`: the API side of the split. One watch of the cluster (the
//! API server, or a state file), the trackers run once, each node served
//! its own view.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::PathBuf,
    sync::{Arc, OnceLock},
    time::SystemTime,
};

use anyhow::Context;
use futures::{future::BoxFuture, stream::BoxStream, FutureExt, StreamExt};

use super::{clients, Failure, Source, STATE_FILE_POLL};
use crate::{
    apiside::{
        self,
        cluster::Cluster,
        serve_tls, serve_unix,
        server::{Access, Shared, ViewService},
        tokens::{TokenPolicy, TokenReviewer},
        ServeError,
    },
    config::{ApiServerArgs, Config, ConfigArgs},
    nodeview::endpoint::{ApiEndpoint, TlsFiles},
    server::start,
    source::{
        self,
        kube::{Admission, Release},
        listwatch::Accept,
        SourceEvent,
    },
    version::Kubernetes,
};

/// Where the API side serves its metrics without
/// `--metrics-bind-address`: the port after deploy/'s view port, not
/// the node proxy's 10249.
const DEFAULT_METRICS_ADDRESS: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9444);

/// `api-server`'s own flags, checked; the configuration is loaded from
/// [`Settings::config`].
#[derive(Debug, Clone)]
pub struct Settings {
    /// The sources' flags, without `--metrics-bind-address`: a
    /// configuration file shared with the nodes names theirs, which the
    /// API side would take from a control-plane node's proxy.
    pub config: ConfigArgs,
    pub metrics: Option<SocketAddr>,
    pub listen: ApiEndpoint,
    pub tls_dir: Option<PathBuf>,
    pub token_audience: Option<String>,
    pub token_service_account: String,
}

impl Settings {
    pub fn from_args(args: &ApiServerArgs) -> Result<Self, Failure> {
        let mut config = args.config.clone();
        let metrics = match config.metrics_bind_address.take().as_deref() {
            None => Some(DEFAULT_METRICS_ADDRESS),
            Some("") => None,
            Some(address) => Some(address.parse().map_err(|e| {
                Failure::bad_config(format!(
                    "--metrics-bind-address {address}: {e}"
                ))
            })?),
        };
        let listen = ApiEndpoint::parse(&args.listen)
            .map_err(|e| Failure::bad_config(format!("--listen {e}")))?;
        if matches!(listen, ApiEndpoint::Tls { .. }) && args.tls_dir.is_none() {
            return Err(Failure::bad_config(
                "--listen https:// needs --tls-dir",
            ));
        }
        Ok(Self {
            config,
            metrics,
            listen,
            tls_dir: args.tls_dir.clone(),
            token_audience: args.token_audience.clone(),
            token_service_account: args.token_service_account.clone(),
        })
    }
}

/// Runs the API side until its source or its server stops. Must run
/// inside a multi-threaded tokio runtime: the views are served beside
/// the source's feeding.
pub async fn run(config: Config, settings: Settings) -> Result<(), Failure> {
    // The release the API side behaves as, once read, for its nodes.
    let kubernetes = Arc::new(OnceLock::new());
    let source = match Source::of(&config)? {
        Source::StateFile(path) => {
            // Set once, here, before anything reads it.
            let _ = kubernetes.set(Release::NEWEST.report_without_api_server());
            source::file::watch(
                path,
                STATE_FILE_POLL,
                Admission::newest(config.service_proxy_name.as_deref()),
            )
            .boxed()
        }
        Source::ApiServer { kubeconfig, master } => {
            let client =
                clients::kube_client(kubeconfig.as_deref(), master.as_deref())
                    .await?;
            let read = Arc::clone(&kubernetes);
            source::kube::watch_cluster(
                client,
                Accept::configured(&config.api_content_types),
                config.service_proxy_name.as_deref(),
                Box::new(move |release| {
                    let _ = read.set(release.clone());
                }),
            )
            .map_err(anyhow::Error::from)?
            .boxed()
        }
        Source::ApiSide { .. } => {
            return Err(Failure::bad_config(
                "api-server watches the API server or --state, not another \
                 API side (--api-endpoint)",
            ))
        }
    };
    if let Some(address) = settings.metrics {
        start::metrics(
            address,
            config.bind_address_hard_fail,
            Default::default(),
        )
        .map_err(anyhow::Error::from)?;
    }
    serve(&config, &settings, source, kubernetes).await
}

/// Serves the views of what `source` holds on `settings.listen`, telling
/// each node the release `kubernetes` holds once it is known.
pub async fn serve(
    config: &Config,
    settings: &Settings,
    source: BoxStream<'static, SourceEvent>,
    kubernetes: Arc<OnceLock<Kubernetes>>,
) -> Result<(), Failure> {
    let shared =
        Shared::with_kubernetes(Cluster::new(SystemTime::now()), kubernetes);
    let serving = serving(config, settings, Arc::clone(&shared)).await?;
    tracing::info!(
        listen = %settings.listen,
        instance = shared.instance(),
        "serving node views"
    );
    apiside::run(source, shared, serving)
        .await
        .map_err(|e| Failure::Failed(e.into()))
}

/// The view server on `settings.listen`, ready to be spawned: a Unix
/// socket as it is, TCP with TLS and the access `settings` allow.
async fn serving(
    config: &Config,
    settings: &Settings,
    shared: Arc<Shared>,
) -> Result<BoxFuture<'static, Result<(), ServeError>>, Failure> {
    Ok(match &settings.listen {
        ApiEndpoint::Unix(path) => {
            let service = ViewService::new(shared, Access::Socket);
            let path = path.clone();
            async move { serve_unix(&path, service, std::future::pending()).await }
                .boxed()
        }
        ApiEndpoint::Tls { host, port } => {
            let Some(dir) = settings.tls_dir.as_deref() else {
                return Err(Failure::bad_config(
                    "--listen https:// needs --tls-dir",
                ));
            };
            let tls = TlsFiles::read(dir)
                .map_err(|e| anyhow::anyhow!("--tls-dir {e}"))?;
            let listener = tokio::net::TcpListener::bind((
                host.trim_matches(['[', ']']),
                *port,
            ))
            .await
            .with_context(|| format!("listening on {host}:{port}"))?;
            let access = match &settings.token_audience {
                None => Access::ClientCertificates,
                Some(audience) => {
                    let policy = TokenPolicy::new(
                        &settings.token_service_account,
                        audience,
                    )
                    .map_err(|e| {
                        Failure::bad_config(format!(
                            "--token-service-account {e}"
                        ))
                    })?;
                    let client = clients::kube_client(
                        config.kubeconfig.as_deref(),
                        config.master.as_deref(),
                    )
                    .await?;
                    Access::CertificatesOrTokens(Arc::new(TokenReviewer::new(
                        client, policy,
                    )))
                }
            };
            let service = ViewService::new(shared, access);
            async move {
                serve_tls(listener, &tls, service, std::future::pending()).await
            }
            .boxed()
        }
    })
}
