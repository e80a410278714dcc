//! Reads of IPVS through ipvs-sys (no process per look), shared by the
//! guest benches.

use std::net::IpAddr;

use futures::TryStreamExt;
use ipvs_sys::{Destination, Handle, Service, ServiceKey};

pub fn connect() -> anyhow::Result<Handle> {
    let (conn, handle, _) = ipvs_sys::new_connection()?;
    tokio::spawn(conn);
    Ok(handle)
}

/// Virtual servers and real servers in this namespace.
pub async fn ipvs_counts(handle: &Handle) -> anyhow::Result<(usize, usize)> {
    let services: Vec<Service> =
        handle.service().list().execute().try_collect().await?;
    let mut dests = 0;
    for svc in &services {
        dests += handle
            .dest(svc)
            .list()
            .execute()
            .try_collect::<Vec<Destination>>()
            .await?
            .len();
    }
    Ok((services.len(), dests))
}

/// The real servers of TCP `vip:port`; empty when there is no such
/// virtual server (the kernel's dump of a missing service is empty).
pub async fn real_servers(
    handle: &Handle,
    vip: IpAddr,
    port: u16,
) -> anyhow::Result<Vec<Destination>> {
    Ok(handle
        .dest(ServiceKey::tcp(vip, port))
        .list()
        .execute()
        .try_collect()
        .await?)
}
