//! kube-ipvs-proxy: parse the command line, resolve the configuration,
//! run. A configuration that cannot be used exits with status 64
//! (EX_USAGE) and one line naming the field or flag; a kernel that cannot
//! run IPVS mode exits with 69 (EX_UNAVAILABLE) and one line naming what
//! is missing.

// Input from the API and the kernel must never panic the proxy: no
// unwrap, expect or panic! outside tests.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::Path,
    process::ExitCode,
    sync::Arc,
    time::{Duration, SystemTime},
};

use anyhow::Context;
use clap::Parser;
use futures::{stream::BoxStream, StreamExt};
use kube_ipvs_proxy::{
    apiside::{
        cluster::{Cluster, NO_NODE},
        serve_tls, serve_unix,
        server::{Access, Shared, ViewService},
        tokens::{TokenPolicy, TokenReviewer},
    },
    backend::Backend,
    config::{
        self, ApiServerArgs, Cli, Command, Config, ConfigArgs, ConfigWarning,
        OutputFormat, PlanArgs, Resolved, RunArgs, EXIT_BAD_CONFIG,
        EXIT_KERNEL_UNSUPPORTED,
    },
    daemon::{self, LoopSettings, Source},
    kernel::{
        addresses::NetlinkAddresses,
        capabilities::Unsupported,
        ipsets::NetlinkIpsets,
        iptables::{
            real::{RealIptables, Variant},
            IpFamily,
        },
        ipvs::{ConnTimeouts, NetlinkIpvs},
        sysctl::{
            self,
            conntrack::{self, ConntrackSettings},
            Change, KernelVersion, ProcSysctls, SysctlConfig, Sysctls,
        },
        KernelError,
    },
    logging::{self, LogSettings},
    oom,
    proxier::{stack, Proxier, ProxierConfig},
    server::{
        self, service_health, ProxyHealth, ServiceHealthServer, SyncReporter,
    },
    nodeview::endpoint::{ApiEndpoint, Credentials, TlsFiles},
    source::{
        self,
        client_metrics::RestClientMetricsLayer,
        recorder::EventSink,
        store::Stores,
        SourceEvent,
    },
    sync::{self, NodeSettings, SyncState},
    version::{VersionFlag, BUILD},
};

/// Where the kubelet reads a container's termination message: the one
/// line a DaemonSet's Pod shows as the reason it crashed.
const TERMINATION_LOG: &str = "/dev/termination-log";

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print to stdout and are not failures.
            let code = if e.use_stderr() { EXIT_BAD_CONFIG } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if let Some(value) = cli.run.version.as_deref() {
        match VersionFlag::parse(value) {
            Ok(VersionFlag::Off) => {}
            Ok(flag) => {
                print!("{}", BUILD.render(flag));
                return ExitCode::SUCCESS;
            }
            Err(e) => return bad_config(&anyhow::anyhow!(e)),
        }
    }
    match cli.command {
        Some(Command::Plan(args)) => plan(&args),
        Some(Command::ApiServer(args)) => api_server(&args),
        None => run(&cli.run),
    }
}

/// Resolves the configuration, then starts logging as it says (stderr,
/// so that `plan` output on stdout stays parseable) and logs each
/// warning once.
fn load(args: &ConfigArgs) -> Result<Config, ExitCode> {
    let Resolved { config, warnings } = match resolve(args) {
        Ok(resolved) => resolved,
        Err(e) => return Err(bad_config(&e)),
    };
    if let Some(problem) =
        logging::init(LogSettings::for_stderr(&config.logging))
    {
        tracing::warn!("{problem}");
    }
    for ConfigWarning { field, message } in &warnings {
        tracing::warn!(field = %field, "{message}");
    }
    Ok(config)
}

/// Reads `--config` if given and resolves flags and file.
fn resolve(args: &ConfigArgs) -> anyhow::Result<Resolved> {
    let text = args.config.as_deref().map(read_config).transpose()?;
    Ok(config::resolve(args, text.as_deref())?)
}

fn read_config(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path)
        .with_context(|| format!("--config {}", path.display()))
}

fn bad_config(error: &anyhow::Error) -> ExitCode {
    // `{:#}` keeps the whole context chain on one line.
    eprintln!("kube-ipvs-proxy: invalid configuration: {error:#}");
    ExitCode::from(EXIT_BAD_CONFIG)
}

fn run(args: &RunArgs) -> ExitCode {
    let config = match load(&args.config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if let Some(path) = &args.write_config_to {
        return write_config(&config, path);
    }
    // One thread for the sync loop: under churn a second worker cost more
    // CPU in wake-ups and stealing than it saved. What would compete with
    // the loop has a runtime on a thread of its own (runtime_thread.rs):
    // a repair's whole-kernel reads, and the watches' reading and decoding.
    let runtime =
        match runtime(&mut tokio::runtime::Builder::new_current_thread()) {
            Ok(runtime) => runtime,
            Err(code) => return code,
        };
    let mode = if args.cleanup() {
        Mode::Cleanup
    } else if args.init_only() {
        Mode::InitOnly
    } else {
        Mode::Run
    };
    match runtime.block_on(run_proxy(config, mode)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` keeps the whole context chain on one line.
            let line = format!("{e:#}");
            tracing::error!("{line}");
            write_termination_message(&line);
            if e.downcast_ref::<Unsupported>().is_some() {
                ExitCode::from(EXIT_KERNEL_UNSUPPORTED)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// A runtime, or the exit code of a process that cannot have one.
fn runtime(
    builder: &mut tokio::runtime::Builder,
) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|e| {
        eprintln!("kube-ipvs-proxy: cannot start the runtime: {e}");
        ExitCode::FAILURE
    })
}

/// Only inside a container, where the kubelet mounted the file: never
/// creates it on a host.
fn write_termination_message(line: &str) {
    let path = Path::new(TERMINATION_LOG);
    if path.is_file() {
        let _ = std::fs::write(path, format!("{line}\n"));
    }
}

/// `--write-config-to`: as upstream, the resolved configuration with
/// its defaults, then exit.
fn write_config(config: &Config, path: &Path) -> ExitCode {
    let written = config::to_yaml(config)
        .map_err(anyhow::Error::from)
        .and_then(|yaml| Ok(std::fs::write(path, yaml)?));
    match written {
        Ok(()) => {
            tracing::info!(file = %path.display(), "wrote the configuration");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(file = %path.display(), "cannot write the configuration: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// What the process is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Run,
    /// `--cleanup`: remove what IPVS mode created, then exit.
    Cleanup,
    /// `--init-only`: the privileged start-up steps, then exit.
    InitOnly,
}

/// How often the state file is checked for edits.
const STATE_FILE_POLL: Duration = Duration::from_millis(500);

async fn run_proxy(config: Config, mode: Mode) -> anyhow::Result<()> {
    if mode == Mode::Cleanup {
        return clean_up(&config).await;
    }
    let node_name = config.node_name(&hostname());
    tracing::info!(
        node = %node_name,
        version = BUILD.git_version,
        commit = BUILD.git_commit,
        "starting"
    );
    stack::check_kernel(&config).await?;
    set_sysctls(&config);
    set_ipvs_timeouts(&config).await;
    if mode == Mode::InitOnly {
        tracing::info!("system initialized and --init-only specified");
        return Ok(());
    }
    if let Err(error) = oom::apply_score_adj(config.oom_score_adj) {
        tracing::debug!(value = config.oom_score_adj, %error, "oomScoreAdj not applied");
    }
    let mut backend = stack::open(&config)
        .await
        .context("opening the kernel facilities")?;
    let mut events = None;
    // Where the sources are read and decoded (source/thread.rs).
    let sources = source::thread::handle().map_err(anyhow::Error::msg)?;
    let api_endpoint = config
        .api_endpoint
        .as_deref()
        .map(ApiEndpoint::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--api-endpoint {e}"))?;
    let source = match (&config.state_file, api_endpoint) {
        (_, Some(endpoint)) => Source::View(
            source::nodeview::watch(
                &tokio::runtime::Handle::current(),
                endpoint,
                api_credentials(&config)?,
                node_name.clone(),
            )
            .boxed(),
        ),
        (Some(path), None) => {
            Source::objects(source::file::watch(path.clone(), STATE_FILE_POLL))
        }
        (None, None) => {
            let kube_config = kube_config(config.kubeconfig.as_deref()).await?;
            // The watches' client is built on the sources' runtime, so
            // that its connections (TLS, HTTP) are driven there, beside
            // the sync loop rather than on its thread; the events' client
            // stays here.
            let watch_client = {
                let _sources = sources.enter();
                client_from(kube_config.clone())?
            };
            let watch = source::kube::watch(
                watch_client,
                &node_name,
                config.service_proxy_name.as_deref(),
            )?
            .boxed();
            // Upstream's birth cry, once its informers are started.
            let sink = EventSink::spawn(client_from(kube_config)?, &node_name);
            sink.starting();
            events = Some(sink);
            Source::Objects(watch)
        }
    };
    let health_addresses = service_health::listen_addresses(
        &config.node_port_addresses,
        &backend.local_addresses().await.unwrap_or_default(),
    );
    let reporter = start_servers(&config, health_addresses, events)?;
    let mut state = SyncState::new(
        node_name,
        NodeSettings::from_config(&config),
        None,
        SystemTime::now(),
    );
    if matches!(source, Source::View(_)) {
        state = state.fed_by_view();
    }
    let settings = LoopSettings {
        min_sync_period: config.ipvs.min_sync_period,
        sync_period: config.ipvs.sync_period,
    };
    daemon::run(source, state, backend, settings, reporter, sources.clone())
        .await?;
    Ok(())
}

/// conntrack's and IPVS mode's sysctls, written only where they differ.
/// A failure is logged and the proxy goes on (upstream refuses to start;
/// see tests/conformance/differences.md).
fn set_sysctls(config: &Config) {
    let mut sysctls = ProcSysctls::new();
    // Upstream's IPVS proxier says this once at start and sets nothing.
    if sysctl::bridge_nf_call_iptables_off(&mut sysctls) {
        tracing::info!(
            "missing br-netfilter module or unset sysctl \
             br-nf-call-iptables, proxy may not work as intended"
        );
    }
    set_conntrack(&mut sysctls, config);
    let kernel = match KernelVersion::running(&mut sysctls) {
        Ok(kernel) => kernel,
        Err(error) => {
            tracing::warn!(%error, "cannot read the kernel version; sysctls left alone");
            return;
        }
    };
    let wanted = SysctlConfig {
        strict_arp: config.ipvs.strict_arp,
    };
    for result in sysctl::ensure(&mut sysctls, &wanted, kernel) {
        log_sysctl(result);
    }
}

fn log_sysctl(result: Result<Change, KernelError>) {
    match result {
        Ok(change) => tracing::info!(
            sysctl = change.path,
            from = %change.from,
            to = %change.to,
            "set"
        ),
        Err(error) => tracing::warn!(%error, "sysctl not set"),
    }
}

/// conntrack's table size and timeouts, from `conntrack.*` as upstream
/// sets them before its proxier.
fn set_conntrack(sysctls: &mut ProcSysctls, config: &Config) {
    let c = &config.conntrack;
    let settings = ConntrackSettings {
        max: conntrack::table_size(c.max_per_core, c.min, online_cpus()),
        tcp_established_timeout: c.tcp_established_timeout.as_secs(),
        tcp_close_wait_timeout: c.tcp_close_wait_timeout.as_secs(),
        tcp_be_liberal: c.tcp_be_liberal,
        udp_timeout: c.udp_timeout.as_secs(),
        udp_stream_timeout: c.udp_stream_timeout.as_secs(),
    };
    let mut module = ProcSysctls::with_root(conntrack::MODULE_PARAMETERS);
    for result in conntrack::ensure(sysctls, &mut module, &settings) {
        log_sysctl(result);
    }
}

/// The online CPUs, as upstream counts them for the conntrack table; the
/// CPUs this process may use if the kernel's list cannot be read.
fn online_cpus() -> u32 {
    ProcSysctls::with_root(conntrack::CPU_DIR)
        .read(conntrack::ONLINE_CPUS)
        .ok()
        .and_then(|list| conntrack::count_cpus(&list))
        .or_else(|| {
            std::thread::available_parallelism()
                .ok()
                .and_then(|n| u32::try_from(n.get()).ok())
        })
        .unwrap_or(1)
}

/// `ipvs.tcpTimeout`, `tcpFinTimeout` and `udpTimeout`, when one is set;
/// a failure is logged, as upstream does.
async fn set_ipvs_timeouts(config: &Config) {
    let Some(timeouts) = ConnTimeouts::from_config(
        config.ipvs.tcp_timeout,
        config.ipvs.tcp_fin_timeout,
        config.ipvs.udp_timeout,
    ) else {
        return;
    };
    let result = match NetlinkIpvs::new() {
        Ok(ipvs) => ipvs.set_timeouts(&timeouts).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => tracing::info!(%timeouts, "IPVS timeouts set"),
        Err(error) => tracing::warn!(%error, "IPVS timeouts not set"),
    }
}

/// `--cleanup`: removes our iptables chains and jumps first (sets they
/// reference cannot be destroyed), then our virtual servers, kube-ipvs0
/// and our sets, and nothing that is not ours.
async fn clean_up(config: &Config) -> anyhow::Result<()> {
    let mut iptables = RealIptables::new(Variant::detect().await);
    let (report, kept) = kube_ipvs_proxy::proxier::iptables::cleanup(
        &mut iptables,
        &[IpFamily::V4, IpFamily::V6],
    )
    .await;
    for (family, table, error) in &report.errors {
        tracing::warn!(%family, table, %error, "iptables cleanup");
    }
    for (family, table, chain) in kept {
        tracing::warn!(%family, table, chain, "chain still referenced by a rule that is not ours; flushed and kept");
    }
    let mut proxier = Proxier::new(
        NetlinkIpvs::new().context("IPVS")?,
        NetlinkAddresses::new().context("kube-ipvs0 addresses")?,
        NetlinkIpsets::new().context("ipsets")?,
        ProxierConfig::from_config(config),
    );
    let report = proxier.cleanup().await;
    let failures: Vec<_> = report.failed().collect();
    for error in &failures {
        tracing::warn!(%error, "cleanup");
    }
    tracing::info!(
        operations = report.op_count(),
        failures = failures.len(),
        "cleanup done"
    );
    Ok(())
}

/// How often histogram samples are folded in when nobody scrapes.
const METRICS_UPKEEP: Duration = Duration::from_secs(5);

/// Starts the healthz and metrics servers (an empty bind address
/// disables one) and the health check node port servers. A port that
/// is taken is retried in the background, never fatal.
fn start_servers(
    config: &Config,
    health_addresses: Vec<IpAddr>,
    events: Option<EventSink>,
) -> anyhow::Result<SyncReporter> {
    // Upstream's health timeout: a queued update may wait two periods.
    let health = Arc::new(ProxyHealth::new(2 * config.ipvs.sync_period));
    if let Some(address) = config.healthz_bind_address {
        server::spawn_forever(
            "healthz",
            address,
            server::healthz::router(Arc::clone(&health)),
        );
    }
    if let Some(address) = config.metrics_bind_address {
        let handle = kube_ipvs_proxy::telemetry::exporter::install()?;
        server::metrics::spawn_upkeep(handle.clone(), METRICS_UPKEEP);
        server::spawn_forever(
            "metrics",
            address,
            server::metrics::router(handle),
        );
    }
    let service_health =
        ServiceHealthServer::new(health_addresses, Arc::clone(&health))?;
    if let Some(events) = events {
        service_health.record_events_to(events);
    }
    Ok(SyncReporter::new(health, Some(service_health)))
}

async fn kube_client(
    kubeconfig: Option<&Path>,
) -> anyhow::Result<kube::Client> {
    client_from(kube_config(kubeconfig).await?)
}

async fn kube_config(
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
fn client_from(config: kube::Config) -> anyhow::Result<kube::Client> {
    // Every request counted and timed for the rest_client_* metrics.
    let metrics = RestClientMetricsLayer::for_url(&config.cluster_url);
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&metrics)
        .build())
}

/// `api-server`: one watch of the API server (or a state file) for the
/// whole cluster; each node served its own view.
fn api_server(args: &ApiServerArgs) -> ExitCode {
    // Its metrics address is its own: a config file shared with the
    // nodes names theirs, which the API side would take from a
    // control-plane node's proxy.
    let mut proxy_args = args.config.clone();
    let metrics = proxy_args.metrics_bind_address.take();
    let config = match load(&proxy_args) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let metrics = match metrics.as_deref() {
        None => Some(API_SIDE_METRICS_ADDRESS),
        Some("") => None,
        Some(address) => match address.parse() {
            Ok(address) => Some(address),
            Err(e) => {
                return bad_config(&anyhow::anyhow!(
                    "--metrics-bind-address {address}: {e}"
                ))
            }
        },
    };
    let listen = match ApiEndpoint::parse(&args.listen) {
        Ok(listen) => listen,
        Err(e) => return bad_config(&anyhow::anyhow!("--listen {e}")),
    };
    let runtime = match runtime(&mut tokio::runtime::Builder::new_multi_thread())
    {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    match runtime.block_on(run_api_side(config, listen, metrics, args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Where `api-server` serves its metrics without `--metrics-bind-address`:
/// the port after deploy/'s view port, not the node proxy's 10249.
const API_SIDE_METRICS_ADDRESS: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9444);

async fn run_api_side(
    config: Config,
    listen: ApiEndpoint,
    metrics: Option<SocketAddr>,
    args: &ApiServerArgs,
) -> anyhow::Result<()> {
    let source: BoxStream<'static, SourceEvent> = match &config.state_file {
        Some(path) => {
            source::file::watch(path.clone(), STATE_FILE_POLL).boxed()
        }
        None => {
            let client = kube_client(config.kubeconfig.as_deref()).await?;
            source::kube::watch_cluster(
                client,
                config.service_proxy_name.as_deref(),
            )?
            .boxed()
        }
    };
    let shared = Shared::new(Cluster::new(SystemTime::now()));
    if let Some(address) = metrics {
        let handle = kube_ipvs_proxy::telemetry::exporter::install()?;
        server::metrics::spawn_upkeep(handle.clone(), METRICS_UPKEEP);
        server::spawn_forever(
            "metrics",
            address,
            server::metrics::router(handle),
        );
    }
    tracing::info!(%listen, instance = shared.instance(), "serving node views");
    let serving = match listen {
        ApiEndpoint::Unix(path) => tokio::spawn({
            let service = ViewService::new(shared.clone(), Access::Socket);
            async move { serve_unix(&path, service, std::future::pending()).await }
        }),
        ApiEndpoint::Tls { host, port } => {
            let Some(dir) = args.tls_dir.as_deref() else {
                anyhow::bail!("--listen https:// needs --tls-dir");
            };
            let tls = TlsFiles::read(dir)
                .map_err(|e| anyhow::anyhow!("--tls-dir {e}"))?;
            let listener = tokio::net::TcpListener::bind((
                host.trim_matches(['[', ']']),
                port,
            ))
            .await
            .with_context(|| format!("listening on {host}:{port}"))?;
            let access = match &args.token_audience {
                None => Access::ClientCertificates,
                Some(audience) => {
                    let policy =
                        TokenPolicy::new(&args.token_service_account, audience)
                            .map_err(|e| {
                                anyhow::anyhow!("--token-service-account {e}")
                            })?;
                    let client =
                        kube_client(config.kubeconfig.as_deref()).await?;
                    Access::CertificatesOrTokens(Arc::new(TokenReviewer::new(
                        client, policy,
                    )))
                }
            };
            let service = ViewService::new(shared.clone(), access);
            tokio::spawn(async move {
                serve_tls(listener, &tls, service, std::future::pending()).await
            })
        }
    };
    let mut stores = Stores::new(NO_NODE);
    let mut listed = false;
    // What is ready at once goes into one sync, so that a burst of
    // changes wakes each node's watch once.
    let mut batches = source.ready_chunks(1024);
    while let Some(events) = batches.next().await {
        for event in events {
            shared.apply(stores.apply(event))?;
        }
        if !listed && stores.ready() {
            listed = true;
            tracing::info!("services and endpoint slices synced; serving");
            shared.sync().await?;
        } else if listed {
            shared.sync_changes().await?;
        }
        if serving.is_finished() {
            break;
        }
    }
    match serving.await {
        Ok(Ok(())) => anyhow::bail!("the object source ended"),
        Ok(Err(e)) => Err(e.into()),
        Err(e) => Err(e.into()),
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default()
}

fn plan(args: &PlanArgs) -> ExitCode {
    let config = match load(&args.config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if let Some(endpoint) = config.api_endpoint.as_deref() {
        return plan_from_api_side(args, &config, endpoint);
    }
    // `--state` or `--api-endpoint` is required for plan.
    let Some(path) = config.state_file.as_deref() else {
        return bad_config(&anyhow::anyhow!("plan needs --state FILE"));
    };
    let snapshot = match source::file::load(path) {
        Ok(snapshot) => snapshot,
        Err(e) => {
            eprintln!("kube-ipvs-proxy plan: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(node) = sync::plan_node_name(&snapshot, args.node.as_deref())
    else {
        eprintln!(
            "kube-ipvs-proxy plan: {} has {} Node objects; name one with --node",
            path.display(),
            snapshot.nodes.len()
        );
        return ExitCode::from(EXIT_BAD_CONFIG);
    };
    let plan =
        sync::plan(&snapshot, &node, &NodeSettings::from_config(&config));
    print_plan(&plan, args.output)
}

/// `--api-tls-dir`'s and `--api-token-file`'s credentials.
fn api_credentials(config: &Config) -> anyhow::Result<Credentials> {
    let tls = config
        .api_tls_dir
        .as_deref()
        .map(TlsFiles::read)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--api-tls-dir {e}"))?;
    Ok(Credentials {
        tls,
        token_file: config.api_token_file.clone(),
    })
}

/// How long `plan --api-endpoint` waits for the node's view.
const PLAN_VIEW_TIMEOUT: Duration = Duration::from_secs(30);

/// `plan --api-endpoint ADDR --node NAME`: what the node would program,
/// fed by the API side.
fn plan_from_api_side(
    args: &PlanArgs,
    config: &Config,
    endpoint: &str,
) -> ExitCode {
    let endpoint = match ApiEndpoint::parse(endpoint) {
        Ok(endpoint) => endpoint,
        Err(e) => return bad_config(&anyhow::anyhow!("--api-endpoint {e}")),
    };
    let Some(node) = args.node.clone() else {
        return bad_config(&anyhow::anyhow!(
            "plan --api-endpoint needs --node NAME"
        ));
    };
    let runtime =
        match runtime(&mut tokio::runtime::Builder::new_current_thread()) {
            Ok(runtime) => runtime,
            Err(code) => return code,
        };
    let credentials = match api_credentials(config) {
        Ok(credentials) => credentials,
        Err(e) => return bad_config(&e),
    };
    let first = runtime.block_on(async {
        let view = source::nodeview::first_view(&endpoint, &credentials, &node);
        tokio::time::timeout(PLAN_VIEW_TIMEOUT, view).await
    });
    let update = match first {
        Ok(Ok(update)) => update,
        Ok(Err(e)) => {
            eprintln!(
                "kube-ipvs-proxy plan: no view of {node} from {endpoint}: {e}"
            );
            return ExitCode::FAILURE;
        }
        Err(_) => {
            eprintln!(
                "kube-ipvs-proxy plan: no view of {node} from {endpoint} within {PLAN_VIEW_TIMEOUT:?}"
            );
            return ExitCode::FAILURE;
        }
    };
    let plan =
        sync::plan_from_view(update, &node, &NodeSettings::from_config(config));
    print_plan(&plan, args.output)
}

fn print_plan(
    plan: &kube_ipvs_proxy::desired::Plan,
    output: OutputFormat,
) -> ExitCode {
    match output {
        OutputFormat::Text => print!("{plan}"),
        OutputFormat::Json => match serde_json::to_string_pretty(plan) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("kube-ipvs-proxy plan: {e}");
                return ExitCode::FAILURE;
            }
        },
    }
    ExitCode::SUCCESS
}
