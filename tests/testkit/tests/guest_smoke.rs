//! The guest works end to end: IPVS, set up with the standard tool on a
//! dummy kube-ipvs0, balances real TCP and UDP traffic over two pods.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use testkit::{
    guest, run, run_with_input, start_pods, tcp_tally, udp_tally, PodSpec,
    Tally,
};

const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
const SERVICE_PORT: u16 = 80;
const POD_PORT: u16 = 8080;
const REQUESTS: usize = 20;
const TIMEOUT: Duration = Duration::from_secs(10);
// Generous: timers run late on a loaded TCG host.
const STATS_DELAY: Duration = Duration::from_secs(10);

/// Removes what the test added to the root namespace, even when it fails.
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = run(Command::new("ipvsadm").arg("-C"));
        let _ = run(Command::new("ip").args(["link", "del", "kube-ipvs0"]));
    }
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn ipvs_round_robin_over_two_pods() -> Result<()> {
    guest::require();
    let _root = guest::lock_root_netns();
    let pods = start_pods(&[
        PodSpec::new("pod-a").port(POD_PORT),
        PodSpec::new("pod-b").port(POD_PORT),
    ])?;
    let _cleanup = Cleanup;

    // kube-proxy's shape: a dummy interface left down still makes its
    // addresses local.
    run_with_input(
        Command::new("ip").args(["-batch", "-"]),
        &format!(
            "link add kube-ipvs0 type dummy\n\
             addr add {VIP}/32 dev kube-ipvs0\n"
        ),
    )?;
    let mut rules = String::new();
    for proto in ["-t", "-u"] {
        rules += &format!("-A {proto} {VIP}:{SERVICE_PORT} -s rr\n");
        for pod in &pods {
            rules += &format!(
                "-a {proto} {VIP}:{SERVICE_PORT} -r {} -m\n",
                pod.addr(POD_PORT)
            );
        }
    }
    run_with_input(Command::new("ipvsadm").arg("-R"), &rules)?;

    let vip = SocketAddr::from((VIP, SERVICE_PORT));
    let state = std::fs::read_to_string("/sys/class/net/kube-ipvs0/operstate")?;
    assert_eq!(state.trim(), "down", "kube-ipvs0 must stay down");
    let half = Tally::from([
        ("pod-a".to_string(), REQUESTS / 2),
        ("pod-b".to_string(), REQUESTS / 2),
    ]);
    assert_eq!(tcp_tally(vip, REQUESTS, TIMEOUT)?, half, "tcp");
    assert_eq!(udp_tally(vip, REQUESTS, TIMEOUT)?, half, "udp");

    let mut want = Vec::new();
    for proto in ["TCP", "UDP"] {
        want.push((format!("{proto} {vip}"), REQUESTS as u64));
        for pod in &pods {
            want.push((
                format!("{proto} {vip} -> {}", pod.addr(POD_PORT)),
                (REQUESTS / 2) as u64,
            ));
        }
    }
    want.sort();
    // The kernel (6.1) folds its per-CPU counters into what it reports
    // only every 2 s, in the rate estimator's timer.
    let deadline = Instant::now() + STATS_DELAY;
    loop {
        let stats = run(Command::new("ipvsadm").args(["-Ln", "--stats"]))?;
        let conns = connection_counts(&stats)?;
        if conns == want {
            return Ok(());
        }
        if Instant::now() > deadline {
            assert_eq!(conns, want, "ipvsadm -Ln --stats:\n{stats}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The Conns column of `ipvsadm -Ln --stats`, keyed "PROTO VIP" for a
/// service and "PROTO VIP -> DEST" for each of its destinations.
fn connection_counts(stats: &str) -> Result<Vec<(String, u64)>> {
    let mut counts = Vec::new();
    let mut service = None;
    for line in stats.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [proto @ ("TCP" | "UDP"), addr, conns, ..] => {
                let key = format!("{proto} {addr}");
                counts.push((key.clone(), parse_count(conns)?));
                service = Some(key);
            }
            ["->", addr, conns, ..] if addr.contains(':') => {
                let service = service
                    .as_ref()
                    .with_context(|| format!("destination first: {line}"))?;
                counts.push((
                    format!("{service} -> {addr}"),
                    parse_count(conns)?,
                ));
            }
            _ => {}
        }
    }
    counts.sort();
    Ok(counts)
}

fn parse_count(field: &str) -> Result<u64> {
    match field.parse() {
        Ok(n) => Ok(n),
        // ipvsadm abbreviates large counts (12K); this test's are small.
        Err(_) => bail!("unexpected count {field:?}"),
    }
}

#[test]
fn stats_parser_reads_services_and_destinations() -> Result<()> {
    let stats = "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes
  -> RemoteAddress:Port
TCP  198.18.0.10:80                     20      120       80     7040     5120
  -> 198.19.1.1:8080                    10       60       40     3520     2560
UDP  198.18.0.10:80                      3        3        3      159      180
  -> 198.19.1.2:8080                     3        3        3      159      180
";
    let want = vec![
        ("TCP 198.18.0.10:80".to_string(), 20),
        ("TCP 198.18.0.10:80 -> 198.19.1.1:8080".to_string(), 10),
        ("UDP 198.18.0.10:80".to_string(), 3),
        ("UDP 198.18.0.10:80 -> 198.19.1.2:8080".to_string(), 3),
    ];
    assert_eq!(connection_counts(stats)?, want);
    assert!(connection_counts("TCP 198.18.0.10:80 12K 0 0 0 0").is_err());
    Ok(())
}
