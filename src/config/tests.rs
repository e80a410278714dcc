use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::PathBuf,
    time::Duration,
};

use clap::Parser;
use ipnet::IpNet;
use pretty_assertions::assert_eq;

use super::{
    duration::GoDuration,
    settings::{ConntrackConfig, IpvsConfig, Scheduler},
    *,
};

const KUBEADM: &str = include_str!("../../examples/kube-proxy-config.yaml");

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn sock(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// The kubeadm ConfigMap with one line replaced (or appended when the
/// key is absent), so each case shows only what it changes.
fn kubeadm_with(key_line: &str, replacement: &str) -> String {
    let mut found = false;
    let mut out: Vec<String> = KUBEADM
        .lines()
        .map(|line| {
            if !found && line.starts_with(key_line) {
                found = true;
                replacement.to_owned()
            } else {
                line.to_owned()
            }
        })
        .collect();
    if !found {
        out.push(replacement.to_owned());
    }
    out.join("\n")
}

fn from_file(text: &str) -> Result<Resolved, ConfigError> {
    resolve(&ConfigArgs::default(), Some(text))
}

fn args(flags: &[&str]) -> ConfigArgs {
    let argv = std::iter::once("kube-ipvs-proxy").chain(flags.iter().copied());
    match Cli::try_parse_from(argv) {
        Ok(cli) => cli.run.config,
        Err(e) => panic!("{flags:?}: {e}"),
    }
}

/// Upstream kube-proxy's defaults (v1.34) written out, not taken from our
/// `Default`s, so that a default of ours that drifts fails here and not
/// only in the conformance diff. Where a field says `defaults.go`, the
/// value is set by `SetDefaults_KubeProxyConfiguration` in
/// k8s.io/kubernetes pkg/proxy/apis/config/v1alpha1/defaults.go; "not
/// defaulted" means that function leaves Go's zero value.
fn upstream_conntrack() -> ConntrackConfig {
    ConntrackConfig {
        // defaults.go: Conntrack.MaxPerCore, 32 * 1024.
        max_per_core: 32_768,
        // defaults.go: Conntrack.Min, 128 * 1024.
        min: 131_072,
        // defaults.go: Conntrack.TCPEstablishedTimeout, 24 h.
        tcp_established_timeout: Duration::from_secs(86_400),
        // defaults.go: Conntrack.TCPCloseWaitTimeout, 1 h.
        tcp_close_wait_timeout: Duration::from_secs(3_600),
        // Not defaulted: false, and zero timeouts leave the kernel's.
        tcp_be_liberal: false,
        udp_timeout: Duration::ZERO,
        udp_stream_timeout: Duration::ZERO,
    }
}

/// See [`upstream_conntrack`].
fn upstream_defaults() -> Config {
    Config {
        ipvs: IpvsConfig {
            // Not defaulted: an empty scheduler, which the IPVS proxier
            // (pkg/proxy/ipvs/proxier.go, defaultScheduler) takes as rr.
            scheduler: Scheduler::default(),
            // defaults.go: IPVS.SyncPeriod, 30 s.
            sync_period: Duration::from_secs(30),
            // Not defaulted (unlike IPTables.MinSyncPeriod's 1 s).
            min_sync_period: Duration::ZERO,
            exclude_cidrs: vec![],
            strict_arp: false,
            tcp_timeout: None,
            tcp_fin_timeout: None,
            udp_timeout: None,
        },
        cluster_cidrs: vec![],
        detect_local: DetectLocal::ClusterCidr,
        node_port_addresses: vec![],
        masquerade_all: false,
        // defaults.go: IPTables.MasqueradeBit, 14.
        masquerade_bit: 14,
        hostname_override: None,
        // defaults.go: BindAddress 0.0.0.0, which is no override.
        primary_ip_override: None,
        // defaults.go: 0.0.0.0 for an IPv4 bind address
        // (getDefaultAddresses) and ports.ProxyHealthzPort, 10256
        // (pkg/cluster/ports/ports.go).
        healthz_bind_address: Some(sock("0.0.0.0:10256")),
        // defaults.go: 127.0.0.1 and ports.ProxyStatusPort, 10249.
        metrics_bind_address: Some(sock("127.0.0.1:10249")),
        kubeconfig: None,
        api_content_types: Default::default(),
        master: None,
        bind_address_hard_fail: false,
        allow_service_external_ips: true,
        // The zpages gates, beta and on since 1.36.
        component_flagz: true,
        component_statusz: true,
        flags: Default::default(),
        state_file: None,
        api_endpoint: None,
        api_tls_dir: None,
        api_token_file: None,
        service_proxy_name: None,
        scheduler_flags: Default::default(),
        service_schedulers: super::settings::standard_service_schedulers(),
        // defaults.go calls component-base's
        // SetRecommendedLoggingConfiguration (logs/api/v1): format
        // "text"; the verbosity is not defaulted.
        logging: LoggingConfig {
            format: LogFormat::Text,
            verbosity: 0,
        },
        // defaults.go: qos.KubeProxyOOMScoreAdj, -999
        // (pkg/kubelet/qos/policy.go).
        oom_score_adj: -999,
        conntrack: upstream_conntrack(),
    }
}

#[test]
fn defaults_are_upstreams() {
    let upstream = upstream_defaults();
    assert_eq!(Config::default(), upstream, "Config::default()");
    assert_eq!(
        resolve(&args(&[]), None).unwrap().config,
        upstream,
        "no flags"
    );
    let empty = from_file(&format!("{HEAD}mode: ipvs\n")).unwrap();
    assert_eq!(empty.config, upstream, "a file that sets nothing");
    assert_eq!(empty.warnings, vec![]);
    // kubeadm writes every field, null or zero: the same defaults apply.
    let kubeadm = from_file(KUBEADM).unwrap().config;
    assert_eq!(kubeadm.conntrack, upstream.conntrack);
    assert_eq!(kubeadm.ipvs.sync_period, upstream.ipvs.sync_period);
    assert_eq!(kubeadm.oom_score_adj, upstream.oom_score_adj);
}

#[test]
fn kubeadm_configmap_gives_upstream_defaults_in_ipvs_mode() {
    let resolved = from_file(KUBEADM).unwrap();
    // kubeadm's file differs from upstream's defaults in these alone.
    let upstream = upstream_defaults();
    let expected = Config {
        ipvs: IpvsConfig {
            strict_arp: true,
            ..upstream.ipvs.clone()
        },
        cluster_cidrs: vec![net("198.19.0.0/16")],
        kubeconfig: Some(PathBuf::from("/var/lib/kube-proxy/kubeconfig.conf")),
        ..upstream
    };
    assert_eq!(resolved.config, expected);
    // Zero values everywhere else: nothing is being ignored.
    assert_eq!(resolved.warnings, vec![]);
}

#[test]
fn json_is_accepted_too() {
    let text = r#"{"apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration", "mode": "ipvs",
        "ipvs": {"scheduler": "wrr", "syncPeriod": "1m0s",
                 "excludeCIDRs": ["198.18.0.0/24"]}}"#;
    let config = from_file(text).unwrap().config;
    assert_eq!(config.ipvs.scheduler, Scheduler::from("wrr"));
    assert_eq!(config.ipvs.sync_period, Duration::from_secs(60));
    assert_eq!(config.ipvs.exclude_cidrs, vec![net("198.18.0.0/24")]);
}

#[test]
fn empty_flags_give_the_same_defaults_as_kubeadm() {
    let from_flags = resolve(&args(&[]), None).unwrap().config;
    let mut from_kubeadm = from_file(KUBEADM).unwrap().config;
    // The two things the example sets on purpose.
    from_kubeadm.cluster_cidrs.clear();
    from_kubeadm.ipvs.strict_arp = false;
    from_kubeadm.kubeconfig = None;
    assert_eq!(from_flags, from_kubeadm);
    assert_eq!(from_flags, upstream_defaults());
}

struct Valid {
    name: &'static str,
    text: &'static str,
    check: fn(&Config) -> bool,
}

const VALID: &[Valid] = &[
    Valid {
        name: "scheduler by kernel name",
        text: "ipvs:\n  scheduler: sed",
        check: |c| c.ipvs.scheduler == Scheduler::from("sed"),
    },
    Valid {
        name: "go duration with minutes and seconds",
        text: "ipvs:\n  syncPeriod: 1m0s",
        check: |c| c.ipvs.sync_period == Duration::from_secs(60),
    },
    Valid {
        name: "min sync period kept",
        text: "ipvs:\n  minSyncPeriod: 1.5s",
        check: |c| c.ipvs.min_sync_period == Duration::from_millis(1500),
    },
    Valid {
        name: "ipvs tcp timeout",
        text: "ipvs:\n  tcpTimeout: 15m0s\n  udpTimeout: 0s",
        check: |c| {
            c.ipvs.tcp_timeout == Some(Duration::from_secs(900))
                && c.ipvs.udp_timeout.is_none()
        },
    },
    Valid {
        name: "healthz bare IP gets the default port",
        text: "healthzBindAddress: 198.18.0.1",
        check: |c| c.healthz_bind_address == Some(sock("198.18.0.1:10256")),
    },
    Valid {
        name: "metrics IPv6 with port",
        text: "metricsBindAddress: \"[2001:db8::1]:9100\"",
        check: |c| c.metrics_bind_address == Some(sock("[2001:db8::1]:9100")),
    },
    Valid {
        name: "IPv6 bind address switches the default listen addresses",
        text: "bindAddress: \"::\"",
        check: |c| {
            c.healthz_bind_address == Some(sock("[::]:10256"))
                && c.metrics_bind_address == Some(sock("[::1]:10249"))
                && c.primary_ip_override.is_none()
        },
    },
    Valid {
        name: "bind address overrides the primary IP",
        text: "bindAddress: 198.18.0.7",
        check: |c| {
            c.primary_ip_override
                == Some(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 7)))
        },
    },
    Valid {
        name: "dual-stack cluster CIDR",
        text: "clusterCIDR: 198.19.0.0/16,2001:db8:42::/56",
        check: |c| {
            c.cluster_cidrs
                == vec![net("198.19.0.0/16"), net("2001:db8:42::/56")]
        },
    },
    Valid {
        name: "node port addresses with primary and CIDRs",
        text: "nodePortAddresses: [primary, 198.18.0.0/15]",
        check: |c| {
            c.node_port_addresses
                == vec![
                    NodePortAddress::Primary,
                    NodePortAddress::Cidr(net("198.18.0.0/15")),
                ]
        },
    },
    Valid {
        name: "node port addresses keyword all",
        text: "nodePortAddresses: [all]",
        check: |c| {
            c.node_port_addresses
                == vec![
                    NodePortAddress::Cidr(net("0.0.0.0/0")),
                    NodePortAddress::Cidr(net("::/0")),
                ]
        },
    },
    Valid {
        name: "detect local by bridge",
        text: "detectLocalMode: BridgeInterface\n\
               detectLocal:\n  bridgeInterface: cbr0",
        check: |c| {
            c.detect_local == DetectLocal::BridgeInterface("cbr0".into())
        },
    },
    Valid {
        name: "detect local by node CIDR",
        text: "detectLocalMode: NodeCIDR",
        check: |c| c.detect_local == DetectLocal::NodeCidr,
    },
    Valid {
        name: "masquerade settings come from the iptables section",
        text: "iptables:\n  masqueradeBit: 0\n  masqueradeAll: true",
        check: |c| c.masquerade_bit == 0 && c.masquerade_all,
    },
    Valid {
        name: "hostname override is trimmed and lowercased",
        text: "hostnameOverride: \" Node-A \"",
        check: |c| c.hostname_override.as_deref() == Some("node-a"),
    },
    Valid {
        name: "the mh scheduler",
        text: "ipvs:\n  scheduler: mh",
        check: |c| c.ipvs.scheduler == Scheduler::from("mh"),
    },
    // Any name, as upstream: the kernel decides, through the start-up
    // probe.
    Valid {
        name: "a scheduler outside upstream's documented list",
        text: "ipvs:\n  scheduler: ovf",
        check: |c| c.ipvs.scheduler.as_str() == "ovf",
    },
    Valid {
        name: "a site's own scheduler",
        text: "ipvs:\n  scheduler: site_built",
        check: |c| c.ipvs.scheduler.as_str() == "site_built",
    },
    Valid {
        name: "an empty scheduler is round robin",
        text: "ipvs:\n  scheduler: \"\"",
        check: |c| c.ipvs.scheduler.as_str() == "rr",
    },
    Valid {
        name: "config sync period: accepted, and nothing else changes",
        text: "configSyncPeriod: 1h",
        check: |c| *c == Config::default(),
    },
    Valid {
        name: "conntrack settings; zero leaves a value alone",
        text: "conntrack:\n  maxPerCore: 0\n  min: 5\n  \
               tcpEstablishedTimeout: 0s\n  tcpCloseWaitTimeout: 30m\n  \
               tcpBeLiberal: true\n  udpTimeout: 30s\n  udpStreamTimeout: 2m",
        check: |c| {
            c.conntrack
                == ConntrackConfig {
                    max_per_core: 0,
                    min: 5,
                    tcp_established_timeout: Duration::ZERO,
                    tcp_close_wait_timeout: Duration::from_secs(1800),
                    tcp_be_liberal: true,
                    udp_timeout: Duration::from_secs(30),
                    udp_stream_timeout: Duration::from_secs(120),
                }
        },
    },
    Valid {
        name: "conntrack section absent: upstream's defaults",
        text: "mode: ipvs",
        check: |c| c.conntrack == upstream_conntrack(),
    },
];

#[test]
fn valid_values() {
    for case in VALID {
        match from_file(&format!("{HEAD}{}\n", case.text)) {
            Ok(r) => {
                assert!((case.check)(&r.config), "{}: {:?}", case.name, r)
            }
            Err(e) => panic!("{}: {e}", case.name),
        }
    }
}

struct Invalid {
    name: &'static str,
    text: &'static str,
    field: &'static str,
    reason: &'static str,
}

const HEAD: &str = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n\
                    kind: KubeProxyConfiguration\n";

const INVALID: &[Invalid] = &[
    Invalid {
        name: "another proxy mode",
        text: "mode: iptables",
        field: "mode",
        reason: "only \"ipvs\" is supported, got \"iptables\"",
    },
    Invalid {
        name: "masquerade bit above 31",
        text: "iptables:\n  masqueradeBit: 32",
        field: "iptables.masqueradeBit",
        reason: "must be in [0, 31], got 32",
    },
    Invalid {
        name: "negative masquerade bit",
        text: "iptables:\n  masqueradeBit: -1",
        field: "iptables.masqueradeBit",
        reason: "must be in [0, 31], got -1",
    },
    Invalid {
        name: "duration with unknown unit",
        text: "ipvs:\n  syncPeriod: 30x",
        field: "ipvs.syncPeriod",
        reason: "unknown unit \"x\"",
    },
    Invalid {
        name: "duration without unit",
        text: "ipvs:\n  syncPeriod: \"30\"",
        field: "ipvs.syncPeriod",
        reason: "missing unit",
    },
    Invalid {
        name: "negative sync period",
        text: "ipvs:\n  syncPeriod: -1s",
        field: "ipvs.syncPeriod",
        reason: "must be greater than 0, got -1s",
    },
    Invalid {
        name: "negative min sync period",
        text: "ipvs:\n  minSyncPeriod: -1s",
        field: "ipvs.minSyncPeriod",
        reason: "must be greater than or equal to 0",
    },
    Invalid {
        name: "min sync period above sync period",
        text: "ipvs:\n  syncPeriod: 30s\n  minSyncPeriod: 1m",
        field: "ipvs.syncPeriod",
        reason: "must be greater than or equal to ipvs.minSyncPeriod (1m0s)",
    },
    Invalid {
        name: "negative ipvs timeout",
        text: "ipvs:\n  tcpFinTimeout: -5s",
        field: "ipvs.tcpFinTimeout",
        reason: "must be greater than or equal to 0",
    },
    Invalid {
        name: "bad exclude CIDR names its index",
        text: "ipvs:\n  excludeCIDRs: [198.18.0.0/16, nope]",
        field: "ipvs.excludeCIDRs[1]",
        reason: "invalid CIDR \"nope\"",
    },
    Invalid {
        name: "two cluster CIDRs of one family",
        text: "clusterCIDR: 198.19.0.0/16,198.18.0.0/16",
        field: "clusterCIDR",
        reason: "must be one IPv4 and one IPv6",
    },
    Invalid {
        name: "three cluster CIDRs",
        text: "clusterCIDR: 198.19.0.0/16,2001:db8::/64,198.18.0.0/16",
        field: "clusterCIDR",
        reason: "at most one CIDR per IP family",
    },
    Invalid {
        name: "cluster CIDR not a CIDR",
        text: "clusterCIDR: 198.19.0.0",
        field: "clusterCIDR",
        reason: "invalid CIDR",
    },
    Invalid {
        name: "unknown detect-local mode",
        text: "detectLocalMode: Magic",
        field: "detectLocalMode",
        reason: "unknown mode \"Magic\"",
    },
    Invalid {
        name: "bridge mode without a bridge",
        text: "detectLocalMode: BridgeInterface",
        field: "detectLocal.bridgeInterface",
        reason: "must be set when detectLocalMode is \"BridgeInterface\"",
    },
    Invalid {
        name: "prefix mode without a prefix",
        text: "detectLocalMode: InterfaceNamePrefix\ndetectLocal: {}",
        field: "detectLocal.interfaceNamePrefix",
        reason: "must be set",
    },
    Invalid {
        name: "node port address not a CIDR",
        text: "nodePortAddresses: [198.18.0.0/15, eth0]",
        field: "nodePortAddresses[1]",
        reason: "invalid CIDR \"eth0\"",
    },
    Invalid {
        name: "healthz address with a hostname",
        text: "healthzBindAddress: localhost:10256",
        field: "healthzBindAddress",
        reason: "must be IP:port",
    },
    Invalid {
        name: "metrics port zero",
        text: "metricsBindAddress: 127.0.0.1:0",
        field: "metricsBindAddress",
        reason: "port in 1-65535",
    },
    Invalid {
        name: "bind address not an IP",
        text: "bindAddress: node-a",
        field: "bindAddress",
        reason: "invalid IP address",
    },
    Invalid {
        name: "blank hostname override",
        text: "hostnameOverride: \"  \"",
        field: "hostnameOverride",
        reason: "must not be blank",
    },
    Invalid {
        name: "negative config sync period",
        text: "configSyncPeriod: -1m",
        field: "configSyncPeriod",
        reason: "must be greater than 0",
    },
    Invalid {
        name: "oom score adjustment out of range",
        text: "oomScoreAdj: -1001",
        field: "oomScoreAdj",
        reason: "[-1000, 1000]",
    },
    Invalid {
        name: "unknown log format",
        text: "logging:\n  format: logfmt",
        field: "logging.format",
        reason: "unsupported log format \"logfmt\"",
    },
    Invalid {
        name: "negative verbosity",
        text: "logging:\n  verbosity: -1",
        field: "logging.verbosity",
        reason: "must be 0 or more",
    },
    Invalid {
        name: "negative conntrack size",
        text: "conntrack:\n  maxPerCore: -1",
        field: "conntrack.maxPerCore",
        reason: "must be in [0,",
    },
    Invalid {
        name: "negative conntrack timeout",
        text: "conntrack:\n  udpTimeout: -1s",
        field: "conntrack.udpTimeout",
        reason: "greater than or equal to 0",
    },
    Invalid {
        name: "wrong type",
        text: "iptables:\n  masqueradeAll: [true]",
        field: "iptables.masqueradeAll",
        reason: "at line 4, column 18",
    },
];

#[test]
fn invalid_values_name_the_field() {
    for case in INVALID {
        let text = format!("{HEAD}{}\n", case.text);
        let err = match from_file(&text) {
            Ok(r) => panic!("{}: accepted: {:?}", case.name, r.config),
            Err(e) => e,
        };
        let fields = err.fields();
        assert!(
            fields.iter().any(
                |f| f.field == case.field && f.reason.contains(case.reason)
            ),
            "{}: got {err}",
            case.name
        );
        // The exit message is one line that starts with the field.
        let message = err.to_string();
        assert!(!message.contains('\n'), "{}: {message}", case.name);
        assert!(message.starts_with(case.field), "{}: {message}", case.name);
    }
}

#[test]
fn type_meta_is_required() {
    let cases = [
        ("kind: KubeProxyConfiguration\n", "apiVersion", "missing"),
        (
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n\
             kind: KubeletConfiguration\n",
            "kind",
            "must be \"KubeProxyConfiguration\"",
        ),
        (
            "apiVersion: kubeproxy.config.k8s.io/v1beta1\n\
             kind: KubeProxyConfiguration\n",
            "apiVersion",
            "must be \"kubeproxy.config.k8s.io/v1alpha1\"",
        ),
    ];
    for (text, field, reason) in cases {
        let err = from_file(text).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Decode { path, reason: r }
                if path == field && r.contains(reason)),
            "{text}: {err}"
        );
    }
}

#[test]
fn broken_yaml_is_a_syntax_error_on_one_line() {
    for text in [
        "kind: \"unterminated\nipvs: {}\n",
        // Upstream's strict decoding rejects duplicate fields too.
        "mode: ipvs\nmode: ipvs\n",
    ] {
        let err = from_file(text).unwrap_err();
        assert!(matches!(err, ConfigError::Syntax(_)), "{text}: {err:?}");
        assert!(!err.to_string().contains('\n'), "{err}");
    }
}

#[test]
fn every_error_is_reported_at_once() {
    let text = format!("{HEAD}mode: iptables\nipvs:\n  syncPeriod: -1s\n");
    let fields: Vec<String> = from_file(&text)
        .unwrap_err()
        .fields()
        .into_iter()
        .map(|f| f.field)
        .collect();
    assert_eq!(fields, vec!["mode", "ipvs.syncPeriod"]);
}

#[test]
fn unused_fields_warn_once_each() {
    let text = format!(
        "{HEAD}mode: ipvs\n\
         featureGates:\n  SomeGate: true\n  OtherGate: false\n\
         conntrack:\n  maxPerCore: 32768\n  min: 0\n  tcpBeLiberal: true\n\
         logging:\n  verbosity: 4\n  flushFrequency: 5s\n\
         iptables:\n  syncPeriod: 30s\n  masqueradeBit: 14\n\
         winkernel:\n  networkName: l2bridge\n  enableDSR: false\n\
         oomScoreAdj: -999\n\
         udpIdleTimeout: 250ms\n"
    );
    let warnings = from_file(&text).unwrap().warnings;
    let fields: Vec<&str> = warnings.iter().map(|w| w.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "logging.flushFrequency",
            "iptables.syncPeriod",
            "winkernel.networkName",
            "udpIdleTimeout",
            "featureGates.OtherGate",
            "featureGates.SomeGate",
        ]
    );
}

#[test]
fn flags_alone_configure_everything() {
    let a = args(&[
        "--proxy-mode=ipvs",
        "--ipvs-scheduler=wrr",
        "--ipvs-sync-period=10s",
        "--ipvs-min-sync-period=1s",
        "--ipvs-exclude-cidrs=198.18.10.0/24,2001:db8::/64",
        "--ipvs-strict-arp",
        "--ipvs-tcp-timeout=2m",
        "--ipvs-tcpfin-timeout=30s",
        "--ipvs-udp-timeout=5s",
        "--cluster-cidr=198.19.0.0/16",
        "--detect-local-mode=InterfaceNamePrefix",
        "--pod-interface-name-prefix=veth",
        "--nodeport-addresses=primary",
        "--masquerade-all",
        "--iptables-masquerade-bit=15",
        "--hostname-override=Node-B",
        "--bind-address=198.18.0.2",
        "--healthz-bind-address=127.0.0.1:20256",
        "--metrics-bind-address=",
        "--kubeconfig=/etc/kube/proxy.conf",
        "--kube-api-content-type=application/json",
        "--config-sync-period=5m",
        "--conntrack-max-per-core=0",
        "--conntrack-tcp-be-liberal",
        "--conntrack-udp-timeout=30s",
        "--state=examples/cluster.yaml",
        "--service-proxy-name=ours",
        "--oom-score-adj=-500",
        "-v=3",
        "--logging-format=json",
    ]);
    let resolved = resolve(&a, None).unwrap();
    let expected = Config {
        ipvs: IpvsConfig {
            scheduler: Scheduler::from("wrr"),
            sync_period: Duration::from_secs(10),
            min_sync_period: Duration::from_secs(1),
            exclude_cidrs: vec![net("198.18.10.0/24"), net("2001:db8::/64")],
            strict_arp: true,
            tcp_timeout: Some(Duration::from_secs(120)),
            tcp_fin_timeout: Some(Duration::from_secs(30)),
            udp_timeout: Some(Duration::from_secs(5)),
        },
        cluster_cidrs: vec![net("198.19.0.0/16")],
        detect_local: DetectLocal::InterfaceNamePrefix("veth".into()),
        node_port_addresses: vec![NodePortAddress::Primary],
        masquerade_all: true,
        masquerade_bit: 15,
        hostname_override: Some("node-b".into()),
        primary_ip_override: Some(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2))),
        healthz_bind_address: Some(sock("127.0.0.1:20256")),
        // An empty flag value disables the server.
        metrics_bind_address: None,
        kubeconfig: Some(PathBuf::from("/etc/kube/proxy.conf")),
        api_content_types: super::ApiContentTypes {
            content_type: "application/json".into(),
            accept_content_types: String::new(),
        },
        master: None,
        bind_address_hard_fail: false,
        allow_service_external_ips: true,
        component_flagz: true,
        component_statusz: true,
        flags: Default::default(),
        state_file: Some(PathBuf::from("examples/cluster.yaml")),
        api_endpoint: None,
        api_tls_dir: None,
        api_token_file: None,
        service_proxy_name: Some("ours".into()),
        scheduler_flags: Default::default(),
        service_schedulers: super::settings::standard_service_schedulers(),
        logging: LoggingConfig {
            format: LogFormat::Json,
            verbosity: 3,
        },
        oom_score_adj: -500,
        conntrack: ConntrackConfig {
            max_per_core: 0,
            tcp_be_liberal: true,
            udp_timeout: Duration::from_secs(30),
            ..upstream_conntrack()
        },
    };
    assert_eq!(resolved.config, expected);
    let warned: Vec<&str> =
        resolved.warnings.iter().map(|w| w.field.as_str()).collect();
    assert_eq!(warned, ["--config-sync-period"]);
}

#[test]
fn with_a_config_file_most_flags_are_ignored() {
    let a = args(&[
        "--config=/var/lib/kube-proxy/config.conf",
        "--ipvs-scheduler=wrr",
        "--masquerade-all",
        "--kubeconfig=/elsewhere",
        "--hostname-override=Node-C",
        "--state=/tmp/state.yaml",
        "--service-proxy-name=ours",
    ]);
    let resolved = resolve(&a, Some(KUBEADM)).unwrap();
    let c = &resolved.config;
    // From the file:
    assert_eq!(c.ipvs.scheduler, Scheduler::default());
    assert!(!c.masquerade_all);
    assert_eq!(
        c.kubeconfig,
        Some(PathBuf::from("/var/lib/kube-proxy/kubeconfig.conf"))
    );
    // Still from the flags:
    assert_eq!(c.hostname_override.as_deref(), Some("node-c"));
    assert_eq!(c.state_file, Some(PathBuf::from("/tmp/state.yaml")));
    assert_eq!(c.service_proxy_name.as_deref(), Some("ours"));
    let ignored: Vec<&str> =
        resolved.warnings.iter().map(|w| w.field.as_str()).collect();
    assert_eq!(
        ignored,
        vec!["--ipvs-scheduler", "--masquerade-all", "--kubeconfig"]
    );
}

/// With `--config`, every flag of the configuration that is given is
/// named in a warning, by the name the command line takes; the flags the
/// file does not replace are not.
#[test]
fn with_a_config_file_every_configuration_flag_given_is_named() {
    let configuration = [
        "--proxy-mode=ipvs",
        "--ipvs-scheduler=wrr",
        "--ipvs-sync-period=10s",
        "--ipvs-min-sync-period=1s",
        "--ipvs-exclude-cidrs=198.18.10.0/24",
        "--ipvs-strict-arp",
        "--ipvs-tcp-timeout=2m",
        "--ipvs-tcpfin-timeout=30s",
        "--ipvs-udp-timeout=5s",
        "--cluster-cidr=198.19.0.0/16",
        "--detect-local-mode=BridgeInterface",
        "--pod-bridge-interface=cbr0",
        "--pod-interface-name-prefix=veth",
        "--nodeport-addresses=primary",
        "--masquerade-all",
        "--iptables-masquerade-bit=15",
        "--bind-address=198.18.0.2",
        "--healthz-bind-address=127.0.0.1:20256",
        "--metrics-bind-address=127.0.0.1:20249",
        "--kubeconfig=/etc/kube/proxy.conf",
        "--kube-api-content-type=application/json",
        "--config-sync-period=5m",
        "--oom-score-adj=-500",
        "--conntrack-max-per-core=0",
        "--conntrack-min=1",
        "--conntrack-tcp-timeout-established=1h",
        "--conntrack-tcp-timeout-close-wait=1h",
        "--conntrack-tcp-be-liberal",
        "--conntrack-udp-timeout=30s",
        "--conntrack-udp-timeout-stream=2m",
        "--healthz-port=20256",
        "--metrics-port=20249",
        "--bind-address-hard-fail",
        "--feature-gates=AllowServiceExternalIPs=false",
    ];
    let not_replaced = [
        "--config=x",
        "--master=https://198.18.0.1:6443",
        "--hostname-override=node-c",
        "--state=/tmp/state.yaml",
        "--service-proxy-name=ours",
        "--ipvs-scheduler-flags=mh-fallback",
        "--ipvs-service-schedulers=rr,mh",
        "-v=3",
        "--logging-format=json",
    ];
    let given: Vec<&str> =
        not_replaced.iter().chain(&configuration).copied().collect();
    let resolved = resolve(&args(&given), Some(KUBEADM)).unwrap();
    let warned: Vec<&str> =
        resolved.warnings.iter().map(|w| w.field.as_str()).collect();
    let names: Vec<&str> = configuration
        .iter()
        .map(|f| f.split('=').next().unwrap())
        .collect();
    assert_eq!(warned, names);
    // The flags named after the file's fields (in errors, and in
    // docs/configuration.md) are these and the three that apply over
    // the file.
    let mut mapped: Vec<&str> =
        validate::FLAG_NAMES.iter().map(|(_, flag)| *flag).collect();
    mapped.sort_unstable();
    let mut expected = names.clone();
    expected.extend(reference::OVER_THE_FILE.iter().map(|(flag, _)| *flag));
    expected.sort_unstable();
    assert_eq!(mapped, expected);
    // What the command line takes, from clap itself: the list above is
    // every flag of the configuration, so a new one must join it.
    let command =
        <ConfigArgs as clap::Args>::augment_args(clap::Command::new("t"));
    let mut visible: Vec<String> = command
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long())
        .map(|l| format!("--{l}"))
        .filter(|l| {
            !not_replaced.iter().any(|f| f.starts_with(&format!("{l}=")))
                && l != "--v"
                // Not replaced either, but it excludes --state, which is
                // above: the next test has it.
                && l != "--api-endpoint"
                && l != "--api-tls-dir"
                && l != "--api-token-file"
        })
        .collect();
    visible.sort();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, visible);
}

#[test]
fn with_a_config_file_the_api_endpoint_still_applies() {
    let resolved = resolve(
        &args(&["--config=k.yaml", "--api-endpoint=unix:///run/views.sock"]),
        Some(KUBEADM),
    )
    .unwrap();
    assert_eq!(
        resolved.config.api_endpoint.as_deref(),
        Some("unix:///run/views.sock")
    );
    assert_eq!(resolved.warnings, []);
}

#[test]
fn hostname_override_flag_beats_the_file() {
    let text = kubeadm_with("hostnameOverride:", "hostnameOverride: from-file");
    let from_file_only = from_file(&text).unwrap().config;
    assert_eq!(
        from_file_only.hostname_override.as_deref(),
        Some("from-file")
    );
    let a = args(&["--config=x", "--hostname-override=From-Flag"]);
    let both = resolve(&a, Some(&text)).unwrap().config;
    assert_eq!(both.hostname_override.as_deref(), Some("from-flag"));
    // An empty flag (e.g. an unset $(NODE_NAME)) does not override.
    let a = args(&["--config=x", "--hostname-override="]);
    let empty = resolve(&a, Some(&text)).unwrap().config;
    assert_eq!(empty.hostname_override.as_deref(), Some("from-file"));
}

#[test]
fn invalid_flags_name_the_flag() {
    let cases: &[(&[&str], &str, &str)] = &[
        (&["--proxy-mode=iptables"], "--proxy-mode", "only \"ipvs\""),
        (
            &["--iptables-masquerade-bit=40"],
            "--iptables-masquerade-bit",
            "must be in [0, 31]",
        ),
        (
            &["--ipvs-sync-period=1s", "--ipvs-min-sync-period=2s"],
            "--ipvs-sync-period",
            "--ipvs-min-sync-period",
        ),
        (
            &["--ipvs-exclude-cidrs=198.18.0.0/16,bad"],
            "--ipvs-exclude-cidrs",
            "invalid CIDR \"bad\"",
        ),
        (
            &["--detect-local-mode=BridgeInterface"],
            "--pod-bridge-interface",
            "when --detect-local-mode is",
        ),
        (&["--hostname-override=  "], "--hostname-override", "blank"),
        (
            &["--healthz-bind-address=:10256"],
            "--healthz-bind-address",
            "IP",
        ),
    ];
    for (flags, field, reason) in cases {
        let err = resolve(&args(flags), None).unwrap_err();
        assert!(
            err.fields()
                .iter()
                .any(|f| f.field == *field && f.reason.contains(reason)),
            "{flags:?}: {err}"
        );
    }
}

#[test]
fn unimplemented_upstream_flags_are_accepted_with_a_warning() {
    let a = args(&["--profiling", "--vmodule=x=4", "--kube-api-qps=5"]);
    let warnings = resolve(&a, None).unwrap().warnings;
    let fields: Vec<&str> = warnings.iter().map(|w| w.field.as_str()).collect();
    assert_eq!(fields, vec!["--kube-api-qps", "--vmodule", "--profiling"]);
}

#[test]
fn port_flags_apply_without_a_file_as_upstreams() {
    let resolved = |flags: &[&str]| resolve(&args(flags), None).unwrap().config;
    let off = resolved(&["--healthz-port=0", "--metrics-port=0"]);
    assert_eq!(off.healthz_bind_address, None, "port 0 turns it off");
    assert_eq!(off.metrics_bind_address, None);
    let bare = resolved(&[
        "--healthz-bind-address=198.18.0.2",
        "--healthz-port=20256",
        "--metrics-bind-address=::1",
        "--metrics-port=20249",
    ]);
    assert_eq!(bare.healthz_bind_address, Some(sock("198.18.0.2:20256")));
    assert_eq!(bare.metrics_bind_address, Some(sock("[::1]:20249")));
    // An address with a port keeps it, and the default address keeps
    // its own: upstream's flag defaults carry their ports already.
    let kept = resolved(&[
        "--healthz-bind-address=198.18.0.2:30256",
        "--healthz-port=20256",
        "--metrics-port=20249",
    ]);
    assert_eq!(kept.healthz_bind_address, Some(sock("198.18.0.2:30256")));
    assert_eq!(kept.metrics_bind_address, Some(sock("127.0.0.1:10249")));
    let err = resolve(&args(&["--healthz-port=65536"]), None).unwrap_err();
    assert_eq!(err.fields()[0].field, "--healthz-port", "{err}");
    // With a file they are ignored, as every flag the file replaces.
    let with_file = resolve(&args(&["--healthz-port=0"]), Some(KUBEADM));
    let with_file = with_file.unwrap();
    assert_eq!(
        with_file.config.healthz_bind_address,
        Some(sock("0.0.0.0:10256"))
    );
    assert_eq!(with_file.warnings[0].field, "--healthz-port");
}

#[test]
fn bind_address_hard_fail_is_applied_from_flag_and_file() {
    assert!(!from_file(KUBEADM).unwrap().config.bind_address_hard_fail);
    let text =
        kubeadm_with("bindAddressHardFail:", "bindAddressHardFail: true");
    let resolved = from_file(&text).unwrap();
    assert!(resolved.config.bind_address_hard_fail);
    assert_eq!(resolved.warnings, []);
    let flag = resolve(&args(&["--bind-address-hard-fail"]), None).unwrap();
    assert!(flag.config.bind_address_hard_fail);
}

#[test]
fn feature_gates_the_proxy_acts_on_and_the_rest_warned() {
    let text = kubeadm_with(
        "featureGates:",
        "featureGates: {AllowServiceExternalIPs: false, KubeProxyIPVS: false}",
    );
    let resolved = from_file(&text).unwrap();
    assert!(!resolved.config.allow_service_external_ips);
    assert_eq!(resolved.warnings, [], "KubeProxyIPVS is no warning");
    assert!(
        from_file(KUBEADM)
            .unwrap()
            .config
            .allow_service_external_ips
    );

    let flags = args(&[
        "--feature-gates=KubeProxyIPVS=true, AllowServiceExternalIPs=F,Foo=1",
    ]);
    let resolved = resolve(&flags, None).unwrap();
    assert!(!resolved.config.allow_service_external_ips);
    let warned: Vec<&str> =
        resolved.warnings.iter().map(|w| w.field.as_str()).collect();
    assert_eq!(warned, ["featureGates.Foo"]);
    for bad in ["--feature-gates=Foo", "--feature-gates=Foo=maybe"] {
        let err = resolve(&args(&[bad]), None).unwrap_err();
        assert_eq!(err.fields()[0].field, "--feature-gates", "{bad}: {err}");
    }
}

#[test]
fn master_applies_next_to_a_file_too() {
    let a = args(&["--master=https://198.18.0.1:6443", "--config=k.yaml"]);
    let resolved = resolve(&a, Some(KUBEADM)).unwrap();
    assert_eq!(
        resolved.config.master.as_deref(),
        Some("https://198.18.0.1:6443")
    );
    assert_eq!(resolved.warnings, []);
    let none = resolve(&args(&["--master="]), None).unwrap();
    assert_eq!(none.config.master, None, "empty: the kubeconfig's server");
}

#[test]
fn node_port_address_keywords_as_upstreams() {
    let addresses = |list: &str| {
        let text = kubeadm_with("nodePortAddresses:", list);
        from_file(&text).map(|r| r.config.node_port_addresses)
    };
    assert_eq!(
        addresses("nodePortAddresses: [localhost]").unwrap(),
        [
            NodePortAddress::Cidr(net("127.0.0.0/8")),
            NodePortAddress::Cidr(net("::1/128"))
        ],
        "loopback, which IPVS mode never serves: no NodePort anywhere"
    );
    for twice in ["[primary, primary]", "[all, 198.18.0.0/16, all]"] {
        let err = addresses(&format!("nodePortAddresses: {twice}"));
        let err = err.unwrap_err();
        assert!(err.to_string().contains("duplicate"), "{twice}: {err}");
    }
    assert!(
        addresses("nodePortAddresses: [198.18.0.0/16, 198.18.0.0/16]").is_ok(),
        "only keywords are refused twice"
    );
}

fn cli(argv: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(
        std::iter::once("kube-ipvs-proxy").chain(argv.iter().copied()),
    )
}

#[test]
fn plan_subcommand() {
    let parsed = cli(&[
        "plan", "--state", "s.yaml", "--node", "n1", "--output", "json",
    ])
    .unwrap();
    let Some(Command::Plan(plan)) = parsed.command else {
        panic!("not plan: {parsed:?}");
    };
    assert_eq!(plan.config.state, Some(PathBuf::from("s.yaml")));
    assert_eq!(plan.node.as_deref(), Some("n1"));
    assert_eq!(plan.output, OutputFormat::Json);

    let defaults = cli(&["plan", "--state=s.yaml"]).unwrap();
    let Some(Command::Plan(plan)) = defaults.command else {
        panic!("not plan: {defaults:?}");
    };
    assert_eq!(plan.output, OutputFormat::Text);
    assert_eq!(plan.node, None);

    // Plan takes the configuration flags too.
    let with_config =
        cli(&["plan", "--state=s.yaml", "--ipvs-scheduler=sh"]).unwrap();
    let Some(Command::Plan(plan)) = with_config.command else {
        panic!("not plan");
    };
    assert_eq!(plan.config.ipvs_scheduler.as_deref(), Some("sh"));
}

#[test]
fn cli_rejections() {
    let cases: &[(&[&str], clap::error::ErrorKind)] = &[
        (
            &["plan", "--state=s", "--output=yaml"],
            clap::error::ErrorKind::InvalidValue,
        ),
        (
            &["list", "--output=yaml"],
            clap::error::ErrorKind::InvalidValue,
        ),
        (
            &["--ipvs-sync-period=5x"],
            clap::error::ErrorKind::ValueValidation,
        ),
        (&["--no-such-flag"], clap::error::ErrorKind::UnknownArgument),
        (
            &["--cleanup=maybe"],
            clap::error::ErrorKind::ValueValidation,
        ),
        (&["-v=two"], clap::error::ErrorKind::ValueValidation),
        (
            &["--logging-format=logfmt"],
            clap::error::ErrorKind::InvalidValue,
        ),
    ];
    for (argv, kind) in cases {
        match cli(argv) {
            Ok(parsed) => panic!("{argv:?} accepted: {parsed:?}"),
            Err(e) => assert_eq!(e.kind(), *kind, "{argv:?}: {e}"),
        }
    }
}

#[test]
fn cli_bools_and_lists() {
    let parsed = cli(&["--cleanup"]).unwrap();
    assert!(parsed.run.cleanup());
    assert!(!cli(&["--cleanup=false"]).unwrap().run.cleanup());
    assert!(!cli(&[]).unwrap().run.cleanup());
    let parsed = cli(&[
        "--ipvs-strict-arp=false",
        "--ipvs-exclude-cidrs=198.18.0.0/16,2001:db8::/32",
        "--ipvs-sync-period=1m30s",
    ])
    .unwrap();
    let c = parsed.run.config;
    assert_eq!(c.ipvs_strict_arp, Some(false));
    assert_eq!(
        c.ipvs_exclude_cidrs,
        Some(vec!["198.18.0.0/16".to_owned(), "2001:db8::/32".to_owned()])
    );
    assert_eq!(
        c.ipvs_sync_period,
        Some(GoDuration::from_std(Duration::from_secs(90)))
    );
}

/// Every boolean flag parses as pflag's: alone it is true, a value goes
/// after `=`, and a value after a space is not the flag's.
#[test]
fn every_boolean_flag_is_a_go_boolean() {
    type Field = fn(&Cli) -> Option<bool>;
    let flags: [(&str, Field); 5] = [
        ("--cleanup", |c| c.run.cleanup),
        ("--init-only", |c| c.run.init_only),
        ("--ipvs-strict-arp", |c| c.run.config.ipvs_strict_arp),
        ("--masquerade-all", |c| c.run.config.masquerade_all),
        ("--conntrack-tcp-be-liberal", |c| {
            c.run.config.conntrack_tcp_be_liberal
        }),
    ];
    for (flag, field) in flags {
        assert_eq!(field(&cli(&[]).unwrap()), None, "{flag}");
        assert_eq!(field(&cli(&[flag]).unwrap()), Some(true), "{flag}");
        for (value, expected) in [("false", false), ("no", false), ("1", true)]
        {
            let given = format!("{flag}={value}");
            assert_eq!(
                field(&cli(&[&given]).unwrap()),
                Some(expected),
                "{given}"
            );
        }
        assert!(cli(&[flag, "false"]).is_err(), "{flag} false");
        assert!(cli(&[&format!("{flag}=maybe")]).is_err(), "{flag}=maybe");
    }
    // `plan` takes the configuration's flags the same way.
    let plan = ["plan", "--state=x", "--masquerade-all"];
    let Some(Command::Plan(parsed)) = cli(&plan).unwrap().command else {
        panic!("not a plan");
    };
    assert_eq!(parsed.config.masquerade_all, Some(true));
    assert!(cli(&["plan", "--state=x", "--masquerade-all", "false"]).is_err());
}

#[test]
fn go_durations() {
    const NS: i64 = 1;
    const MS: i64 = 1_000_000;
    const S: i64 = 1_000_000_000;
    let ok: &[(&str, i64)] = &[
        ("0", 0),
        ("0s", 0),
        ("30s", 30 * S),
        ("1m0s", 60 * S),
        ("1h2m3s", 3723 * S),
        ("1.5h", 5400 * S),
        ("300ms", 300 * MS),
        ("2.5ms", 2_500_000 * NS),
        (".5s", 500 * MS),
        ("5.s", 5 * S),
        ("1us", 1_000 * NS),
        ("1\u{b5}s", 1_000 * NS),
        ("1\u{3bc}s", 1_000 * NS),
        ("7ns", 7 * NS),
        ("-1s", -S),
        ("+5s", 5 * S),
        ("1.0000000001s", S),
    ];
    for (text, nanos) in ok {
        assert_eq!(GoDuration::parse(text), Ok(GoDuration(*nanos)), "{text}");
    }
    let bad = [
        "",
        "s",
        "5",
        "5x",
        "-",
        "1.2.3s",
        ".s",
        "9999999999h",
        "1s5",
    ];
    for text in bad {
        assert!(GoDuration::parse(text).is_err(), "{text:?} accepted");
    }
    let shown: &[(i64, &str)] = &[
        (0, "0s"),
        (90 * S, "1m30s"),
        (3600 * S, "1h0m0s"),
        (1500 * MS, "1500ms"),
        (-S, "-1s"),
    ];
    for (nanos, text) in shown {
        assert_eq!(GoDuration(*nanos).to_string(), *text);
    }
}

#[test]
fn node_name_prefers_the_override() {
    let mut config = Config::default();
    assert_eq!(config.node_name(" Host-1\n"), "host-1");
    config.hostname_override = Some("node-a".into());
    assert_eq!(config.node_name("host-1"), "node-a");
}

#[test]
fn unknown_fields_are_warnings_as_with_kube_proxys_lenient_decoding() {
    let text = format!("{HEAD}modee: ipvs\nipvs:\n  schedulr: rr\n");
    let resolved = from_file(&text).expect("accepted, as upstream does");
    let fields: Vec<&str> =
        resolved.warnings.iter().map(|w| w.field.as_str()).collect();
    assert!(fields.contains(&"modee"), "{fields:?}");
    assert!(fields.contains(&"ipvs.schedulr"), "{fields:?}");
    assert_eq!(resolved.config.ipvs.scheduler.as_str(), "rr");
}

#[test]
fn logging_from_the_file_and_flags_over_it() {
    let text = kubeadm_with(
        "logging:",
        "logging:\n  format: json\n  verbosity: 2\nunused:",
    );
    // `unused:` swallows the kubeadm lines that followed `logging:`.
    let file_only = from_file(&text).unwrap().config.logging;
    assert_eq!(
        file_only,
        LoggingConfig {
            format: LogFormat::Json,
            verbosity: 2
        }
    );
    // kube-proxy copies the logging flags over the loaded file, so
    // `--config ... -v=5` works; they are not "ignored" config flags.
    let a = args(&["--config=x", "-v=5", "--logging-format=text"]);
    let resolved = resolve(&a, Some(&text)).unwrap();
    assert_eq!(
        resolved.config.logging,
        LoggingConfig {
            format: LogFormat::Text,
            verbosity: 5
        }
    );
    assert!(
        !resolved.warnings.iter().any(|w| w.field.starts_with('-')),
        "{:?}",
        resolved.warnings
    );
    let a = args(&["--config=x", "--v=3"]);
    let resolved = resolve(&a, Some(&text)).unwrap().config.logging;
    assert_eq!(resolved.format, LogFormat::Json, "the file's format stays");
    assert_eq!(resolved.verbosity, 3);
}

#[test]
fn oom_score_adj_defaults_to_upstreams_minus_999() {
    assert_eq!(from_file(KUBEADM).unwrap().config.oom_score_adj, -999);
    let text = kubeadm_with("oomScoreAdj:", "oomScoreAdj: 500");
    assert_eq!(from_file(&text).unwrap().config.oom_score_adj, 500);
    assert_eq!(
        resolve(&args(&[]), None).unwrap().config.oom_score_adj,
        -999
    );
}

#[test]
fn an_empty_mode_in_the_file_says_ipvs_runs() {
    for line in ["mode: \"\"", "mode: null"] {
        let text = kubeadm_with("mode:", line);
        let resolved = from_file(&text).unwrap();
        let warned: Vec<&ConfigWarning> = resolved
            .warnings
            .iter()
            .filter(|w| w.field == "mode")
            .collect();
        assert_eq!(warned.len(), 1, "{line}: {:?}", resolved.warnings);
        assert!(warned[0].message.contains("iptables"), "{warned:?}");
        assert!(warned[0].message.contains("runs in ipvs mode"));
    }
    // The flags never said iptables: no --proxy-mode is no news.
    assert_eq!(resolve(&args(&[]), None).unwrap().warnings, vec![]);
    // And the other modes stay errors, file or flag.
    for mode in ["iptables", "nftables", "kernelspace"] {
        let text = kubeadm_with("mode:", &format!("mode: {mode}"));
        let err = from_file(&text).unwrap_err();
        assert!(err.to_string().starts_with("mode: only \"ipvs\""), "{err}");
        let flag = format!("--proxy-mode={mode}");
        let err = resolve(&args(&[&flag]), None).unwrap_err();
        assert!(err.to_string().starts_with("--proxy-mode:"), "{err}");
    }
}

#[test]
fn applied_fields_do_not_warn() {
    // bindAddress overrides the node's primary IP, and the IPVS timeouts
    // are written at start-up: set, they are simply used.
    let text = kubeadm_with("bindAddress:", "bindAddress: 198.18.0.7");
    let resolved = from_file(&text).unwrap();
    assert_eq!(resolved.warnings, vec![]);
    assert_eq!(
        resolved.config.primary_ip_override,
        Some(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 7)))
    );
    // The unspecified address is kubeadm's default: no override.
    for line in ["bindAddress: 0.0.0.0", "bindAddress: \"::\""] {
        let text = kubeadm_with("bindAddress:", line);
        let resolved = from_file(&text).unwrap();
        assert_eq!(resolved.warnings, vec![], "{line}");
        assert_eq!(resolved.config.primary_ip_override, None, "{line}");
    }
    let text = format!("{HEAD}ipvs:\n  tcpTimeout: 2m\n  udpTimeout: 0s\n");
    let warnings = from_file(&text).unwrap().warnings;
    assert!(
        !warnings.iter().any(|w| w.field.starts_with("ipvs.")),
        "{warnings:?}"
    );
}

#[test]
fn written_configuration_reads_back_the_same_without_warnings() {
    let configs = [
        from_file(KUBEADM).unwrap().config,
        Config::default(),
        resolve(
            &args(&[
                "--ipvs-scheduler=sh",
                "--ipvs-exclude-cidrs=198.18.10.0/24,2001:db8::/64",
                "--cluster-cidr=198.19.0.0/16,2001:db8:1::/64",
                "--detect-local-mode=BridgeInterface",
                "--pod-bridge-interface=cbr0",
                "--nodeport-addresses=primary,198.18.0.0/16",
                "--masquerade-all",
                "--iptables-masquerade-bit=3",
                "--hostname-override=node-b",
                "--healthz-bind-address=[::]:20256",
                "--oom-score-adj=-10",
                "-v=4",
                "--logging-format=json",
            ]),
            None,
        )
        .unwrap()
        .config,
    ];
    for config in configs {
        let yaml = to_yaml(&config).unwrap();
        let read = from_file(&yaml).unwrap();
        assert_eq!(read.warnings, vec![], "{yaml}");
        assert_eq!(read.config, config, "{yaml}");
        // kubeadm's shape: every top-level field is present.
        for key in [
            "apiVersion:",
            "bindAddress:",
            "clientConnection:",
            "conntrack:",
            "ipvs:",
            "logging:",
            "mode: ipvs",
            "oomScoreAdj:",
            "winkernel:",
        ] {
            assert!(yaml.contains(key), "{key} missing in {yaml}");
        }
    }
}

#[test]
fn a_config_sync_period_says_it_is_not_used() {
    let warned = |text: &str| {
        from_file(&format!("{HEAD}{text}\n"))
            .unwrap()
            .warnings
            .iter()
            .any(|w| w.field == "configSyncPeriod")
    };
    assert!(warned("configSyncPeriod: 1h"));
    // kubeadm writes the default (or 0s, which means it): nothing to say.
    assert!(!warned("configSyncPeriod: 15m0s"));
    assert!(!warned("configSyncPeriod: 0s"));
}

/// `/flagz` lists every flag the command line takes, none unknown to it:
/// a new flag without a value there fails here.
#[test]
fn flagz_lists_every_flag_with_a_value_of_its_own() {
    use clap::CommandFactory;
    let longs: Vec<String> = Cli::command()
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_owned))
        .filter(|l| l != "help")
        .collect();
    let listed = flagz(&ConfigArgs::default());
    assert_eq!(listed.keys().cloned().collect::<Vec<_>>(), {
        let mut sorted = longs.clone();
        sorted.sort();
        sorted
    });
    for long in &longs {
        assert!(
            super::flagz::value_of(
                long,
                &ConfigArgs::default(),
                &serde_json::Value::Null
            )
            .is_some(),
            "--{long} has no value for /flagz"
        );
    }
    // Upstream's defaults, as its flags print them.
    for (flag, value) in [
        ("ipvs-sync-period", "30s"),
        ("ipvs-min-sync-period", "0s"),
        ("healthz-bind-address", "0.0.0.0:10256"),
        ("metrics-port", "10249"),
        ("conntrack-max-per-core", "32768"),
        ("iptables-masquerade-bit", "14"),
        ("v", "0"),
        ("feature-gates", ""),
    ] {
        assert_eq!(
            listed.get(flag).map(String::as_str),
            Some(value),
            "--{flag}"
        );
    }
}

/// As upstream's: a flag reads what the command line set, also where
/// `--config` makes the file the configuration.
#[test]
fn flagz_shows_the_flags_not_the_file() {
    let given = args(&[
        "--config=/etc/kube-proxy/config.conf",
        "--ipvs-scheduler=lc",
        "--metrics-port=0",
        "--nodeport-addresses=198.18.0.0/16,primary",
        "--iptables-sync-period=1m",
    ]);
    let listed = flagz(&given);
    for (flag, value) in [
        ("config", "/etc/kube-proxy/config.conf"),
        ("ipvs-scheduler", "lc"),
        ("metrics-port", "0"),
        ("nodeport-addresses", "[198.18.0.0/16,primary]"),
        // Ignored here, and shown as given.
        ("iptables-sync-period", "1m"),
        ("ipvs-sync-period", "30s"),
    ] {
        assert_eq!(
            listed.get(flag).map(String::as_str),
            Some(value),
            "--{flag}"
        );
    }
}

#[test]
fn scheduler_flags_apply_with_or_without_a_file() {
    let flags =
        resolve(&args(&["--ipvs-scheduler-flags=mh-fallback,mh-port"]), None)
            .unwrap()
            .config
            .scheduler_flags;
    assert_eq!(flags.names(), ["mh-fallback", "mh-port"]);
    let with_file = resolve(
        &args(&["--ipvs-scheduler-flags=sh-fallback"]),
        Some(KUBEADM),
    )
    .unwrap();
    assert_eq!(with_file.config.scheduler_flags.names(), ["sh-fallback"]);
    assert_eq!(with_file.warnings, [], "ours, not a file field: no warning");
    assert_eq!(
        resolve(&args(&[]), None).unwrap().config.scheduler_flags,
        FlagChoice::default()
    );
    let err =
        resolve(&args(&["--ipvs-scheduler-flags=mh-fast"]), None).unwrap_err();
    let message = err.to_string();
    assert!(message.starts_with("--ipvs-scheduler-flags"), "{message}");
    assert!(message.contains("mh-fast"), "{message}");
}

#[test]
fn the_watches_ask_for_protobuf_unless_told_otherwise() {
    use super::ApiContentTypes;
    let protobuf = ApiContentTypes {
        content_type: "application/vnd.kubernetes.protobuf".into(),
        accept_content_types: String::new(),
    };
    assert_eq!(
        resolve(&args(&[]), None).unwrap().config.api_content_types,
        protobuf
    );
    assert_eq!(
        resolve(&args(&[]), Some(KUBEADM))
            .unwrap()
            .config
            .api_content_types,
        protobuf
    );
    let flag =
        resolve(&args(&["--kube-api-content-type=application/json"]), None)
            .unwrap();
    assert_eq!(
        flag.config.api_content_types.content_type,
        "application/json"
    );
    assert!(flag.warnings.is_empty(), "{:?}", flag.warnings);
    let file = KUBEADM
        .replace(
            "acceptContentTypes: \"\"",
            "acceptContentTypes: application/json",
        )
        .replace("contentType: \"\"", "contentType: application/json");
    let resolved = resolve(&args(&[]), Some(&file)).unwrap();
    assert_eq!(
        resolved.config.api_content_types,
        ApiContentTypes {
            content_type: "application/json".into(),
            accept_content_types: "application/json".into(),
        }
    );
    assert!(
        resolved
            .warnings
            .iter()
            .all(|w| !w.field.starts_with("clientConnection")),
        "{:?}",
        resolved.warnings
    );
    let Err(ConfigError::Invalid(errors)) = resolve(
        &args(&["--kube-api-content-type=application/\u{7f}json"]),
        None,
    ) else {
        panic!("a content type that is no header value is refused");
    };
    assert_eq!(errors[0].field, "--kube-api-content-type");
}
