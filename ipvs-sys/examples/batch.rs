//! Many writes in flight at once: a batch sends them without waiting for
//! each acknowledgement and answers with one result per operation, in
//! order, a failure leaving the others alone. Here the batch adds three
//! services (the last one twice: its second add fails with EEXIST) and a
//! destination each, prints every result, then deletes them.
//!
//! Run as root on a kernel with IPVS: `cargo run --example batch`.

use std::net::Ipv4Addr;

use ipvs_sys::{Destination, Service, ServiceKey};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (conn, handle, _) = ipvs_sys::new_connection()?;
    tokio::spawn(conn);

    let services: Vec<Service> = (1..=3)
        .map(|i| {
            let vip = Ipv4Addr::new(198, 18, 1, i);
            Service::new(ServiceKey::tcp(vip.into(), 80)).with_scheduler("rr")
        })
        .collect();
    let mut batch = handle.batch().window(64);
    for (i, service) in services.iter().enumerate() {
        batch.add_service(service);
        let rip = Ipv4Addr::new(198, 19, 1, i as u8 + 1);
        batch.add_dest(service, &Destination::new(rip.into(), 8080));
    }
    // Once more: the kernel answers EEXIST for this one alone.
    if let Some(last) = services.last() {
        batch.add_service(last);
    }
    let results = batch.execute().await?;
    for (i, result) in results.iter().enumerate() {
        match result {
            Ok(()) => println!("{i}: ok"),
            Err(e) => println!("{i}: {e} [{}]", e.metric_label()),
        }
    }

    let mut cleanup = handle.batch();
    for service in &services {
        cleanup.del_service(service);
    }
    for result in cleanup.execute().await? {
        result?;
    }
    Ok(())
}
