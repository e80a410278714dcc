//! The service types' basic paths, and the proxy's own life: restarts,
//! drift, cleanup, and virtual servers that are not ours.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::harness::{
    endpoint_slice, ipvs_services, node, real_servers, service, sh,
    weighted_real_servers, Cluster, Port, NODE_IP, TIMEOUT,
};
use testkit::{tcp_tally, udp_tally, PodSpec, Tally};

/// The IPVS scheduler is round robin: n connections to two fresh real
/// servers split evenly.
fn assert_round_robin(tally: &Tally, pods: [&str; 2], n: usize) {
    let want: Tally = pods.iter().map(|p| ((*p).to_string(), n / 2)).collect();
    assert_eq!(tally, &want, "each pod answers every other connection");
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn cluster_ip_tcp_and_udp_reach_both_pods() -> anyhow::Result<()> {
    testkit::guest::require();
    let ports = [Port::tcp("http", 80, 8080), Port::udp("dns", 53, 5353)];
    let state = [
        node(),
        service("echo", "198.18.1.10", &ports, ""),
        endpoint_slice(
            "echo",
            &ports,
            &[("198.19.1.2", "node-a"), ("198.19.1.3", "node-a")],
        ),
    ];
    let pods = [
        PodSpec::new("echo-1")
            .ip("198.19.1.2".parse()?)
            .port(8080)
            .port(5353),
        PodSpec::new("echo-2")
            .ip("198.19.1.3".parse()?)
            .port(8080)
            .port(5353),
    ];
    let mut cluster = Cluster::new("cluster-ip", &pods, &state)?;
    cluster.start_proxy(&[])?;
    cluster.wait_for("both real servers of the TCP and UDP ports", || {
        Ok(real_servers("-t", "198.18.1.10:80")?.len() == 2
            && real_servers("-u", "198.18.1.10:53")?.len() == 2)
    })?;

    let tcp = tcp_tally("198.18.1.10:80".parse()?, 6, TIMEOUT)?;
    assert_round_robin(&tcp, ["echo-1", "echo-2"], 6);
    let udp = udp_tally("198.18.1.10:53".parse()?, 4, TIMEOUT)?;
    assert_round_robin(&udp, ["echo-1", "echo-2"], 4);
    Ok(())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn node_port_on_the_node_ip_reaches_both_pods() -> anyhow::Result<()> {
    testkit::guest::require();
    let ports = [Port::tcp("http", 80, 8080).node_port(30080)];
    let state = [
        node(),
        service("np", "198.18.2.10", &ports, ""),
        endpoint_slice(
            "np",
            &ports,
            &[("198.19.2.2", "node-a"), ("198.19.2.3", "node-a")],
        ),
    ];
    let pods = [
        PodSpec::new("np-1").ip("198.19.2.2".parse()?).port(8080),
        PodSpec::new("np-2").ip("198.19.2.3".parse()?).port(8080),
    ];
    let node_port = format!("{NODE_IP}:30080");
    let mut cluster = Cluster::new("node-port", &pods, &state)?;
    cluster.start_proxy(&[])?;
    cluster.wait_for("the NodePort on the node IP", || {
        Ok(real_servers("-t", &node_port)?.len() == 2)
    })?;

    let tally = tcp_tally(node_port.parse()?, 6, TIMEOUT)?;
    assert_round_robin(&tally, ["np-1", "np-2"], 6);
    Ok(())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn client_ip_affinity_keeps_a_client_on_one_pod() -> anyhow::Result<()> {
    testkit::guest::require();
    let ports = [Port::tcp("http", 80, 8080)];
    let affinity = "  sessionAffinity: ClientIP\n  \
                    sessionAffinityConfig: {clientIP: {timeoutSeconds: 600}}\n";
    let state = [
        node(),
        service("sticky", "198.18.3.10", &ports, affinity),
        endpoint_slice(
            "sticky",
            &ports,
            &[("198.19.3.2", "node-a"), ("198.19.3.3", "node-a")],
        ),
    ];
    let pods = [
        PodSpec::new("sticky-1")
            .ip("198.19.3.2".parse()?)
            .port(8080),
        PodSpec::new("sticky-2")
            .ip("198.19.3.3".parse()?)
            .port(8080),
    ];
    let mut cluster = Cluster::new("affinity", &pods, &state)?;
    cluster.start_proxy(&[])?;
    cluster.wait_for("both real servers", || {
        Ok(real_servers("-t", "198.18.3.10:80")?.len() == 2)
    })?;

    // Both pods could answer (two real servers, round robin): only
    // persistence keeps every connection on the first one chosen.
    let tally = tcp_tally("198.18.3.10:80".parse()?, 8, TIMEOUT)?;
    assert_eq!(
        tally.values().copied().collect::<Vec<_>>(),
        [8],
        "one client, one pod: {tally:?}"
    );
    let table = sh("ipvsadm -Ln -t 198.18.3.10:80")?;
    assert!(table.contains("persistent 600"), "{table}");
    Ok(())
}

/// A virtual server someone else made, on an address not on kube-ipvs0.
const FOREIGN: &str = "198.18.200.1:80";
const FOREIGN_REAL: &str = "198.19.200.2:80";

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn a_foreign_virtual_server_is_left_alone() -> anyhow::Result<()> {
    testkit::guest::require();
    let ports = [Port::tcp("http", 80, 8080)];
    let one = [
        node(),
        service("plain", "198.18.4.10", &ports, ""),
        endpoint_slice("plain", &ports, &[("198.19.4.2", "node-a")]),
    ];
    let pods = [PodSpec::new("plain-1").ip("198.19.4.2".parse()?).port(8080)];
    let mut cluster = Cluster::new("foreign", &pods, &one)?;
    cluster.add_foreign(FOREIGN, FOREIGN_REAL)?;
    cluster.start_proxy(&["--ipvs-sync-period", "2s"])?;
    cluster.wait_for("our virtual server", || {
        Ok(real_servers("-t", "198.18.4.10:80")?.len() == 1)
    })?;

    // An event-driven sync (a new service) and then periodic ones.
    let mut two = one.to_vec();
    two.push(service("plain-b", "198.18.4.11", &ports, ""));
    two.push(endpoint_slice(
        "plain-b",
        &ports,
        &[("198.19.4.2", "node-a")],
    ));
    cluster.write_state(&two)?;
    cluster.wait_for("the second service", || {
        Ok(real_servers("-t", "198.18.4.11:80")?.len() == 1)
    })?;
    thread::sleep(Duration::from_secs(5));

    assert_eq!(real_servers("-t", FOREIGN)?, [FOREIGN_REAL]);
    let linked = sh("ip -o addr show dev kube-ipvs0")?;
    assert!(!linked.contains("198.18.200.1/"), "{linked}");
    let tally = tcp_tally("198.18.4.10:80".parse()?, 2, TIMEOUT)?;
    assert_eq!(tally.get("plain-1"), Some(&2), "{tally:?}");
    Ok(())
}

/// A NodePort deleted while the proxy was down, in a cluster whose
/// `--service-node-port-range` is not the default: the restarted proxy
/// has no record of it, but the kernel's NodePort set still lists its
/// port, so it goes. A virtual server on the node address that no set
/// lists stays, even with a port in the default range.
#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn a_node_port_deleted_while_down_goes_whatever_its_range() -> anyhow::Result<()>
{
    testkit::guest::require();
    let ports = [Port::tcp("http", 80, 8080).node_port(40080)];
    let state = [
        node(),
        service("custom", "198.18.9.10", &ports, ""),
        endpoint_slice("custom", &ports, &[("198.19.9.2", "node-a")]),
    ];
    let pods = [PodSpec::new("custom-1")
        .ip("198.19.9.2".parse()?)
        .port(8080)];
    let node_port = format!("{NODE_IP}:40080");
    let foreign = format!("{NODE_IP}:30999");
    let mut cluster = Cluster::new("custom-range", &pods, &state)?;
    cluster.add_foreign(&foreign, FOREIGN_REAL)?;
    cluster.start_proxy(&[])?;
    cluster.wait_for("the NodePort outside the default range", || {
        Ok(real_servers("-t", &node_port)?.len() == 1)
    })?;
    assert_eq!(
        tcp_tally(node_port.parse()?, 1, TIMEOUT)?.get("custom-1"),
        Some(&1)
    );

    cluster.stop_proxy();
    cluster.write_state(&[node()])?;
    cluster.start_proxy(&[])?;
    let left = ipvs_services()?;
    assert!(
        !left.iter().any(|l| l.contains(&node_port)),
        "the stale NodePort survived the restart: {left:?}"
    );
    assert_eq!(real_servers("-t", &foreign)?, [FOREIGN_REAL]);
    Ok(())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn cleanup_leaves_a_clean_kernel() -> anyhow::Result<()> {
    testkit::guest::require();
    let ports = [Port::tcp("http", 80, 8080).node_port(30085)];
    let state = [
        node(),
        service("gone", "198.18.5.10", &ports, ""),
        endpoint_slice("gone", &ports, &[("198.19.5.2", "node-a")]),
    ];
    let pods = [PodSpec::new("gone-1").ip("198.19.5.2".parse()?).port(8080)];
    let mut cluster = Cluster::new("cleanup", &pods, &state)?;
    cluster.add_foreign(FOREIGN, FOREIGN_REAL)?;
    cluster.start_proxy(&[])?;
    // iptables is written after IPVS: wait for both, so that what
    // cleanup must remove is there and its absence afterwards means
    // something.
    cluster.wait_for("the services, the sets and the chains", || {
        Ok(real_servers("-t", "198.18.5.10:80")?.len() == 1
            && real_servers("-t", &format!("{NODE_IP}:30085"))?.len() == 1
            && !kube_sets()?.is_empty()
            && kube_chains()?.iter().any(|c| c.contains("KUBE-SERVICES")))
    })?;
    assert!(link_exists("kube-ipvs0")?);

    cluster.stop_proxy();
    cluster.cleanup()?;

    assert_eq!(kube_sets()?, Vec::<String>::new(), "KUBE- sets left");
    assert!(!link_exists("kube-ipvs0")?, "kube-ipvs0 left");
    assert_eq!(kube_chains()?, Vec::<String>::new(), "KUBE- chains left");
    assert_eq!(
        ipvs_services()?,
        [format!("TCP  {FOREIGN} rr")],
        "only the foreign virtual server is left"
    );
    assert_eq!(real_servers("-t", FOREIGN)?, [FOREIGN_REAL]);
    Ok(())
}

fn kube_sets() -> anyhow::Result<Vec<String>> {
    Ok(sh("ipset list -n")?
        .lines()
        .filter(|l| l.starts_with("KUBE-"))
        .map(str::to_string)
        .collect())
}

/// Our chains in either iptables variant (`TABLE CHAIN`), and rules
/// jumping to one of them.
fn kube_chains() -> anyhow::Result<Vec<String>> {
    let dump = sh("iptables-nft-save 2>/dev/null; \
         iptables-legacy-save 2>/dev/null; true")?;
    let mut table = "";
    let mut ours = Vec::new();
    for line in dump.lines() {
        if let Some(name) = line.strip_prefix('*') {
            table = name;
        } else if let Some(chain) = line.strip_prefix(':') {
            let name = chain.split_whitespace().next().unwrap_or_default();
            if name.starts_with("KUBE-") {
                ours.push(format!("{table} {name}"));
            }
        } else if line.contains("-j KUBE-") {
            ours.push(format!("{table} {line}"));
        }
    }
    Ok(ours)
}

fn link_exists(name: &str) -> anyhow::Result<bool> {
    Ok(!sh(&format!("ip -o link show {name} 2>/dev/null || true"))?
        .trim()
        .is_empty())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn drift_is_repaired_within_a_sync_period() -> anyhow::Result<()> {
    testkit::guest::require();
    let ports = [Port::tcp("http", 80, 8080)];
    let state = [
        node(),
        service("drift", "198.18.6.10", &ports, ""),
        endpoint_slice("drift", &ports, &[("198.19.6.2", "node-a")]),
        service("drift-b", "198.18.6.11", &ports, ""),
        endpoint_slice("drift-b", &ports, &[("198.19.6.2", "node-a")]),
    ];
    let pods = [PodSpec::new("drift-1").ip("198.19.6.2".parse()?).port(8080)];
    let mut cluster = Cluster::new("drift", &pods, &state)?;
    cluster.start_proxy(&["--ipvs-sync-period", "5s"])?;
    const PERIOD: Duration = Duration::from_secs(5);
    let address_of_b = || -> anyhow::Result<bool> {
        Ok(sh("ip -o addr show dev kube-ipvs0")?.contains("198.18.6.11/32"))
    };
    cluster.wait_for("both services", || {
        Ok(real_servers("-t", "198.18.6.10:80")?.len() == 1
            && real_servers("-t", "198.18.6.11:80")?.len() == 1
            && address_of_b()?)
    })?;

    // A repair reads the sets and the rules on the reads' thread too:
    // drift there is repaired in the same round.
    let entry_of_b = || -> anyhow::Result<bool> {
        Ok(sh("ipset list KUBE-CLUSTER-IP")?.contains("198.18.6.11,tcp:80"))
    };
    let cluster_ip_rule = || -> anyhow::Result<bool> {
        Ok(sh("iptables -t nat -S KUBE-SERVICES")?
            .contains("--match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT"))
    };
    cluster.wait_for("the set entry and the rule", || {
        Ok(entry_of_b()? && cluster_ip_rule()?)
    })?;

    let logged = cluster.log()?.len();
    sh("ipvsadm -D -t 198.18.6.10:80 && \
        ip addr del 198.18.6.11/32 dev kube-ipvs0 && \
        ipset del KUBE-CLUSTER-IP 198.18.6.11,tcp:80 && \
        iptables -t nat -F KUBE-SERVICES")?;
    // Each deletion above fails when there is nothing to delete, so the
    // chain's success is the proof of the drift (the rule was there: seen
    // just before). Not read back here: a repair round already reading
    // the kernel may put a part back before the reads below would look,
    // which is the repair this test waits for, not a failure.
    let broken = Instant::now();
    cluster.wait_for(
        "the virtual server, address, entry and rule back",
        || {
            Ok(
                real_servers("-t", "198.18.6.10:80")
                    .is_ok_and(|r| r.len() == 1)
                    && address_of_b()?
                    && entry_of_b()?
                    && cluster_ip_rule()?,
            )
        },
    )?;
    // The first periodic sync comes at most one period after the
    // break; the second period is room for the slow guest (each poll
    // above starts processes), not for a missed sync.
    let took = broken.elapsed();
    let log = cluster.log()?;
    assert!(
        took < 2 * PERIOD,
        "repaired after {took:?}; proxy log:\n{log}"
    );
    let repairs: Vec<_> = log
        .get(logged..)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("repair applied"))
        .filter(|l| !l.contains("operations=0"))
        .collect();
    assert!(!repairs.is_empty(), "no repair round logged:\n{log}");

    for vip in ["198.18.6.10:80", "198.18.6.11:80"] {
        let tally = tcp_tally(vip.parse()?, 2, TIMEOUT)?;
        assert_eq!(tally.get("drift-1"), Some(&2), "{vip}: {tally:?}");
    }
    Ok(())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn external_traffic_policy_local_prefers_local_pods() -> anyhow::Result<()> {
    testkit::guest::require();
    let ports = [Port::tcp("http", 80, 8080).node_port(30087)];
    let svc = service(
        "local",
        "198.18.7.10",
        &ports,
        "  externalTrafficPolicy: Local\n  healthCheckNodePort: 32087\n",
    );
    let state = [
        node(),
        svc.clone(),
        endpoint_slice(
            "local",
            &ports,
            &[("198.19.7.2", "node-a"), ("198.19.7.3", "node-b")],
        ),
    ];
    let pods = [
        PodSpec::new("here").ip("198.19.7.2".parse()?).port(8080),
        PodSpec::new("there").ip("198.19.7.3".parse()?).port(8080),
    ];
    let node_port = format!("{NODE_IP}:30087");
    let mut cluster = Cluster::new("etp-local", &pods, &state)?;
    cluster.start_proxy(&[])?;
    cluster.wait_for("the ClusterIP and the NodePort", || {
        Ok(real_servers("-t", "198.18.7.10:80")?.len() == 2
            && !real_servers("-t", &node_port)?.is_empty())
    })?;

    assert_eq!(real_servers("-t", &node_port)?, ["198.19.7.2:8080"]);
    let tally = tcp_tally(node_port.parse()?, 4, TIMEOUT)?;
    assert_eq!(tally.keys().collect::<Vec<_>>(), ["here"], "{tally:?}");
    // The policy is about external traffic: the ClusterIP uses every pod.
    let tally = tcp_tally("198.18.7.10:80".parse()?, 4, TIMEOUT)?;
    assert_round_robin(&tally, ["here", "there"], 4);

    // No local pod left: IPVS mode falls back to the other nodes' pods
    // (kubernetes#97081) so that clients on this node still get through;
    // an external client's replies would come back from the pod's address
    // and be dropped, which is the failure upstream intends.
    cluster.write_state(&[
        node(),
        svc,
        endpoint_slice("local", &ports, &[("198.19.7.3", "node-b")]),
    ])?;
    cluster.wait_for("the NodePort's fallback to node-b's pod", || {
        let taking: Vec<_> = weighted_real_servers("-t", &node_port)?
            .into_iter()
            .filter(|(_, weight)| *weight > 0)
            .map(|(server, _)| server)
            .collect();
        Ok(taking == ["198.19.7.3:8080"])
    })?;
    let tally = tcp_tally(node_port.parse()?, 2, TIMEOUT)?;
    assert_eq!(tally.keys().collect::<Vec<_>>(), ["there"], "{tally:?}");
    Ok(())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn restart_under_steady_traffic_fails_no_request() -> anyhow::Result<()> {
    testkit::guest::require();
    let ports = [Port::tcp("http", 80, 8080)];
    let state = [
        node(),
        service("steady", "198.18.8.10", &ports, ""),
        endpoint_slice(
            "steady",
            &ports,
            &[("198.19.8.2", "node-a"), ("198.19.8.3", "node-a")],
        ),
    ];
    let pods = [
        PodSpec::new("steady-1")
            .ip("198.19.8.2".parse()?)
            .port(8080),
        PodSpec::new("steady-2")
            .ip("198.19.8.3".parse()?)
            .port(8080),
    ];
    let mut cluster = Cluster::new("restart", &pods, &state)?;
    cluster.start_proxy(&[])?;
    cluster.wait_for("both real servers", || {
        Ok(real_servers("-t", "198.18.8.10:80")?.len() == 2)
    })?;

    let vip: SocketAddr = "198.18.8.10:80".parse()?;
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let (mut ok, mut failed) = (0usize, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                match tcp_tally(vip, 1, TIMEOUT) {
                    Ok(_) => ok += 1,
                    Err(e) => failed.push(e.to_string()),
                }
                thread::sleep(Duration::from_millis(20));
            }
            (ok, failed)
        })
    };
    thread::sleep(Duration::from_secs(1));
    cluster.stop_proxy();
    thread::sleep(Duration::from_millis(500));
    let before = cluster.log()?.len();
    // Returns once the new process has read the kernel and applied the
    // state.
    cluster.start_proxy(&[])?;
    assert!(
        cluster
            .log()?
            .get(before..)
            .is_some_and(|l| l.contains("full reconcile applied")),
        "the restarted proxy reconciled the kernel it found"
    );
    thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let (ok, failed) = client
        .join()
        .map_err(|_| anyhow::anyhow!("the client thread panicked"))?;

    assert_eq!(failed, Vec::<String>::new(), "failed requests ({ok} ok)");
    assert!(ok >= 10, "only {ok} requests in the window");
    let servers: BTreeSet<_> =
        real_servers("-t", "198.18.8.10:80")?.into_iter().collect();
    assert_eq!(servers.len(), 2, "{servers:?}");
    Ok(())
}
