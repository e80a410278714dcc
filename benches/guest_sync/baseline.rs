//! The kernel baseline: the same state loaded by the standard tools, each
//! given the whole of its part in one process (`ip -batch`, `ipset
//! restore`, `ipvsadm -R`), and the same two changes made with them.

use std::{
    fmt::Write as _,
    net::IpAddr,
    time::{Duration, Instant},
};

use anyhow::Context;
use bench_support::fixtures::ENDPOINTS_PER_SERVICE;
pub use bench_support::tool::{run, timed};
use kube_ipvs_proxy::{
    desired::{Plan, SetKind, SetType, VirtualServer},
    model::Protocol,
};

fn service_flag(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Tcp => "-t",
        Protocol::Udp => "-u",
        Protocol::Sctp => "--sctp-service",
    }
}

fn host_prefix(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

fn ipvsadm_lines(text: &mut String, vs: &VirtualServer) {
    let flag = service_flag(vs.protocol);
    let target = match vs.address {
        IpAddr::V4(a) => format!("{a}:{}", vs.port),
        IpAddr::V6(a) => format!("[{a}]:{}", vs.port),
    };
    let _ = write!(text, "-A {flag} {target} -s {}", vs.scheduling.scheduler);
    if vs.persistent {
        let _ = write!(text, " -p {}", vs.timeout);
    }
    text.push('\n');
    for rs in &vs.real_servers {
        let real = match rs.address {
            IpAddr::V4(a) => format!("{a}:{}", rs.port),
            IpAddr::V6(a) => format!("[{a}]:{}", rs.port),
        };
        let _ =
            writeln!(text, "-a {flag} {target} -r {real} -m -w {}", rs.weight);
    }
}

/// `ipset create` arguments for a set of the plan, by its name.
fn create_line(name: &str) -> anyhow::Result<String> {
    let kind = SetKind::ALL
        .into_iter()
        .find(|k| k.base_name() == name)
        .with_context(|| format!("set {name} is not an IPv4 kube-proxy set"))?;
    Ok(match kind.set_type() {
        SetType::BitmapPort => {
            format!("create {name} bitmap:port range 0-65535")
        }
        other => format!(
            "create {name} {} family inet hashsize 1024 maxelem 65536",
            other.as_str()
        ),
    })
}

/// The plan as the three tools' inputs.
pub struct Scripts {
    pub ip_batch: String,
    pub ipset_restore: String,
    pub ipvsadm_restore: String,
}

impl Scripts {
    pub fn new(plan: &Plan) -> anyhow::Result<Self> {
        let mut ip_batch = String::from("link add kube-ipvs0 type dummy\n");
        for ip in &plan.bound_addresses {
            let _ = writeln!(
                ip_batch,
                "addr add {ip}/{} dev kube-ipvs0",
                host_prefix(*ip)
            );
        }
        let mut ipset_restore = String::new();
        for (name, entries) in &plan.ipsets {
            ipset_restore.push_str(&create_line(name)?);
            ipset_restore.push('\n');
            for entry in entries {
                let _ = writeln!(ipset_restore, "add {name} {entry}");
            }
        }
        let mut ipvsadm_restore = String::new();
        for vs in &plan.virtual_servers {
            ipvsadm_lines(&mut ipvsadm_restore, vs);
        }
        Ok(Self {
            ip_batch,
            ipset_restore,
            ipvsadm_restore,
        })
    }
}

/// How long each tool took to load its part.
pub struct ColdLoad {
    pub ip_batch: Duration,
    pub ipset_restore: Duration,
    pub ipvsadm_restore: Duration,
}

impl ColdLoad {
    pub fn total(&self) -> Duration {
        self.ip_batch + self.ipset_restore + self.ipvsadm_restore
    }
}

/// Addresses first, then sets, then virtual servers: the order the
/// proxy's first sync needs them in too.
pub fn cold_load(scripts: &Scripts) -> anyhow::Result<ColdLoad> {
    Ok(ColdLoad {
        ip_batch: timed("ip", &["-batch", "-"], &scripts.ip_batch)?,
        ipset_restore: timed("ipset", &["restore"], &scripts.ipset_restore)?,
        ipvsadm_restore: timed("ipvsadm", &["-R"], &scripts.ipvsadm_restore)?,
    })
}

/// One real server of one virtual server removed (`ready == false`) or
/// added back, with one `ipvsadm` command.
pub fn endpoint_change(
    vip: IpAddr,
    rip: IpAddr,
    ready: bool,
) -> anyhow::Result<Duration> {
    let vs = format!("{vip}:80");
    let rs = format!("{rip}:8080");
    if ready {
        timed(
            "ipvsadm",
            &["-a", "-t", &vs, "-r", &rs, "-m", "-w", "1"],
            "",
        )
    } else {
        timed("ipvsadm", &["-d", "-t", &vs, "-r", &rs], "")
    }
}

/// A new ClusterIP service with its endpoints: its address on
/// kube-ipvs0, its two set entries, its virtual server and real servers,
/// one process per tool.
pub fn new_service(vip: IpAddr, rips: &[IpAddr]) -> anyhow::Result<Duration> {
    let start = Instant::now();
    run(
        "ip",
        &["addr", "add", &format!("{vip}/32"), "dev", "kube-ipvs0"],
        "",
    )?;
    run(
        "ipset",
        &["restore"],
        &format!("add KUBE-CLUSTER-IP {vip},tcp:80\nadd KUBE-IPVS-IPS {vip}\n"),
    )?;
    let mut script = format!("-A -t {vip}:80 -s rr\n");
    for rip in rips.iter().take(ENDPOINTS_PER_SERVICE) {
        let _ = writeln!(script, "-a -t {vip}:80 -r {rip}:8080 -m -w 1");
    }
    run("ipvsadm", &["-R"], &script)?;
    Ok(start.elapsed())
}
