//! What an on-call engineer runs from the proxy's Pod, whose image has no
//! ipvsadm: `list`, the kernel's IPVS table as `ipvsadm -Ln` prints it,
//! each virtual server named by its Service, checked against ipvsadm
//! itself on the same kernel.

use std::net::TcpStream;

use serde_json::Value;
use testkit::PodSpec;

use super::harness::{endpoint_slice, node, service, sh, Cluster, Port};

const PODS: [(&str, &str); 2] = [("a", "198.19.30.2"), ("b", "198.19.30.3")];

/// Where `list` ends the line of a virtual server and starts its note.
const NOTE: &str = "  # ";

fn pods() -> Vec<PodSpec> {
    PODS.iter()
        .map(|(name, ip)| {
            PodSpec::new(*name)
                .ip(ip.parse().expect("a fixture address"))
                .port(8080)
        })
        .collect()
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
