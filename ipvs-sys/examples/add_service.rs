//! Program one virtual service with two real servers, as
//! `ipvsadm -A -t 198.18.0.10:80 -s rr` and two `ipvsadm -a ... -m`
//! would, read it back, then remove it (unless `--keep`).
//!
//! Run as root on a kernel with IPVS: `cargo run --example add_service`.
//! An address from 198.18.0.0/15 (RFC 2544, for tests) is used so that no
//! real service is touched.

use futures::TryStreamExt;
use ipvs_sys::{Destination, ForwardMethod, Service, ServiceKey};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let keep = std::env::args().any(|a| a == "--keep");
    let (conn, handle, _) = ipvs_sys::new_connection()?;
    tokio::spawn(conn);

    let service = Service::new(ServiceKey::tcp("198.18.0.10".parse()?, 80))
        .with_scheduler("rr");
    match handle.service().add(&service).execute().await {
        // Left by an earlier run with --keep: use it as it is.
        Err(e) if e.is_exists() => println!("{}: already there", service.key),
        other => other?,
    }
    for address in ["198.19.0.5", "198.19.0.6"] {
        let dest = Destination::new(address.parse()?, 8080)
            .with_fwd_method(ForwardMethod::Masquerade)
            .with_weight(1);
        match handle.dest(&service).add(&dest).execute().await {
            Err(e) if e.is_exists() => {}
            other => other?,
        }
    }

    // Read back what the kernel holds, as `ipvsadm -Ln -t` shows it.
    let stored = handle.service().get(&service).execute().await?;
    println!("{} {}", stored.key, stored.scheduler);
    let dests: Vec<Destination> =
        handle.dest(&service).list().execute().try_collect().await?;
    for dest in &dests {
        println!("  -> {dest} {} weight {}", dest.fwd_method, dest.weight);
    }

    if !keep {
        // Deleting the service deletes its destinations with it.
        handle.service().del(&service).execute().await?;
        println!("{}: deleted", service.key);
    }
    Ok(())
}
