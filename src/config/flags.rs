//! Command line: kube-proxy's flag names, plus `--state`,
//! `--service-proxy-name` and the `plan` subcommand.
//!
//! Flags that take values are kept close to what was typed (strings,
//! `Option` when not given) and validated together with the config file
//! in `validate.rs`, so a bad value gets the same message either way.

use std::{collections::BTreeMap, path::PathBuf};

use clap::{builder::BoolishValueParser, Args, Parser, Subcommand, ValueEnum};

use super::{
    duration::GoDuration,
    kubeproxy::{
        ClientConnection, Conntrack, DetectLocalSection, Iptables, Ipvs,
        KubeProxyConfiguration, Logging, API_VERSION, KIND,
    },
};

#[derive(Debug, Clone, PartialEq, Parser)]
#[command(
    name = "kube-ipvs-proxy",
    // `--version` is ours: it takes kube-proxy's `=raw` too.
    disable_version_flag = true,
    about = "kube-proxy in IPVS mode: same flags, same config file, \
             same kernel state",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Clone, PartialEq, Subcommand)]
pub enum Command {
    /// Print the desired IPVS and ipset state of a node, from the source
    /// the configuration names (`--state`, `--api-endpoint`, or the API
    /// server); changes nothing.
    Plan(PlanArgs),
    /// Print the kernel's IPVS table as `ipvsadm -Ln` does, each virtual
    /// server followed by the Service it is for; changes nothing.
    List(ListArgs),
    /// Explain what the proxy does with one Service on a node: each port
    /// and frontend with its virtual server and every endpoint, used or
    /// not and why, then what the kernel holds, where it can be read.
    /// Exits 0 when found (and the kernel agrees or was not read), 1 when
    /// not found, 2 when the kernel differs.
    Explain(ExplainArgs),
    /// Watch the API server once for the whole cluster and serve each
    /// node its own view (the nodes run with `--api-endpoint`).
    ApiServer(ApiServerArgs),
}

/// Makes every boolean flag parse as kube-proxy's (pflag's) do: `--flag`
/// alone is true, a value must follow `=` (`--flag=false`), and
/// `1`/`yes`/`on` and their opposites are taken too; in `--flag false`,
/// `false` is a stray argument, as it is upstream. Applied where the
/// flags are declared: a flattened struct's arguments join its parent's
/// command.
fn go_bools(arg: clap::Arg) -> clap::Arg {
    if arg.get_value_parser().type_id() != std::any::TypeId::of::<bool>() {
        return arg;
    }
    arg.num_args(0..=1)
        .require_equals(true)
        .default_missing_value("true")
        .value_parser(BoolishValueParser::new())
}

/// Running the proxy (no subcommand).
#[derive(Debug, Clone, PartialEq, Args)]
#[command(mut_args(go_bools))]
pub struct RunArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Remove everything kube-proxy's IPVS mode created, then exit.
    #[arg(long)]
    pub cleanup: Option<bool>,
    /// Print version information and exit; `--version=raw` prints every
    /// build detail.
    #[arg(
        long,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "true|raw"
    )]
    pub version: Option<String>,
    /// Write the effective configuration, defaults included, to this
    /// file as a KubeProxyConfiguration, then exit.
    #[arg(long, value_name = "FILE")]
    pub write_config_to: Option<PathBuf>,
    /// Do the start-up steps that need full root privileges (the kernel
    /// checks and IPVS mode's sysctls), then exit.
    #[arg(long)]
    pub init_only: Option<bool>,
}

impl RunArgs {
    pub fn cleanup(&self) -> bool {
        self.cleanup.unwrap_or(false)
    }

    pub fn init_only(&self) -> bool {
        self.init_only.unwrap_or(false)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum OutputFormat {
    #[default]
    Text,
    Json,
}

/// `plan`: the same configuration flags, its source among them.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Compute the plan as seen from this node (NodePorts, local
    /// endpoints); defaults to the only Node of a state file, else to the
    /// node the proxy would be (`--hostname-override`, the `NODE_NAME`
    /// the DaemonSet sets, the host's name).
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// How the plan is printed.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// With --state: read the file as a proxy of this Kubernetes release
    /// would be given it (MAJOR.MINOR, or vX.Y.Z), where releases select
    /// Services and EndpointSlices differently; the newest by default.
    #[arg(long, value_name = "VERSION", value_parser = kubernetes_release)]
    pub kubernetes_version: Option<(u32, u32)>,
}

/// `list`: the same configuration flags, whose source names the
/// virtual servers.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Name the virtual servers as this node's proxy programs them; by
    /// default a state file's only Node, else the node the proxy would be
    /// (`--hostname-override`, the `NODE_NAME` the DaemonSet sets, the
    /// host's name).
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// How the table is printed.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// `explain`: the same configuration flags, and the Service.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// As seen from this node; by default a state file's only Node, else
    /// the node the proxy would be (`--hostname-override`, the
    /// `NODE_NAME` the DaemonSet sets, the host's name).
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// How the answer is printed.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// The Service, as NAMESPACE/NAME.
    #[arg(value_name = "NAMESPACE/NAME")]
    pub service: String,
}

/// `1.35`, `v1.35` or `v1.35.4`: the release, major and minor.
fn kubernetes_release(text: &str) -> Result<(u32, u32), String> {
    let bare = text.strip_prefix('v').unwrap_or(text);
    let mut parts = bare.split('.');
    let number = |part: Option<&str>| part.and_then(|p| p.parse::<u32>().ok());
    match (number(parts.next()), number(parts.next()), parts.next()) {
        (Some(major), Some(minor), patch)
            if patch.is_none_or(|p| p.parse::<u32>().is_ok())
                && parts.next().is_none() =>
        {
            Ok((major, minor))
        }
        _ => Err(format!(
            "{text:?} is not a Kubernetes release (1.37, v1.37.2)"
        )),
    }
}

/// `api-server`: the sources of the proxy (`--kubeconfig`, `--state`,
/// `--service-proxy-name`, logging) and where to serve.
#[derive(Debug, Clone, PartialEq, Args)]
#[command(mut_arg("metrics_bind_address", |a| a.help(
    "Serve the API side's metrics on IP:PORT (127.0.0.1:9444 if not \
     given; empty: off). With --config too: the file's metricsBindAddress \
     is the node proxies'."
)))]
pub struct ApiServerArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Serve the node views on ADDR: `unix:///PATH`, or
    /// `https://HOST:PORT` (with `--tls-dir`).
    #[arg(long, value_name = "ADDR")]
    pub listen: String,
    /// For `https://`: a folder with the server's certificate (`tls.crt`,
    /// `tls.key`) and the CA that signs the nodes' client certificates
    /// (`ca.crt`).
    #[arg(long, value_name = "DIR")]
    pub tls_dir: Option<PathBuf>,
    /// Also let nodes in with their ServiceAccount token made for this
    /// audience: a TokenReview (with `--kubeconfig`'s credentials) says
    /// which node the token's Pod runs on.
    #[arg(long, value_name = "AUDIENCE")]
    pub token_audience: Option<String>,
    /// The ServiceAccount (`NAMESPACE/NAME`) whose tokens are let in.
    #[arg(
        long,
        value_name = "NS/NAME",
        default_value = "kube-system/kube-ipvs-proxy"
    )]
    pub token_service_account: String,
}

/// The flags among `fields` of `args` that were given, by their names on
/// the command line: clap names a field's flag after the field, in kebab
/// case (`with_a_config_file_every_configuration_flag_given_is_named`
/// holds the list to clap's).
macro_rules! given_flags {
    ($args:expr; $($field:ident),* $(,)?) => {
        [$((stringify!($field), $args.$field.is_some())),*]
            .into_iter()
            .filter(|(_, given)| *given)
            .map(|(field, _)| format!("--{}", field.replace('_', "-")))
            .collect()
    };
}

/// Flags that make up the configuration.
///
/// Precedence, as in kube-proxy (`cmd/kube-proxy/app/options.go`): without
/// `--config`, the flags below apply on top of the defaults. With
/// `--config`, the file is the whole configuration and these flags are
/// ignored (each given one gets a warning), except:
/// - `--hostname-override`, which still overrides the file's
///   `hostnameOverride`;
/// - the flags that are not part of `KubeProxyConfiguration`: `--config`
///   itself, `--cleanup`, and our own `--state`, `--api-endpoint`,
///   `--api-tls-dir`, `--api-token-file`, `--service-proxy-name`,
///   `--ipvs-scheduler-flags` and `--ipvs-service-schedulers`.
#[derive(Debug, Clone, Default, PartialEq, Args)]
#[command(mut_args(go_bools))]
pub struct ConfigArgs {
    /// Path to a KubeProxyConfiguration file
    /// (kubeproxy.config.k8s.io/v1alpha1), e.g. kubeadm's ConfigMap.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Read Services, EndpointSlices and Nodes from this YAML/JSON file
    /// (watched for changes) instead of the API server.
    #[arg(long, value_name = "FILE", conflicts_with = "api_endpoint")]
    pub state: Option<PathBuf>,

    /// Take this node's view from kube-ipvs-proxy's API side
    /// (`api-server`) at ADDR (`unix:///PATH` or `https://HOST:PORT`)
    /// instead of the API server.
    #[arg(long, value_name = "ADDR")]
    pub api_endpoint: Option<String>,

    /// For an `https://` API side: a folder with this node's client
    /// certificate (`tls.crt`, `tls.key`, its CN the node's name) and
    /// the CA that signed the API side's (`ca.crt`).
    #[arg(long, value_name = "DIR", requires = "api_endpoint")]
    pub api_tls_dir: Option<PathBuf>,

    /// For an `https://` API side: a file with this node's ServiceAccount
    /// token (a projected token bound to its Pod), sent instead of a
    /// client certificate.
    #[arg(long, value_name = "FILE", requires = "api_endpoint")]
    pub api_token_file: Option<PathBuf>,

    /// Only handle Services labelled
    /// service.kubernetes.io/service-proxy-name=NAME.
    #[arg(long, value_name = "NAME")]
    pub service_proxy_name: Option<String>,

    /// Scheduler flags for every virtual server whose scheduler takes
    /// them, comma-separated: sh-fallback, sh-port, mh-fallback, mh-port.
    /// The names of one scheduler are its whole set (mh-fallback alone
    /// drops mh-port); a scheduler none is named for keeps upstream's
    /// (mh-port with mh).
    #[arg(long, value_name = "FLAGS")]
    pub ipvs_scheduler_flags: Option<String>,

    /// The schedulers a Service's kube-ipvs-proxy.io/scheduler (or
    /// kube-router's) annotation may choose, comma-separated; an empty
    /// list lets annotations choose none. Default: a standard kernel's
    /// (rr, wrr, lc, wlc, fo, ovf, lblc, lblcr, dh, sh, mh, sed, nq, twos).
    #[arg(long, value_name = "NAMES")]
    pub ipvs_service_schedulers: Option<String>,

    /// Which proxy mode to use; only "ipvs" is supported.
    #[arg(long, value_name = "MODE")]
    pub proxy_mode: Option<String>,

    /// The IPVS scheduler: any the kernel has (rr, wrr, lc, wlc, fo, ovf, lblc,
    /// lblcr, dh, sh, mh, sed, nq, twos, or a site's own).
    #[arg(long, value_name = "NAME")]
    pub ipvs_scheduler: Option<String>,

    /// Maximum interval between syncs (e.g. 30s, 1m).
    #[arg(long, value_name = "DURATION", value_parser = GoDuration::parse)]
    pub ipvs_sync_period: Option<GoDuration>,

    /// Minimum interval between syncs; 0 syncs on every change.
    #[arg(long, value_name = "DURATION", value_parser = GoDuration::parse)]
    pub ipvs_min_sync_period: Option<GoDuration>,

    /// Comma-separated CIDRs whose IPVS services cleanup never touches.
    #[arg(long, value_name = "CIDRS", value_delimiter = ',')]
    pub ipvs_exclude_cidrs: Option<Vec<String>>,

    /// Set arp_ignore=1 and arp_announce=2.
    #[arg(long)]
    pub ipvs_strict_arp: Option<bool>,

    /// Idle timeout for IPVS TCP connections; 0 leaves it as is.
    #[arg(long, value_name = "DURATION", value_parser = GoDuration::parse)]
    pub ipvs_tcp_timeout: Option<GoDuration>,

    /// IPVS TCP timeout after a FIN; 0 leaves it as is.
    #[arg(long, value_name = "DURATION", value_parser = GoDuration::parse)]
    pub ipvs_tcpfin_timeout: Option<GoDuration>,

    /// IPVS UDP timeout; 0 leaves it as is.
    #[arg(long, value_name = "DURATION", value_parser = GoDuration::parse)]
    pub ipvs_udp_timeout: Option<GoDuration>,

    /// Pod CIDR of the cluster (one per IP family, comma-separated).
    #[arg(long, value_name = "CIDRS")]
    pub cluster_cidr: Option<String>,

    /// How local traffic is detected: ClusterCIDR, NodeCIDR,
    /// BridgeInterface or InterfaceNamePrefix.
    #[arg(long, value_name = "MODE")]
    pub detect_local_mode: Option<String>,

    /// Bridge for --detect-local-mode=BridgeInterface.
    #[arg(long, value_name = "NAME")]
    pub pod_bridge_interface: Option<String>,

    /// Interface prefix for --detect-local-mode=InterfaceNamePrefix.
    #[arg(long, value_name = "PREFIX")]
    pub pod_interface_name_prefix: Option<String>,

    /// Comma-separated CIDRs (or "primary") of the node IPs that serve
    /// NodePorts; unset means all local IPs.
    #[arg(long, value_name = "CIDRS", value_delimiter = ',')]
    pub nodeport_addresses: Option<Vec<String>>,

    /// SNAT all traffic sent to Service cluster IPs.
    #[arg(long)]
    pub masquerade_all: Option<bool>,

    /// The fwmark bit for packets that need SNAT, in [0, 31].
    #[arg(long, value_name = "BIT", allow_negative_numbers = true)]
    pub iptables_masquerade_bit: Option<i64>,

    /// Name of our Node, instead of the hostname.
    #[arg(long, value_name = "NAME")]
    pub hostname_override: Option<String>,

    /// Overrides the node's primary IP.
    #[arg(long, value_name = "IP")]
    pub bind_address: Option<String>,

    /// IP:port for the health check server; empty disables it.
    #[arg(long, value_name = "IP:PORT")]
    pub healthz_bind_address: Option<String>,

    /// IP:port for the metrics server; empty disables it.
    #[arg(long, value_name = "IP:PORT")]
    pub metrics_bind_address: Option<String>,

    /// The health check server's port when --healthz-bind-address is a
    /// bare IP; 0 disables the server. Without --config only, as
    /// upstream (deprecated there).
    #[arg(long, value_name = "PORT", allow_negative_numbers = true)]
    pub healthz_port: Option<i64>,

    /// The metrics server's port when --metrics-bind-address is a bare
    /// IP; 0 disables the server. Without --config only, as upstream
    /// (deprecated there).
    #[arg(long, value_name = "PORT", allow_negative_numbers = true)]
    pub metrics_port: Option<i64>,

    /// Exit when the health check or metrics server cannot bind its
    /// port, instead of retrying.
    #[arg(long)]
    pub bind_address_hard_fail: Option<bool>,

    /// Feature gates as NAME=BOOL,...: AllowServiceExternalIPs,
    /// KubeProxyIPVS, ComponentFlagz and ComponentStatusz are
    /// understood, any other is warned about.
    #[arg(long, value_name = "NAME=BOOL,...")]
    pub feature_gates: Option<String>,

    /// The API server's address, over the kubeconfig's server (as
    /// upstream, with --config too).
    #[arg(long, value_name = "URL")]
    pub master: Option<String>,

    /// Path to a kubeconfig file; in-cluster config when unset.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// The encoding the watches ask the API server for
    /// (clientConnection.contentType); application/vnd.kubernetes.protobuf
    /// when unset.
    #[arg(long, value_name = "TYPE")]
    pub kube_api_content_type: Option<String>,

    /// How often informers relist from the API server.
    #[arg(long, value_name = "DURATION", value_parser = GoDuration::parse)]
    pub config_sync_period: Option<GoDuration>,

    /// The OOM score adjustment of the process, in [-1000, 1000]
    /// (default -999).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub oom_score_adj: Option<i64>,

    /// Log verbosity: 0-1 info, 2-4 debug, 5 and more trace. Applies
    /// with --config too, over the file's logging.verbosity. RUST_LOG,
    /// when set, takes precedence.
    #[arg(long = "v", short = 'v', value_name = "LEVEL")]
    pub verbosity: Option<u32>,

    /// "text" or "json" (one JSON object per line). Applies with
    /// --config too, over the file's logging.format.
    #[arg(long, value_name = "FORMAT", value_parser = ["text", "json"])]
    pub logging_format: Option<String>,
    /// conntrack entries per CPU: nf_conntrack_max is this times the
    /// CPUs, at least --conntrack-min; 0 leaves it alone.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub conntrack_max_per_core: Option<i64>,

    /// The least nf_conntrack_max that --conntrack-max-per-core sets.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub conntrack_min: Option<i64>,

    /// Idle timeout of established TCP conntrack entries; 0 leaves it.
    #[arg(long, value_name = "DURATION", value_parser = GoDuration::parse)]
    pub conntrack_tcp_timeout_established: Option<GoDuration>,

    /// Timeout of TCP conntrack entries in CLOSE_WAIT; 0 leaves it.
    #[arg(long, value_name = "DURATION", value_parser = GoDuration::parse)]
    pub conntrack_tcp_timeout_close_wait: Option<GoDuration>,

    /// Mark only out-of-window RST segments INVALID.
    #[arg(long)]
    pub conntrack_tcp_be_liberal: Option<bool>,

    /// Idle timeout of unreplied UDP conntrack entries; 0 leaves it.
    #[arg(long, value_name = "DURATION", value_parser = GoDuration::parse)]
    pub conntrack_udp_timeout: Option<GoDuration>,

    /// Idle timeout of replied UDP conntrack entries; 0 leaves it.
    #[arg(long, value_name = "DURATION", value_parser = GoDuration::parse)]
    pub conntrack_udp_timeout_stream: Option<GoDuration>,

    #[command(flatten)]
    pub ignored: IgnoredFlags,
}

/// kube-proxy flags we accept so that existing manifests keep working, but
/// do not implement; each one given gets a warning. Flags that change what
/// the process does are never here: ignoring them would run the proxy
/// where upstream would exit.
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct IgnoredFlags {
    #[arg(long, hide = true)]
    pub iptables_sync_period: Option<String>,
    #[arg(long, hide = true)]
    pub iptables_min_sync_period: Option<String>,
    #[arg(long, hide = true)]
    pub iptables_localhost_nodeports: Option<String>,
    #[arg(long, hide = true)]
    pub kube_api_qps: Option<String>,
    #[arg(long, hide = true)]
    pub kube_api_burst: Option<String>,
    #[arg(long, hide = true)]
    pub show_hidden_metrics_for_version: Option<String>,
    #[arg(long, hide = true)]
    pub proxy_port_range: Option<String>,
    #[arg(long, hide = true)]
    pub log_flush_frequency: Option<String>,
    #[arg(long, hide = true)]
    pub vmodule: Option<String>,
    #[arg(
        long,
        hide = true,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub profiling: Option<String>,
}

impl IgnoredFlags {
    /// (flag, value) for each ignored flag that was given.
    pub fn given(&self) -> Vec<(&'static str, &str)> {
        [
            ("--iptables-sync-period", &self.iptables_sync_period),
            ("--iptables-min-sync-period", &self.iptables_min_sync_period),
            (
                "--iptables-localhost-nodeports",
                &self.iptables_localhost_nodeports,
            ),
            ("--kube-api-qps", &self.kube_api_qps),
            ("--kube-api-burst", &self.kube_api_burst),
            (
                "--show-hidden-metrics-for-version",
                &self.show_hidden_metrics_for_version,
            ),
            ("--proxy-port-range", &self.proxy_port_range),
            ("--log-flush-frequency", &self.log_flush_frequency),
            ("--vmodule", &self.vmodule),
            ("--profiling", &self.profiling),
        ]
        .into_iter()
        .filter_map(|(flag, value)| value.as_deref().map(|v| (flag, v)))
        .collect()
    }
}

impl ConfigArgs {
    /// The `KubeProxyConfiguration` these flags describe, as if written in
    /// a file (unset flags stay unset, so defaults apply the same way).
    pub fn to_kube_proxy_configuration(&self) -> KubeProxyConfiguration {
        let ipvs = Ipvs {
            sync_period: self.ipvs_sync_period,
            min_sync_period: self.ipvs_min_sync_period,
            scheduler: self.ipvs_scheduler.clone(),
            exclude_cidrs: self.ipvs_exclude_cidrs.clone(),
            strict_arp: self.ipvs_strict_arp,
            tcp_timeout: self.ipvs_tcp_timeout,
            tcp_fin_timeout: self.ipvs_tcpfin_timeout,
            udp_timeout: self.ipvs_udp_timeout,
        };
        let iptables = Iptables {
            masquerade_bit: self.iptables_masquerade_bit,
            masquerade_all: self.masquerade_all,
            ..Iptables::default()
        };
        let logging = Logging {
            format: self.logging_format.clone(),
            verbosity: self.verbosity.map(i64::from),
            ..Logging::default()
        };
        KubeProxyConfiguration {
            api_version: Some(API_VERSION.to_owned()),
            kind: Some(KIND.to_owned()),
            feature_gates: Some(BTreeMap::new()),
            bind_address_hard_fail: self.bind_address_hard_fail,
            client_connection: Some(ClientConnection {
                kubeconfig: self
                    .kubeconfig
                    .as_ref()
                    .map(|p| p.to_string_lossy().into_owned()),
                content_type: self.kube_api_content_type.clone(),
                ..ClientConnection::default()
            }),
            hostname_override: self.hostname_override.clone(),
            bind_address: self.bind_address.clone(),
            healthz_bind_address: self.healthz_bind_address.clone(),
            metrics_bind_address: self.metrics_bind_address.clone(),
            mode: self.proxy_mode.clone(),
            iptables: Some(iptables),
            ipvs: Some(ipvs),
            detect_local_mode: self.detect_local_mode.clone(),
            detect_local: Some(DetectLocalSection {
                bridge_interface: self.pod_bridge_interface.clone(),
                interface_name_prefix: self.pod_interface_name_prefix.clone(),
            }),
            cluster_cidr: self.cluster_cidr.clone(),
            node_port_addresses: self.nodeport_addresses.clone(),
            config_sync_period: self.config_sync_period,
            oom_score_adj: self.oom_score_adj,
            logging: Some(logging),
            conntrack: Some(Conntrack {
                max_per_core: self.conntrack_max_per_core,
                min: self.conntrack_min,
                tcp_established_timeout: self.conntrack_tcp_timeout_established,
                tcp_close_wait_timeout: self.conntrack_tcp_timeout_close_wait,
                tcp_be_liberal: self.conntrack_tcp_be_liberal,
                udp_timeout: self.conntrack_udp_timeout,
                udp_stream_timeout: self.conntrack_udp_timeout_stream,
            }),
            ..KubeProxyConfiguration::default()
        }
    }

    /// The configuration flags that were given; with `--config` these are
    /// ignored, as upstream does. `--hostname-override` is not one of
    /// them: it still overrides the file.
    pub fn given_config_flags(&self) -> Vec<String> {
        given_flags!(
            self;
            proxy_mode, ipvs_scheduler, ipvs_sync_period, ipvs_min_sync_period,
            ipvs_exclude_cidrs, ipvs_strict_arp, ipvs_tcp_timeout,
            ipvs_tcpfin_timeout, ipvs_udp_timeout, cluster_cidr,
            detect_local_mode, pod_bridge_interface, pod_interface_name_prefix,
            nodeport_addresses, masquerade_all, iptables_masquerade_bit,
            bind_address, healthz_bind_address, metrics_bind_address, kubeconfig,
            kube_api_content_type,
            config_sync_period, oom_score_adj, conntrack_max_per_core,
            conntrack_min, conntrack_tcp_timeout_established,
            conntrack_tcp_timeout_close_wait, conntrack_tcp_be_liberal,
            conntrack_udp_timeout, conntrack_udp_timeout_stream,
            healthz_port, metrics_port, bind_address_hard_fail, feature_gates,
        )
    }
}
