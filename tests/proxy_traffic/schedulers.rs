//! Schedulers: every one the guest's kernel has, for the node and by a
//! Service's annotation, in `ipvsadm -Ln` and answering; a scheduler the
//! kernel lacks; a Service's scheduler changed in place under a live
//! connection and kept across a restart and a repair round; kube-router's
//! annotations; and `mh`'s fallback flag while a real server drains at
//! weight 0.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use testkit::{tcp_tally, PodSpec};

use super::harness::{
    endpoint_slice, ipvs_services, node, pods_on_8080, service, sh,
    weighted_real_servers, Cluster, Port, TIMEOUT,
};

/// The schedulers of the guest's 6.1 kernel (`tests/vm/modules` loads
/// them); `twos` came with 6.2.
const SCHEDULERS: &[&str] = &[
    "rr", "wrr", "lc", "wlc", "fo", "ovf", "lblc", "lblcr", "dh", "sh", "mh",
    "sed", "nq",
];

const PODS: [(&str, &str); 3] = [
    ("a", "198.19.20.2"),
    ("b", "198.19.20.3"),
    ("c", "198.19.20.4"),
];

fn pods() -> Vec<PodSpec> {
    pods_on_8080(&PODS)
}

fn ports() -> [Port; 1] {
    [Port::tcp("http", 80, 8080)]
}

/// Service `name` at `ip` over every pod, with `annotations`.
fn annotated(
    name: &str,
    ip: &str,
    annotations: &[(&str, &str)],
) -> [String; 2] {
    let plain = service(name, ip, &ports(), "");
    let listed: Vec<String> = annotations
        .iter()
        .map(|(k, v)| format!("{k:?}: {v:?}"))
        .collect();
    let doc = plain.replacen(
        &format!("metadata: {{name: {name}, namespace: default}}"),
        &format!(
            "metadata: {{name: {name}, namespace: default, annotations: {{{}}}}}",
            listed.join(", ")
        ),
        1,
    );
    let endpoints: Vec<(&str, &str)> =
        PODS.iter().map(|(_, ip)| (*ip, "node-a")).collect();
    [doc, endpoint_slice(name, &ports(), &endpoints)]
}

/// The scheduler and flags `ipvsadm -Ln` shows for `vip`
/// (`mh (mh-port)` as `["mh", "(mh-port)"]`), empty without it.
fn scheduling_of(vip: &str) -> anyhow::Result<Vec<String>> {
    Ok(ipvs_services()?
        .iter()
        .find(|line| line.split_whitespace().nth(1) == Some(vip))
        .map(|line| {
            line.split_whitespace().skip(2).map(str::to_owned).collect()
        })
        .unwrap_or_default())
}

/// The active connections the real servers of `vip` count: those of a
/// virtual server made again start at 0, whatever their pods still see.
fn active_connections(vip: &str) -> anyhow::Result<u64> {
    let table = sh(&format!("ipvsadm -Ln -t {vip}"))?;
    let mut active = 0;
    for line in table.lines() {
        let Some(rest) = line.trim_start().strip_prefix("->") else {
            continue;
        };
        // RemoteAddress:Port Forward Weight ActiveConn InActConn
        if let Some(n) = rest
            .split_whitespace()
            .nth(3)
            .and_then(|n| n.parse::<u64>().ok())
        {
            active += n;
        }
    }
    Ok(active)
}

/// [`SCHEDULERS`], and `twos` where the guest's kernel has it.
fn kernel_schedulers() -> anyhow::Result<Vec<&'static str>> {
    let mut all = SCHEDULERS.to_vec();
    if kernel_has("twos")? {
        all.push("twos");
    } else {
        eprintln!("schedulers: this kernel has no twos (6.2+), not tested");
    }
    Ok(all)
}

/// Whether the guest's kernel has `ip_vs_NAME`: the guest loads every
/// scheduler its kernel ships (tests/vm/modules), and the tests run on the
/// host's root, whose /lib/modules is not that kernel's.
fn kernel_has(scheduler: &str) -> anyhow::Result<bool> {
    Ok(Path::new(&format!("/sys/module/ip_vs_{scheduler}")).is_dir())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn every_scheduler_of_the_kernel_serves_as_the_nodes() -> anyhow::Result<()> {
    testkit::guest::require();
    let mut state = vec![node()];
    state.extend(annotated("web", "198.18.20.10", &[]));
    let mut cluster = Cluster::new("schedulers-node", &pods(), &state)?;
    let vip: SocketAddr = "198.18.20.10:80".parse()?;
    for scheduler in kernel_schedulers()? {
        cluster.start_proxy(&[&format!("--ipvs-scheduler={scheduler}")])?;
        let shown = scheduling_of("198.18.20.10:80")?;
        assert_eq!(
            shown.first().map(String::as_str),
            Some(scheduler),
            "{shown:?}"
        );
        let tally = tcp_tally(vip, 3, TIMEOUT)
            .with_context(|| format!("through {scheduler}"))?;
        assert_eq!(tally.values().sum::<usize>(), 3, "{scheduler}: {tally:?}");
        cluster.stop_proxy();
        cluster.cleanup()?;
    }
    Ok(())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn a_scheduler_the_kernel_lacks_stops_the_start_and_changes_nothing(
) -> anyhow::Result<()> {
    testkit::guest::require();
    let mut state = vec![node()];
    state.extend(annotated("web", "198.18.20.10", &[]));
    let mut cluster = Cluster::new("schedulers-missing", &pods(), &state)?;
    cluster.clear_log()?;
    cluster.spawn_proxy(&[], &["--ipvs-scheduler=nosuch"])?;
    let status = cluster.proxy_exit()?;
    let log = cluster.log()?;
    assert_eq!(status.code(), Some(69), "{log}");
    let said: Vec<&str> =
        log.lines().filter(|l| l.contains("ip_vs_nosuch")).collect();
    assert_eq!(said.len(), 1, "one line names the module:\n{log}");
    assert_eq!(ipvs_services()?, Vec::<String>::new(), "nothing programmed");
    assert!(
        sh("ip link show kube-ipvs0 2>&1 || true")?.contains("does not exist"),
        "kube-ipvs0 was made"
    );
    Ok(())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn every_scheduler_of_the_kernel_serves_by_annotation() -> anyhow::Result<()> {
    testkit::guest::require();
    let schedulers = kernel_schedulers()?;
    let mut state = vec![node()];
    for (i, scheduler) in schedulers.iter().enumerate() {
        state.extend(annotated(
            &format!("s-{scheduler}"),
            &format!("198.18.21.{}", i + 10),
            &[("kube-ipvs-proxy.io/scheduler", scheduler)],
        ));
    }
    // A scheduler the operator allows and the kernel lacks: the node's
    // runs instead.
    state.extend(annotated(
        "s-nosuch",
        "198.18.21.100",
        &[("kube-ipvs-proxy.io/scheduler", "nosuch")],
    ));
    let mut cluster = Cluster::new("schedulers-annotated", &pods(), &state)?;
    let allowed =
        format!("--ipvs-service-schedulers={},nosuch", schedulers.join(","));
    cluster.start_proxy(&[&allowed])?;
    for (i, scheduler) in schedulers.iter().enumerate() {
        let vip = format!("198.18.21.{}:80", i + 10);
        let shown = scheduling_of(&vip)?;
        assert_eq!(
            shown.first().map(String::as_str),
            Some(*scheduler),
            "{vip}"
        );
        let tally = tcp_tally(vip.parse()?, 3, TIMEOUT)
            .with_context(|| format!("through {scheduler}"))?;
        assert_eq!(tally.values().sum::<usize>(), 3, "{scheduler}: {tally:?}");
    }
    let first = |vip: &str| -> anyhow::Result<Option<String>> {
        Ok(scheduling_of(vip)?.into_iter().next())
    };
    assert_eq!(first("198.18.21.100:80")?.as_deref(), Some("rr"));
    let log = cluster.log()?;
    assert!(
        log.contains("annotated scheduler \"nosuch\": the kernel has none"),
        "{log}"
    );

    // The operator allows fewer: a scheduler the kernel has but the list
    // lacks gives way to the node's, and is said.
    cluster.stop_proxy();
    cluster.start_proxy(&["--ipvs-service-schedulers=rr,wrr"])?;
    // wrr's Service (allowed) and mh's (not), SCHEDULERS' 2nd and 11th.
    assert_eq!(first("198.18.21.11:80")?.as_deref(), Some("wrr"));
    assert_eq!(first("198.18.21.20:80")?.as_deref(), Some("rr"));
    let log = cluster.log()?;
    assert!(
        log.contains(
            "annotated scheduler \"mh\" is not among --ipvs-service-schedulers"
        ),
        "{log}"
    );
    Ok(())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn an_annotated_scheduler_changes_in_place_and_is_kept() -> anyhow::Result<()> {
    testkit::guest::require();
    let vip = "198.18.22.10:80";
    let with = |annotations: &[(&str, &str)]| {
        let mut state = vec![node()];
        state.extend(annotated("web", "198.18.22.10", annotations));
        state
    };
    let mut cluster = Cluster::new(
        "schedulers-in-place",
        &pods(),
        &with(&[("kube-ipvs-proxy.io/scheduler", "mh")]),
    )?;
    // Repair rounds every 2 s, so that one runs within the test.
    cluster.start_proxy(&["--ipvs-sync-period=2s"])?;
    assert_eq!(scheduling_of(vip)?, ["mh", "(mh-port)"]);

    let stream = TcpStream::connect_timeout(&vip.parse()?, TIMEOUT)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    let mut live = BufReader::new(stream);
    let mut greeting = String::new();
    live.read_line(&mut greeting)?;
    assert_eq!(
        active_connections(vip)?,
        1,
        "the live connection is counted"
    );

    cluster.write_state(&with(&[
        ("kube-ipvs-proxy.io/scheduler", "sh"),
        ("kube-ipvs-proxy.io/scheduler-flags", "sh-fallback,sh-port"),
    ]))?;
    cluster.wait_for("the scheduler changed", || {
        Ok(scheduling_of(vip)? == ["sh", "(sh-fallback,sh-port)"])
    })?;
    // Edited, not replaced: the connection lives on, to the same pod.
    live.get_mut().write_all(b"still there?\n")?;
    let mut echo = String::new();
    live.read_line(&mut echo)?;
    assert_eq!(echo, "still there?\n");
    assert_eq!(
        active_connections(vip)?,
        1,
        "the live connection is no longer counted: the virtual server was made again"
    );

    // A restart and a repair round leave it as it is.
    cluster.stop_proxy();
    cluster.start_proxy(&["--ipvs-sync-period=2s"])?;
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(scheduling_of(vip)?, ["sh", "(sh-fallback,sh-port)"]);

    // kube-router's annotations, as a Service moved from kube-router has
    // them.
    cluster.write_state(&with(&[
        ("kube-router.io/service.scheduler", "mh"),
        ("kube-router.io/service.schedflags", "flag-1,flag-2"),
    ]))?;
    cluster.wait_for("kube-router's scheduling", || {
        Ok(scheduling_of(vip)? == ["mh", "(mh-fallback,mh-port)"])
    })?;
    // Without annotations: upstream's.
    cluster.write_state(&with(&[]))?;
    cluster.wait_for("the node's scheduler", || {
        Ok(scheduling_of(vip)? == ["rr"])
    })?;
    live.get_mut().write_all(b"and now?\n")?;
    let mut echo = String::new();
    live.read_line(&mut echo)?;
    assert_eq!(echo, "and now?\n");
    Ok(())
}

/// `mh` keeps a real server at weight 0 in its table: without
/// `mh-fallback`, the connections hashed to it find no destination while
/// it drains; with it, another real server takes them.
#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn mh_fallback_serves_while_a_real_server_drains() -> anyhow::Result<()> {
    testkit::guest::require();
    let vip_text = "198.18.23.10:80";
    let vip: SocketAddr = vip_text.parse()?;
    let mut failed = Vec::new();
    for flags in ["", "mh-fallback,mh-port"] {
        let mut annotations = vec![("kube-ipvs-proxy.io/scheduler", "mh")];
        if !flags.is_empty() {
            annotations.push(("kube-ipvs-proxy.io/scheduler-flags", flags));
        }
        let mut all = vec![node()];
        all.extend(annotated("mh", "198.18.23.10", &annotations));
        let mut cluster = Cluster::new("schedulers-mh", &pods(), &all)?;
        cluster.start_proxy(&[])?;

        // A live connection to one pod, which then leaves: its real
        // server stays, at weight 0, while the connection lasts.
        let stream = TcpStream::connect_timeout(&vip, TIMEOUT)?;
        stream.set_read_timeout(Some(TIMEOUT))?;
        let mut live = BufReader::new(stream);
        let mut greeting = String::new();
        live.read_line(&mut greeting)?;
        let leaving = greeting.trim();
        let (_, leaving_ip) = PODS
            .iter()
            .find(|(name, _)| *name == leaving)
            .with_context(|| format!("greeted by {leaving:?}"))?;
        let staying: Vec<(&str, &str)> = PODS
            .iter()
            .filter(|(name, _)| *name != leaving)
            .map(|(_, ip)| (*ip, "node-a"))
            .collect();
        let mut after = vec![node()];
        after.push(annotated("mh", "198.18.23.10", &annotations)[0].clone());
        after.push(endpoint_slice("mh", &ports(), &staying));
        cluster.write_state(&after)?;
        let drained = (format!("{leaving_ip}:8080"), 0);
        cluster.wait_for("the leaving real server at weight 0", || {
            Ok(weighted_real_servers("-t", vip_text)?.contains(&drained))
        })?;

        // 1,000 new connections, each from its own port. One that finds
        // no destination is refused at once (IPVS answers ICMP port
        // unreachable, not rate-limited towards a local client).
        let mut failures = 0;
        let started = std::time::Instant::now();
        for i in 0..1000 {
            if i == 50 && started.elapsed() > Duration::from_secs(30) {
                anyhow::bail!(
                    "50 connections took {:?}: failures time out instead \
                     of being refused",
                    started.elapsed()
                );
            }
            let answered =
                TcpStream::connect_timeout(&vip, Duration::from_secs(1))
                    .and_then(|s| {
                        s.set_read_timeout(Some(TIMEOUT))?;
                        let mut line = String::new();
                        BufReader::new(s).read_line(&mut line).map(|n| n > 0)
                    })
                    .unwrap_or(false);
            if !answered {
                failures += 1;
            }
        }
        failed.push((flags, failures));
        drop(live);
    }
    let [(_, without), (_, with)] = failed[..] else {
        anyhow::bail!("two runs, not {failed:?}");
    };
    assert!(without > 0, "without mh-fallback none failed: {failed:?}");
    assert_eq!(with, 0, "with mh-fallback some failed: {failed:?}");
    eprintln!("mh: of 1,000 new connections, {without} failed without mh-fallback, {with} with it");
    Ok(())
}
