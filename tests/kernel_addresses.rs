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
    contract::multicast_is_an_address_like_any_other(&mut k).await;
    contract::errors_are_per_operation(&mut k).await;
    contract::missing_link(&mut k).await;
    contract::detached_writes_answer_like_apply(&mut k).await;
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

/// More requests than the pipeline keeps in flight, in one batch: every
/// acknowledgement arrives (none lost to a full socket buffer), each
/// address is bound once, and the time is printed next to `ip -batch`
/// binding as many on another link in the same kernel.
#[tokio::test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
async fn binds_a_thousand_addresses_in_one_batch() -> anyhow::Result<()> {
    guest::require();
    const N: u16 = 1000;
    let (ours, theirs) = ("kipt-many0", "kipt-many1");
    let ips: Vec<std::net::IpAddr> = (0..N)
        .map(|i| {
            let [hi, lo] = i.to_be_bytes();
            std::net::Ipv4Addr::new(198, 18, 16 + hi, lo).into()
        })
        .collect();
    let mut k = NetlinkAddresses::new()?;
    for link in [ours, theirs] {
        let _ = k.delete_link(link).await;
        k.ensure_dummy(link).await?;
    }

    let ops: Vec<_> = ips.iter().copied().map(AddressOp::Add).collect();
    let started = std::time::Instant::now();
    let results = k.apply(ours, &ops).await;
    let ours_took = started.elapsed();
    let failed: Vec<_> =
        results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} failed, first {:?}",
        failed.len(),
        failed.first()
    );
    assert_eq!(k.list(ours).await?, ips.iter().copied().collect());

    let script: String = ips
        .iter()
        .map(|ip| format!("address add {ip}/32 dev {theirs}\n"))
        .collect();
    let started = std::time::Instant::now();
    testkit::run_with_input(Command::new("ip").args(["-batch", "-"]), &script)?;
    let theirs_took = started.elapsed();
    eprintln!(
        "{N} address adds: apply {ours_took:?}, ip -batch {theirs_took:?} \
         (ratio {:.2})",
        ours_took.as_secs_f64() / theirs_took.as_secs_f64()
    );

    // A second batch of the same adds: all Exists, none lost either.
    let again = k.apply(ours, &ops).await;
    assert!(again.iter().all(|r| r.as_ref().is_err_and(|e| {
        e.kind == kube_ipvs_proxy::kernel::ErrorKind::Exists
    })));
    for link in [ours, theirs] {
        k.delete_link(link).await?;
    }
    Ok(())
}
