use std::{
    collections::HashMap,
    net::{Ipv4Addr, SocketAddr},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use pretty_assertions::assert_eq;
use std::io::{Read, Write};

use super::{
    health::{Clock, ProxyHealth},
    healthz,
    service_health::{
        health_check_node_ports, listen_addresses, local_ready_endpoints,
        LocalCounts,
    },
    timestamp::{rfc3339_nano, unix_date},
    zpages::{self, Format, Page},
    Server, ServiceHealthServer,
};
use crate::{
    config::NodePortAddress,
    model::{
        fixtures::{ep, port_info},
        IpFamily, NamespacedName, Protocol, ServicePortName,
    },
    telemetry::{
        events::{InternalEvent, SyncCompleted},
        exporter,
    },
};

/// 2023-11-14T22:13:20Z.
const T0: u64 = 1_700_000_000;
const SYNC_PERIOD: Duration = Duration::from_secs(30);

/// A clock the test moves by hand.
#[derive(Debug)]
struct ManualClock(Mutex<SystemTime>);

impl ManualClock {
    fn at(secs: u64) -> Arc<Self> {
        Arc::new(Self(Mutex::new(UNIX_EPOCH + Duration::from_secs(secs))))
    }

    fn set(&self, secs: u64, millis: u64) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = UNIX_EPOCH
            + Duration::from_secs(secs)
            + Duration::from_millis(millis);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: HashMap<String, String>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// A plain HTTP/1.1 request over loopback: enough to see exactly what a
/// kubelet or a load balancer probe sees. Blocking I/O on a blocking
/// thread, so the server's tasks keep running on the test's runtime.
async fn get(addr: SocketAddr, path: &str) -> anyhow::Result<Reply> {
    request(addr, "GET", path).await
}

async fn request(
    addr: SocketAddr,
    method: &'static str,
    path: &str,
) -> anyhow::Result<Reply> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        request_blocking(addr, method, &path, "")
    })
    .await?
}

/// A GET with this `Accept` header.
async fn request_with(
    addr: SocketAddr,
    path: &str,
    accept: &str,
) -> anyhow::Result<Reply> {
    let (path, header) = (path.to_owned(), format!("Accept: {accept}\r\n"));
    tokio::task::spawn_blocking(move || {
        request_blocking(addr, "GET", &path, &header)
    })
    .await?
}

fn request_blocking(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
) -> anyhow::Result<Reply> {
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: probe\r\n{headers}Connection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8(raw)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no end of headers in {text:?}"))?;
    let mut lines = head.lines();
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("bad status line {status_line:?}"))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(Reply {
        status,
        headers,
        body: body.to_owned(),
    })
}

const LOOPBACK: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

#[test]
fn timestamps_format_as_go_json_times() {
    let cases = [
        (0, 0, "1970-01-01T00:00:00Z"),
        (T0, 0, "2023-11-14T22:13:20Z"),
        (T0, 500_000_000, "2023-11-14T22:13:20.5Z"),
        (T0, 123_456_789, "2023-11-14T22:13:20.123456789Z"),
        (T0, 1_000, "2023-11-14T22:13:20.000001Z"),
        // Leap day, the day after, and a century that is a leap year.
        (1_709_164_800, 0, "2024-02-29T00:00:00Z"),
        (1_709_251_199, 0, "2024-02-29T23:59:59Z"),
        (1_709_251_200, 0, "2024-03-01T00:00:00Z"),
        (951_782_400, 0, "2000-02-29T00:00:00Z"),
        (4_107_542_400, 0, "2100-03-01T00:00:00Z"),
    ];
    for (secs, nanos, expected) in cases {
        let at = UNIX_EPOCH + Duration::new(secs, nanos);
        assert_eq!(rfc3339_nano(at), expected, "{secs}.{nanos}");
    }
}

#[test]
fn unix_dates_format_as_go_time_unix_date() {
    for (secs, expected) in [
        (0, "Thu Jan  1 00:00:00 UTC 1970"),
        (1_709_197_507, "Thu Feb 29 09:05:07 UTC 2024"),
        (1_796_305_279, "Thu Dec  3 13:41:19 UTC 2026"),
        (T0, "Tue Nov 14 22:13:20 UTC 2023"),
    ] {
        assert_eq!(unix_date(UNIX_EPOCH + Duration::from_secs(secs)), expected);
    }
}

#[test]
fn zpages_answer_the_format_asked_for_as_upstream_negotiates() {
    let beta = |page: &str| {
        format!("application/json;as={page};g=config.k8s.io;v=v1beta1")
    };
    let json = |version| Some(Format::Json { version });
    let cases: Vec<(String, Page, Option<Format>)> = vec![
        (String::new(), Page::Flagz, Some(Format::Text)),
        ("  ".into(), Page::Statusz, Some(Format::Text)),
        // curl's default: JSON and YAML need a kind, so text it is.
        ("*/*".into(), Page::Flagz, Some(Format::Text)),
        ("text/plain".into(), Page::Statusz, Some(Format::Text)),
        ("application/json".into(), Page::Flagz, None),
        ("application/json;as=Flagz".into(), Page::Flagz, None),
        (beta("Flagz"), Page::Flagz, json("v1beta1")),
        (beta("Statusz"), Page::Statusz, json("v1beta1")),
        (beta("Flagz"), Page::Statusz, None),
        (
            "application/json;as=Statusz;g=config.k8s.io;v=v1alpha1".into(),
            Page::Statusz,
            json("v1alpha1"),
        ),
        (
            "application/json;as=Statusz;g=config.k8s.io;v=v1".into(),
            Page::Statusz,
            None,
        ),
        (
            "application/yaml;as=Flagz;g=config.k8s.io;v=v1beta1".into(),
            Page::Flagz,
            Some(Format::Yaml { version: "v1beta1" }),
        ),
        (
            "application/*;as=Flagz;g=config.k8s.io;v=v1beta1".into(),
            Page::Flagz,
            json("v1beta1"),
        ),
        (
            "text/plain;as=Flagz;g=config.k8s.io;v=v1beta1".into(),
            Page::Flagz,
            None,
        ),
        ("*/json".into(), Page::Flagz, None),
        // The highest q wins, whatever the order.
        (
            format!("{};q=0.5, text/plain", beta("Statusz")),
            Page::Statusz,
            Some(Format::Text),
        ),
        (
            format!("text/plain;q=0.1, {}", beta("Statusz")),
            Page::Statusz,
            json("v1beta1"),
        ),
        (
            format!("{};q=0, application/xml", beta("Flagz")),
            Page::Flagz,
            None,
        ),
        // A refused clause gives way to the next.
        (
            format!("application/json, {}", beta("Flagz")),
            Page::Flagz,
            json("v1beta1"),
        ),
    ];
    for (accept, page, expected) in cases {
        assert_eq!(
            zpages::negotiate(Some(&accept), page),
            expected,
            "{accept:?}"
        );
    }
    assert_eq!(zpages::negotiate(None, Page::Flagz), Some(Format::Text));
}

#[test]
fn statusz_lists_the_first_segment_of_each_path_once() {
    assert_eq!(
        zpages::listed_paths([
            "/metrics",
            "/metrics/slis",
            "/healthz",
            "/",
            "/configz"
        ]),
        ["/configz", "/healthz", "/metrics"]
    );
}

/// One probe state: what happened, when the probe asks, what it sees.
struct HealthCase {
    name: &'static str,
    /// Applied in order; times are seconds after T0.
    steps: &'static [Step],
    /// Probe time, milliseconds after T0.
    probe_at_ms: u64,
    healthz: (u16, &'static str),
    livez: (u16, &'static str),
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Queued(u64),
    Updated(u64),
    NotEligible,
}

const TIMEOUT_MS: u64 = 2 * 30_000;

fn health_cases() -> Vec<HealthCase> {
    vec![
        HealthCase {
            name: "fresh: never synced is healthy",
            steps: &[],
            probe_at_ms: 5_000,
            healthz: (
                200,
                r#"{"lastUpdated":"2023-11-14T22:13:25Z","currentTime":"2023-11-14T22:13:25Z","nodeEligible":true,"healthy":true}"#,
            ),
            livez: (
                200,
                r#"{"lastUpdated":"2023-11-14T22:13:25Z","currentTime":"2023-11-14T22:13:25Z","healthy":true}"#,
            ),
        },
        HealthCase {
            name: "queued before the first sync is still starting",
            steps: &[Step::Queued(0)],
            probe_at_ms: 10 * TIMEOUT_MS,
            healthz: (
                200,
                r#"{"lastUpdated":"2023-11-14T22:23:20Z","currentTime":"2023-11-14T22:23:20Z","nodeEligible":true,"healthy":true}"#,
            ),
            livez: (
                200,
                r#"{"lastUpdated":"2023-11-14T22:23:20Z","currentTime":"2023-11-14T22:23:20Z","healthy":true}"#,
            ),
        },
        HealthCase {
            name: "updated: lastUpdated is now, the family's is the sync",
            steps: &[Step::Updated(0)],
            probe_at_ms: 10_000,
            healthz: (
                200,
                r#"{"lastUpdated":"2023-11-14T22:13:30Z","currentTime":"2023-11-14T22:13:30Z","nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":"2023-11-14T22:13:20Z","healthy":true}}}"#,
            ),
            livez: (
                200,
                r#"{"lastUpdated":"2023-11-14T22:13:30Z","currentTime":"2023-11-14T22:13:30Z","healthy":true,"status":{"IPv4":{"lastUpdated":"2023-11-14T22:13:20Z","healthy":true}}}"#,
            ),
        },
        HealthCase {
            name: "queued just under 2 x syncPeriod ago is healthy",
            steps: &[Step::Updated(0), Step::Queued(1)],
            probe_at_ms: 1_000 + TIMEOUT_MS - 1,
            healthz: (
                200,
                r#"{"lastUpdated":"2023-11-14T22:14:20.999Z","currentTime":"2023-11-14T22:14:20.999Z","nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":"2023-11-14T22:13:20Z","healthy":true}}}"#,
            ),
            livez: (
                200,
                r#"{"lastUpdated":"2023-11-14T22:14:20.999Z","currentTime":"2023-11-14T22:14:20.999Z","healthy":true,"status":{"IPv4":{"lastUpdated":"2023-11-14T22:13:20Z","healthy":true}}}"#,
            ),
        },
        HealthCase {
            name: "stale: queued 2 x syncPeriod ago and not applied",
            steps: &[Step::Updated(0), Step::Queued(1), Step::Queued(50)],
            probe_at_ms: 1_000 + TIMEOUT_MS,
            healthz: (
                503,
                r#"{"lastUpdated":"2023-11-14T22:13:20Z","currentTime":"2023-11-14T22:14:21Z","nodeEligible":true,"healthy":false,"status":{"IPv4":{"lastUpdated":"2023-11-14T22:13:20Z","healthy":false}}}"#,
            ),
            livez: (
                503,
                r#"{"lastUpdated":"2023-11-14T22:13:20Z","currentTime":"2023-11-14T22:14:21Z","healthy":false,"status":{"IPv4":{"lastUpdated":"2023-11-14T22:13:20Z","healthy":false}}}"#,
            ),
        },
        HealthCase {
            name: "an applied update makes a stale proxy healthy again",
            steps: &[Step::Updated(0), Step::Queued(1), Step::Updated(100)],
            probe_at_ms: 100_000,
            healthz: (
                200,
                r#"{"lastUpdated":"2023-11-14T22:15:00Z","currentTime":"2023-11-14T22:15:00Z","nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":"2023-11-14T22:15:00Z","healthy":true}}}"#,
            ),
            livez: (
                200,
                r#"{"lastUpdated":"2023-11-14T22:15:00Z","currentTime":"2023-11-14T22:15:00Z","healthy":true,"status":{"IPv4":{"lastUpdated":"2023-11-14T22:15:00Z","healthy":true}}}"#,
            ),
        },
        HealthCase {
            name: "node not eligible: /healthz fails, /livez does not",
            steps: &[Step::Updated(0), Step::NotEligible],
            probe_at_ms: 2_000,
            healthz: (
                503,
                r#"{"lastUpdated":"2023-11-14T22:13:20Z","currentTime":"2023-11-14T22:13:22Z","nodeEligible":false,"healthy":true,"status":{"IPv4":{"lastUpdated":"2023-11-14T22:13:20Z","healthy":true}}}"#,
            ),
            livez: (
                200,
                r#"{"lastUpdated":"2023-11-14T22:13:22Z","currentTime":"2023-11-14T22:13:22Z","healthy":true,"status":{"IPv4":{"lastUpdated":"2023-11-14T22:13:20Z","healthy":true}}}"#,
            ),
        },
    ]
}

fn health_at(clock: &Arc<ManualClock>) -> Arc<ProxyHealth> {
    Arc::new(ProxyHealth::with_clock(
        2 * SYNC_PERIOD,
        Arc::clone(clock) as Arc<dyn Clock>,
    ))
}

fn apply(health: &ProxyHealth, clock: &ManualClock, steps: &[Step]) {
    for step in steps {
        match *step {
            Step::Queued(at) => {
                clock.set(T0 + at, 0);
                health.queued_update();
            }
            Step::Updated(at) => {
                clock.set(T0 + at, 0);
                health.updated();
            }
            Step::NotEligible => health.set_node_eligible(false),
        }
    }
}

#[tokio::test]
async fn healthz_and_livez_answer_upstreams_json_for_each_state() {
    let recorder = exporter::recorder().expect("buckets are not empty");
    let metrics = recorder.handle();
    // The current-thread runtime runs the server's tasks on this thread,
    // so they record into this recorder.
    let _local = metrics::set_default_local_recorder(&recorder);
    let cases = health_cases();
    for case in &cases {
        let clock = ManualClock::at(T0);
        let health = health_at(&clock);
        let server = Server::bind_on_this_runtime(
            "healthz",
            LOOPBACK,
            healthz::router(Arc::clone(&health)),
        )
        .await
        .expect("loopback port");
        apply(&health, &clock, case.steps);
        clock.set(T0, case.probe_at_ms);
        for (path, (status, body)) in
            [("/healthz", case.healthz), ("/livez", case.livez)]
        {
            let reply = get(server.local_addr(), path).await.expect(path);
            assert_eq!(
                (reply.status, reply.body.as_str()),
                (status, body),
                "{}: {path}",
                case.name
            );
            assert_eq!(
                reply.header("content-type"),
                Some("application/json"),
                "{}",
                case.name
            );
            assert_eq!(
                reply.header("x-content-type-options"),
                Some("nosniff"),
                "{}",
                case.name
            );
        }
    }
    let count = |path: &str, code: u16| {
        cases
            .iter()
            .filter(|c| {
                let (status, _) = if path == "healthz" {
                    c.healthz
                } else {
                    c.livez
                };
                status == code
            })
            .count()
    };
    let text = metrics.render();
    for (path, code) in [
        ("healthz", 200),
        ("healthz", 503),
        ("livez", 200),
        ("livez", 503),
    ] {
        let line = format!(
            "kubeproxy_proxy_{path}_total{{code=\"{code}\"}} {}",
            count(path, code)
        );
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
}

#[tokio::test]
async fn healthz_reports_each_family_and_forgets_removed_ones() {
    let clock = ManualClock::at(T0);
    let health = health_at(&clock);
    health.set_families(&[IpFamily::V4, IpFamily::V6]);
    health.updated();
    clock.set(T0 + 1, 0);
    health.queued_update();
    clock.set(T0 + 1 + 60, 0);
    let stale = health.health();
    assert!(!stale.healthy);
    assert_eq!(
        stale.status.keys().copied().collect::<Vec<_>>(),
        [IpFamily::V4, IpFamily::V6]
    );
    assert!(stale.status.values().all(|s| !s.healthy));

    health.set_families(&[IpFamily::V6]);
    let status: Vec<_> = health.health().status.into_keys().collect();
    assert_eq!(status, [IpFamily::V6]);
}

#[tokio::test]
async fn metrics_server_answers_metrics_healthz_proxy_mode_and_configz() {
    let recorder = exporter::recorder().expect("buckets are not empty");
    metrics::with_local_recorder(&recorder, || {
        exporter::describe();
        exporter::at_start_up(&crate::version::BUILD);
        SyncCompleted {
            families: &[IpFamily::V4],
            duration: Duration::from_millis(20),
            at: UNIX_EPOCH + Duration::from_secs(T0),
            changed_service_ports: 1,
        }
        .emit();
    });
    let server = metrics_server(
        &recorder,
        super::metrics::Pages {
            configz: Some(crate::config::to_configz(
                &crate::config::Config::default(),
            )),
            ..Default::default()
        },
    )
    .await;
    let addr = server.local_addr();

    let configz = get(addr, "/configz").await.expect("/configz");
    assert_eq!(configz.status, 200);
    assert_eq!(configz.header("content-type"), Some("application/json"));
    let configz: serde_json::Value =
        serde_json::from_str(&configz.body).expect("/configz is JSON");
    let served = &configz["kubeproxy.config.k8s.io"];
    assert_eq!(served["apiVersion"], "kubeproxy.config.k8s.io/v1alpha1");
    assert_eq!(served["kind"], "KubeProxyConfiguration");
    assert_eq!(served["mode"], "ipvs");
    assert_eq!(served["ipvs"]["scheduler"], "rr", "{served}");

    let mode = get(addr, "/proxyMode").await.expect("/proxyMode");
    assert_eq!((mode.status, mode.body.as_str()), (200, "ipvs"));
    assert_eq!(
        mode.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    let healthz = get(addr, "/healthz").await.expect("/healthz");
    assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok"));

    let metrics = get(addr, "/metrics").await.expect("/metrics");
    assert_eq!(metrics.status, 200);
    assert_eq!(
        metrics.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    for line in [
        "# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram",
        r#"kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="0.016"} 0"#,
        r#"kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="0.032"} 1"#,
        r#"kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="+Inf"} 1"#,
        r#"kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 1700000000"#,
        // Upstream's unlabelled series exist from start-up, at zero.
        "kubeproxy_sync_proxy_rules_endpoint_changes_total 0",
        "kubeproxy_sync_proxy_rules_service_changes_total 0",
        "kubeproxy_sync_proxy_rules_endpoint_changes_pending 0",
        "kubeproxy_sync_proxy_rules_service_changes_pending 0",
        // The process collector's families, read from /proc.
        "# TYPE process_cpu_seconds_total counter",
        "# TYPE process_resident_memory_bytes gauge",
        "# TYPE process_open_fds gauge",
        "# TYPE process_start_time_seconds gauge",
        "# TYPE go_goroutines gauge",
    ] {
        assert!(
            metrics.body.lines().any(|l| l == line),
            "no {line:?} in\n{}",
            metrics.body
        );
    }
    let series = |name: &str| {
        metrics
            .body
            .lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let own = series("kube_ipvs_proxy_build_info");
    assert_eq!(own.len(), 1, "{}", metrics.body);
    assert!(own[0].ends_with("} 1"), "{own:?}");
    let build = crate::version::BUILD;
    for label in [
        format!("version=\"{}\"", build.git_version),
        format!("git_commit=\"{}\"", build.git_commit),
    ] {
        assert!(own[0].contains(&label), "no {label} in {own:?}");
    }
    // The Kubernetes release is not known before the API server answers:
    // no guess that monitoring would count as another version.
    assert_eq!(series("kubernetes_build_info"), Vec::<String>::new());
    // Each family once, its samples together: Prometheus refuses others.
    let mut families: Vec<&str> = metrics
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let count = families.len();
    families.sort_unstable();
    families.dedup();
    assert_eq!(families.len(), count, "a family twice in\n{}", metrics.body);
    // Go's handlers ignore the method.
    let posted = request(addr, "POST", "/proxyMode").await.expect("POST");
    assert_eq!((posted.status, posted.body.as_str()), (200, "ipvs"));
    let missing = get(addr, "/configz/nope").await.expect("404");
    assert_eq!(missing.status, 404);
    // Without the pages (the gates off, or the API side's server).
    for path in ["/flagz", "/statusz"] {
        let off = get(addr, path).await.expect(path);
        assert_eq!(off.status, 404, "{path}");
    }
}

/// The metrics server with these pages, on a loopback port.
async fn metrics_server(
    recorder: &metrics_exporter_prometheus::PrometheusRecorder,
    pages: super::metrics::Pages,
) -> Server {
    Server::bind(
        "metrics",
        LOOPBACK,
        super::metrics::router(recorder.handle(), pages),
    )
    .await
    .expect("loopback port")
}

#[tokio::test]
async fn metrics_server_serves_flagz_and_statusz_as_kube_proxy() {
    use clap::Parser;
    let cli = crate::config::Cli::try_parse_from([
        "kube-ipvs-proxy",
        "--ipvs-scheduler=lc",
        "--feature-gates=KubeProxyIPVS=true,AllowServiceExternalIPs=false",
        "--hostname-override=node-a",
    ])
    .expect("flags");
    let flags = crate::config::flagz(&cli.run.config);
    let recorder = exporter::recorder().expect("buckets are not empty");
    let server = metrics_server(
        &recorder,
        super::metrics::Pages {
            configz: Some("{}".to_owned()),
            flagz: Some(flags),
            statusz: true,
        },
    )
    .await;
    let addr = server.local_addr();
    let flagz_json = "application/json;as=Flagz;g=config.k8s.io;v=v1beta1";

    // Text by default, one delimiter of upstream's four for the page.
    let text = get(addr, "/flagz").await.expect("/flagz");
    assert_eq!(text.status, 200);
    assert_eq!(
        text.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    let all: Vec<&str> = text.body.lines().collect();
    assert_eq!(all[..2], ["", "kube-proxy flagz"], "{}", text.body);
    assert!(all[2].starts_with(
        "Warning: This endpoint is not meant to be machine parseable"
    ));
    let lines = &all[3..];
    let delimiter = [": ", ":", "=", " "]
        .into_iter()
        .find(|d| lines.contains(&format!("ipvs-scheduler{d}lc").as_str()))
        .unwrap_or_else(|| panic!("no ipvs-scheduler line in {}", text.body));
    assert!(
        lines.iter().all(|l| l.contains(delimiter)),
        "{delimiter:?} not on every line of {}",
        text.body
    );

    let structured = request_with(addr, "/flagz", flagz_json)
        .await
        .expect("/flagz");
    assert_eq!(structured.status, 200);
    assert_eq!(structured.header("content-type"), Some("application/json"));
    assert_eq!(structured.header("warning"), None);
    let flagz: serde_json::Value =
        serde_json::from_str(&structured.body).expect("JSON");
    assert_eq!(flagz["kind"], "Flagz");
    assert_eq!(flagz["apiVersion"], "config.k8s.io/v1beta1");
    assert_eq!(flagz["metadata"]["name"], "kube-proxy");
    let flag = |name: &str| flagz["flags"][name].as_str().map(str::to_owned);
    for (name, value) in [
        ("ipvs-scheduler", "lc"),
        // Defaults as kube-proxy's flags print them.
        ("ipvs-sync-period", "30s"),
        ("metrics-bind-address", "127.0.0.1:10249"),
        ("healthz-port", "10256"),
        ("nodeport-addresses", "[]"),
        ("masquerade-all", "false"),
        (
            "feature-gates",
            "AllowServiceExternalIPs=false,KubeProxyIPVS=true",
        ),
        ("hostname-override", "node-a"),
        ("config", ""),
        ("cleanup", "false"),
    ] {
        assert_eq!(flag(name).as_deref(), Some(value), "{name} in {flagz}");
    }
    let alpha = request_with(
        addr,
        "/flagz",
        &flagz_json.replace("v1beta1", "v1alpha1"),
    )
    .await
    .expect("v1alpha1");
    assert_eq!(alpha.status, 200);
    assert!(
        alpha
            .header("warning")
            .is_some_and(|w| w.starts_with("299 - ")),
        "{:?}",
        alpha.headers
    );
    let refused = request_with(addr, "/flagz", "application/json")
        .await
        .expect("406");
    assert_eq!(refused.status, 406);
    let status: serde_json::Value =
        serde_json::from_str(&refused.body).expect("a Status");
    assert_eq!(status["reason"], "NotAcceptable");
    assert_eq!(
        status["message"],
        "only the following media types are accepted: application/json, application/yaml, text/plain"
    );

    let yaml = request_with(
        addr,
        "/statusz",
        "application/yaml;as=Statusz;g=config.k8s.io;v=v1beta1",
    )
    .await
    .expect("/statusz");
    assert_eq!(yaml.status, 200);
    assert_eq!(yaml.header("content-type"), Some("application/yaml"));
    let statusz: serde_json::Value =
        serde_saphyr::from_str(&yaml.body).expect("YAML");
    assert_eq!(statusz["kind"], "Statusz");
    assert_eq!(
        statusz["binaryVersion"],
        crate::version::BUILD.git_version.trim_start_matches('v')
    );
    // Listed as upstream lists them: what was served before /statusz.
    assert_eq!(
        statusz["paths"],
        serde_json::json!([
            "/configz",
            "/flagz",
            "/healthz",
            "/metrics",
            "/proxyMode"
        ])
    );
    let started = statusz["startTime"].as_str().expect("startTime");
    assert!(
        started.ends_with('Z') && !started.contains('.'),
        "{started}"
    );
    assert!(statusz["uptimeSeconds"].as_u64().is_some(), "{statusz}");
    assert_eq!(
        statusz["emulationVersion"].as_str(),
        exporter::behaving_as_release()
            .map(|k| format!("{}.{}", k.major, k.minor))
            .as_deref(),
    );
    let text = get(addr, "/statusz").await.expect("/statusz");
    assert!(
        text.body.starts_with("\nkube-proxy statusz\nWarning: "),
        "{}",
        text.body
    );
    for label in ["Started", "Up", "Binary version", "Paths"] {
        assert!(
            text.body.lines().any(|l| l.starts_with(label)),
            "no {label} in {}",
            text.body
        );
    }
}

fn nsn(name: &str) -> NamespacedName {
    NamespacedName::new("shop", name)
}

/// Waits until nothing accepts on `addr`: closing is asynchronous (the
/// listener goes when its task is dropped).
async fn assert_closes(addr: SocketAddr) {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{addr} still accepts connections");
}

/// IPv4 local endpoints only.
fn v4(ipv4: usize) -> LocalCounts {
    LocalCounts { ipv4, ipv6: 0 }
}

fn service_health(health: &Arc<ProxyHealth>) -> ServiceHealthServer {
    ServiceHealthServer::new(
        vec![Ipv4Addr::LOCALHOST.into()],
        vec![IpFamily::V4],
        Arc::clone(health),
    )
    .expect("inside the runtime")
}

fn only_addr(
    server: &ServiceHealthServer,
    name: &NamespacedName,
) -> SocketAddr {
    let addrs = server.local_addrs(name).expect("health check is open");
    assert_eq!(addrs.len(), 1, "{addrs:?}");
    addrs[0]
}

#[tokio::test]
async fn service_health_answers_with_the_local_endpoint_count() {
    let clock = ManualClock::at(T0);
    let health = health_at(&clock);
    health.updated();
    let server = service_health(&health);
    let web = nsn("web");
    // Port 0: the kernel picks a free one, read back below.
    assert_eq!(server.sync_services(&HashMap::from([(web.clone(), 0)])), 0);
    let addr = only_addr(&server, &web);

    let none = get(addr, "/").await.expect("probe");
    assert_eq!(none.status, 503);
    assert_eq!(
        none.body,
        "{\n\t\"service\": {\n\t\t\"namespace\": \"shop\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 0,\n\t\"serviceProxyHealthy\": true\n}"
    );
    assert_eq!(none.header("x-load-balancing-endpoint-weight"), Some("0"));

    server.sync_endpoints(&HashMap::from([(web.clone(), v4(2))]));
    let two = get(addr, "/healthz").await.expect("probe");
    assert_eq!(two.status, 200);
    assert_eq!(
        two.body,
        "{\n\t\"service\": {\n\t\t\"namespace\": \"shop\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}"
    );
    assert_eq!(two.header("x-load-balancing-endpoint-weight"), Some("2"));
    assert_eq!(two.header("content-type"), Some("application/json"));
    assert_eq!(two.header("x-content-type-options"), Some("nosniff"));

    // A stuck proxy fails the check even with endpoints.
    clock.set(T0 + 1, 0);
    health.queued_update();
    clock.set(T0 + 1 + 60, 0);
    let stale = get(addr, "/").await.expect("probe");
    assert_eq!(stale.status, 503);
    assert!(
        stale.body.ends_with("\"serviceProxyHealthy\": false\n}"),
        "{}",
        stale.body
    );
    assert_eq!(stale.header("x-load-balancing-endpoint-weight"), Some("2"));

    // Endpoints missing from the map count as none.
    health.updated();
    server.sync_endpoints(&HashMap::new());
    assert_eq!(get(addr, "/").await.expect("probe").status, 503);
}

#[tokio::test]
async fn service_health_opens_and_closes_listeners_as_services_come_and_go() {
    let health = health_at(&ManualClock::at(T0));
    let server = service_health(&health);
    let (web, api) = (nsn("web"), nsn("api"));
    server.sync_services(&HashMap::from([(web.clone(), 0), (api.clone(), 0)]));
    let web_addr = only_addr(&server, &web);
    let api_addr = only_addr(&server, &api);
    assert_eq!(get(web_addr, "/").await.expect("web").status, 503);
    assert_eq!(get(api_addr, "/").await.expect("api").status, 503);

    // api goes away; web stays on the same listener.
    server.sync_services(&HashMap::from([(web.clone(), 0)]));
    assert_closes(api_addr).await;
    assert_eq!(server.local_addrs(&api), None);
    assert_eq!(only_addr(&server, &web), web_addr);
    assert!(get(web_addr, "/").await.is_ok());

    // web moves to another port: the old listener closes.
    let moved = std::net::TcpListener::bind(LOOPBACK).expect("free port");
    let port = moved.local_addr().expect("bound").port();
    drop(moved);
    server.sync_services(&HashMap::from([(web.clone(), port)]));
    assert_closes(web_addr).await;
    assert_eq!(only_addr(&server, &web).port(), port);

    server.sync_services(&HashMap::new());
    assert_closes(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)).await;
    assert!(server.open_services().is_empty());
}

#[tokio::test]
async fn service_health_listen_failure_is_counted_and_retried() {
    let recorder = exporter::recorder().expect("buckets are not empty");
    let metrics = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let health = health_at(&ManualClock::at(T0));
    let server = service_health(&health);
    let (web, api) = (nsn("web"), nsn("api"));
    let blocker = std::net::TcpListener::bind(LOOPBACK).expect("free port");
    let port = blocker.local_addr().expect("bound").port();
    let wanted = HashMap::from([(web.clone(), port), (api.clone(), 0)]);

    assert_eq!(server.sync_services(&wanted), 1);
    assert!(server.retry_pending());
    assert_eq!(server.local_addrs(&web), None);
    // The other service opened regardless.
    assert!(server.local_addrs(&api).is_some());
    server.sync_endpoints(&HashMap::from([(web.clone(), v4(1))]));
    let text = metrics.render();
    assert!(
        text.lines()
            .any(|l| l
                == "kube_ipvs_proxy_service_health_listen_failures_total 1"),
        "{text}"
    );

    drop(blocker);
    assert_eq!(server.sync_services(&wanted), 0);
    assert!(!server.retry_pending());
    let addr = only_addr(&server, &web);
    assert_eq!(addr.port(), port);
    // The count given while it could not open is not lost.
    let reply = get(addr, "/").await.expect("probe");
    assert_eq!(reply.header("x-load-balancing-endpoint-weight"), Some("1"));
}

#[test]
fn health_check_ports_and_local_endpoints_come_from_the_maps() {
    let port = |name: &str, p: &str| {
        ServicePortName::new("shop", name, p, Protocol::Tcp)
    };
    let services = HashMap::from([
        (
            port("web", "http"),
            Arc::new(port_info(|i| i.health_check_node_port = 31000)),
        ),
        (
            port("web", "https"),
            Arc::new(port_info(|i| i.health_check_node_port = 31000)),
        ),
        (port("api", "http"), Arc::new(port_info(|_| {}))),
    ]);
    assert_eq!(
        health_check_node_ports(&services),
        HashMap::from([(nsn("web"), 31000)])
    );

    let local = |ip: &str, p: u16| ep(ip, p, |e| e.is_local = true);
    let endpoints = HashMap::from([
        (
            port("web", "http"),
            vec![
                local("198.19.0.1", 80),
                local("198.19.0.2", 80),
                ep("198.19.1.1", 80, |_| {}),
                ep("198.19.0.3", 80, |e| {
                    e.is_local = true;
                    e.ready = false;
                }),
            ],
        ),
        // Another port of the same pods: distinct ip:port, so counted.
        (port("web", "https"), vec![local("198.19.0.1", 443)]),
        (port("api", "http"), vec![ep("198.19.1.2", 80, |_| {})]),
    ]);
    assert_eq!(
        local_ready_endpoints(&endpoints),
        HashMap::from([(nsn("web"), v4(3))])
    );
}

#[test]
fn the_health_check_index_follows_changed_ports_like_a_full_walk() {
    use super::service_health::HealthCheckIndex;

    let nsn = |name: &str| NamespacedName::new("shop", name);
    let port = |name: &str, p: &str| {
        ServicePortName::new("shop", name, p, Protocol::Tcp)
    };
    let local = |ip: &str, p: u16| ep(ip, p, |e| e.is_local = true);
    let mut services = HashMap::from([
        (
            port("web", "http"),
            Arc::new(port_info(|i| i.health_check_node_port = 31000)),
        ),
        (
            port("web", "https"),
            Arc::new(port_info(|i| i.health_check_node_port = 31000)),
        ),
        (port("api", "http"), Arc::new(port_info(|_| {}))),
    ]);
    let mut endpoints = HashMap::from([
        (
            port("web", "http"),
            vec![local("198.19.0.1", 80), ep("198.19.1.1", 80, |_| {})],
        ),
        (
            port("web", "https"),
            vec![local("198.19.0.1", 443), local("198.19.0.2", 443)],
        ),
        (port("api", "http"), vec![local("198.19.0.9", 80)]),
    ]);
    // What a full walk says, for the services that have a health check.
    let full = |s: &crate::model::ServicePortMap,
                e: &crate::model::EndpointsMap| {
        let wanted = health_check_node_ports(s);
        let local = local_ready_endpoints(e);
        let counts: HashMap<NamespacedName, LocalCounts> = wanted
            .keys()
            .map(|n| (n.clone(), local.get(n).copied().unwrap_or_default()))
            .collect();
        (wanted, counts)
    };

    let mut index = HealthCheckIndex::default();
    let all: Vec<ServicePortName> = services.keys().cloned().collect();
    assert!(index.update(&all, &services, &endpoints));
    assert_eq!(
        (index.wanted(), index.local_counts()),
        full(&services, &endpoints)
    );
    assert_eq!(index.local_counts(), HashMap::from([(nsn("web"), v4(3))]));

    // Nothing new for these ports: nothing moves.
    assert!(!index.update(&all, &services, &endpoints));

    // The https port goes: its endpoints leave the count, the health
    // check stays for the other port.
    services.remove(&port("web", "https"));
    endpoints.remove(&port("web", "https"));
    assert!(index.update([&port("web", "https")], &services, &endpoints));
    assert_eq!(
        (index.wanted(), index.local_counts()),
        full(&services, &endpoints)
    );
    assert_eq!(index.local_counts(), HashMap::from([(nsn("web"), v4(1))]));

    // The last port with a health check goes: none is wanted any more.
    services.remove(&port("web", "http"));
    endpoints.remove(&port("web", "http"));
    assert!(index.update([&port("web", "http")], &services, &endpoints));
    assert!(index.wanted().is_empty());
    assert!(index.local_counts().is_empty());
}

/// The example ETP=Local load balancer, its health check moved to
/// `port`, fed through a sync state as the daemon does.
fn load_balancer_state(
    port: u16,
) -> (crate::sync::SyncState, k8s_openapi::api::core::v1::Node) {
    use crate::{
        source::file,
        sync::{NodeSettings, SyncState},
    };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/plan/loadbalancer-local.yaml");
    let mut snapshot = file::load(&path).expect("example parses");
    for svc in &mut snapshot.services {
        if let Some(spec) = svc.spec.as_mut() {
            spec.health_check_node_port = Some(i32::from(port));
        }
    }
    let mut state = SyncState::new(
        "node-a",
        NodeSettings::default(),
        Some(vec!["198.18.100.1".parse().expect("address")]),
        SystemTime::now(),
    );
    let node = snapshot.nodes[0].clone();
    state.apply_snapshot(&snapshot);
    (state, node)
}

#[tokio::test]
async fn reporter_keeps_health_and_health_check_ports_in_step_with_syncs() {
    use crate::source::store::ObjectChange;

    let clock = ManualClock::at(T0);
    let health = health_at(&clock);
    let server = service_health(&health);
    let reporter =
        super::SyncReporter::new(Arc::clone(&health), Some(server.clone()));
    let blocker = std::net::TcpListener::bind(LOOPBACK).expect("free port");
    let port = blocker.local_addr().expect("bound").port();
    let (mut state, node) = load_balancer_state(port);
    let shop = NamespacedName::new("default", "shop");

    reporter.queued();
    clock.set(T0 + 1, 0);
    let outcome = state.sync();
    reporter.changed(&state, &outcome);
    reporter.synced(&state, &outcome, Duration::from_millis(2));
    let after_first = health.health();
    assert!(after_first.healthy);
    assert_eq!(
        after_first
            .status
            .get(&IpFamily::V4)
            .map(|s| s.last_updated),
        Some(UNIX_EPOCH + Duration::from_secs(T0 + 1))
    );
    // The port was taken: not open, but remembered for a retry.
    assert_eq!(server.local_addrs(&shop), None);
    assert!(server.retry_pending());

    // Nothing changed since, yet the next sync retries the port.
    drop(blocker);
    let outcome = state.sync();
    assert!(outcome.deltas.is_empty());
    reporter.changed(&state, &outcome);
    reporter.synced(&state, &outcome, Duration::from_millis(1));
    let addr = only_addr(&server, &shop);
    let reply = get(addr, "/").await.expect("probe");
    // One of the two endpoints is on node-a.
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("x-load-balancing-endpoint-weight"), Some("1"));

    // The autoscaler marks the node for deletion.
    let mut tainted = node.clone();
    tainted
        .spec
        .get_or_insert_with(Default::default)
        .taints
        .get_or_insert_with(Vec::new)
        .push(k8s_openapi::api::core::v1::Taint {
            key: "ToBeDeletedByClusterAutoscaler".to_owned(),
            effect: "NoSchedule".to_owned(),
            ..Default::default()
        });
    state.apply_objects(&ObjectChange::Node {
        previous: Some(Arc::new(node)),
        current: Some(Arc::new(tainted)),
    });
    assert!(health.node_eligible());
    let outcome = state.sync();
    reporter.changed(&state, &outcome);
    reporter.synced(&state, &outcome, Duration::from_millis(1));
    assert!(!health.node_eligible());
}

#[tokio::test]
async fn the_ipv4_wildcard_listens_dual_stack_like_go() {
    let health = health_at(&ManualClock::at(T0));
    let server = Server::bind(
        "healthz",
        SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0),
        healthz::router(health),
    )
    .await
    .expect("wildcard port");
    let port = server.local_addr().port();
    let v4 = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port);
    assert_eq!(get(v4, "/livez").await.expect("over IPv4").status, 200);
    if server.local_addr().is_ipv6() {
        let v6 = SocketAddr::new(std::net::Ipv6Addr::LOCALHOST.into(), port);
        assert_eq!(get(v6, "/livez").await.expect("over IPv6").status, 200);
    } else {
        // Only a host without IPv6 falls back to an IPv4 socket.
        assert!(std::net::TcpListener::bind("[::1]:0").is_err());
    }
}

#[tokio::test]
async fn the_daemon_reports_queued_and_applied_syncs() {
    use futures::StreamExt;
    use kube::runtime::watcher::Event;

    use crate::{
        backend::NoKernel,
        daemon::{self, LoopSettings},
        source::{file, SourceEvent},
        sync::{NodeSettings, SyncState},
    };

    let recorder = exporter::recorder().expect("buckets are not empty");
    let metrics = recorder.handle();
    // Current-thread runtime: the daemon's tasks record here too.
    let _local = metrics::set_default_local_recorder(&recorder);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/plan/loadbalancer-local.yaml");
    let snapshot = file::load(&path).expect("example parses");
    let mut events = Vec::new();
    events.push(SourceEvent::Node(Event::Init));
    events.extend(
        snapshot
            .nodes
            .iter()
            .cloned()
            .map(|n| SourceEvent::Node(Event::InitApply(n))),
    );
    events.push(SourceEvent::Node(Event::InitDone));
    events.push(SourceEvent::Service(Event::Init));
    events.extend(
        snapshot
            .services
            .iter()
            .cloned()
            .map(|s| SourceEvent::Service(Event::InitApply(s))),
    );
    events.push(SourceEvent::Service(Event::InitDone));
    events.push(SourceEvent::EndpointSlice(Event::Init));
    events.extend(
        snapshot
            .endpoint_slices
            .iter()
            .cloned()
            .map(|s| SourceEvent::EndpointSlice(Event::InitApply(s))),
    );
    events.push(SourceEvent::EndpointSlice(Event::InitDone));
    // The source stays open, as a watch does.
    let source =
        futures::stream::iter(events).chain(futures::stream::pending());

    let health = Arc::new(ProxyHealth::new(2 * SYNC_PERIOD));
    let reporter = super::SyncReporter::new(Arc::clone(&health), None);
    let state = SyncState::new(
        "node-a",
        NodeSettings::default(),
        None,
        SystemTime::now(),
    );
    let daemon = tokio::spawn(daemon::run(
        daemon::Feed::start(
            daemon::Source::objects(source),
            "node-a",
            &tokio::runtime::Handle::current(),
        ),
        state,
        NoKernel,
        LoopSettings {
            min_sync_period: Duration::ZERO,
            sync_period: SYNC_PERIOD,
        },
        reporter,
    ));
    let mut synced = false;
    for _ in 0..500 {
        if !health.health().status.is_empty() {
            synced = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    daemon.abort();
    assert!(synced, "no sync reported within 5 s");
    let health_now = health.health();
    assert!(health_now.healthy);
    assert_eq!(
        health_now.status.keys().copied().collect::<Vec<_>>(),
        [IpFamily::V4]
    );
    let text = metrics.render();
    for prefix in [
        r#"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"} "#,
        r#"kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} "#,
        r#"kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} "#,
        // The example's load balancer has a local endpoint.
        r#"kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="external"} 0"#,
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(prefix)),
            "no {prefix:?} in\n{text}"
        );
    }
}

#[test]
fn health_checks_listen_on_the_node_port_addresses_that_exist_here() {
    let local: Vec<std::net::IpAddr> =
        ["198.18.100.1", "10.0.2.15", "2001:db8::1"]
            .iter()
            .map(|ip| ip.parse().expect("fixture address"))
            .collect();
    let cidr =
        |net: &str| NodePortAddress::Cidr(net.parse().expect("fixture CIDR"));
    let ip =
        |ip: &str| -> std::net::IpAddr { ip.parse().expect("fixture address") };
    let cases: Vec<(&str, Vec<NodePortAddress>, Vec<std::net::IpAddr>)> = vec![
        ("unset: everywhere", vec![], vec![]),
        (
            "a range: its local addresses",
            vec![cidr("198.18.0.0/15")],
            vec![ip("198.18.100.1")],
        ),
        (
            "two families, overlapping ranges: each address once",
            vec![
                cidr("198.18.100.0/24"),
                cidr("198.18.0.0/15"),
                cidr("2001:db8::/64"),
            ],
            vec![ip("198.18.100.1"), ip("2001:db8::1")],
        ),
        (
            "no match: everywhere, as upstream",
            vec![cidr("203.0.113.0/24")],
            vec![],
        ),
        (
            "primary: everywhere (the Node is not known yet)",
            vec![cidr("198.18.0.0/15"), NodePortAddress::Primary],
            vec![],
        ),
    ];
    for (case, wanted, want) in cases {
        assert_eq!(listen_addresses(&wanted, &local), want, "{case}");
    }
}

#[tokio::test]
async fn every_trigger_time_counts_as_one_programmed_change() {
    let clock = ManualClock::at(T0);
    let health = health_at(&clock);
    let reporter = super::SyncReporter::new(Arc::clone(&health), None);
    let (mut state, _) = load_balancer_state(0);
    let mut outcome = state.sync();
    // One change made 5 s ago, one stamped ahead of our clock (another
    // node's clock, or a time rounded up to the second).
    outcome.endpoints.last_change_trigger_times.insert(
        NamespacedName::new("default", "shop"),
        vec![
            UNIX_EPOCH + Duration::from_secs(T0 - 5),
            UNIX_EPOCH + Duration::from_secs(T0 + 10),
        ],
    );
    let recorder = exporter::recorder().expect("buckets are not empty");
    metrics::with_local_recorder(&recorder, || {
        reporter.synced(&state, &outcome, Duration::from_millis(1));
    });
    let text = recorder.handle().render();
    for line in [
        r#"kubeproxy_network_programming_duration_seconds_count{ip_family="IPv4"} 2"#,
        r#"kubeproxy_network_programming_duration_seconds_sum{ip_family="IPv4"} 5"#,
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
}

/// A probe is answered while the loop's thread is busy: the servers run
/// on a thread of their own. Under load a sync outlasted the kubelet's
/// one-second liveness probe, and a proxy whose probes waited for its
/// syncs was killed in the middle of Kubernetes' own e2e suite.
#[tokio::test]
async fn a_probe_is_answered_while_the_loop_is_busy() {
    let health = health_at(&ManualClock::at(T0));
    let server = Server::bind("healthz", LOOPBACK, healthz::router(health))
        .await
        .expect("loopback port");
    let address = server.local_addr();
    let probe = std::thread::spawn(move || -> std::io::Result<String> {
        let budget = Duration::from_secs(1);
        let mut stream =
            std::net::TcpStream::connect_timeout(&address, budget)?;
        stream.set_read_timeout(Some(budget))?;
        stream.write_all(b"GET /livez HTTP/1.0\r\nHost: probe\r\n\r\n")?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer)
    });
    // The test's runtime has one thread, as the proxy's loop has: a
    // sync holds it (here, for three seconds).
    std::thread::sleep(Duration::from_secs(3));
    let answer = probe.join().expect("the probe's thread").expect("answered");
    assert!(answer.contains(" 200 "), "{answer}");
}

/// `bindAddressHardFail`: a port that is taken is the caller's error at
/// once, naming the server and the address; a free one is served.
#[tokio::test]
async fn hard_fail_servers_report_a_taken_port_and_serve_a_free_one() {
    let taken = std::net::TcpListener::bind(LOOPBACK).unwrap();
    let address = taken.local_addr().unwrap();
    let health = health_at(&ManualClock::at(T0));
    let refused =
        super::spawn_bound("healthz", address, healthz::router(health.clone()));
    let message = refused.map(|_| ()).unwrap_err().to_string();
    assert!(
        message
            .starts_with(&format!("healthz server cannot listen on {address}")),
        "{message}"
    );
    drop(taken);
    let served =
        super::spawn_bound("healthz", address, healthz::router(health));
    assert!(served.is_ok(), "{served:?}");
    let reply = get(address, "/livez").await.unwrap();
    assert!(
        reply.status == 200 || reply.status == 503,
        "{}",
        reply.status
    );
}

/// kube-proxy since 1.36: each family's health check listens on its own
/// wildcard and counts its own family's local endpoints.
#[tokio::test]
async fn each_family_has_its_own_health_check_listener_and_count() {
    let clock = ManualClock::at(T0);
    let health = health_at(&clock);
    health.updated();
    let web = nsn("web");
    // A free port for both families: bound on IPv4 here, then freed.
    let port = std::net::TcpListener::bind("0.0.0.0:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();

    // An IPv4-only node listens on IPv4 alone, as upstream's tcp4 server.
    let v4_only = ServiceHealthServer::new(
        vec![],
        vec![IpFamily::V4],
        Arc::clone(&health),
    )
    .unwrap();
    assert_eq!(
        v4_only.sync_services(&HashMap::from([(web.clone(), port)])),
        0
    );
    assert_eq!(
        v4_only.local_addrs(&web).unwrap(),
        [SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))]
    );

    // Dual-stack needs the IPv6 stack, which the guest has. A port free
    // on both (Linux binds `[::]` for both families), since the IPv4-only
    // server's port closes only once its task is dropped.
    let Ok(port) = std::net::TcpListener::bind("[::]:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
    else {
        eprintln!("no IPv6 here: the dual-stack half is the guest's");
        return;
    };
    let both = ServiceHealthServer::new(
        vec![],
        vec![IpFamily::V4, IpFamily::V6],
        Arc::clone(&health),
    )
    .unwrap();
    assert_eq!(both.sync_services(&HashMap::from([(web.clone(), port)])), 0);
    let mut addrs = both.local_addrs(&web).unwrap();
    addrs.sort();
    assert_eq!(
        addrs,
        [
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)),
            SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)),
        ]
    );
    both.sync_endpoints(&HashMap::from([(
        web.clone(),
        LocalCounts { ipv4: 0, ipv6: 2 },
    )]));
    let over_v4 = get(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), "/")
        .await
        .unwrap();
    assert_eq!(over_v4.status, 503, "no IPv4 endpoint: {}", over_v4.body);
    assert!(
        over_v4.body.contains("\"localEndpoints\": 0"),
        "{}",
        over_v4.body
    );
    let over_v6 =
        get(SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port)), "/")
            .await
            .unwrap();
    assert_eq!(over_v6.status, 200, "{}", over_v6.body);
    assert!(
        over_v6.body.contains("\"localEndpoints\": 2"),
        "{}",
        over_v6.body
    );
}

#[test]
fn local_counts_split_by_family() {
    let port = ServicePortName::new("shop", "web", "http", Protocol::Tcp);
    let local = |ip: &str| ep(ip, 80, |e| e.is_local = true);
    let endpoints = HashMap::from([(
        port,
        vec![
            local("198.19.0.1"),
            local("2001:db8::1"),
            local("2001:db8::2"),
        ],
    )]);
    assert_eq!(
        local_ready_endpoints(&endpoints),
        HashMap::from([(nsn("web"), LocalCounts { ipv4: 1, ipv6: 2 })])
    );
}
