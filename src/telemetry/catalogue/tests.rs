use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::Path,
};

use std::fmt::Write as _;

use pretty_assertions::assert_eq;

use super::*;
use crate::telemetry::process;

fn bucket_list(buckets: &[f64]) -> String {
    let shown: Vec<String> = buckets.iter().map(f64::to_string).collect();
    shown.join(", ")
}

fn table(out: &mut String, metrics: &[&Metric]) {
    let _ = writeln!(out, "| metric | type | labels | help |");
    let _ = writeln!(out, "|---|---|---|---|");
    for metric in metrics {
        let labels: Vec<String> =
            metric.labels.iter().map(|l| format!("`{l}`")).collect();
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} |",
            metric.name,
            metric.kind.as_str(),
            if labels.is_empty() {
                "none".to_owned()
            } else {
                labels.join(", ")
            },
            metric.help
        );
    }
}

/// client-go's families kube-proxy registers and this proxy does not
/// record, in component-base's order (v0.37.2).
const CLIENT_GO_UNSERVED: &[&str] = &[
    "rest_client_dns_resolution_duration_seconds",
    "rest_client_request_size_bytes",
    "rest_client_response_size_bytes",
    "rest_client_rate_limiter_duration_seconds",
    "rest_client_request_retries_total",
    "rest_client_exec_plugin_ttl_seconds",
    "rest_client_exec_plugin_certificate_rotation_age",
    "rest_client_exec_plugin_call_total",
    "rest_client_exec_plugin_policy_call_total",
    "rest_client_transport_cache_entries",
    "rest_client_transport_create_calls_total",
    "rest_client_transport_ca_reload_total",
    "rest_client_transport_cert_rotation_gc_calls_total",
    "rest_client_transport_cache_gc_calls_total",
];

/// The page says which of client-go's families are not served: none of
/// them may be recorded.
#[test]
fn the_client_go_families_said_unserved_are_not_recorded() {
    let recorded: Vec<&str> = recorded().iter().map(|m| m.name).collect();
    for name in CLIENT_GO_UNSERVED {
        assert!(!recorded.contains(name), "{name} is recorded");
    }
}

/// `docs/metrics.md`, as the code defines it.
fn markdown() -> String {
    let all = recorded();
    let mut out = String::new();
    out.push_str(
        "# Metrics\n\n\
         <!-- Generated from src/telemetry/catalogue.rs by its test: run\n\
         `UPDATE_DOCS=1 cargo test --lib telemetry::catalogue` after a change. -->\n\n\
         Served on `metricsBindAddress` (default `127.0.0.1:10249`) at\n\
         `/metrics`, in Prometheus' text format. Names, types, labels and\n\
         histogram buckets of kube-proxy's metrics are kube-proxy's, so its\n\
         dashboards and alerts keep working; the proxy's own carry the\n\
         `kube_ipvs_proxy_` prefix. A series with labels appears with its\n\
         first value, as upstream's; one without exists from start-up.\n\n\
         ## kube-proxy's\n\n",
    );
    let upstream: Vec<&Metric> = all
        .iter()
        .filter(|m| m.origin == Origin::Upstream)
        .collect();
    table(&mut out, &upstream);
    out.push_str(
        "\nkube-proxy's API client (client-go) registers more `rest_client_*`\n\
         families, which this proxy does not record (message sizes, retries,\n\
         client-go's rate limiter, DNS, exec credential plugins and\n\
         transport cache). At 1.37.2 they are ",
    );
    let unserved: Vec<String> = CLIENT_GO_UNSERVED
        .iter()
        .map(|n| format!("`{n}`"))
        .collect();
    out.push_str(&unserved.join(", "));
    out.push_str(
        "; the last three are new in 1.36 (`k8s.io/component-base`'s\n\
         `metrics/prometheus/restclient`).\n",
    );
    out.push_str("\n## The proxy's own\n\n");
    let ours: Vec<&Metric> =
        all.iter().filter(|m| m.origin == Origin::Ours).collect();
    table(&mut out, &ours);
    out.push_str(
        "\n## Process\n\n\
         As client_golang's process collector names them, read from\n\
         `/proc` at each scrape (the maximums and network bytes only where\n\
         the kernel gives them).\n\n\
         | metric | type | help |\n|---|---|---|\n",
    );
    for family in process::FAMILIES {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} |",
            family.name, family.kind, family.help
        );
    }
    out.push_str("\n## Histogram buckets\n\nUpper bounds, in seconds.\n\n");
    for metric in &all {
        if let Some(buckets) = &metric.buckets {
            let _ =
                writeln!(out, "- `{}`: {}", metric.name, bucket_list(buckets));
        }
    }
    out
}

/// docs/metrics.md is what the code defines. `UPDATE_DOCS=1` rewrites it.
#[test]
fn the_metrics_page_is_the_catalogue() {
    crate::docs_page::assert_page_is(
        "docs/metrics.md",
        &markdown(),
        "telemetry::catalogue",
    );
}

/// One `metrics::counter!(...)`, `gauge!` or `histogram!` in the source,
/// or one `handles::counter(...)`, `gauge` or `histogram`.
#[derive(Debug)]
struct Site {
    file: String,
    kind: Kind,
    constant: String,
    labels: BTreeSet<String>,
}

/// The text between the parenthesis at `open` and its match, string
/// literals skipped.
fn arguments(text: &str, open: usize) -> Option<&str> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text[open..].char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[open + 1..open + i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// The labels given as `("name", value)`, as the kept handles take them.
fn tuple_labels(arguments: &str) -> BTreeSet<String> {
    arguments
        .split("(\"")
        .skip(1)
        .filter_map(|rest| rest.split_once('"'))
        .map(|(name, _)| name.to_owned())
        .collect()
}

/// The labels given as `"name" => value`.
fn labels(arguments: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = arguments;
    while let Some(arrow) = rest.find("=>") {
        let before = rest[..arrow].trim_end();
        if let Some(literal) = before.strip_suffix('"') {
            if let Some(start) = literal.rfind('"') {
                out.insert(literal[start + 1..].to_owned());
            }
        }
        rest = &rest[arrow + 2..];
    }
    out
}

fn sites_in(file: &Path, text: &str, out: &mut Vec<Site>) {
    for (needle, kind) in [
        ("metrics::counter!", Kind::Counter),
        ("metrics::gauge!", Kind::Gauge),
        ("metrics::histogram!", Kind::Histogram),
        ("handles::counter", Kind::Counter),
        ("handles::gauge", Kind::Gauge),
        ("handles::histogram", Kind::Histogram),
    ] {
        let read_labels = if needle.ends_with('!') {
            labels
        } else {
            tuple_labels
        };
        for (at, _) in text.match_indices(needle) {
            let open = at + needle.len();
            let args = arguments(text, open).unwrap_or_else(|| {
                panic!("{}: unclosed {needle} at byte {at}", file.display())
            });
            // A path (`names::X`) names the constant by its last part.
            let first = args.split(',').next().unwrap_or_default().trim();
            let constant =
                first.rsplit("::").next().unwrap_or_default().to_owned();
            out.push(Site {
                file: file.display().to_string(),
                kind,
                constant,
                labels: read_labels(args),
            });
        }
    }
}

/// The recording sites of the product's code: tests record whatever they
/// check, so they are left out.
fn recording_sites() -> Vec<Site> {
    fn walk(dir: &Path, out: &mut Vec<Site>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "tests" {
                    walk(&path, out);
                }
            } else if name.ends_with(".rs") && name != "tests.rs" {
                let text = fs::read_to_string(&path).unwrap();
                sites_in(&path, &text, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&crate::docs_page::repo_file("src"), &mut out);
    out
}

/// Each place the code records a metric names it by its constant, with the
/// catalogue's type and exactly its labels; and each metric of the
/// catalogue is recorded somewhere.
#[test]
fn every_recording_site_matches_the_catalogue() {
    let catalogue: BTreeMap<&str, Metric> =
        recorded().into_iter().map(|m| (m.constant, m)).collect();
    let sites = recording_sites();
    assert!(sites.len() >= catalogue.len(), "{sites:#?}");
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for site in &sites {
        let Some(metric) = catalogue.get(site.constant.as_str()) else {
            problems.push(format!(
                "{}: `{}` is not a constant of the catalogue",
                site.file, site.constant
            ));
            continue;
        };
        seen.insert(metric.constant);
        if site.kind != metric.kind {
            problems.push(format!(
                "{}: {} recorded as a {}, listed as a {}",
                site.file,
                metric.name,
                site.kind.as_str(),
                metric.kind.as_str()
            ));
        }
        let listed: BTreeSet<String> =
            metric.labels.iter().map(|l| (*l).to_owned()).collect();
        if site.labels != listed {
            problems.push(format!(
                "{}: {} recorded with labels {:?}, listed with {:?}",
                site.file, metric.name, site.labels, listed
            ));
        }
    }
    for constant in catalogue.keys() {
        if !seen.contains(constant) {
            problems.push(format!("{constant} is listed but never recorded"));
        }
    }
    assert_eq!(problems, Vec::<String>::new());
}

/// The reader itself: a label list across lines, a nested call, a string
/// holding a parenthesis.
#[test]
fn recording_sites_are_read_with_their_labels() {
    let text = r#"
        metrics::counter!(
            KERNEL_OPERATIONS_TOTAL,
            "facility" => facility.as_str(),
            "op" => op,
        )
        .increment(n);
        metrics::gauge!(API_SIDE_VIEWS).set(f(")"));
        handles::gauge(
            names::SYNC_PROXY_RULES_NO_LOCAL_ENDPOINTS_TOTAL,
            &[("ip_family", family.as_str()), ("traffic_policy", policy)],
        )
        .set(n);
        handles::counter(names::ENDPOINT_CHANGES_TOTAL, &[]).increment(1);
    "#;
    let mut sites = Vec::new();
    sites_in(Path::new("x.rs"), text, &mut sites);
    let read: Vec<(&str, Vec<&str>)> = sites
        .iter()
        .map(|s| {
            (
                s.constant.as_str(),
                s.labels.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        read,
        [
            ("KERNEL_OPERATIONS_TOTAL", vec!["facility", "op"]),
            ("API_SIDE_VIEWS", vec![]),
            ("ENDPOINT_CHANGES_TOTAL", vec![]),
            (
                "SYNC_PROXY_RULES_NO_LOCAL_ENDPOINTS_TOTAL",
                vec!["ip_family", "traffic_policy"]
            ),
        ]
    );
    let kinds: Vec<Kind> = sites.iter().map(|s| s.kind).collect();
    assert_eq!(
        kinds,
        [Kind::Counter, Kind::Gauge, Kind::Counter, Kind::Gauge]
    );
}

/// The process families the page lists are those a scrape renders.
#[test]
fn the_listed_process_families_are_rendered() {
    let stats = process::ProcessStats {
        cpu_seconds: 1.0,
        open_fds: 1,
        max_fds: Some(2.0),
        virtual_memory_bytes: 1,
        virtual_memory_max_bytes: Some(2.0),
        resident_memory_bytes: 1,
        start_time_seconds: 1.0,
        network_receive_bytes: Some(1),
        network_transmit_bytes: Some(1),
    };
    let mut text = String::new();
    process::render(&stats, &mut text);
    process::render_tasks(1, &mut text);
    for family in process::FAMILIES {
        let line = format!("# TYPE {} {}", family.name, family.kind);
        assert!(text.contains(&line), "{line} missing in\n{text}");
    }
}
