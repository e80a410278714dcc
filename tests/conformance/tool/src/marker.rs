//! The marker that tells the runner a proxy has synced a step, and the
//! wait for it.
//!
//! After each step (and after the EndpointSlice controller has caught up
//! with it) the host writes the marker: the dual-stack Service
//! `conformance-marker`'s port and its two hand-written slices' port
//! become 1000+STEP and 20000+STEP. Watch events of one kind reach a proxy
//! in order, so a proxy that has programmed marker N has seen everything
//! the step changed. Upstream's proxier deletes virtual servers it no
//! longer wants last in its sync, after every ipset, iptables and address
//! change; so marker N present and marker N-1 gone, in both families
//! (upstream's two proxiers sync apart), means the sync that took the step
//! in has finished. After a start, the proxy must also have finished a
//! sync of each family (its `kubeproxy_sync_proxy_rules_last_timestamp_
//! seconds`), since the marker may be there from before. Then the snapshot
//! must hold still.

use std::{
    net::{Ipv4Addr, Ipv6Addr, SocketAddr},
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::{
    marker_addresses::{REAL4, REAL6, VIP4, VIP6},
    snapshot,
};

pub fn port(step: u32) -> u32 {
    1000 + step
}

pub fn target(step: u32) -> u32 {
    20000 + step
}

/// The marker's objects for `step`, as a List for kubectl.
pub fn objects(step: u32) -> Value {
    let slice = |suffix: &str, family: &str, ip: String| {
        json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": format!("conformance-marker-{suffix}"),
                "labels": {"kubernetes.io/service-name": "conformance-marker"},
            },
            "addressType": family,
            "ports": [{"name": "marker", "port": target(step), "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": true}, "nodeName": "node-b"}],
        })
    };
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "conformance-marker"},
            "spec": {
                "clusterIP": VIP4.to_string(),
                "clusterIPs": [VIP4.to_string(), VIP6.to_string()],
                "ipFamilyPolicy": "RequireDualStack",
                "ipFamilies": ["IPv4", "IPv6"],
                "ports": [{"name": "marker", "port": port(step),
                           "targetPort": target(step), "protocol": "TCP"}],
            },
        },
        slice("4", "IPv4", REAL4.to_string()),
        slice("6", "IPv6", REAL6.to_string()),
    ]})
}

/// /proc/net/ip_vs's spelling of an address and port.
fn proc_v4(ip: Ipv4Addr, port: u32) -> String {
    format!("{:08X}:{port:04X}", u32::from(ip))
}

fn proc_v6(ip: Ipv6Addr, port: u32) -> String {
    let groups: Vec<String> =
        ip.segments().iter().map(|s| format!("{s:04x}")).collect();
    format!("[{}]:{port:04X}", groups.join(":"))
}

/// Which families hold the marker of `step` (virtual server and real
/// server), and which still hold any virtual server of the marker's
/// address on another port, in /proc/net/ip_vs's text.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MarkerState {
    pub present: [bool; 2],
    pub others: [bool; 2],
}

impl MarkerState {
    /// Step `step`'s marker is in, and the last step's gone, in the
    /// first `families` families (IPv4 first): a node without IPv6 has
    /// one.
    pub fn marked(&self, step: u32, families: usize) -> bool {
        let n = families.min(2);
        self.present[..n].iter().all(|p| *p)
            && (step == 0 || self.others[..n].iter().all(|o| !o))
    }
}

pub fn state(proc_ip_vs: &str, step: u32) -> MarkerState {
    let vips = [proc_v4(VIP4, port(step)), proc_v6(VIP6, port(step))];
    let reals = [proc_v4(REAL4, target(step)), proc_v6(REAL6, target(step))];
    let prefixes = [
        format!("TCP  {:08X}:", u32::from(VIP4)),
        format!("TCP  {}", proc_v6(VIP6, 0).trim_end_matches("0000")),
    ];
    let lines: Vec<&str> = proc_ip_vs.lines().collect();
    let mut state = MarkerState::default();
    for (i, line) in lines.iter().enumerate() {
        for family in 0..2 {
            let wanted = format!("TCP  {} ", vips[family]);
            if line.starts_with(&wanted) {
                let real = format!("  -> {} ", reals[family]);
                if lines.get(i + 1).is_some_and(|next| next.starts_with(&real))
                {
                    state.present[family] = true;
                }
            } else if line.starts_with(&prefixes[family]) {
                state.others[family] = true;
            }
        }
    }
    state
}

/// Each `kubeproxy_sync_proxy_rules_last_timestamp_seconds` sample.
fn last_syncs(metrics: &str) -> Vec<f64> {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("kubeproxy_sync_proxy_rules_last_timestamp_seconds")
        })
        .filter_map(|l| l.split_whitespace().last()?.parse().ok())
        .collect()
}

/// Every family has synced; with one family (a node without IPv6) the one
/// that can: a proxy may still export the other's series at 0.
fn synced_families(last_syncs: &[f64], families: usize) -> bool {
    if families < 2 {
        last_syncs.iter().any(|t| *t > 0.0)
    } else {
        last_syncs.len() >= families && last_syncs.iter().all(|t| *t > 0.0)
    }
}

fn metrics() -> Option<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], 10249));
    testkit::http_get(addr, "/metrics", Duration::from_secs(2))
        .ok()
        .map(|(_, body)| body)
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .to_owned();
            Some(state != "Z")
        })
        .unwrap_or(false)
}

pub struct Wait<'a> {
    pub step: u32,
    pub out: &'a Path,
    pub pid: Option<u32>,
    /// The proxy was started since its last step.
    pub fresh: bool,
    pub families: usize,
    pub timeout: Duration,
    /// Equal snapshots a second apart needed after the first.
    pub still: usize,
}

/// Waits as the module says; prints how long each part took. Fails,
/// with the last snapshot written, if the deadline passes first.
pub fn wait(w: &Wait) -> Result<()> {
    let start = Instant::now();
    let deadline = start + w.timeout;
    let check_alive = || -> Result<()> {
        if let Some(pid) = w.pid {
            if !alive(pid) {
                bail!("the proxy (pid {pid}) exited");
            }
        }
        Ok(())
    };
    loop {
        check_alive()?;
        let text =
            std::fs::read_to_string("/proc/net/ip_vs").unwrap_or_default();
        let s = state(&text, w.step);
        let marked = s.marked(w.step, w.families);
        let synced = !w.fresh || {
            let syncs = metrics().map(|m| last_syncs(&m)).unwrap_or_default();
            synced_families(&syncs, w.families)
        };
        if marked && synced {
            break;
        }
        if Instant::now() >= deadline {
            let _ = std::fs::write(w.out, snapshot::take()?);
            bail!(
                "not synced within {:?}: marker {} present {:?}, others {:?}, synced {synced}",
                w.timeout,
                w.step,
                s.present,
                s.others
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let synced_after = start.elapsed();
    let mut previous = snapshot::take()?;
    let mut same = 0;
    while same < w.still {
        std::thread::sleep(Duration::from_secs(1));
        check_alive()?;
        let now = snapshot::take()?;
        if now == previous {
            same += 1;
            continue;
        }
        same = 0;
        previous = now;
        if Instant::now() >= deadline {
            std::fs::write(w.out, &previous)?;
            bail!(
                "the snapshot of step {} was still changing at the deadline",
                w.step
            );
        }
    }
    std::fs::write(w.out, &previous)?;
    println!(
        "synced after {}ms, still after {}ms",
        synced_after.as_millis(),
        (start.elapsed() - synced_after).as_millis()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC: &str = "IP Virtual Server version 1.2.1 (size=4096)\n\
        Prot LocalAddress:Port Scheduler Flags\n\
        \x20 -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n\
        TCP  C612FFFE:03EA rr\n\
        \x20 -> C613FFFE:4E22      Masq    1      0          0\n\
        TCP  C612FFFE:03E9 rr\n\
        \x20 -> C613FFFE:4E21      Masq    1      0          0\n\
        TCP  [2001:0db8:0042:0000:0000:0000:0000:fffe]:03EA rr\n\
        \x20 -> [2001:0db8:0019:0255:0000:0000:0000:00fe]:4E22      Masq    1      0          0\n\
        TCP  C6120A01:0050 rr\n";

    #[test]
    fn the_proc_file_says_which_marker_is_there() {
        assert_eq!(
            state(PROC, 2),
            MarkerState {
                present: [true, true],
                others: [true, false]
            }
        );
        assert_eq!(
            state(PROC, 1),
            MarkerState {
                present: [true, false],
                others: [true, true]
            }
        );
        assert_eq!(state(PROC, 3).present, [false, false]);
    }

    #[test]
    fn one_family_needs_only_the_ipv4_marker() {
        let v4_only = MarkerState {
            present: [true, false],
            others: [false, true],
        };
        assert!(!v4_only.marked(2, 2));
        assert!(v4_only.marked(2, 1));
        let both = MarkerState {
            present: [true, true],
            others: [false, false],
        };
        assert!(both.marked(2, 2) && both.marked(2, 1));
        // The last step's marker still there: not yet.
        let stale = MarkerState {
            present: [true, true],
            others: [true, false],
        };
        assert!(!stale.marked(2, 1) && stale.marked(0, 1));
    }

    #[test]
    fn a_marker_without_its_real_server_is_not_there_yet() {
        let vs_only = "TCP  C612FFFE:03EA rr\nTCP  C6120A01:0050 rr\n";
        assert_eq!(state(vs_only, 2).present, [false, false]);
    }

    #[test]
    fn last_syncs_per_family() {
        let m = "# HELP x\nkubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 1.7e+09\n\
                 kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv6\"} 0\n\
                 kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds 5\n";
        assert_eq!(last_syncs(m), [1.7e9, 0.0]);
        assert!(!synced_families(&last_syncs(m), 2));
        assert!(synced_families(&last_syncs(m), 1));
        assert!(synced_families(&[1.7e9, 1.8e9], 2));
        assert!(!synced_families(&[1.7e9], 2));
        assert!(!synced_families(&[0.0], 1));
    }

    #[test]
    fn marker_objects_name_the_step() {
        let list = objects(7);
        assert_eq!(list["items"][0]["spec"]["ports"][0]["port"], 1007);
        assert_eq!(list["items"][1]["ports"][0]["port"], 20007);
        assert_eq!(
            list["items"][2]["endpoints"][0]["addresses"][0],
            "2001:db8:19:255::fe"
        );
    }
}
