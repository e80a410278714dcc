//! `plan`, `list` and `explain` against the live API server, as an
//! on-call engineer runs them in the proxy's Pod with its flags: the plan
//! is what the running proxy programmed, `list` names every virtual
//! server, and `explain` finds the kernel agreeing.

use std::collections::BTreeSet;
use std::process::{Command, Output};

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::{env_path, sh, GuestCluster, NODE, PROXY};
use crate::scenarios::{
    endpoint, expect_serving, programming, wait_for, Cluster,
};

/// `kube-ipvs-proxy SUBCOMMAND` with the running proxy's flags.
fn one_shot(subcommand: &str, args: &[&str]) -> Result<String> {
    let output: Output = Command::new(PROXY)
        .arg(subcommand)
        .arg("--kubeconfig")
        .arg(env_path("E2E_PROXY_KUBECONFIG")?)
        .args(["--hostname-override", NODE])
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .with_context(|| format!("running {subcommand}"))?;
    anyhow::ensure!(
        output.status.success(),
        "{subcommand}: exit {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout)?)
}

/// `TCP 198.18.0.10:80` for each virtual server `ipvsadm -Ln` lists on
/// a [`steady`] address.
fn kernel_virtual_servers() -> Result<BTreeSet<String>> {
    Ok(sh("ipvsadm -Ln")?
        .lines()
        .filter(|l| ["TCP", "UDP", "SCTP"].iter().any(|p| l.starts_with(p)))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            Some(format!("{} {}", words.next()?, words.next()?))
        })
        .filter(|vs| steady(vs))
        .collect())
}

/// Each virtual server line of `list` with its note (after `  # `).
fn list_notes(listed: &str) -> Vec<(&str, &str)> {
    listed
        .lines()
        .filter(|l| ["TCP", "UDP", "SCTP"].iter().any(|p| l.starts_with(p)))
        .map(|l| l.split_once("  # ").unwrap_or((l, "")))
        .collect()
}

/// Whether a virtual server (`TCP 198.18.0.10:80`) is on a Service's
/// address or node0's, which are there before the proxy starts. The
/// guest's other addresses come and go with the netns pods' bridge; the
/// running proxy takes them in at its next repair round, a one-shot
/// command at once, so NodePorts on them may differ for a while.
fn steady(vs: &str) -> bool {
    let address = vs.split_whitespace().nth(1).unwrap_or_default();
    address.starts_with("198.18.") || address.starts_with("[2001:db8:42:")
}

#[test]
#[cfg_attr(
    not(all(feature = "kernel-tests", feature = "e2e-tests")),
    ignore = "needs the guest and the control plane: run `make e2e`"
)]
fn plan_list_and_explain_read_what_the_running_proxy_reads() -> Result<()> {
    let mut c = GuestCluster::new("e2e-inspect", 46)?;
    let ports = json!([{"name": "http", "port": 80, "targetPort": 8080}]);
    let ip = c.service("web", ports)?;
    let vs = endpoint(&ip, 80);
    let before = programming(c.node().as_ref())?;
    let pod = endpoint(&c.add_pod("web-1", "web", &[("http", 8080)])?, 8080);
    expect_serving(&c, "one pod", &vs, &[&pod], before)?;

    // The plan from the API server is what the proxy programmed. The
    // guest's other tests create and delete Services meanwhile, so the
    // two reads may straddle one of their changes: compare until they
    // agree; the last difference is named when they never do.
    wait_for(&c, "the plan and the kernel to agree", || {
        let plan: Value =
            serde_json::from_str(&one_shot("plan", &["--output", "json"])?)?;
        let planned: BTreeSet<String> = plan["virtualServers"]
            .as_array()
            .context("the plan has no virtual servers")?
            .iter()
            .map(|v| {
                let address = v["address"].as_str().unwrap_or_default();
                let port = v["port"].as_u64().unwrap_or_default();
                let protocol = v["protocol"].as_str().unwrap_or_default();
                format!("{protocol} {}", endpoint(address, port as u16))
            })
            .filter(|vs| steady(vs))
            .collect();
        let kernel = kernel_virtual_servers()?;
        anyhow::ensure!(
            planned == kernel,
            "planned, not in the kernel: {:?}; in the kernel, not planned: {:?}",
            planned.difference(&kernel).collect::<Vec<_>>(),
            kernel.difference(&planned).collect::<Vec<_>>()
        );
        Ok(true)
    })?;

    // Every virtual server named, this test's Service among them.
    let mut listed = String::new();
    wait_for(&c, "list to name every virtual server", || {
        listed = one_shot("list", &[])?;
        let notes = list_notes(&listed);
        let unnamed: Vec<&str> = notes
            .iter()
            .filter(|(line, note)| {
                steady(line)
                    && (note.is_empty() || note.starts_with("no Service"))
            })
            .map(|(line, _)| *line)
            .collect();
        anyhow::ensure!(
            !notes.is_empty() && unnamed.is_empty(),
            "not named: {unnamed:?}\n{listed}"
        );
        Ok(true)
    })?;
    let notes = list_notes(&listed);
    let web = notes
        .iter()
        .find(|(line, _)| line.split_whitespace().nth(1) == Some(vs.as_str()))
        .map(|(_, note)| *note);
    assert_eq!(web, Some("e2e-inspect/web:http clusterIP"), "{listed}");

    // The Service explained: its one pod used, and the kernel agreeing.
    let answer: Value = serde_json::from_str(&one_shot(
        "explain",
        &["--output", "json", "e2e-inspect/web"],
    )?)?;
    assert_eq!(answer["allEndpointsKnown"], true, "{answer:#}");
    let frontend = &answer["ports"][0]["frontends"][0];
    assert_eq!(frontend["kind"], "clusterIP", "{answer:#}");
    assert_eq!(frontend["endpoints"][0]["used"], true, "{answer:#}");
    let checks = answer["kernel"].as_array().cloned().unwrap_or_default();
    assert!(!checks.is_empty(), "{answer:#}");
    for check in checks {
        assert_eq!(check["differences"], json!([]), "{answer:#}");
    }
    Ok(())
}
