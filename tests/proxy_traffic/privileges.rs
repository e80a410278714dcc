//! The long-running container without privilege, as deploy/'s manifests
//! run it: `--init-only` does the privileged steps as root first (the init
//! container), then the proxy runs with NET_ADMIN, NET_RAW and
//! SYS_RESOURCE alone and /proc/sys and /sys read-only, as a container
//! runtime mounts them for an unprivileged container. Each of the three is
//! then taken away in turn: this is how the manifests' list was found.
//! And as a container's PID 1, the proxy still stops on SIGTERM.

use super::harness::{
    endpoint_slice, ipvs_services, node, real_servers, service, sh,
    weighted_real_servers, Cluster, Port, NODE_IP, TIMEOUT,
};
use testkit::{tcp_tally, udp_tally, PodSpec, Tally};

/// What deploy/'s long-running container adds, as `setpriv` names them.
const NEEDED: [&str; 3] = ["net_admin", "net_raw", "sys_resource"];

/// Their bits in `/proc/PID/status`' capability masks
/// (`linux/capability.h`).
fn bit(capability: &str) -> u64 {
    match capability {
        "net_admin" => 1 << 12,
        "net_raw" => 1 << 13,
        "sys_resource" => 1 << 24,
        other => panic!("no bit for {other}"),
    }
}

/// A wrapper that runs its arguments as an unprivileged container's
/// process: in a mount namespace of its own with /proc/sys and /sys
/// read-only, and with `capabilities` alone in its bounding set (it stays
/// uid 0, so the bounding set is what it has, as in a container).
fn container(capabilities: &[&str]) -> Vec<String> {
    let bounding: String =
        capabilities.iter().map(|c| format!(",+{c}")).collect();
    [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        "mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && \
         mount --bind /sys /sys && mount -o remount,bind,ro /sys && \
         exec setpriv --bounding-set=\"$0\" --inh-caps=-all -- \"$@\"",
    ]
    .into_iter()
    .map(str::to_string)
    .chain([format!("-all{bounding}")])
    .collect()
}

fn without(capability: &str) -> Vec<String> {
    let kept: Vec<&str> =
        NEEDED.into_iter().filter(|c| *c != capability).collect();
    container(&kept)
}

fn args(wrapper: &[String]) -> Vec<&str> {
    wrapper.iter().map(String::as_str).collect()
}

/// A process' effective capabilities.
fn effective(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(str::trim)
        .ok_or_else(|| anyhow::anyhow!("no CapEff in /proc/{pid}/status"))?;
    Ok(u64::from_str_radix(hex, 16)?)
}

fn oom_score_adj(pid: &str) -> anyhow::Result<i32> {
    Ok(
        std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj"))?
            .trim()
            .parse()?,
    )
}

/// A log's warnings and errors.
fn complaints(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect()
}

const VIP: &str = "198.18.21.10";
const PODS: [(&str, &str); 2] =
    [("priv-1", "198.19.21.2"), ("priv-2", "198.19.21.3")];

fn ports() -> [Port; 2] {
    [
        Port::tcp("http", 80, 8080).node_port(30121),
        Port::udp("dns", 53, 5353),
    ]
}

fn state(endpoints: &[(&str, &str)]) -> Vec<String> {
    let ports = ports();
    let on_node: Vec<(&str, &str)> =
        endpoints.iter().map(|(_, ip)| (*ip, "node-a")).collect();
    vec![
        node(),
        service("priv", VIP, &ports, ""),
        endpoint_slice("priv", &ports, &on_node),
    ]
}

fn cluster(name: &str) -> anyhow::Result<Cluster> {
    let pods = PODS.map(|(name, ip)| {
        PodSpec::new(name)
            .ip(ip.parse().expect("a fixture address"))
            .port(8080)
            .port(5353)
    });
    Cluster::new(name, &pods, &state(&PODS))
}

fn both_pods(n: usize) -> Tally {
    PODS.iter()
        .map(|(name, _)| ((*name).to_string(), n / 2))
        .collect()
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn three_capabilities_serve_once_init_only_has_run() -> anyhow::Result<()> {
    testkit::guest::require();
    let mut cluster = cluster("unprivileged")?;
    let confined = container(&NEEDED);

    // Without the init container a sysctl that is not yet what IPVS mode
    // needs cannot be written, and the proxy says which.
    sh("sysctl -qw net.ipv4.vs.conntrack=0")?;
    cluster.start_proxy_under(&args(&confined), &[])?;
    let log = cluster.log()?;
    assert!(
        log.lines().any(|l| l.contains("sysctl not set")
            && l.contains("net/ipv4/vs/conntrack")
            && l.contains("Read-only file system")),
        "no warning names the read-only sysctl:\n{log}"
    );
    cluster.stop_proxy();
    cluster.clear_log()?;

    cluster.init_only()?;
    assert_eq!(sh("sysctl -n net.ipv4.vs.conntrack")?.trim(), "1");
    cluster.start_proxy_under(&args(&confined), &[])?;
    let pid = cluster.proxy_pid()?;
    let want: u64 = NEEDED.iter().map(|c| bit(c)).sum();
    assert_eq!(
        effective(pid)?,
        want,
        "the proxy runs with the three capabilities and no other"
    );
    assert_eq!(oom_score_adj(&pid.to_string())?, -999);

    let vip = format!("{VIP}:80").parse()?;
    assert_eq!(tcp_tally(vip, 4, TIMEOUT)?, both_pods(4));
    let node_port = format!("{NODE_IP}:30121").parse()?;
    assert_eq!(tcp_tally(node_port, 4, TIMEOUT)?, both_pods(4));
    assert_eq!(
        udp_tally(format!("{VIP}:53").parse()?, 4, TIMEOUT)?,
        both_pods(4)
    );

    // A change: one pod leaves (IPVS, the sets, conntrack's UDP flows).
    // Its TCP real servers drain at weight 0 while the connections above
    // linger in TIME_WAIT; its UDP one goes at once.
    cluster.write_state(&state(&PODS[..1]))?;
    let leaving = format!("{}:8080", PODS[1].1);
    cluster.wait_for(
        "the leaving pod's real servers to drain or go",
        || {
            let tcp = weighted_real_servers("-t", &format!("{VIP}:80"))?;
            Ok(tcp
                .iter()
                .all(|(rs, weight)| *rs != leaving || *weight == 0)
                && real_servers("-u", &format!("{VIP}:53"))?.len() == 1)
        },
    )?;
    let staying: Tally = [(PODS[0].0.to_string(), 3)].into();
    assert_eq!(tcp_tally(vip, 3, TIMEOUT)?, staying);
    assert_eq!(tcp_tally(node_port, 3, TIMEOUT)?, staying);

    let log = cluster.log()?;
    assert_eq!(complaints(&log), Vec::<&str>::new(), "{log}");
    Ok(())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn each_of_the_three_capabilities_is_needed() -> anyhow::Result<()> {
    testkit::guest::require();
    let mut cluster = cluster("capabilities")?;
    cluster.init_only()?;

    // NET_ADMIN for every netlink request, NET_RAW for the raw socket
    // iptables' set match asks ipset over: without either the proxy
    // stops at once with EX_NOPERM, naming the capability, rather than
    // retrying syncs that cannot succeed.
    for (capability, named) in
        [("net_admin", "CAP_NET_ADMIN"), ("net_raw", "CAP_NET_RAW")]
    {
        cluster.clear_log()?;
        cluster.spawn_proxy(&args(&without(capability)), &[])?;
        let status = cluster.proxy_exit()?;
        let log = cluster.log()?;
        assert_eq!(status.code(), Some(77), "without {capability}:\n{log}");
        assert!(
            log.contains(&format!(
                "this process may not program the kernel: it lacks {named} ("
            )),
            "without {capability}:\n{log}"
        );
        assert!(
            sh("ipvsadm -Ln")?.lines().all(|l| !l.contains(VIP)),
            "without {capability} something was programmed"
        );
    }

    // SYS_RESOURCE for oom_score_adj: without it the proxy serves, but
    // the kernel would kill it before the Pods it serves.
    cluster.clear_log()?;
    cluster.start_proxy_under(&args(&without("sys_resource")), &[])?;
    let pid = cluster.proxy_pid()?;
    assert_eq!(
        oom_score_adj(&pid.to_string())?,
        oom_score_adj("self")?,
        "the proxy's oom_score_adj is not its parent's"
    );
    let vip = format!("{VIP}:80").parse()?;
    assert_eq!(tcp_tally(vip, 4, TIMEOUT)?, both_pods(4));
    Ok(())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn as_pid_1_it_stops_on_sigterm_and_leaves_the_kernel() -> anyhow::Result<()> {
    testkit::guest::require();
    let mut cluster = cluster("pid-1")?;
    // PID 1 of a namespace of its own, as in a container: the kernel
    // drops a signal PID 1 has no handler for.
    cluster.start_proxy_under(&["unshare", "--pid", "--fork"], &[])?;
    let unshare = cluster.proxy_pid()?;
    let pid = sh(&format!("pgrep -P {unshare}"))?.trim().to_string();
    let ns_pids = sh(&format!("grep NSpid /proc/{pid}/status"))?;
    assert!(ns_pids.trim_end().ends_with("\t1"), "not PID 1: {ns_pids}");
    let programmed = ipvs_services()?;
    assert!(programmed.iter().any(|l| l.contains(VIP)), "{programmed:?}");

    sh(&format!("kill -TERM {pid}"))?;
    // unshare exits with its child's status; a proxy that ignored the
    // signal would still run when this gives up.
    let status = cluster.proxy_exit()?;
    assert_eq!(status.code(), Some(0), "{}", cluster.log()?);
    assert_eq!(ipvs_services()?, programmed, "the kernel's state changed");
    let log = cluster.log()?;
    assert!(
        log.contains("stopping; the kernel's state is left as it is")
            && log.contains("SIGTERM"),
        "{log}"
    );
    Ok(())
}
