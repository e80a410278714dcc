//! Time bulk programming through ipvs-sys: add SERVICES virtual services
//! with DESTS destinations each in one batch, dump them all, flush.
//! For comparison with `ipvsadm -R` / `ipvsadm -Sn` in the guest.
//!
//! `cargo run --example bulk -- [SERVICES] [DESTS] [WINDOW] [DUMPS]`
//! (defaults 1000 10 128 1; DUMPS is how many destination dumps run at
//! once). Run as root; it flushes the IPVS table first and last.

use std::{net::Ipv4Addr, time::Instant};

use futures::{stream, StreamExt, TryStreamExt};
use ipvs_sys::{Destination, Service, ServiceKey};

fn arg(n: usize, default: usize) -> usize {
    std::env::args()
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

// One thread: under TCG emulation cross-thread wake-ups dominate, and one
// socket serialises the work anyway.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (services, dests, window, dumps) =
        (arg(1, 1000), arg(2, 10), arg(3, 128), arg(4, 1));
    let (conn, handle, _) = ipvs_sys::new_connection()?;
    tokio::spawn(conn);
    handle.flush().execute().await?;

    let svcs: Vec<Service> = (0..services)
        .map(|i| {
            let [_, _, a, b] = (i as u32).to_be_bytes();
            let vip = Ipv4Addr::new(198, 18, a, b);
            Service::new(ServiceKey::tcp(vip.into(), 80)).with_scheduler("rr")
        })
        .collect();
    let mut batch = handle.batch().window(window);
    for svc in &svcs {
        batch.add_service(svc);
        for d in 0..dests {
            let rip =
                Ipv4Addr::new(198, 19, (d / 250) as u8, (d % 250 + 1) as u8);
            batch.add_dest(svc, &Destination::new(rip.into(), 8080));
        }
    }
    let ops = batch.len();
    let start = Instant::now();
    let failed = batch
        .execute()
        .await?
        .into_iter()
        .filter(Result::is_err)
        .count();
    let add = start.elapsed();
    println!("add: {ops} operations in {add:?} ({failed} failed)");

    let start = Instant::now();
    let listed: Vec<Service> =
        handle.service().list().execute().try_collect().await?;
    let counts: Vec<Result<usize, ipvs_sys::Error>> = stream::iter(&listed)
        .map(|svc| {
            let handle = handle.clone();
            async move {
                let dests: Vec<Destination> =
                    handle.dest(svc).list().execute().try_collect().await?;
                Ok(dests.len())
            }
        })
        .buffered(dumps.max(1))
        .collect()
        .await;
    let dump = start.elapsed();
    let errors: Vec<String> = counts
        .iter()
        .filter_map(|c| c.as_ref().err().map(ToString::to_string))
        .take(3)
        .collect();
    let total: usize = counts.iter().filter_map(|c| c.as_ref().ok()).sum();
    println!(
        "dump: {} services, {total} destinations in {dump:?}; errors: {errors:?}",
        listed.len()
    );
    handle.flush().execute().await?;
    Ok(())
}
