//! The host before the proxy programs it: a kernel that cannot run IPVS
//! mode is refused before anything is changed, then conntrack's and IPVS
//! mode's sysctls and IPVS's connection timeouts are set as the
//! configuration asks (`--init-only` stops there).

use crate::{
    config::Config,
    kernel::{
        addresses::NetlinkAddresses,
        capabilities::{self, FacilityProbe, Missing, Need, Refused},
        ipsets::NetlinkIpsets,
        ipvs::{ConnTimeouts, NetlinkIpvs},
        sysctl::{
            self,
            conntrack::{self, ConntrackSettings},
            Change, KernelVersion, ProcSysctls, SysctlConfig, Sysctls,
        },
        ErrorKind, KernelError,
    },
};

/// Refuses a kernel without what IPVS mode needs, or a process without
/// the capabilities to program it, before anything is changed (see
/// [`capabilities`]): the probe's own virtual server and link are gone
/// again either way.
pub async fn check_kernel(config: &Config) -> Result<(), Refused> {
    let refused = |need, error| {
        capabilities::refusal(vec![Missing { need, error }], Ok(()))
    };
    let ipvs = match NetlinkIpvs::new() {
        Ok(ipvs) => ipvs,
        Err(error) => return refused(Need::Ipvs, error),
    };
    let addresses = match NetlinkAddresses::new() {
        Ok(addresses) => addresses,
        Err(error) => return refused(Need::DummyLinks, error),
    };
    let mut probe = FacilityProbe {
        ipvs,
        addresses,
        ipsets: NetlinkIpsets::new(),
        raw_socket: open_raw_socket(),
    };
    capabilities::check(&mut probe, config.ipvs.scheduler.as_str()).await
}

/// A raw IPv4 socket opened and closed again: iptables' set match asks
/// ipset over one, and IPVS's socket option is read over one.
fn open_raw_socket() -> Result<(), KernelError> {
    const OBJECT: &str = "socket(AF_INET, SOCK_RAW, IPPROTO_RAW)";
    match ipvs_sys::SockoptSocket::open() {
        Ok(_) => Ok(()),
        Err(ipvs_sys::Error::Socket(error)) => {
            let failed =
                KernelError::new(ErrorKind::Other, OBJECT, error.to_string());
            Err(match error.raw_os_error() {
                Some(errno) => failed.with_errno(errno),
                None => failed,
            })
        }
        Err(error) => Err(KernelError::new(
            ErrorKind::Transport,
            OBJECT,
            error.to_string(),
        )),
    }
}

/// The sysctls and IPVS timeouts. Each failure is logged and the proxy
/// goes on (upstream refuses to start on some; see
/// tests/conformance/differences.md). Must run inside a tokio runtime.
pub async fn prepare(config: &Config) {
    set_sysctls(config);
    set_ipvs_timeouts(config).await;
}

/// conntrack's and IPVS mode's sysctls, written only where they differ.
fn set_sysctls(config: &Config) {
    let mut sysctls = ProcSysctls::new();
    // Upstream's IPVS proxier says this once at start and sets nothing.
    if sysctl::bridge_nf_call_iptables_off(&mut sysctls) {
        tracing::info!(
            "missing br-netfilter module or unset sysctl \
             br-nf-call-iptables, proxy may not work as intended"
        );
    }
    set_conntrack(&mut sysctls, config);
    let kernel = match KernelVersion::running(&mut sysctls) {
        Ok(kernel) => kernel,
        Err(error) => {
            tracing::warn!(%error, "cannot read the kernel version; sysctls left alone");
            return;
        }
    };
    let wanted = SysctlConfig {
        strict_arp: config.ipvs.strict_arp,
    };
    for result in sysctl::ensure(&mut sysctls, &wanted, kernel) {
        log_sysctl(result);
    }
}

fn log_sysctl(result: Result<Change, KernelError>) {
    match result {
        Ok(change) => tracing::info!(
            sysctl = change.path,
            from = %change.from,
            to = %change.to,
            "set"
        ),
        Err(error) => tracing::warn!(%error, "sysctl not set"),
    }
}

/// conntrack's table size and timeouts, from `conntrack.*` as upstream
/// sets them before its proxier.
fn set_conntrack(sysctls: &mut ProcSysctls, config: &Config) {
    let c = &config.conntrack;
    let settings = ConntrackSettings {
        max: conntrack::table_size(c.max_per_core, c.min, online_cpus()),
        tcp_established_timeout: c.tcp_established_timeout.as_secs(),
        tcp_close_wait_timeout: c.tcp_close_wait_timeout.as_secs(),
        tcp_be_liberal: c.tcp_be_liberal,
        udp_timeout: c.udp_timeout.as_secs(),
        udp_stream_timeout: c.udp_stream_timeout.as_secs(),
    };
    let mut module = ProcSysctls::with_root(conntrack::MODULE_PARAMETERS);
    for result in conntrack::ensure(sysctls, &mut module, &settings) {
        log_sysctl(result);
    }
}

/// The online CPUs, as upstream counts them for the conntrack table; the
/// CPUs this process may use if the kernel's list cannot be read.
fn online_cpus() -> u32 {
    ProcSysctls::with_root(conntrack::CPU_DIR)
        .read(conntrack::ONLINE_CPUS)
        .ok()
        .and_then(|list| conntrack::count_cpus(&list))
        .or_else(|| {
            std::thread::available_parallelism()
                .ok()
                .and_then(|n| u32::try_from(n.get()).ok())
        })
        .unwrap_or(1)
}

/// `ipvs.tcpTimeout`, `tcpFinTimeout` and `udpTimeout`, when one is set;
/// a failure is logged, as upstream does.
async fn set_ipvs_timeouts(config: &Config) {
    let Some(timeouts) = ConnTimeouts::from_config(
        config.ipvs.tcp_timeout,
        config.ipvs.tcp_fin_timeout,
        config.ipvs.udp_timeout,
    ) else {
        return;
    };
    let result = match NetlinkIpvs::new() {
        Ok(ipvs) => ipvs.set_timeouts(&timeouts).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => tracing::info!(%timeouts, "IPVS timeouts set"),
        Err(error) => tracing::warn!(%error, "IPVS timeouts not set"),
    }
}
