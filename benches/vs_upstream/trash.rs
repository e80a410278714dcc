//! BENCH_TRASH_PREFILL: the kernel's trash of deleted real servers
//! filled before the churn, as a churn that has run for minutes leaves
//! it.
//!
//! The kernel keeps a deleted real server on a per-namespace list for
//! 120 to 180 s, and every real server added walks that list first
//! (`ip_vs_trash_get_dest`). A churn's first minutes start with the list
//! empty and so cost less than its later ones, whatever the proxy does.
//! Filling the list beforehand, with virtual servers no proxy programs,
//! tells that apart from anything accumulating in the proxy: if the
//! first minute then costs what the later ones do, the difference was
//! the kernel's.

use anyhow::Context;
use ipvs_sys::{Destination, ForwardMethod, Handle, Service, ServiceKey};
use std::net::{IpAddr, Ipv4Addr};

/// Real servers per virtual server: the kernel looks a real server up
/// in its virtual server's list, so one long list would make the fill
/// quadratic.
const PER_SERVICE: u32 = 100;

/// Adds `count` real servers on virtual servers of the bench's own
/// (198.18.255.0/24, port 9: outside the services the bench creates)
/// and deletes those virtual servers, which puts every real server in
/// the trash.
pub async fn fill(handle: &Handle, count: u32) -> anyhow::Result<()> {
    let services: Vec<ServiceKey> = (0..count.div_ceil(PER_SERVICE))
        .map(|s| {
            ServiceKey::tcp(
                IpAddr::V4(Ipv4Addr::new(198, 18, 255, 1 + (s % 250) as u8)),
                9 + (s / 250) as u16,
            )
        })
        .collect();
    let mut batch = handle.batch().window(ipvs_sys::DEFAULT_WINDOW);
    for (s, key) in services.iter().enumerate() {
        batch.add_service(&Service::new(*key).with_scheduler("rr"));
        let first = s as u32 * PER_SERVICE;
        for i in first..(first + PER_SERVICE).min(count) {
            let address =
                Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 19, 0, 0)) + i);
            batch.add_dest(
                *key,
                &Destination::new(IpAddr::V4(address), 9)
                    .with_fwd_method(ForwardMethod::Masquerade),
            );
        }
    }
    for key in &services {
        batch.del_service(*key);
    }
    let results = batch.execute().await.context("filling the IPVS trash")?;
    let failed = results.iter().filter(|r| r.is_err()).count();
    anyhow::ensure!(
        failed == 0,
        "filling the IPVS trash: {failed} of {} operations failed, the first: {:?}",
        results.len(),
        results.iter().find_map(|r| r.as_ref().err())
    );
    Ok(())
}
