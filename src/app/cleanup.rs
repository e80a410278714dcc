//! `--cleanup`: what IPVS mode created removed, and nothing that is not
//! ours.

use anyhow::Context;

use super::Failure;
use crate::{
    config::Config,
    kernel::{
        addresses::{Addresses, NetlinkAddresses},
        ipsets::{Ipsets, NetlinkIpsets},
        iptables::{
            real::{RealIptables, Variant},
            IpFamily, Iptables,
        },
        ipvs::{Ipvs, NetlinkIpvs},
    },
    proxier::{iptables, Proxier, ProxierConfig},
};

/// Removes our iptables chains and jumps first (sets they reference
/// cannot be destroyed), then our virtual servers, kube-ipvs0 and our
/// sets, from this host's kernel. What fails is logged and the rest
/// still removed.
pub async fn run(config: &Config) -> Result<(), Failure> {
    rules(&mut RealIptables::new(Variant::detect().await)).await;
    let mut proxier = Proxier::new(
        NetlinkIpvs::new().context("IPVS")?,
        NetlinkAddresses::new().context("kube-ipvs0 addresses")?,
        NetlinkIpsets::new().context("ipsets")?,
        ProxierConfig::from_config(config),
    );
    kernel(&mut proxier).await;
    Ok(())
}

/// Our iptables chains and the jumps to them, both families.
pub async fn rules<K: Iptables>(tables: &mut K) {
    let (report, kept) =
        iptables::cleanup(tables, &[IpFamily::V4, IpFamily::V6]).await;
    for (family, table, error) in &report.errors {
        tracing::warn!(%family, table, %error, "iptables cleanup");
    }
    for (family, table, chain) in kept {
        tracing::warn!(%family, table, chain, "chain still referenced by a rule that is not ours; flushed and kept");
    }
}

/// Our virtual servers, kube-ipvs0 and our sets.
pub async fn kernel<I: Ipvs, A: Addresses, S: Ipsets>(
    proxier: &mut Proxier<I, A, S>,
) {
    let report = proxier.cleanup().await;
    let failures: Vec<_> = report.failed().collect();
    for error in &failures {
        tracing::warn!(%error, "cleanup");
    }
    tracing::info!(
        operations = report.op_count(),
        failures = failures.len(),
        "cleanup done"
    );
}
