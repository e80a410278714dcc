//! The backend the daemon runs on a real node: the proxier over netlink
//! (IPVS, kube-ipvs0, ipsets), wrapped by the iptables rules and the UDP
//! conntrack cleanup. Shared by the binary and the benchmarks, so that
//! both measure the same thing. What is checked and set on the host
//! before it opens is in [`super::host`].

use tracing::warn;

use super::{
    conntrack::WithConntrack,
    iptables::{RulesSettings, WithIptables},
    Proxier, ProxierConfig,
};
use crate::{
    config::Config,
    kernel::{
        addresses::NetlinkAddresses,
        conntrack::NetlinkConntrack,
        ipsets::NetlinkIpsets,
        iptables::real::{RealIptables, Variant},
        ipvs::NetlinkIpvs,
        KernelError,
    },
};

pub type KernelBackend = WithConntrack<
    WithIptables<
        Proxier<NetlinkIpvs, NetlinkAddresses, NetlinkIpsets>,
        RealIptables,
    >,
    NetlinkConntrack,
>;

/// Opens the kernel facilities and makes sure kube-ipvs0 and the sets
/// exist. Nothing is flushed: the first sync reads the kernel and applies
/// the difference, so connections through existing virtual servers
/// survive a restart. Must run inside a tokio runtime (the netlink
/// connections are spawned on it).
pub async fn open(config: &Config) -> Result<KernelBackend, KernelError> {
    open_with(config, NetlinkIpvs::new()?).await
}

/// Like [`open`], with every IPVS read and write over generic netlink,
/// as on a kernel that refuses IPVS's socket options: the same-process
/// baseline `make bench` holds the socket options' path to.
#[cfg(any(test, feature = "test-support"))]
pub async fn open_over_netlink(
    config: &Config,
) -> Result<KernelBackend, KernelError> {
    open_with(config, NetlinkIpvs::new()?.without_socket_options()).await
}

async fn open_with(
    config: &Config,
    ipvs: NetlinkIpvs,
) -> Result<KernelBackend, KernelError> {
    let addresses = NetlinkAddresses::new()?;
    let ipsets = NetlinkIpsets::new()?;
    let conntrack = NetlinkConntrack::new()?;
    let mut proxier = Proxier::new(
        ipvs,
        addresses,
        ipsets,
        ProxierConfig::from_config(config),
    );
    let report = proxier.start().await;
    for error in report.failed() {
        warn!(%error, "start-up");
    }
    let iptables = RealIptables::new(Variant::detect().await);
    // Unconditional, as kube-proxy since 1.37: every iptables of a
    // supported node (1.6.2 and later) has it.
    let with_rules = WithIptables::new(
        proxier,
        iptables,
        RulesSettings::from_config(config, true),
    );
    Ok(WithConntrack::new(with_rules, conntrack))
}
