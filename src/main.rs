//! kube-ipvs-proxy: parse the command line, resolve the configuration,
//! run. A configuration that cannot be used exits with status 64
//! (EX_USAGE) and one line naming the field or flag.

use std::{
    net::IpAddr,
    path::Path,
    process::ExitCode,
    sync::Arc,
    time::{Duration, SystemTime},
};

use anyhow::Context;
use clap::Parser;
use futures::{stream::BoxStream, StreamExt};
use kube_ipvs_proxy::{
    backend::Backend,
    config::{
        self, Cli, Command, Config, ConfigArgs, OutputFormat, PlanArgs,
        Resolved, RunArgs,
    },
    daemon::{self, LoopSettings},
    kernel::{
        addresses::NetlinkAddresses,
        ipsets::NetlinkIpsets,
        iptables::{
            real::{RealIptables, Variant},
            Family,
        },
        ipvs::{ConnTimeouts, NetlinkIpvs},
        sysctl::{
            self,
            conntrack::{self, ConntrackSettings},
            Change, KernelVersion, ProcSysctls, SysctlConfig, Sysctls,
        },
        KernelError,
    },
    proxier::{
        stack::{self, KernelBackend},
        Proxier, ProxierConfig,
    },
    server::{
        self, service_health, ProxyHealth, ServiceHealthServer, SyncReporter,
    },
    source::{self, SourceEvent},
    sync::{self, NodeSettings, SyncState},
};
use tracing_subscriber::EnvFilter;

/// sysexits' EX_USAGE, as linkerd2-proxy uses for a bad configuration.
const EXIT_BAD_CONFIG: u8 = 64;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print to stdout and are not failures.
            let code = if e.use_stderr() { EXIT_BAD_CONFIG } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    init_tracing();
    match cli.command {
        Some(Command::Plan(args)) => plan(&args),
        None => run(&cli.run),
    }
}

/// Logs go to stderr so that `plan` output on stdout stays parseable.
fn init_tracing() {
    let (filter, bad_filter) = match EnvFilter::try_from_default_env() {
        Ok(filter) => (filter, None),
        Err(e) if std::env::var_os("RUST_LOG").is_some() => {
            (EnvFilter::new("info"), Some(e))
        }
        Err(_) => (EnvFilter::new("info"), None),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    if let Some(e) = bad_filter {
        tracing::warn!("RUST_LOG ignored: {e}; logging at info");
    }
}

/// Reads `--config` if given and resolves flags and file into a
/// [`Config`]; warnings are logged once each.
fn load(args: &ConfigArgs) -> anyhow::Result<Config> {
    let text = args.config.as_deref().map(read_config).transpose()?;
    let Resolved { config, warnings } = config::resolve(args, text.as_deref())?;
    for warning in &warnings {
        tracing::warn!(field = %warning.field, "{}", warning.message);
    }
    Ok(config)
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
        Err(e) => return bad_config(&e),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("kube-ipvs-proxy: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run_proxy(config, args.cleanup())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// How often the state file is checked for edits.
const STATE_FILE_POLL: Duration = Duration::from_millis(500);

async fn run_proxy(config: Config, cleanup: bool) -> anyhow::Result<()> {
    if cleanup {
        return clean_up(&config).await;
    }
    let node_name = config.node_name(&hostname());
    tracing::info!(node = %node_name, "starting");
    let mut backend = kernel_backend(&config).await?;
    let source: BoxStream<'static, SourceEvent> = match &config.state_file {
        Some(path) => {
            source::file::watch(path.clone(), STATE_FILE_POLL).boxed()
        }
        None => {
            let client = kube_client(config.kubeconfig.as_deref()).await?;
            source::kube::watch(
                client,
                &node_name,
                config.service_proxy_name.as_deref(),
            )?
            .boxed()
        }
    };
    let health_addresses = service_health::listen_addresses(
        &config.node_port_addresses,
        &backend.local_addresses().await.unwrap_or_default(),
    );
    let reporter = start_servers(&config, health_addresses)?;
    let state = SyncState::new(
        node_name,
        NodeSettings::from_config(&config),
        None,
        SystemTime::now(),
    );
    let settings = LoopSettings {
        min_sync_period: config.ipvs.min_sync_period,
        sync_period: config.ipvs.sync_period,
    };
    daemon::run(source, state, backend, settings, reporter).await?;
    Ok(())
}

/// Sets IPVS mode's sysctls and timeouts, then opens the kernel
/// facilities.
async fn kernel_backend(config: &Config) -> anyhow::Result<KernelBackend> {
    set_sysctls(config);
    set_ipvs_timeouts(config).await;
    stack::open(config)
        .await
        .context("opening the kernel facilities")
}

/// conntrack's and IPVS mode's sysctls, written only where they differ.
/// A failure is logged and the proxy goes on (upstream refuses to start;
/// see tests/conformance/differences.md).
fn set_sysctls(config: &Config) {
    let mut sysctls = ProcSysctls::new();
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
    let result = match NetlinkIpvs::connect() {
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
    let (report, kept) = kube_ipvs_proxy::kernel::iptables::apply::cleanup(
        &mut iptables,
        &[Family::V4, Family::V6],
    )
    .await;
    for (family, table, error) in &report.errors {
        tracing::warn!(%family, table, %error, "iptables cleanup");
    }
    for (family, table, chain) in kept {
        tracing::warn!(%family, table, chain, "chain still referenced by a rule that is not ours; flushed and kept");
    }
    let mut proxier = Proxier::new(
        NetlinkIpvs::connect().context("IPVS")?,
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
        let handle = kube_ipvs_proxy::metrics::exporter::install()?;
        server::metrics::spawn_upkeep(handle.clone(), METRICS_UPKEEP);
        server::spawn_forever(
            "metrics",
            address,
            server::metrics::router(handle),
        );
    }
    let service_health =
        ServiceHealthServer::new(health_addresses, Arc::clone(&health))?;
    Ok(SyncReporter::new(health, Some(service_health)))
}

async fn kube_client(
    kubeconfig: Option<&Path>,
) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
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
    };
    Ok(kube::Client::try_from(config)?)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default()
}

fn plan(args: &PlanArgs) -> ExitCode {
    let config = match load(&args.config) {
        Ok(config) => config,
        Err(e) => return bad_config(&e),
    };
    // `--state` is required for plan, so this is always set.
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
    match args.output {
        OutputFormat::Text => print!("{plan}"),
        OutputFormat::Json => match serde_json::to_string_pretty(&plan) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("kube-ipvs-proxy plan: {e}");
                return ExitCode::FAILURE;
            }
        },
    }
    ExitCode::SUCCESS
}
