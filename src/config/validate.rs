//! Turns a decoded `KubeProxyConfiguration` (from the file, or assembled
//! from flags) into a [`Config`]: upstream's defaulting for zero values,
//! then validation, collecting every error with the field (or flag) name.

use std::{
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    time::Duration,
};

use ipnet::IpNet;

use super::{
    duration::GoDuration,
    kubeproxy::KubeProxyConfiguration,
    settings::{
        default_healthz_address, default_metrics_address, ApiContentTypes,
        Config, ConntrackConfig, DetectLocal, IpvsConfig, LogFormat,
        LoggingConfig, NodePortAddress, Scheduler, DEFAULT_CONFIG_SYNC_PERIOD,
        DEFAULT_CONTENT_TYPE, DEFAULT_OOM_SCORE_ADJ, HEALTHZ_PORT,
        METRICS_PORT,
    },
    ConfigError, ConfigWarning, FieldError,
};

/// Where the values came from, so errors can name what the user wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    File,
    Flags,
}

/// File field path → the flag that sets it when there is no file.
pub(super) const FLAG_NAMES: &[(&str, &str)] = &[
    ("mode", "--proxy-mode"),
    ("ipvs.scheduler", "--ipvs-scheduler"),
    ("ipvs.syncPeriod", "--ipvs-sync-period"),
    ("ipvs.minSyncPeriod", "--ipvs-min-sync-period"),
    ("ipvs.excludeCIDRs", "--ipvs-exclude-cidrs"),
    ("ipvs.tcpTimeout", "--ipvs-tcp-timeout"),
    ("ipvs.tcpFinTimeout", "--ipvs-tcpfin-timeout"),
    ("ipvs.udpTimeout", "--ipvs-udp-timeout"),
    ("ipvs.strictARP", "--ipvs-strict-arp"),
    ("iptables.masqueradeAll", "--masquerade-all"),
    ("clientConnection.kubeconfig", "--kubeconfig"),
    ("clientConnection.contentType", "--kube-api-content-type"),
    ("iptables.masqueradeBit", "--iptables-masquerade-bit"),
    ("clusterCIDR", "--cluster-cidr"),
    ("detectLocalMode", "--detect-local-mode"),
    ("detectLocal.bridgeInterface", "--pod-bridge-interface"),
    (
        "detectLocal.interfaceNamePrefix",
        "--pod-interface-name-prefix",
    ),
    ("nodePortAddresses", "--nodeport-addresses"),
    ("bindAddress", "--bind-address"),
    ("healthzBindAddress", "--healthz-bind-address"),
    ("metricsBindAddress", "--metrics-bind-address"),
    ("hostnameOverride", "--hostname-override"),
    ("configSyncPeriod", "--config-sync-period"),
    ("oomScoreAdj", "--oom-score-adj"),
    ("logging.format", "--logging-format"),
    ("logging.verbosity", "-v"),
    ("conntrack.maxPerCore", "--conntrack-max-per-core"),
    ("conntrack.min", "--conntrack-min"),
    (
        "conntrack.tcpEstablishedTimeout",
        "--conntrack-tcp-timeout-established",
    ),
    (
        "conntrack.tcpCloseWaitTimeout",
        "--conntrack-tcp-timeout-close-wait",
    ),
    ("conntrack.tcpBeLiberal", "--conntrack-tcp-be-liberal"),
    ("conntrack.udpTimeout", "--conntrack-udp-timeout"),
    (
        "conntrack.udpStreamTimeout",
        "--conntrack-udp-timeout-stream",
    ),
    // The port flags set part of an address field; names are looked up
    // by path, first entry first, so the address flags above still name
    // those fields.
    ("healthzBindAddress", "--healthz-port"),
    ("metricsBindAddress", "--metrics-port"),
    ("bindAddressHardFail", "--bind-address-hard-fail"),
    ("featureGates", "--feature-gates"),
];

impl Origin {
    pub fn name(self, path: &str) -> String {
        match self {
            Origin::File => path.to_owned(),
            Origin::Flags => {
                let base = path.split('[').next().unwrap_or(path);
                FLAG_NAMES
                    .iter()
                    .find(|(p, _)| *p == base)
                    .map_or_else(|| path.to_owned(), |(_, f)| (*f).to_owned())
            }
        }
    }
}

struct Validator {
    origin: Origin,
    errors: Vec<FieldError>,
    warnings: Vec<ConfigWarning>,
}

impl Validator {
    fn err(&mut self, path: &str, reason: impl Into<String>) {
        self.errors.push(FieldError {
            field: self.origin.name(path),
            reason: reason.into(),
        });
    }

    fn warn(&mut self, path: &str, message: impl Into<String>) {
        self.warnings.push(ConfigWarning {
            field: self.origin.name(path),
            message: message.into(),
        });
    }

    /// A period that must be positive; zero or unset takes the default.
    fn positive(
        &mut self,
        path: &str,
        value: Option<GoDuration>,
        default: Duration,
    ) -> Duration {
        match value.unwrap_or_default() {
            d if d.is_zero() => default,
            d => d.to_std().unwrap_or_else(|| {
                self.err(path, format!("must be greater than 0, got {d}"));
                default
            }),
        }
    }

    /// A duration where zero is meaningful and negative is not.
    fn non_negative(
        &mut self,
        path: &str,
        value: Option<GoDuration>,
    ) -> Duration {
        let d = value.unwrap_or_default();
        d.to_std().unwrap_or_else(|| {
            self.err(
                path,
                format!("must be greater than or equal to 0, got {d}"),
            );
            Duration::ZERO
        })
    }

    fn cidr(&mut self, path: &str, text: &str) -> Option<IpNet> {
        match text.trim().parse::<IpNet>() {
            Ok(net) => Some(net.trunc()),
            Err(_) => {
                self.err(path, format!("invalid CIDR {text:?}"));
                None
            }
        }
    }
}

/// Decoded values → effective config, or every error found.
pub fn to_config(
    kpc: &KubeProxyConfiguration,
    origin: Origin,
) -> Result<(Config, Vec<ConfigWarning>), ConfigError> {
    let mut v = Validator {
        origin,
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    let defaults = Config::default();

    match kpc.mode.as_deref().unwrap_or("") {
        // kubeadm writes `mode: ""`, which kube-proxy reads as iptables:
        // whoever swapped the image in should hear which mode runs.
        "" if origin == Origin::File => v.warn(
            "mode",
            "empty, which kube-proxy takes as \"iptables\"; kube-ipvs-proxy \
             runs in ipvs mode (set mode: ipvs to say so)",
        ),
        "" | "ipvs" => {}
        other => {
            v.err("mode", format!("only \"ipvs\" is supported, got {other:?}"))
        }
    }

    let ipvs = ipvs_config(&mut v, kpc);

    let iptables = kpc.iptables.clone().unwrap_or_default();
    let masquerade_bit = match iptables.masquerade_bit {
        None => defaults.masquerade_bit,
        Some(bit) => u8::try_from(bit)
            .ok()
            .filter(|b| *b <= 31)
            .unwrap_or_else(|| {
                v.err(
                    "iptables.masqueradeBit",
                    format!("must be in [0, 31], got {bit}"),
                );
                defaults.masquerade_bit
            }),
    };

    let cluster_cidrs = cluster_cidrs(&mut v, kpc.cluster_cidr.as_deref());
    let detect_local = detect_local(&mut v, kpc);
    let node_port_addresses = node_port_addresses(
        &mut v,
        kpc.node_port_addresses.as_deref().unwrap_or_default(),
    );

    let bind_address = match kpc.bind_address.as_deref().unwrap_or("") {
        "" => None,
        text => text.parse::<IpAddr>().ok().or_else(|| {
            v.err("bindAddress", format!("invalid IP address {text:?}"));
            None
        }),
    };
    let ipv6 = bind_address.is_some_and(|ip| ip.is_ipv6());
    let healthz_bind_address = Some(host_port(
        &mut v,
        "healthzBindAddress",
        kpc.healthz_bind_address.as_deref(),
        HEALTHZ_PORT,
        default_healthz_address(ipv6),
    ));
    let metrics_bind_address = Some(host_port(
        &mut v,
        "metricsBindAddress",
        kpc.metrics_bind_address.as_deref(),
        METRICS_PORT,
        default_metrics_address(ipv6),
    ));

    let hostname_override = match kpc.hostname_override.as_deref() {
        None | Some("") => None,
        Some(name) if name.trim().is_empty() => {
            v.err("hostnameOverride", "must not be blank");
            None
        }
        Some(name) => Some(name.trim().to_lowercase()),
    };

    let kubeconfig = kpc
        .client_connection
        .as_ref()
        .and_then(|c| c.kubeconfig.as_deref())
        .filter(|k| !k.is_empty())
        .map(PathBuf::from);

    let api_content_types = api_content_types(&mut v, kpc);

    let config_sync_period = v.positive(
        "configSyncPeriod",
        kpc.config_sync_period,
        DEFAULT_CONFIG_SYNC_PERIOD,
    );
    let logging = logging_config(&mut v, kpc);
    let oom_score_adj = match kpc.oom_score_adj {
        None => DEFAULT_OOM_SCORE_ADJ,
        Some(n) => i32::try_from(n)
            .ok()
            .filter(|n| (-1000..=1000).contains(n))
            .unwrap_or_else(|| {
                v.err(
                    "oomScoreAdj",
                    format!("must be within the range [-1000, 1000], got {n}"),
                );
                DEFAULT_OOM_SCORE_ADJ
            }),
    };
    // Upstream's informers re-deliver every object at this period, which
    // changes nothing in a proxy that already has them; our watches do
    // not, so the period has nothing to act on.
    if config_sync_period != DEFAULT_CONFIG_SYNC_PERIOD {
        v.warn(
            "configSyncPeriod",
            "kube-ipvs-proxy's watches do not resync periodically (upstream's \
             resync only re-delivers unchanged objects); ignored",
        );
    }
    let conntrack = conntrack_config(&mut v, kpc);
    let gates = feature_gates(&mut v, kpc);

    if !v.errors.is_empty() {
        return Err(ConfigError::Invalid(v.errors));
    }
    let config = Config {
        ipvs,
        cluster_cidrs,
        detect_local,
        node_port_addresses,
        masquerade_all: iptables.masquerade_all.unwrap_or(false),
        masquerade_bit,
        hostname_override,
        primary_ip_override: bind_address.filter(|ip| !ip.is_unspecified()),
        healthz_bind_address,
        metrics_bind_address,
        kubeconfig,
        api_content_types,
        master: None,
        bind_address_hard_fail: kpc.bind_address_hard_fail.unwrap_or(false),
        allow_service_external_ips: gates.allow_service_external_ips,
        component_flagz: gates.component_flagz,
        component_statusz: gates.component_statusz,
        flags: Default::default(),
        state_file: None,
        api_endpoint: None,
        api_tls_dir: None,
        api_token_file: None,
        service_proxy_name: None,
        scheduler_flags: Default::default(),
        service_schedulers: super::settings::standard_service_schedulers(),
        logging,
        oom_score_adj,
        conntrack,
    };
    Ok((config, v.warnings))
}

/// `clientConnection.contentType` (kube-proxy's default when empty) and
/// `acceptContentTypes`, each a header value.
fn api_content_types(
    v: &mut Validator,
    kpc: &KubeProxyConfiguration,
) -> ApiContentTypes {
    let connection = kpc.client_connection.as_ref();
    let mut field = |path: &str, value: Option<&String>| {
        let value = value.map(|t| t.trim()).unwrap_or_default();
        if http::HeaderValue::from_str(value).is_err() {
            v.err(path, "must be a media type (visible ASCII)");
        }
        value.to_owned()
    };
    let content_type = field(
        "clientConnection.contentType",
        connection.and_then(|c| c.content_type.as_ref()),
    );
    let accept_content_types = field(
        "clientConnection.acceptContentTypes",
        connection.and_then(|c| c.accept_content_types.as_ref()),
    );
    ApiContentTypes {
        content_type: if content_type.is_empty() {
            DEFAULT_CONTENT_TYPE.to_owned()
        } else {
            content_type
        },
        accept_content_types,
    }
}

/// The gates that change what the proxy does.
struct Gates {
    allow_service_external_ips: bool,
    component_flagz: bool,
    component_statusz: bool,
}

/// `featureGates` (`--feature-gates`): the gates an IPVS proxy acts on
/// are applied, every other is warned about. Upstream refuses a gate it
/// does not know; this proxy warns, so that a configuration written for
/// a newer or older kube-proxy still runs.
fn feature_gates(v: &mut Validator, kpc: &KubeProxyConfiguration) -> Gates {
    let mut gates = Gates {
        allow_service_external_ips: true,
        component_flagz: true,
        component_statusz: true,
    };
    for (gate, &enabled) in kpc.feature_gates.iter().flatten() {
        match gate.as_str() {
            "AllowServiceExternalIPs" => {
                gates.allow_service_external_ips = enabled;
            }
            // The metrics server's /flagz and /statusz, as upstream's.
            "ComponentFlagz" => gates.component_flagz = enabled,
            "ComponentStatusz" => gates.component_statusz = enabled,
            // Upstream's switch for its own IPVS mode (false by default
            // from 1.40): it is why this proxy runs, so either value is
            // fine here and neither is worth a warning.
            "KubeProxyIPVS" => {}
            _ => v.warn(
                &format!("featureGates.{gate}"),
                format!(
                    "not a gate kube-ipvs-proxy acts on; {gate}={enabled} \
                     ignored"
                ),
            ),
        }
    }
    gates
}

/// `logging.format` and `logging.verbosity` (`--logging-format`, `-v`).
fn logging_config(
    v: &mut Validator,
    kpc: &KubeProxyConfiguration,
) -> LoggingConfig {
    let logging = kpc.logging.clone().unwrap_or_default();
    let format = match logging.format.as_deref().unwrap_or("") {
        "" => LogFormat::Text,
        name => name.parse().unwrap_or_else(|_| {
            v.err(
                "logging.format",
                format!(
                    "unsupported log format {name:?} (must be \"text\" or \
                     \"json\")"
                ),
            );
            LogFormat::Text
        }),
    };
    let verbosity = match logging.verbosity {
        None => 0,
        Some(level) => u32::try_from(level).unwrap_or_else(|_| {
            v.err(
                "logging.verbosity",
                format!("must be 0 or more, got {level}"),
            );
            0
        }),
    };
    LoggingConfig { format, verbosity }
}

/// Upstream's defaults for what is null or absent; zero durations are
/// kept (they leave the kernel's value), negative values are errors.
fn conntrack_config(
    v: &mut Validator,
    kpc: &KubeProxyConfiguration,
) -> ConntrackConfig {
    let c = kpc.conntrack.clone().unwrap_or_default();
    let d = ConntrackConfig::default();
    let count = |v: &mut Validator, path: &str, value: Option<i64>, default| {
        match value {
            None => default,
            Some(n) => u32::try_from(n).unwrap_or_else(|_| {
                v.err(path, format!("must be in [0, {}], got {n}", u32::MAX));
                default
            }),
        }
    };
    let timeout =
        |v: &mut Validator, path: &str, value: Option<GoDuration>, default| {
            match value {
                None => default,
                some => v.non_negative(path, some),
            }
        };
    ConntrackConfig {
        max_per_core: count(
            v,
            "conntrack.maxPerCore",
            c.max_per_core,
            d.max_per_core,
        ),
        min: count(v, "conntrack.min", c.min, d.min),
        tcp_established_timeout: timeout(
            v,
            "conntrack.tcpEstablishedTimeout",
            c.tcp_established_timeout,
            d.tcp_established_timeout,
        ),
        tcp_close_wait_timeout: timeout(
            v,
            "conntrack.tcpCloseWaitTimeout",
            c.tcp_close_wait_timeout,
            d.tcp_close_wait_timeout,
        ),
        tcp_be_liberal: c.tcp_be_liberal.unwrap_or(d.tcp_be_liberal),
        udp_timeout: timeout(
            v,
            "conntrack.udpTimeout",
            c.udp_timeout,
            d.udp_timeout,
        ),
        udp_stream_timeout: timeout(
            v,
            "conntrack.udpStreamTimeout",
            c.udp_stream_timeout,
            d.udp_stream_timeout,
        ),
    }
}

fn ipvs_config(v: &mut Validator, kpc: &KubeProxyConfiguration) -> IpvsConfig {
    let defaults = IpvsConfig::default();
    let ipvs = kpc.ipvs.clone().unwrap_or_default();
    let sync_period =
        v.positive("ipvs.syncPeriod", ipvs.sync_period, defaults.sync_period);
    let min_sync_period =
        v.non_negative("ipvs.minSyncPeriod", ipvs.min_sync_period);
    if min_sync_period > sync_period {
        v.err(
            "ipvs.syncPeriod",
            format!(
                "must be greater than or equal to {} ({})",
                v.origin.name("ipvs.minSyncPeriod"),
                GoDuration::from_std(min_sync_period),
            ),
        );
    }
    let scheduler =
        Scheduler::from(ipvs.scheduler.unwrap_or_default().as_str());
    let exclude_cidrs = ipvs
        .exclude_cidrs
        .unwrap_or_default()
        .iter()
        .enumerate()
        .filter_map(|(i, text)| {
            v.cidr(&format!("ipvs.excludeCIDRs[{i}]"), text)
        })
        .collect();
    let timeout = |v: &mut Validator, path: &str, d: Option<GoDuration>| {
        Some(v.non_negative(path, d)).filter(|d| !d.is_zero())
    };
    IpvsConfig {
        scheduler,
        sync_period,
        min_sync_period,
        exclude_cidrs,
        strict_arp: ipvs.strict_arp.unwrap_or(false),
        tcp_timeout: timeout(v, "ipvs.tcpTimeout", ipvs.tcp_timeout),
        tcp_fin_timeout: timeout(v, "ipvs.tcpFinTimeout", ipvs.tcp_fin_timeout),
        udp_timeout: timeout(v, "ipvs.udpTimeout", ipvs.udp_timeout),
    }
}

/// A comma-separated list with at most one CIDR per family.
fn cluster_cidrs(v: &mut Validator, text: Option<&str>) -> Vec<IpNet> {
    let text = text.unwrap_or("").trim();
    if text.is_empty() {
        return Vec::new();
    }
    let cidrs: Vec<IpNet> = text
        .split(',')
        .filter_map(|part| v.cidr("clusterCIDR", part))
        .collect();
    match cidrs.as_slice() {
        [] | [_] => {}
        [a, b] if a.addr().is_ipv4() != b.addr().is_ipv4() => {}
        [_, _] => v.err(
            "clusterCIDR",
            format!("{text:?}: two CIDRs must be one IPv4 and one IPv6"),
        ),
        _ => v.err(
            "clusterCIDR",
            format!("{text:?}: at most one CIDR per IP family"),
        ),
    }
    cidrs
}

fn detect_local(
    v: &mut Validator,
    kpc: &KubeProxyConfiguration,
) -> DetectLocal {
    let section = kpc.detect_local.clone().unwrap_or_default();
    let required = |v: &mut Validator, path: &str, value: Option<String>| {
        let value = value.unwrap_or_default();
        if value.is_empty() {
            let mode = v.origin.name("detectLocalMode");
            v.err(
                path,
                format!("must be set when {mode} is {:?}", mode_of(kpc)),
            );
        }
        value
    };
    match mode_of(kpc) {
        "" | "ClusterCIDR" => DetectLocal::ClusterCidr,
        "NodeCIDR" => DetectLocal::NodeCidr,
        "BridgeInterface" => DetectLocal::BridgeInterface(required(
            v,
            "detectLocal.bridgeInterface",
            section.bridge_interface,
        )),
        "InterfaceNamePrefix" => DetectLocal::InterfaceNamePrefix(required(
            v,
            "detectLocal.interfaceNamePrefix",
            section.interface_name_prefix,
        )),
        other => {
            v.err(
                "detectLocalMode",
                format!(
                    "unknown mode {other:?} (must be ClusterCIDR, NodeCIDR, \
                     BridgeInterface or InterfaceNamePrefix)"
                ),
            );
            DetectLocal::ClusterCidr
        }
    }
}

fn mode_of(kpc: &KubeProxyConfiguration) -> &str {
    kpc.detect_local_mode.as_deref().unwrap_or("")
}

fn node_port_addresses(
    v: &mut Validator,
    entries: &[String],
) -> Vec<NodePortAddress> {
    let cidrs = |list: [&str; 2]| {
        list.into_iter()
            .filter_map(|c| c.parse().ok())
            .map(NodePortAddress::Cidr)
            .collect::<Vec<_>>()
    };
    let mut out = Vec::new();
    let mut keywords = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let path = format!("nodePortAddresses[{i}]");
        let entry = entry.trim();
        if ["primary", "all", "localhost"].contains(&entry) {
            if keywords.contains(&entry) {
                v.err(&path, format!("duplicate value {entry:?}"));
            }
            keywords.push(entry);
        }
        match entry {
            "primary" => out.push(NodePortAddress::Primary),
            "all" => out.extend(cidrs(["0.0.0.0/0", "::/0"])),
            // Loopback's own ranges, as upstream (1.37) reads the
            // keyword; IPVS mode never serves NodePorts on loopback, so
            // alone it serves them nowhere, where an empty list would
            // mean every address.
            "localhost" => {
                v.warn(
                    &path,
                    "NodePorts are never served on loopback in IPVS mode; \
                     this entry matches no address",
                );
                out.extend(cidrs(["127.0.0.0/8", "::1/128"]));
            }
            text => {
                if let Some(net) = v.cidr(&path, text) {
                    out.push(NodePortAddress::Cidr(net));
                }
            }
        }
    }
    out
}

/// "IP:port" or a bare IP (which gets the default port), as upstream's
/// `AppendPortIfNeeded` then `validateHostPort`.
fn host_port(
    v: &mut Validator,
    path: &str,
    text: Option<&str>,
    default_port: u16,
    default: SocketAddr,
) -> SocketAddr {
    let text = text.unwrap_or("").trim();
    if text.is_empty() {
        return default;
    }
    let parsed = text
        .parse::<SocketAddr>()
        .ok()
        .or_else(|| {
            let ip = text.trim_start_matches('[').trim_end_matches(']');
            ip.parse::<IpAddr>()
                .ok()
                .map(|ip| SocketAddr::new(ip, default_port))
        })
        .filter(|addr| addr.port() != 0);
    parsed.unwrap_or_else(|| {
        v.err(
            path,
            format!("{text:?} must be IP:port with a port in 1-65535"),
        );
        default
    })
}
