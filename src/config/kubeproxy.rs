//! The `KubeProxyConfiguration` file (`kubeproxy.config.k8s.io/v1alpha1`),
//! as kubeadm writes it into the kube-proxy ConfigMap.
//!
//! Every field of the upstream type is known, so a typo is an error (as
//! with upstream's strict decoding), and `null` is accepted everywhere
//! because kubeadm writes it for unset pointers. Zero values mean "use the
//! default", as upstream's defaulting does; validation and defaulting
//! happen in `validate.rs`, not here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{duration::GoDuration, ConfigError, ConfigWarning};

/// The API group, which names the configuration on `/configz`.
pub const GROUP: &str = "kubeproxy.config.k8s.io";
pub const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";
pub const KIND: &str = "KubeProxyConfiguration";

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeProxyConfiguration {
    /// Paths of fields no version of the type has (typos, or fields from
    /// a newer release). kube-proxy decodes v1alpha1 leniently and only
    /// logs them; a drop-in must accept what it accepts.
    #[serde(skip)]
    pub unknown_fields: Vec<String>,
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub feature_gates: Option<BTreeMap<String, bool>>,
    pub client_connection: Option<ClientConnection>,
    /// component-base's logging options: `format` and `verbosity` apply.
    pub logging: Option<Logging>,
    pub hostname_override: Option<String>,
    pub bind_address: Option<String>,
    pub healthz_bind_address: Option<String>,
    pub metrics_bind_address: Option<String>,
    pub bind_address_hard_fail: Option<bool>,
    pub enable_profiling: Option<bool>,
    pub show_hidden_metrics_for_version: Option<String>,
    pub mode: Option<String>,
    pub iptables: Option<Iptables>,
    pub ipvs: Option<Ipvs>,
    pub nftables: Option<Nftables>,
    pub winkernel: Option<Winkernel>,
    pub detect_local_mode: Option<String>,
    pub detect_local: Option<DetectLocalSection>,
    #[serde(rename = "clusterCIDR")]
    pub cluster_cidr: Option<String>,
    pub node_port_addresses: Option<Vec<String>>,
    pub oom_score_adj: Option<i64>,
    pub conntrack: Option<Conntrack>,
    pub config_sync_period: Option<GoDuration>,
    pub port_range: Option<String>,
    pub windows_run_as_service: Option<bool>,
    /// Removed upstream in 1.25 but still present in ConfigMaps written by
    /// older kubeadm versions and carried over by upgrades.
    pub udp_idle_timeout: Option<GoDuration>,
}

/// component-base's `LoggingConfiguration`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Logging {
    pub format: Option<String>,
    /// A duration string or nanoseconds; only checked for being zero.
    pub flush_frequency: Option<serde_json::Value>,
    pub verbosity: Option<i64>,
    pub vmodule: Option<serde_json::Value>,
    pub options: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientConnection {
    pub accept_content_types: Option<String>,
    pub burst: Option<i64>,
    pub content_type: Option<String>,
    pub kubeconfig: Option<String>,
    pub qps: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Iptables {
    pub masquerade_bit: Option<i64>,
    pub masquerade_all: Option<bool>,
    pub localhost_node_ports: Option<bool>,
    #[serde(rename = "snatNodeInternalIP")]
    pub snat_node_internal_ip: Option<bool>,
    pub sync_period: Option<GoDuration>,
    pub min_sync_period: Option<GoDuration>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ipvs {
    pub sync_period: Option<GoDuration>,
    pub min_sync_period: Option<GoDuration>,
    pub scheduler: Option<String>,
    #[serde(rename = "excludeCIDRs")]
    pub exclude_cidrs: Option<Vec<String>>,
    #[serde(rename = "strictARP")]
    pub strict_arp: Option<bool>,
    pub tcp_timeout: Option<GoDuration>,
    pub tcp_fin_timeout: Option<GoDuration>,
    pub udp_timeout: Option<GoDuration>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Nftables {
    pub masquerade_bit: Option<i64>,
    pub masquerade_all: Option<bool>,
    pub sync_period: Option<GoDuration>,
    pub min_sync_period: Option<GoDuration>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Winkernel {
    pub network_name: Option<String>,
    pub source_vip: Option<String>,
    #[serde(rename = "enableDSR")]
    pub enable_dsr: Option<bool>,
    pub root_hns_endpoint_name: Option<String>,
    pub forward_health_check_vip: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DetectLocalSection {
    pub bridge_interface: Option<String>,
    pub interface_name_prefix: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Conntrack {
    pub max_per_core: Option<i64>,
    pub min: Option<i64>,
    pub tcp_established_timeout: Option<GoDuration>,
    pub tcp_close_wait_timeout: Option<GoDuration>,
    pub tcp_be_liberal: Option<bool>,
    pub udp_timeout: Option<GoDuration>,
    pub udp_stream_timeout: Option<GoDuration>,
}

/// Decodes a `KubeProxyConfiguration` from YAML or JSON text. Only the
/// shape is checked here (known fields, types, apiVersion and kind).
pub fn parse(text: &str) -> Result<KubeProxyConfiguration, ConfigError> {
    let mut path = None;
    let mut unknown = Vec::new();
    let decoded = serde_saphyr::with_deserializer_from_str(text, |de| {
        // `?` marks an Option layer, which the user never wrote.
        let mut note_unknown = |p: serde_ignored::Path<'_>| {
            let path = p.to_string();
            let parts: Vec<&str> =
                path.split('.').filter(|part| *part != "?").collect();
            unknown.push(parts.join("."));
        };
        let de = serde_ignored::Deserializer::new(de, &mut note_unknown);
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = Some(e.path().to_string());
            e.into_inner()
        })
    });
    let mut kpc: KubeProxyConfiguration = match (decoded, path) {
        (Ok(kpc), _) => kpc,
        // serde_path_to_error says "." for the document itself and "?"
        // where it lost track (e.g. a duplicate key): no useful path.
        (Err(e), Some(path)) if path != "." && path != "?" => {
            return Err(ConfigError::Decode {
                path,
                reason: one_line(&e),
            })
        }
        (Err(e), _) => return Err(ConfigError::Syntax(one_line(&e))),
    };
    check_type_meta("apiVersion", kpc.api_version.as_deref(), API_VERSION)?;
    check_type_meta("kind", kpc.kind.as_deref(), KIND)?;
    kpc.unknown_fields = unknown;
    Ok(kpc)
}

fn check_type_meta(
    field: &str,
    got: Option<&str>,
    want: &str,
) -> Result<(), ConfigError> {
    match got {
        Some(got) if got == want => Ok(()),
        Some(got) => Err(ConfigError::Decode {
            path: field.to_owned(),
            reason: format!("must be {want:?}, got {got:?}"),
        }),
        None => Err(ConfigError::Decode {
            path: field.to_owned(),
            reason: format!("missing; must be {want:?}"),
        }),
    }
}

/// The exit message must stay on one line: no source snippet, and no
/// "error:" prefix in front of the field path.
fn one_line(e: &serde_saphyr::Error) -> String {
    let message = e.without_snippet().to_string();
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Values that mean "unset" upstream, so ignoring them changes nothing.
trait IsZero {
    fn is_zero(&self) -> bool;
}

impl IsZero for bool {
    fn is_zero(&self) -> bool {
        !self
    }
}

impl IsZero for i64 {
    fn is_zero(&self) -> bool {
        *self == 0
    }
}

impl IsZero for f64 {
    fn is_zero(&self) -> bool {
        *self == 0.0
    }
}

impl IsZero for String {
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

impl IsZero for GoDuration {
    fn is_zero(&self) -> bool {
        GoDuration::is_zero(*self)
    }
}

impl IsZero for serde_json::Value {
    fn is_zero(&self) -> bool {
        use serde_json::Value;
        match self {
            Value::Null => true,
            Value::Bool(b) => !b,
            Value::Number(n) => n.as_f64() == Some(0.0),
            // Quantities such as `infoBufferSize: "0"` are strings.
            Value::String(s) => s.is_empty() || s == "0",
            Value::Array(items) => items.iter().all(IsZero::is_zero),
            Value::Object(map) => map.values().all(IsZero::is_zero),
        }
    }
}

struct Unused(Vec<ConfigWarning>);

impl Unused {
    fn check<T: IsZero>(&mut self, path: &str, value: &Option<T>) {
        if value.as_ref().is_some_and(|v| !v.is_zero()) {
            self.0.push(ConfigWarning {
                field: path.to_owned(),
                message: "not used by kube-ipvs-proxy; ignored".to_owned(),
            });
        }
    }
}

impl KubeProxyConfiguration {
    /// One warning for each field that is set to something other than its
    /// zero value but that we do not implement.
    pub fn unused_fields(&self) -> Vec<ConfigWarning> {
        let mut u = Unused(Vec::new());
        for path in &self.unknown_fields {
            u.0.push(ConfigWarning {
                field: path.clone(),
                message: "unknown field; ignored, as kube-proxy's lenient \
                          decoding does (a typo?)"
                    .to_owned(),
            });
        }
        if let Some(c) = &self.client_connection {
            u.check("clientConnection.burst", &c.burst);
            u.check("clientConnection.qps", &c.qps);
        }
        if let Some(l) = &self.logging {
            u.check("logging.flushFrequency", &l.flush_frequency);
            u.check("logging.vmodule", &l.vmodule);
            u.check("logging.options", &l.options);
        }
        u.check("enableProfiling", &self.enable_profiling);
        u.check(
            "showHiddenMetricsForVersion",
            &self.show_hidden_metrics_for_version,
        );
        if let Some(i) = &self.iptables {
            u.check("iptables.localhostNodePorts", &i.localhost_node_ports);
            u.check("iptables.snatNodeInternalIP", &i.snat_node_internal_ip);
            u.check("iptables.syncPeriod", &i.sync_period);
            u.check("iptables.minSyncPeriod", &i.min_sync_period);
        }
        if let Some(n) = &self.nftables {
            u.check("nftables.masqueradeBit", &n.masquerade_bit);
            u.check("nftables.masqueradeAll", &n.masquerade_all);
            u.check("nftables.syncPeriod", &n.sync_period);
            u.check("nftables.minSyncPeriod", &n.min_sync_period);
        }
        if let Some(w) = &self.winkernel {
            u.check("winkernel.networkName", &w.network_name);
            u.check("winkernel.sourceVip", &w.source_vip);
            u.check("winkernel.enableDSR", &w.enable_dsr);
            u.check("winkernel.rootHnsEndpointName", &w.root_hns_endpoint_name);
            u.check(
                "winkernel.forwardHealthCheckVip",
                &w.forward_health_check_vip,
            );
        }
        u.check("portRange", &self.port_range);
        u.check("windowsRunAsService", &self.windows_run_as_service);
        u.check("udpIdleTimeout", &self.udp_idle_timeout);
        u.0
    }
}
