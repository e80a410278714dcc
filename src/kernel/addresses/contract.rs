//! Scenarios every [`Addresses`] implementation passes: the unit tests
//! run them against the model, `tests/kernel_addresses.rs` against the
//! kernel in the guest. Each scenario uses its own link names, so they can
//! run side by side in one kernel, and removes its links at the end.

use std::{
    collections::BTreeSet,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use super::{AddressOp, Addresses};
use crate::kernel::{ErrorKind, KernelError};

const fn v4(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(198, 18, 0, last))
}

const fn v6(last: u16) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, last))
}

fn kinds(results: &[Result<(), KernelError>]) -> Vec<Option<ErrorKind>> {
    results
        .iter()
        .map(|r| r.as_ref().err().map(|e| e.kind))
        .collect()
}

async fn fresh<K: Addresses>(k: &mut K, link: &str) {
    // Left over by an earlier failed run, or absent: either is fine.
    let _ = k.delete_link(link).await;
}

/// Creating is idempotent, the link starts empty, deleting a missing
/// link is NotFound, and listing a missing link is empty.
pub async fn link_lifecycle<K: Addresses>(k: &mut K) {
    let link = "kipt-life0";
    fresh(k, link).await;
    assert_eq!(k.list(link).await, Ok(BTreeSet::new()), "missing link");
    k.ensure_dummy(link).await.expect("create");
    k.ensure_dummy(link).await.expect("ensure again");
    assert_eq!(k.list(link).await, Ok(BTreeSet::new()), "new link");
    k.delete_link(link).await.expect("delete");
    let again = k.delete_link(link).await.expect_err("delete again");
    assert_eq!(again.kind, ErrorKind::NotFound, "{again}");
    assert!(again.object.contains(link), "{again}");
}

/// One batch adds IPv4 and IPv6 host addresses, one result each; the
/// dump shows exactly them; deleting leaves the rest.
pub async fn add_list_delete<K: Addresses>(k: &mut K) {
    let link = "kipt-add0";
    fresh(k, link).await;
    k.ensure_dummy(link).await.expect("create");
    let added = [v4(10), v4(11), v4(12), v6(10)];
    let ops: Vec<_> = added.iter().copied().map(AddressOp::Add).collect();
    let results = k.apply(link, &ops).await;
    assert_eq!(kinds(&results), vec![None; 4], "{results:?}");
    assert_eq!(k.list(link).await, Ok(added.into_iter().collect()));

    let results = k
        .apply(
            link,
            &[AddressOp::Delete(v4(11)), AddressOp::Delete(v6(10))],
        )
        .await;
    assert_eq!(kinds(&results), vec![None; 2], "{results:?}");
    assert_eq!(
        k.list(link).await,
        Ok([v4(10), v4(12)].into_iter().collect())
    );
    k.delete_link(link).await.expect("delete link");
}

/// An IPv4 multicast address (a Service's external IP may be one) binds
/// and unbinds like any other, and deleting it leaves the link's other
/// host addresses: a delete that names no address would take the first.
pub async fn multicast_is_an_address_like_any_other<K: Addresses>(k: &mut K) {
    let link = "kipt-mcast0";
    let multicast = IpAddr::V4(Ipv4Addr::new(239, 18, 0, 1));
    fresh(k, link).await;
    k.ensure_dummy(link).await.expect("create");
    let results = k
        .apply(link, &[AddressOp::Add(v4(30)), AddressOp::Add(multicast)])
        .await;
    assert_eq!(kinds(&results), vec![None; 2], "{results:?}");
    assert_eq!(
        k.list(link).await,
        Ok([v4(30), multicast].into_iter().collect())
    );
    let results = k.apply(link, &[AddressOp::Delete(multicast)]).await;
    assert_eq!(kinds(&results), vec![None], "{results:?}");
    assert_eq!(k.list(link).await, Ok([v4(30)].into_iter().collect()));
    k.delete_link(link).await.expect("delete link");
}

/// A duplicate add is Exists and a delete of an unbound address is
/// NotFound, each naming the address and the link; the operations around
/// them in the same batch still apply.
pub async fn errors_are_per_operation<K: Addresses>(k: &mut K) {
    let link = "kipt-err0";
    fresh(k, link).await;
    k.ensure_dummy(link).await.expect("create");
    let results = k
        .apply(
            link,
            &[
                AddressOp::Add(v4(20)),
                AddressOp::Add(v4(20)),
                AddressOp::Delete(v4(21)),
                AddressOp::Add(v4(22)),
                AddressOp::Delete(v6(21)),
            ],
        )
        .await;
    assert_eq!(
        kinds(&results),
        vec![
            None,
            Some(ErrorKind::Exists),
            Some(ErrorKind::NotFound),
            None,
            Some(ErrorKind::NotFound),
        ],
        "{results:?}"
    );
    for (result, ip) in results.iter().zip([v4(20), v4(20), v4(21)]) {
        if let Err(e) = result {
            assert!(e.object.contains(&format!("{ip}/32 on {link}")), "{e}");
            assert!(e.errno.is_some(), "{e}");
        }
    }
    assert_eq!(
        k.list(link).await,
        Ok([v4(20), v4(22)].into_iter().collect())
    );
    k.delete_link(link).await.expect("delete link");
}

/// Detached writes answer as `apply` does, one result per operation in
/// order, errors per operation and naming the address and the link, and
/// a missing link fails each; by the future's end the link shows them.
pub async fn detached_writes_answer_like_apply<K: Addresses>(k: &mut K) {
    let link = "kipt-det0";
    fresh(k, link).await;
    let missing = k.apply_detached(link, vec![AddressOp::Add(v4(40))]).await;
    assert_eq!(kinds(&missing), vec![Some(ErrorKind::NotFound)]);
    assert!(missing[0].as_ref().is_err_and(|e| e.object.contains(link)));
    k.ensure_dummy(link).await.expect("create");
    // More than the pipeline keeps in flight, with failures among them.
    let mut ops: Vec<_> = (1..=250)
        .flat_map(|i| [AddressOp::Add(v4(i)), AddressOp::Add(v6(i.into()))])
        .collect();
    ops.extend([AddressOp::Add(v4(7)), AddressOp::Delete(v6(300))]);
    let results = k.apply_detached(link, ops).await;
    let mut expected = vec![None; 500];
    expected.extend([Some(ErrorKind::Exists), Some(ErrorKind::NotFound)]);
    assert_eq!(kinds(&results), expected, "{:?}", &results[500..]);
    for (result, object) in results[500..]
        .iter()
        .zip(["198.18.0.7/32", "2001:db8::12c/128"])
    {
        let e = result.as_ref().expect_err("a failure");
        assert!(e.object.contains(&format!("{object} on {link}")), "{e}");
    }
    let shown = k.list(link).await.expect("list");
    assert_eq!(shown.len(), 500);
    let unbind = vec![AddressOp::Delete(v4(1)), AddressOp::Delete(v6(1))];
    let results = k.apply_detached(link, unbind).await;
    assert_eq!(kinds(&results), vec![None; 2], "{results:?}");
    let shown = k.list(link).await.expect("list");
    assert!(!shown.contains(&v4(1)) && !shown.contains(&v6(1)));
    assert_eq!(shown.len(), 498);
    k.delete_link(link).await.expect("delete link");
}

/// Every operation on a missing link is NotFound and names the link.
pub async fn missing_link<K: Addresses>(k: &mut K) {
    let link = "kipt-miss0";
    fresh(k, link).await;
    let results = k
        .apply(link, &[AddressOp::Add(v4(30)), AddressOp::Delete(v4(31))])
        .await;
    assert_eq!(
        kinds(&results),
        vec![Some(ErrorKind::NotFound); 2],
        "{results:?}"
    );
    for r in &results {
        if let Err(e) = r {
            assert!(e.object.contains(link), "{e}");
        }
    }
    assert!(k.apply(link, &[]).await.is_empty());
}

/// The node's addresses leave out the excluded link's.
pub async fn local_addresses_skip_the_link<K: Addresses>(k: &mut K) {
    let (ours, other) = ("kipt-loc0", "kipt-loc1");
    fresh(k, ours).await;
    fresh(k, other).await;
    k.ensure_dummy(ours).await.expect("create ours");
    k.ensure_dummy(other).await.expect("create other");
    let results = k.apply(ours, &[AddressOp::Add(v4(40))]).await;
    assert_eq!(kinds(&results), vec![None], "{results:?}");
    let results = k.apply(other, &[AddressOp::Add(v4(41))]).await;
    assert_eq!(kinds(&results), vec![None], "{results:?}");

    let local = k.local_addresses(ours).await.expect("local addresses");
    assert!(!local.contains(&v4(40)), "{local:?}");
    assert!(local.contains(&v4(41)), "{local:?}");
    // A missing link excludes nothing.
    let all = k.local_addresses("kipt-none0").await.expect("all");
    assert!(all.contains(&v4(40)) && all.contains(&v4(41)), "{all:?}");

    k.delete_link(ours).await.expect("delete ours");
    k.delete_link(other).await.expect("delete other");
}
