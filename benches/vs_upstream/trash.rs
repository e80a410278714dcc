//! BENCH_TRASH_WARMUP: the kernel's trash of deleted real servers
//! brought to where minutes of churn leave it, before the churn.
//!
//! The kernel keeps a deleted real server on a per-namespace list for
//! 120 to 180 s (its trash timer runs every 60 s; a server is freed on
//! the second run after its deletion at the earliest, `ip_vs_ctl.c`), and
//! every real server added walks that list first
//! (`ip_vs_trash_get_dest`). A churn's first minutes start with the list
//! empty and so cost less than its later ones, whatever the proxy does.
//!
//! Deleting real servers at the churn's own rate for that long, on
//! virtual servers no proxy programs, leaves the list as long and its
//! entries as old as a churn that had already run that long: the list
//! then stays the same length while the churn's own deletions replace
//! the warm-up's as they expire. The proxy itself has seen no churn, so
//! a ten-minute run still starts with the proxy's first minute, and a
//! later minute that costs more than the first is the proxy's doing.
//! (Filling the list at once would not do: the whole fill expires
//! together, and the churn's first minutes would walk the fill and their
//! own deletions, a longer list than any later minute's.)

use std::{
    net::{IpAddr, Ipv4Addr},
    time::Duration,
};

use anyhow::Context;
use ipvs_sys::{Destination, ForwardMethod, Handle, Service, ServiceKey};
use tokio::time::MissedTickBehavior;

/// Deletes `rate` real servers a second for `duration`: each second, a
/// virtual server of the bench's own (198.18.255.0/24 from port 9,
/// outside the services the bench creates) with `rate` real servers,
/// added and deleted in one batch, which puts its real servers in the
/// trash.
pub async fn warm_up(
    handle: &Handle,
    rate: u64,
    duration: Duration,
) -> anyhow::Result<()> {
    let rate = u32::try_from(rate).context("BENCH_CHURN_RATE")?;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let seconds =
        u32::try_from(duration.as_secs()).context("BENCH_TRASH_WARMUP")?;
    for s in 0..seconds {
        tick.tick().await;
        let key = ServiceKey::tcp(
            IpAddr::V4(Ipv4Addr::new(198, 18, 255, 1 + (s % 250) as u8)),
            9 + (s / 250) as u16,
        );
        let mut batch = handle.batch().window(ipvs_sys::DEFAULT_WINDOW);
        batch.add_service(&Service::new(key).with_scheduler("rr"));
        for i in 0..rate {
            // Addresses of its own per second, so that no add finds a
            // match in the trash and each walks all of it, as the churn's
            // adds (each a new address) do.
            let nth =
                (u64::from(s) * u64::from(rate) + u64::from(i)) % (1 << 16);
            let address = Ipv4Addr::from(
                u32::from(Ipv4Addr::new(198, 19, 0, 0)) + nth as u32,
            );
            batch.add_dest(
                key,
                &Destination::new(IpAddr::V4(address), 9)
                    .with_fwd_method(ForwardMethod::Masquerade),
            );
        }
        batch.del_service(key);
        let results =
            batch.execute().await.context("warming up the IPVS trash")?;
        let failed = results.iter().filter(|r| r.is_err()).count();
        anyhow::ensure!(
            failed == 0,
            "warming up the IPVS trash: {failed} of {} operations failed, the first: {:?}",
            results.len(),
            results.iter().find_map(|r| r.as_ref().err())
        );
    }
    Ok(())
}
