//! Print the IPVS table the way `ipvsadm -Ln` does (roughly): a quick
//! manual check in the guest. Run as root: `cargo run --example list`.

use futures::TryStreamExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (conn, handle, _) = ipvs_sys::new_connection()?;
    tokio::spawn(conn);

    let info = handle.info().execute().await?;
    println!(
        "IP Virtual Server version {} (size={})",
        info.version, info.conn_table_size
    );
    let services: Vec<ipvs_sys::Service> =
        handle.service().list().execute().try_collect().await?;
    for svc in services {
        let persistent =
            if svc.flags.contains(ipvs_sys::ServiceFlags::PERSISTENT) {
                format!(" persistent {}", svc.timeout)
            } else {
                String::new()
            };
        println!("{} {}{persistent}", svc.key, svc.scheduler);
        let dests: Vec<ipvs_sys::Destination> =
            handle.dest(&svc).list().execute().try_collect().await?;
        for dest in dests {
            let conns = dest.conns.unwrap_or_default();
            println!(
                "  -> {dest} {} {} {} {}",
                dest.fwd_method, dest.weight, conns.active, conns.inactive
            );
        }
    }
    Ok(())
}
