//! The effective configuration: plain data, already validated and
//! defaulted, nested per subsystem. Built by [`super::resolve`] from flags
//! or a `KubeProxyConfiguration` file.

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    path::PathBuf,
    str::FromStr,
    time::Duration,
};

use ipnet::IpNet;

use crate::model::{FlagChoice, STANDARD_SCHEDULERS};

/// What `--ipvs-service-schedulers` lets annotations choose by default.
pub fn standard_service_schedulers() -> Vec<String> {
    STANDARD_SCHEDULERS.iter().map(|&s| s.to_owned()).collect()
}

/// kube-proxy's ports for the health check and metrics servers.
pub const HEALTHZ_PORT: u16 = 10256;
pub const METRICS_PORT: u16 = 10249;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub ipvs: IpvsConfig,
    /// Pod CIDRs (one per family at most); only used when
    /// `detect_local` is [`DetectLocal::ClusterCidr`].
    pub cluster_cidrs: Vec<IpNet>,
    pub detect_local: DetectLocal,
    /// Where NodePorts are served. Empty means every local address, as
    /// upstream's IPVS mode does when the list is unset.
    pub node_port_addresses: Vec<NodePortAddress>,
    pub masquerade_all: bool,
    /// Bit of the fwmark that marks packets for SNAT, in `0..=31`.
    pub masquerade_bit: u8,
    /// The node name to use instead of the hostname, lowercased.
    pub hostname_override: Option<String>,
    /// Overrides the node's primary IP; `None` when unset or unspecified
    /// (0.0.0.0 / ::), in which case the Node object decides.
    pub primary_ip_override: Option<IpAddr>,
    /// `None` disables the server.
    pub healthz_bind_address: Option<SocketAddr>,
    /// `None` disables the server.
    pub metrics_bind_address: Option<SocketAddr>,
    pub kubeconfig: Option<PathBuf>,
    /// `clientConnection.contentType` and `acceptContentTypes`
    /// (`--kube-api-content-type` sets the first): what the watches ask
    /// the API server for.
    pub api_content_types: ApiContentTypes,
    /// `--master`: the API server's URL, over the kubeconfig's server.
    pub master: Option<String>,
    /// `bindAddressHardFail`: exit when the health check or metrics
    /// server cannot bind, instead of retrying.
    pub bind_address_hard_fail: bool,
    /// The `AllowServiceExternalIPs` gate (GA and on by default since
    /// 1.36): off, no Service's external IPs are served, bound or tracked.
    pub allow_service_external_ips: bool,
    /// The `ComponentFlagz` and `ComponentStatusz` gates (beta and on by
    /// default since 1.36): off, the metrics server has no `/flagz`, or
    /// no `/statusz`.
    pub component_flagz: bool,
    pub component_statusz: bool,
    /// Each flag of the command line and its value, as `/flagz` lists
    /// them (see [`super::flagz`]); empty unless the caller fills it in.
    pub flags: std::collections::BTreeMap<String, String>,
    /// Read Services, EndpointSlices and Nodes from this file instead of
    /// the API server.
    pub state_file: Option<PathBuf>,
    /// Take the node's view from the API side at this address instead
    /// (`--api-endpoint`).
    pub api_endpoint: Option<String>,
    /// The node's credentials for an `https://` API side.
    pub api_tls_dir: Option<PathBuf>,
    /// The node's ServiceAccount token for an `https://` API side.
    pub api_token_file: Option<PathBuf>,
    /// When set, only Services labelled
    /// `service.kubernetes.io/service-proxy-name=<this>` are handled;
    /// otherwise only Services without that label.
    pub service_proxy_name: Option<String>,
    /// The scheduler flags chosen for the schedulers that take them
    /// (`--ipvs-scheduler-flags`); upstream's where none is chosen.
    pub scheduler_flags: FlagChoice,
    /// The schedulers a Service's annotation may choose
    /// (`--ipvs-service-schedulers`): a standard kernel's by default.
    pub service_schedulers: Vec<String>,
    pub logging: LoggingConfig,
    /// Written to `/proc/self/oom_score_adj` at start-up, as upstream
    /// does (`oomScoreAdj`, `--oom-score-adj`).
    pub oom_score_adj: i32,
    pub conntrack: ConntrackConfig,
}

/// kube-proxy's OOM score adjustment when none is configured
/// (`qos.KubeProxyOOMScoreAdj`): almost never chosen by the OOM killer.
pub const DEFAULT_OOM_SCORE_ADJ: i32 = -999;

/// Upstream's `configSyncPeriod` default: how often its informers
/// resync. Ours do not, so the value is only validated and warned about.
pub const DEFAULT_CONFIG_SYNC_PERIOD: Duration = Duration::from_secs(15 * 60);

/// How logs are written (`logging.format` and `logging.verbosity` in the
/// file, `--logging-format` and `-v` on the command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoggingConfig {
    pub format: LogFormat,
    /// kube-proxy's `-v`: 0 and 1 log at info, 2 to 4 at debug, 5 and
    /// more at trace.
    pub verbosity: u32,
}

/// component-base's log formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One line per event, for people.
    #[default]
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(other.to_owned()),
        }
    }
}

/// conntrack's table size and timeouts, which upstream sets when it starts
/// (`conntrack.*`; kubeadm writes the section all null, so these
/// defaults apply there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConntrackConfig {
    /// `nf_conntrack_max` becomes `max_per_core` × CPUs, at least `min`;
    /// 0 leaves it alone.
    pub max_per_core: u32,
    pub min: u32,
    /// A zero duration leaves that timeout as the kernel has it.
    pub tcp_established_timeout: Duration,
    pub tcp_close_wait_timeout: Duration,
    pub tcp_be_liberal: bool,
    pub udp_timeout: Duration,
    pub udp_stream_timeout: Duration,
}

impl Default for ConntrackConfig {
    fn default() -> Self {
        Self {
            max_per_core: 32 * 1024,
            min: 128 * 1024,
            tcp_established_timeout: Duration::from_secs(24 * 3600),
            tcp_close_wait_timeout: Duration::from_secs(3600),
            tcp_be_liberal: false,
            udp_timeout: Duration::ZERO,
            udp_stream_timeout: Duration::ZERO,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpvsConfig {
    pub scheduler: Scheduler,
    /// Maximum time between syncs (`syncPeriod`).
    pub sync_period: Duration,
    /// Minimum time between the end of a sync and the start of the next.
    pub min_sync_period: Duration,
    /// Virtual servers in these ranges are never removed by cleanup.
    pub exclude_cidrs: Vec<IpNet>,
    pub strict_arp: bool,
    /// `None` leaves the kernel's current timeout alone.
    pub tcp_timeout: Option<Duration>,
    pub tcp_fin_timeout: Option<Duration>,
    pub udp_timeout: Option<Duration>,
}

/// An IPVS scheduler, by the kernel's name for it (`ip_vs_NAME`, as
/// `ipvsadm` shows it). Any name is taken, as upstream takes it: the
/// kernel decides, and the start-up probe asks it. Empty in the config
/// means `rr`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scheduler(String);

impl Scheduler {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Scheduler {
    fn default() -> Self {
        Scheduler("rr".to_owned())
    }
}

impl fmt::Display for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for Scheduler {
    fn from(name: &str) -> Self {
        if name.is_empty() {
            Scheduler::default()
        } else {
            Scheduler(name.to_owned())
        }
    }
}

/// How traffic from local pods is recognised (`detectLocalMode`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DetectLocal {
    /// Source address inside `cluster_cidrs` (the default).
    #[default]
    ClusterCidr,
    /// Source address inside the Node's `spec.podCIDRs`.
    NodeCidr,
    /// Arriving from this bridge interface.
    BridgeInterface(String),
    /// Arriving from an interface whose name starts with this prefix.
    InterfaceNamePrefix(String),
}

impl DetectLocal {
    /// The `detectLocalMode` value it came from.
    pub fn mode_name(&self) -> &'static str {
        match self {
            DetectLocal::ClusterCidr => "ClusterCIDR",
            DetectLocal::NodeCidr => "NodeCIDR",
            DetectLocal::BridgeInterface(_) => "BridgeInterface",
            DetectLocal::InterfaceNamePrefix(_) => "InterfaceNamePrefix",
        }
    }
}

/// One entry of `nodePortAddresses`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodePortAddress {
    /// The Node object's primary IP of each family.
    Primary,
    /// Local addresses inside this range.
    Cidr(IpNet),
}

impl Default for IpvsConfig {
    fn default() -> Self {
        IpvsConfig {
            scheduler: Scheduler::default(),
            sync_period: Duration::from_secs(30),
            min_sync_period: Duration::ZERO,
            exclude_cidrs: Vec::new(),
            strict_arp: false,
            tcp_timeout: None,
            tcp_fin_timeout: None,
            udp_timeout: None,
        }
    }
}

/// The encodings the API client asks for, as kube-proxy's
/// `clientConnection` names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiContentTypes {
    pub content_type: String,
    /// Empty: `content_type`, then anything.
    pub accept_content_types: String,
}

/// kube-proxy's default `contentType`: the API server's protobuf.
pub const DEFAULT_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

impl Default for ApiContentTypes {
    fn default() -> Self {
        Self {
            content_type: DEFAULT_CONTENT_TYPE.to_owned(),
            accept_content_types: String::new(),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ipvs: IpvsConfig::default(),
            cluster_cidrs: Vec::new(),
            detect_local: DetectLocal::ClusterCidr,
            node_port_addresses: Vec::new(),
            masquerade_all: false,
            masquerade_bit: 14,
            hostname_override: None,
            primary_ip_override: None,
            healthz_bind_address: Some(default_healthz_address(false)),
            metrics_bind_address: Some(default_metrics_address(false)),
            kubeconfig: None,
            api_content_types: ApiContentTypes::default(),
            master: None,
            bind_address_hard_fail: false,
            allow_service_external_ips: true,
            component_flagz: true,
            component_statusz: true,
            flags: Default::default(),
            state_file: None,
            api_endpoint: None,
            api_tls_dir: None,
            api_token_file: None,
            service_proxy_name: None,
            scheduler_flags: FlagChoice::default(),
            service_schedulers: standard_service_schedulers(),
            logging: LoggingConfig::default(),
            oom_score_adj: DEFAULT_OOM_SCORE_ADJ,
            conntrack: ConntrackConfig::default(),
        }
    }
}

/// Upstream serves healthz on all addresses of the bind address' family.
pub fn default_healthz_address(ipv6: bool) -> SocketAddr {
    let ip = if ipv6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    };
    SocketAddr::new(ip, HEALTHZ_PORT)
}

/// Upstream serves metrics on loopback of the bind address' family.
pub fn default_metrics_address(ipv6: bool) -> SocketAddr {
    let ip = if ipv6 {
        IpAddr::V6(Ipv6Addr::LOCALHOST)
    } else {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    };
    SocketAddr::new(ip, METRICS_PORT)
}

impl Config {
    /// The name of our Node object: the override if any, else the
    /// hostname, trimmed and lowercased as kube-proxy does.
    pub fn node_name(&self, hostname: &str) -> String {
        match &self.hostname_override {
            Some(name) => name.clone(),
            None => hostname.trim().to_lowercase(),
        }
    }
}
