//! `--write-config-to`: the effective configuration as a
//! `KubeProxyConfiguration`, defaults filled in, as upstream writes its
//! own. Fields this proxy does not apply are written as their zero
//! value ("the default"), so the file reads back to the same
//! configuration without a warning.

use std::net::SocketAddr;

use super::{
    duration::GoDuration,
    kubeproxy::{
        ClientConnection, Conntrack, DetectLocalSection, Iptables, Ipvs,
        KubeProxyConfiguration, Logging, Nftables, Winkernel, API_VERSION,
        KIND,
    },
    settings::{Config, DetectLocal, NodePortAddress},
};

/// The file's YAML text.
pub fn to_yaml(config: &Config) -> Result<String, serde_saphyr::ser::Error> {
    serde_saphyr::to_string(&to_kube_proxy_configuration(config))
}

/// What `/configz` serves: the same object, versioned (`apiVersion`,
/// `kind`) as kube-proxy serves it since 1.36, as JSON under its group's
/// name.
pub fn to_configz(config: &Config) -> String {
    serde_json::json!({
        super::kubeproxy::GROUP: to_kube_proxy_configuration(config),
    })
    .to_string()
}

fn zero() -> Option<GoDuration> {
    Some(GoDuration::default())
}

fn duration(d: std::time::Duration) -> Option<GoDuration> {
    Some(GoDuration::from_std(d))
}

fn address(address: Option<SocketAddr>) -> Option<String> {
    // A server turned off by an empty flag has no file spelling (empty
    // means the default address there); upstream writes "" too.
    Some(address.map(|a| a.to_string()).unwrap_or_default())
}

/// Every field, as kubeadm writes the file.
pub fn to_kube_proxy_configuration(config: &Config) -> KubeProxyConfiguration {
    let ipvs = &config.ipvs;
    let (bridge, prefix) = match &config.detect_local {
        DetectLocal::BridgeInterface(name) => (name.clone(), String::new()),
        DetectLocal::InterfaceNamePrefix(p) => (String::new(), p.clone()),
        DetectLocal::ClusterCidr | DetectLocal::NodeCidr => {
            (String::new(), String::new())
        }
    };
    let bind_address = match config.primary_ip_override {
        Some(ip) => ip.to_string(),
        None if config.healthz_bind_address.is_some_and(|a| a.is_ipv6()) => {
            "::".to_owned()
        }
        None => "0.0.0.0".to_owned(),
    };
    let node_port_addresses =
        (!config.node_port_addresses.is_empty()).then(|| {
            config
                .node_port_addresses
                .iter()
                .map(|a| match a {
                    NodePortAddress::Primary => "primary".to_owned(),
                    NodePortAddress::Cidr(net) => net.to_string(),
                })
                .collect()
        });
    KubeProxyConfiguration {
        unknown_fields: Vec::new(),
        api_version: Some(API_VERSION.to_owned()),
        kind: Some(KIND.to_owned()),
        feature_gates: None,
        client_connection: Some(ClientConnection {
            accept_content_types: Some(
                config.api_content_types.accept_content_types.clone(),
            ),
            burst: Some(0),
            content_type: Some(config.api_content_types.content_type.clone()),
            kubeconfig: Some(
                config
                    .kubeconfig
                    .as_ref()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
            qps: Some(0.0),
        }),
        logging: Some(Logging {
            format: Some(config.logging.format.as_str().to_owned()),
            flush_frequency: Some(serde_json::Value::from(0)),
            verbosity: Some(i64::from(config.logging.verbosity)),
            vmodule: None,
            options: None,
        }),
        hostname_override: Some(
            config.hostname_override.clone().unwrap_or_default(),
        ),
        bind_address: Some(bind_address),
        healthz_bind_address: address(config.healthz_bind_address),
        metrics_bind_address: address(config.metrics_bind_address),
        bind_address_hard_fail: Some(false),
        enable_profiling: Some(false),
        show_hidden_metrics_for_version: Some(String::new()),
        mode: Some("ipvs".to_owned()),
        iptables: Some(Iptables {
            masquerade_bit: Some(i64::from(config.masquerade_bit)),
            masquerade_all: Some(config.masquerade_all),
            localhost_node_ports: None,
            snat_node_internal_ip: None,
            sync_period: zero(),
            min_sync_period: zero(),
        }),
        ipvs: Some(Ipvs {
            sync_period: duration(ipvs.sync_period),
            min_sync_period: duration(ipvs.min_sync_period),
            scheduler: Some(ipvs.scheduler.as_str().to_owned()),
            exclude_cidrs: (!ipvs.exclude_cidrs.is_empty()).then(|| {
                ipvs.exclude_cidrs.iter().map(ToString::to_string).collect()
            }),
            strict_arp: Some(ipvs.strict_arp),
            tcp_timeout: duration(ipvs.tcp_timeout.unwrap_or_default()),
            tcp_fin_timeout: duration(ipvs.tcp_fin_timeout.unwrap_or_default()),
            udp_timeout: duration(ipvs.udp_timeout.unwrap_or_default()),
        }),
        nftables: Some(Nftables {
            masquerade_bit: None,
            masquerade_all: Some(false),
            sync_period: zero(),
            min_sync_period: zero(),
        }),
        winkernel: Some(Winkernel {
            network_name: Some(String::new()),
            source_vip: Some(String::new()),
            enable_dsr: Some(false),
            root_hns_endpoint_name: Some(String::new()),
            forward_health_check_vip: Some(false),
        }),
        detect_local_mode: Some(config.detect_local.mode_name().to_owned()),
        detect_local: Some(DetectLocalSection {
            bridge_interface: Some(bridge),
            interface_name_prefix: Some(prefix),
        }),
        cluster_cidr: Some(
            config
                .cluster_cidrs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ),
        node_port_addresses,
        oom_score_adj: Some(i64::from(config.oom_score_adj)),
        conntrack: Some(Conntrack {
            max_per_core: Some(i64::from(config.conntrack.max_per_core)),
            min: Some(i64::from(config.conntrack.min)),
            tcp_established_timeout: duration(
                config.conntrack.tcp_established_timeout,
            ),
            tcp_close_wait_timeout: duration(
                config.conntrack.tcp_close_wait_timeout,
            ),
            tcp_be_liberal: Some(config.conntrack.tcp_be_liberal),
            udp_timeout: duration(config.conntrack.udp_timeout),
            udp_stream_timeout: duration(config.conntrack.udp_stream_timeout),
        }),
        // Our watches do not resync: "default", which warns about nothing.
        config_sync_period: zero(),
        port_range: Some(String::new()),
        windows_run_as_service: Some(false),
        udp_idle_timeout: None,
    }
}
