//! The rtnetlink implementation of `Addresses` against the guest's kernel:
//! the contract scenarios the model passes, and kube-ipvs0 left down.

use std::process::Command;

use kube_ipvs_proxy::kernel::addresses::{
    contract, AddressOp, Addresses, NetlinkAddresses,
};
use testkit::{guest, run};

#[tokio::test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
async fn kernel_passes_the_contract() -> anyhow::Result<()> {
    guest::require();
    let mut k = NetlinkAddresses::new()?;
    contract::link_lifecycle(&mut k).await;
    contract::add_list_delete(&mut k).await;
    contract::errors_are_per_operation(&mut k).await;
    contract::missing_link(&mut k).await;
    contract::local_addresses_skip_the_link(&mut k).await;
    Ok(())
}

#[tokio::test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
async fn dummy_stays_down_and_its_addresses_are_local() -> anyhow::Result<()> {
    guest::require();
    let link = "kipt-down0";
    let mut k = NetlinkAddresses::new()?;
    let _ = k.delete_link(link).await;
    k.ensure_dummy(link).await?;
    let ip = "198.18.0.50".parse()?;
    let results = k.apply(link, &[AddressOp::Add(ip)]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");

    let shown = run(Command::new("ip").args(["-o", "link", "show", link]))?;
    assert!(shown.contains("state DOWN"), "{shown}");
    assert!(shown.contains("link/ether"), "{shown}");
    let details = run(Command::new("ip").args(["-d", "link", "show", link]))?;
    assert!(details.contains("dummy"), "{details}");
    let addrs = run(Command::new("ip").args(["-o", "addr", "show", link]))?;
    assert!(addrs.contains("198.18.0.50/32 scope global"), "{addrs}");
    // Down, yet the kernel routes the address locally: what IPVS needs.
    let route = run(Command::new("ip").args(["route", "get", "198.18.0.50"]))?;
    assert!(route.starts_with("local 198.18.0.50"), "{route}");

    k.delete_link(link).await?;
    Ok(())
}
