use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pretty_assertions::assert_eq;

use super::{
    events::{
        ConntrackReconciled, Facility, InternalEvent, IptablesRestoreFailed,
        KernelOperations, NetworkProgrammed, NoLocalEndpoints, Probe,
        ProbeAnswered, SyncCompleted, SyncQueued,
    },
    exporter, network_programming_buckets, sync_duration_buckets,
};
use crate::model::IpFamily;

/// Renders what `emit` recorded, through a recorder built like the
/// process-wide one but installed on this thread only.
pub(crate) fn render(emit: impl FnOnce()) -> String {
    let recorder = exporter::recorder().expect("buckets are not empty");
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        exporter::describe();
        emit();
    });
    handle.render()
}

pub(crate) fn assert_lines(text: &str, expected: &[&str]) {
    let missing: Vec<&&str> = expected
        .iter()
        .filter(|line| !text.lines().any(|l| l == **line))
        .collect();
    assert!(missing.is_empty(), "missing {missing:#?} in\n{text}");
}

#[test]
fn sync_buckets_are_upstreams_exponential_ones() {
    let expected = [
        0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512,
        1.024, 2.048, 4.096, 8.192, 16.384,
    ];
    assert_eq!(sync_duration_buckets(), expected);
}

#[test]
fn network_programming_buckets_are_upstreams() {
    let buckets = network_programming_buckets();
    // merge() starts from a 0 bucket, then 2 + 59 + 12 + 7 linear ones.
    assert_eq!(buckets.len(), 1 + 2 + 59 + 12 + 7);
    assert_eq!(buckets[..5], [0.0, 0.25, 0.5, 1.0, 2.0]);
    assert_eq!(buckets[61..64], [59.0, 60.0, 65.0]);
    assert_eq!(
        buckets[73..],
        [115.0, 120.0, 150.0, 180.0, 210.0, 240.0, 270.0, 300.0]
    );
    assert!(buckets.windows(2).all(|w| w[0] < w[1]), "{buckets:?}");
}

#[test]
fn sync_duration_renders_as_a_histogram_with_upstreams_buckets() {
    let text = render(|| {
        SyncCompleted {
            families: &[IpFamily::V4, IpFamily::V6],
            duration: Duration::from_millis(3),
            at: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            changed_service_ports: 2,
        }
        .emit();
    });
    assert_lines(
        &text,
        &[
            "# HELP kubeproxy_sync_proxy_rules_duration_seconds SyncProxyRules latency in seconds",
            "# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram",
            r#"kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="0.002"} 0"#,
            r#"kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="0.004"} 1"#,
            r#"kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="16.384"} 1"#,
            r#"kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="+Inf"} 1"#,
            r#"kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} 1"#,
            r#"kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv6",le="0.004"} 1"#,
            "# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge",
            r#"kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 1700000000"#,
        ],
    );
    assert!(!text.contains("quantile"), "rendered as a summary:\n{text}");
}

#[test]
fn network_programming_and_conntrack_histograms_use_their_buckets() {
    let text = render(|| {
        NetworkProgrammed {
            family: IpFamily::V4,
            latency: Duration::from_millis(1500),
        }
        .emit();
        ConntrackReconciled {
            family: IpFamily::V6,
            duration: Duration::from_micros(1500),
            deleted: 7,
        }
        .emit();
    });
    assert_lines(
        &text,
        &[
            "# TYPE kubeproxy_network_programming_duration_seconds histogram",
            r#"kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4",le="0"} 0"#,
            r#"kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4",le="1"} 0"#,
            r#"kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4",le="2"} 1"#,
            r#"kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4",le="300"} 1"#,
            "# TYPE kubeproxy_conntrack_reconciler_sync_duration_seconds histogram",
            r#"kubeproxy_conntrack_reconciler_sync_duration_seconds_bucket{ip_family="IPv6",le="0.001"} 0"#,
            r#"kubeproxy_conntrack_reconciler_sync_duration_seconds_bucket{ip_family="IPv6",le="0.002"} 1"#,
            r#"kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family="IPv6"} 7"#,
        ],
    );
}

#[test]
fn counters_and_gauges_carry_upstreams_labels() {
    let text = render(|| {
        SyncQueued {
            families: &[IpFamily::V4],
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(42),
        }
        .emit();
        NoLocalEndpoints {
            family: IpFamily::V4,
            internal: 1,
            external: 3,
        }
        .emit();
        IptablesRestoreFailed {
            family: IpFamily::V6,
            error: &"exit status 2",
        }
        .emit();
        for healthy in [true, true, false] {
            ProbeAnswered {
                probe: Probe::Healthz,
                healthy,
            }
            .emit();
        }
        ProbeAnswered {
            probe: Probe::Livez,
            healthy: true,
        }
        .emit();
    });
    assert_lines(
        &text,
        &[
            r#"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"} 42"#,
            r#"kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="internal"} 1"#,
            r#"kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="external"} 3"#,
            r#"kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family="IPv6"} 1"#,
            "# TYPE kubeproxy_proxy_healthz_total counter",
            r#"kubeproxy_proxy_healthz_total{code="200"} 2"#,
            r#"kubeproxy_proxy_healthz_total{code="503"} 1"#,
            r#"kubeproxy_proxy_livez_total{code="200"} 1"#,
        ],
    );
}

#[test]
fn kernel_operations_are_counted_per_label_set() {
    let mut ops = KernelOperations::new();
    ops.record(Facility::Ipvs, "add_service", "ok");
    ops.record(Facility::Ipvs, "add_service", "ok");
    ops.record(Facility::Ipvs, "add_service", "exists");
    ops.record(Facility::Addresses, "add", "ok");
    assert_eq!(ops.count(Facility::Ipvs, "add_service", "ok"), 2);
    assert_eq!(ops.count(Facility::Ipvs, "add_service", "exists"), 1);
    assert_eq!(ops.count(Facility::Ipsets, "add", "ok"), 0);
    let text = render(|| ops.emit());
    assert_lines(
        &text,
        &[
            r#"kube_ipvs_proxy_kernel_operations_total{facility="ipvs",op="add_service",result="ok"} 2"#,
            r#"kube_ipvs_proxy_kernel_operations_total{facility="ipvs",op="add_service",result="exists"} 1"#,
            r#"kube_ipvs_proxy_kernel_operations_total{facility="addresses",op="add",result="ok"} 1"#,
        ],
    );
}

/// kubernetes-mixin's KubeVersionMismatch reads `vX.Y` out of
/// `git_version`: ours carries the API server's, its suffixes included,
/// and this binary's build in the labels that describe a build.
#[test]
fn kubernetes_build_info_names_the_release_behaved_as() {
    let build = crate::version::BUILD;
    let text = render(|| {
        exporter::behaving_as(
            &crate::version::Kubernetes {
                major: "1".into(),
                minor: "37+".into(),
                git_version: "v1.37.2-gke.1200".into(),
            },
            &build,
        );
    });
    let line = text
        .lines()
        .find(|l| l.starts_with("kubernetes_build_info{"))
        .unwrap_or_else(|| panic!("no kubernetes_build_info in\n{text}"));
    for label in [
        r#"major="1""#.to_owned(),
        r#"minor="37+""#.to_owned(),
        r#"git_version="v1.37.2-gke.1200""#.to_owned(),
        format!(r#"git_commit="{}""#, build.git_commit),
        format!(r#"compiler="{}""#, build.compiler_version),
    ] {
        assert!(line.contains(&label), "no {label} in {line}");
    }
    assert!(line.ends_with("} 1"), "{line}");

    let without = render(|| {
        crate::source::kube::Release::new(1, 36).report_without_api_server();
    });
    assert!(
        without
            .lines()
            .any(|l| l.starts_with("kubernetes_build_info{")
                && l.contains(r#"git_version="v1.36""#)
                && l.contains(r#"minor="36""#)),
        "{without}"
    );
}
