//! What an on-call engineer runs from the proxy's Pod, whose image has no
//! ipvsadm: `list`, the kernel's IPVS table as `ipvsadm -Ln` prints it,
//! each virtual server named by its Service, checked against ipvsadm
//! itself on the same kernel; `explain`, one Service's frontends with
//! every endpoint used or not and why, and the kernel's differences.

use std::net::TcpStream;

use serde_json::Value;
use testkit::PodSpec;

use super::harness::{
    endpoint_slice, endpoint_slice_with, node, pods_on_8080, service, sh,
    Cluster, Conditions, Port,
};

const PODS: [(&str, &str); 2] = [("a", "198.19.30.2"), ("b", "198.19.30.3")];

/// Where `list` ends the line of a virtual server and starts its note.
const NOTE: &str = "  # ";

fn pods() -> Vec<PodSpec> {
    pods_on_8080(&PODS)
}

/// `web`, a NodePort Service; `sticky`, with ClientIP affinity and `mh`
/// with both its flags by annotation: what ipvsadm prints after the
/// scheduler, in the order it prints it.
fn state() -> Vec<String> {
    let endpoints: Vec<(&str, &str)> =
        PODS.iter().map(|(_, ip)| (*ip, "node-a")).collect();
    let web = [Port::tcp("http", 80, 8080).node_port(30080)];
    let sticky_ports = [Port::tcp("http", 80, 8080)];
    let sticky = service(
        "sticky",
        "198.18.30.20",
        &sticky_ports,
        "  sessionAffinity: ClientIP\n",
    )
    .replacen(
        "metadata: {name: sticky, namespace: default}",
        "metadata: {name: sticky, namespace: default, annotations: \
         {kube-ipvs-proxy.io/scheduler: mh, \
         kube-ipvs-proxy.io/scheduler-flags: \"mh-fallback,mh-port\"}}",
        1,
    );
    vec![
        node(),
        service("web", "198.18.30.10", &web, ""),
        endpoint_slice("web", &web, &endpoints),
        sticky,
        endpoint_slice("sticky", &sticky_ports, &endpoints),
    ]
}

/// `list`'s text with the notes taken off, and the notes by line.
fn split_notes(listed: &str) -> (String, Vec<(String, String)>) {
    let mut table = String::new();
    let mut notes = Vec::new();
    for line in listed.lines() {
        match line.split_once(NOTE) {
            Some((kernel, note)) => {
                table.push_str(kernel);
                notes.push((kernel.to_owned(), note.to_owned()));
            }
            None => table.push_str(line),
        }
        table.push('\n');
    }
    (table, notes)
}

fn stdout(output: &std::process::Output) -> anyhow::Result<String> {
    anyhow::ensure!(
        output.status.success(),
        "exit {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout.clone())?)
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn list_prints_ipvsadms_table_with_each_virtual_server_named(
) -> anyhow::Result<()> {
    testkit::guest::require();
    let mut cluster = Cluster::new("inspection-list", &pods(), &state())?;
    cluster.start_proxy(&[])?;
    // Not the proxy's: `list` must say so, not name a Service.
    cluster.add_foreign("198.18.30.99:80", "198.19.30.2:8080")?;
    // A connection held open, so that the counts are not all zero.
    let _held = TcpStream::connect("198.18.30.10:80")?;

    let listed = stdout(&cluster.one_shot("list", &[])?)?;
    let ipvsadm = sh("ipvsadm -Ln")?;
    let (table, notes) = split_notes(&listed);
    assert_eq!(table, ipvsadm, "list:\n{listed}");

    let services: Vec<&str> = ipvsadm
        .lines()
        .filter(|l| l.starts_with("TCP") || l.starts_with("UDP"))
        .collect();
    assert_eq!(notes.len(), services.len(), "one note per virtual server");
    for (line, note) in &notes {
        let expected = if line.contains(" 198.18.30.10:80 ") {
            "default/web:http clusterIP"
        } else if line.contains(":30080 ") {
            "default/web:http nodePort"
        } else if line.contains(" 198.18.30.20:80 ") {
            "default/sticky:http clusterIP"
        } else {
            "no Service: not one the proxy programs"
        };
        assert_eq!(note, expected, "{line}");
    }
    let sticky = notes
        .iter()
        .find(|(line, _)| line.contains(" 198.18.30.20:80 "))
        .map(|(line, _)| line.as_str());
    assert_eq!(
        sticky,
        Some("TCP  198.18.30.20:80 mh (mh-fallback,mh-port) persistent 10800")
    );
    assert!(
        notes
            .iter()
            .any(|(line, _)| line.contains(" 198.18.30.99:80 ")),
        "the foreign virtual server is listed:\n{listed}"
    );

    // The same as JSON: every virtual server, named.
    let json: Value = serde_json::from_str(&stdout(
        &cluster.one_shot("list", &["--output", "json"])?,
    )?)?;
    let servers = json["virtualServers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(servers.len(), services.len(), "{json:#}");
    let web = servers
        .iter()
        .find(|vs| {
            vs["protocol"] == "TCP"
                && vs["address"] == "198.18.30.10"
                && vs["port"] == 80
        })
        .cloned()
        .unwrap_or_default();
    assert_eq!(web["service"], "default/web:http clusterIP", "{web:#}");
    let reals = web["realServers"].as_array().cloned().unwrap_or_default();
    assert_eq!(reals.len(), PODS.len(), "{web:#}");
    let active: u64 =
        reals.iter().filter_map(|r| r["activeConns"].as_u64()).sum();
    assert_eq!(active, 1, "the held connection: {web:#}");

    // With no source to read, the table still, unnamed, and a warning.
    let unnamed =
        std::process::Command::new(env!("CARGO_BIN_EXE_kube-ipvs-proxy"))
            .args(["list", "--state", "/nonexistent/state.yaml"])
            .env("NO_COLOR", "1")
            .output()?;
    let text = stdout(&unnamed)?;
    assert_eq!(text, sh("ipvsadm -Ln")?);
    let said = String::from_utf8_lossy(&unnamed.stderr);
    assert!(
        said.contains("without their Services")
            && said.contains("/nonexistent"),
        "{said}"
    );
    Ok(())
}

/// `explain default/NAME --output json`: its exit status and answer.
fn explain(cluster: &Cluster, name: &str) -> anyhow::Result<(i32, Value)> {
    let out = cluster.one_shot(
        "explain",
        &["--output", "json", &format!("default/{name}")],
    )?;
    let code = out.status.code().unwrap_or(-1);
    let text = String::from_utf8(out.stdout)?;
    let json = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Ok((code, json))
}

/// Each endpoint of the frontend `kind` as `address reason` (`used`).
fn uses(answer: &Value, kind: &str) -> Vec<String> {
    let frontends = answer["ports"][0]["frontends"].as_array().cloned();
    let Some(frontend) = frontends
        .unwrap_or_default()
        .into_iter()
        .find(|f| f["kind"] == kind)
    else {
        return Vec::new();
    };
    (frontend["endpoints"]
        .as_array()
        .cloned()
        .unwrap_or_default())
    .iter()
    .map(|e| {
        let why = e["reason"].as_str().unwrap_or("used");
        format!("{} {why}", e["address"].as_str().unwrap_or_default())
    })
    .collect()
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn explain_says_why_each_endpoint_is_used_or_not_and_what_the_kernel_lacks(
) -> anyhow::Result<()> {
    testkit::guest::require();
    let ports = [Port::tcp("http", 80, 8080).node_port(30081)];
    let not_ready = Conditions {
        ready: false,
        serving: false,
        terminating: false,
    };
    let state = vec![
        node(),
        service(
            "shop",
            "198.18.30.30",
            &ports,
            "  externalTrafficPolicy: Local\n",
        ),
        endpoint_slice_with(
            "shop",
            &ports,
            &[
                ("198.19.30.2", "node-a", Conditions::READY),
                ("198.19.30.3", "node-a", Conditions::READY),
                ("198.19.30.4", "node-b", not_ready),
                ("198.19.30.5", "node-b", Conditions::TERMINATING_SERVING),
            ],
        ),
    ];
    let mut cluster = Cluster::new("inspection-explain", &pods(), &state)?;
    cluster.start_proxy(&[])?;

    let (code, answer) = explain(&cluster, "shop")?;
    assert_eq!(code, 0, "{answer:#}");
    assert_eq!(
        uses(&answer, "clusterIP"),
        [
            "198.19.30.2 used",
            "198.19.30.3 used",
            "198.19.30.4 not-ready",
            "198.19.30.5 terminating",
        ],
        "{answer:#}"
    );
    assert_eq!(
        uses(&answer, "nodePort"),
        [
            "198.19.30.2 used",
            "198.19.30.3 used",
            "198.19.30.4 not-local",
            "198.19.30.5 not-local",
        ],
        "{answer:#}"
    );
    let checks = answer["kernel"].as_array().cloned().unwrap_or_default();
    assert!(!checks.is_empty(), "the kernel was read: {answer:#}");
    for check in &checks {
        assert_eq!(check["differences"], serde_json::json!([]), "{answer:#}");
    }

    // The kernel loses a real server while no proxy runs to put it back.
    cluster.stop_proxy();
    sh("ipvsadm -d -t 198.18.30.30:80 -r 198.19.30.2:8080")?;
    let (code, answer) = explain(&cluster, "shop")?;
    assert_eq!(code, 2, "{answer:#}");
    let said: Vec<String> = checks_of(&answer);
    assert_eq!(
        said,
        ["TCP 198.18.30.30:80: real server 198.19.30.2:8080 missing"],
        "{answer:#}"
    );

    let (code, answer) = explain(&cluster, "nosuch")?;
    assert_eq!(code, 1, "{answer}");
    assert_eq!(answer["found"], false, "{answer}");
    Ok(())
}

/// Every difference the answer's kernel part names, with its virtual
/// server.
fn checks_of(answer: &Value) -> Vec<String> {
    let checks = answer["kernel"].as_array().cloned().unwrap_or_default();
    checks
        .iter()
        .flat_map(|c| {
            let vs = c["virtualServer"].as_str().unwrap_or_default().to_owned();
            (c["differences"].as_array().cloned().unwrap_or_default())
                .into_iter()
                .map(move |d| {
                    format!("{vs}: {}", d.as_str().unwrap_or_default())
                })
        })
        .collect()
}
