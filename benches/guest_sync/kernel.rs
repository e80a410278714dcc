//! The kernel as each side leaves it: a fresh network namespace per
//! side, torn down after it, and the tools' counts of what it holds.

use std::process::Command;

use anyhow::{bail, Context};
use ipvs_sys::Handle;

use crate::baseline;

/// Moves this thread (the runtime's only one) into a new network
/// namespace with lo up and the node's address on a dummy link node0.
/// Sockets opened and processes started afterwards belong to it.
///
/// Why fresh: the kernel keeps deleted real servers on a per-namespace
/// trash list that every real server add walks, so a side loading after
/// another's flush in the same namespace is slowed by the other's
/// leftovers (see ipvs-sys/benches/vs_ipvsadm.rs).
pub fn fresh_netns(node_ip: &str) -> anyhow::Result<()> {
    // SAFETY: unshare has no memory-safety preconditions; it changes the
    // calling thread's namespace only.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        let err = std::io::Error::last_os_error();
        bail!("unshare(CLONE_NEWNET): {err} (run as root, in the guest)");
    }
    baseline::run(
        "ip",
        &["-batch", "-"],
        &format!(
            "link set lo up\nlink add node0 type dummy\n\
             addr add {node_ip}/24 dev node0\nlink set node0 up\n"
        ),
    )
}

/// Undoes a side before the next starts: the IPVS service table (and,
/// before Linux 6.2, the IPv4 address hash) is shared by all namespaces,
/// so a namespace's 10,000 services would lengthen the next one's
/// lookups.
pub async fn tear_down(handle: &Handle) -> anyhow::Result<()> {
    handle.flush().execute().await.context("IPVS flush")?;
    baseline::run("ip", &["link", "del", "kube-ipvs0"], "")?;
    // Sets are per namespace; gone with it, but not while a rule holds
    // one, and the baseline has no rules.
    baseline::run("ipset", &["destroy"], "")
}

/// Addresses on kube-ipvs0 and entries in all sets, read with the tools
/// (once per side, not timed).
pub fn address_and_entry_counts() -> anyhow::Result<(usize, usize)> {
    let out = Command::new("ip")
        .args(["-o", "addr", "show", "dev", "kube-ipvs0"])
        .output()?;
    let addresses = String::from_utf8_lossy(&out.stdout).lines().count();
    let out = Command::new("ipset").args(["list", "-t"]).output()?;
    let entries = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("Number of entries:"))
        .filter_map(|n| n.trim().parse::<usize>().ok())
        .sum();
    Ok((addresses, entries))
}
