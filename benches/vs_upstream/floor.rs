//! The floor of a cold sync: the state the proxy left in the kernel,
//! loaded again the cheapest way the kernel allows, part by part, in the
//! same boot. The proxy's cold sync is then set against it
//! (`cold_sync_over_floor`): what a proxy could still gain, and where.
//!
//! The parts, each timed alone in a fresh network namespace (a fresh IPVS
//! table with an empty trash of deleted real servers: after the proxy's
//! table, the kernel would walk that list at every real server added):
//! - IPVS: one `setsockopt` per virtual and real server, in order, as
//!   `make bench-ipvs` found cheapest;
//! - the `kube-ipvs0` addresses and the ipsets: the proxy's own netlink
//!   writers, every request of a part in flight at once (about ten times
//!   cheaper here than `ip -batch` and `ipset restore`, which wait for
//!   each line's answer);
//! - iptables: one `iptables-restore` (and `ip6tables-restore`) of what
//!   `-save` printed.
//!
//! The list and decode of the objects from the API server is not in the
//! floor: the floor is the kernel's.

use std::{
    net::IpAddr,
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use bench_support::tool::{output, run, timed};
use futures::TryStreamExt;
use ipvs_sys::{Destination, Handle, Service, ServiceKey, SockoptSocket};
use kube_ipvs_proxy::kernel::{
    addresses::{AddressOp, Addresses as _, NetlinkAddresses},
    ipsets::{IpsetOp, Ipsets as _, NetlinkIpsets, SetState},
};

use crate::measurement::Results;

const LINK: &str = "kube-ipvs0";

/// What the proxy left in the kernel, read in the guest's namespace.
struct Left {
    ipvs: Vec<(Service, Vec<Destination>)>,
    /// kube-ipvs0's.
    addresses: Vec<IpAddr>,
    ipsets: Vec<SetState>,
    iptables: String,
    ip6tables: String,
}

/// Each part's time, and what it loaded.
struct Floor {
    ipvs: (Duration, usize),
    addresses: (Duration, usize),
    ipsets: (Duration, usize),
    iptables: (Duration, usize),
}

/// Reads what the proxy left (it has exited), loads it again part by
/// part and prints each part, the floor and `cold` against it.
pub async fn measure(
    results: &Results<'_>,
    handle: &Handle,
    cold: Duration,
) -> anyhow::Result<()> {
    let left = read(handle).await?;
    // A thread of its own: a network namespace is a thread's, and the
    // commands it starts inherit it.
    let floor = std::thread::spawn(move || load(&left))
        .join()
        .map_err(|_| anyhow::anyhow!("the floor's thread panicked"))??;
    let parts = [
        ("ipvs", floor.ipvs),
        ("addresses", floor.addresses),
        ("ipsets", floor.ipsets),
        ("iptables", floor.iptables),
    ];
    let mut total = Duration::ZERO;
    for (name, (took, count)) in parts {
        results.print(&format!("floor_{name}_s"), took.as_secs_f64());
        results.print(&format!("floor_{name}_count"), count as f64);
        total += took;
    }
    results.print("cold_sync_floor_s", total.as_secs_f64());
    let over = cold.as_secs_f64() / total.as_secs_f64().max(1e-9);
    results.print("cold_sync_over_floor", over);
    eprintln!(
        "{} {}: cold sync {:.1} s against a floor of {:.1} s ({over:.2}x): \
         IPVS {:.1} s ({} objects), addresses {:.2} s ({}), ipsets {:.2} s \
         ({} sets and entries), iptables {:.2} s ({} lines)",
        results.proxy(),
        results.services(),
        cold.as_secs_f64(),
        total.as_secs_f64(),
        floor.ipvs.0.as_secs_f64(),
        floor.ipvs.1,
        floor.addresses.0.as_secs_f64(),
        floor.addresses.1,
        floor.ipsets.0.as_secs_f64(),
        floor.ipsets.1,
        floor.iptables.0.as_secs_f64(),
        floor.iptables.1,
    );
    Ok(())
}

async fn read(handle: &Handle) -> anyhow::Result<Left> {
    let services: Vec<Service> = handle
        .service()
        .list()
        .execute()
        .try_collect()
        .await
        .context("listing the IPVS services")?;
    let mut ipvs = Vec::with_capacity(services.len());
    for svc in services {
        let mut dests: Vec<Destination> = handle
            .dest(&svc)
            .list()
            .execute()
            .try_collect()
            .await
            .with_context(|| {
                format!("listing the real servers of {}", svc.key)
            })?;
        // The kernel reports a real server's (empty) tunnel settings,
        // which the socket options cannot carry; the proxies set none.
        for dest in &mut dests {
            dest.tunnel = None;
        }
        ipvs.push((svc, dests));
    }
    let addresses = NetlinkAddresses::new()
        .context("the rtnetlink socket")?
        .list(LINK)
        .await
        .context("listing kube-ipvs0's addresses")?
        .into_iter()
        .collect();
    let ipsets = NetlinkIpsets::new()
        .context("the ipset socket")?
        .dump("KUBE-")
        .await
        .context("listing the ipsets")?;
    Ok(Left {
        ipvs,
        addresses,
        ipsets: ipsets.into_values().collect(),
        iptables: output("iptables-save", &[])?,
        ip6tables: output("ip6tables-save", &[]).unwrap_or_default(),
    })
}

/// In a fresh network namespace, on this thread: each part loaded and
/// timed.
fn load(left: &Left) -> anyhow::Result<Floor> {
    // SAFETY: unshare has no memory-safety preconditions; it moves this
    // thread alone.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        bail!("unshare(CLONE_NEWNET): {}", std::io::Error::last_os_error());
    }
    // The kernel refuses real servers whose address type it cannot tell
    // until the namespace has a local routing table: lo up makes it.
    run("ip", &["link", "set", "lo", "up"], "")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;

    let socket = SockoptSocket::open().context("the IPVS socket")?;
    let mut objects = 0;
    let started = Instant::now();
    for (svc, dests) in &left.ipvs {
        // The socket options speak IPv4 only: the bench's services are.
        if !matches!(
            svc.key,
            ServiceKey::Inet {
                address: IpAddr::V4(_),
                ..
            }
        ) {
            continue;
        }
        socket
            .add_service(svc)
            .with_context(|| format!("adding {}", svc.key))?;
        for dest in dests {
            socket.add_dest(&svc.key, dest).with_context(|| {
                format!("adding a real server to {}", svc.key)
            })?;
        }
        objects += 1 + dests.len();
    }
    let ipvs = (started.elapsed(), objects);

    let ops: Vec<AddressOp> = left
        .addresses
        .iter()
        .map(|ip| AddressOp::Add(*ip))
        .collect();
    let (took, written) = runtime.block_on(async {
        let mut writer = NetlinkAddresses::new()?;
        writer.ensure_dummy(LINK).await?;
        let started = Instant::now();
        let written = writer.apply(LINK, &ops).await;
        anyhow::Ok((started.elapsed(), written))
    })?;
    if let Some(e) = written.into_iter().find_map(Result::err) {
        bail!("binding the addresses: {e}");
    }
    let addresses = (took, ops.len());
    let ops: Vec<IpsetOp> = (left.ipsets.iter())
        .map(|set| IpsetOp::Create(set.spec.clone()))
        .chain(left.ipsets.iter().flat_map(|set| {
            let name = &set.spec.name;
            (set.entries.iter()).map(|e| IpsetOp::Add(name.clone(), e.clone()))
        }))
        .collect();
    let mut writer = NetlinkIpsets::new().context("the ipset socket")?;
    let started = Instant::now();
    let written = runtime.block_on(writer.apply(&ops));
    let ipsets = (started.elapsed(), ops.len());
    if let Some(e) = written.into_iter().find_map(Result::err) {
        bail!("loading the ipsets: {e}");
    }
    let mut iptables = timed("iptables-restore", &[], &left.iptables)?;
    let mut lines = left.iptables.lines().count();
    if left.ip6tables.lines().any(|l| l.starts_with('-')) {
        iptables += timed("ip6tables-restore", &[], &left.ip6tables)?;
        lines += left.ip6tables.lines().count();
    }
    Ok(Floor {
        ipvs,
        addresses,
        ipsets,
        iptables: (iptables, lines),
    })
}
