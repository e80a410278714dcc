//! Scenarios every [`Ipvs`] implementation must pass, the kernel's
//! answers included. Unit tests run them against [`IpvsModel`]; the
//! guest's `tests/kernel_ipvs.rs` runs the same ones against the kernel,
//! so the model cannot drift from it. Each scenario expects an empty
//! table and asserts every result (kind, errno, object) and the final
//! dump.
//!
//! [`IpvsModel`]: super::IpvsModel

use std::{collections::BTreeMap, net::IpAddr};

use super::{
    DestKey, DestSpec, DestState, Ipvs, IpvsOp, IpvsTable, ServiceEntry,
    ServiceSpec, VirtualServerKey,
};
use crate::{
    kernel::{ErrorKind, KernelError},
    model::{Protocol, SchedulerFlags},
};

/// What the scenarios compare of a result: the kind and the errno.
pub type Outcome = Result<(), (ErrorKind, Option<i32>)>;

const OK: Outcome = Ok(());
const EEXIST: Outcome = Err((ErrorKind::Exists, Some(libc::EEXIST)));
const ESRCH: Outcome = Err((ErrorKind::NotFound, Some(libc::ESRCH)));
const ENOENT: Outcome = Err((ErrorKind::NotFound, Some(libc::ENOENT)));
const EINVAL: Outcome = Err((ErrorKind::Invalid, Some(libc::EINVAL)));

pub fn outcome(result: &Result<(), KernelError>) -> Outcome {
    result.as_ref().map(drop).map_err(|e| (e.kind, e.errno))
}

fn ip(text: &str) -> IpAddr {
    // Scenario literals only; a typo fails the scenario loudly.
    text.parse()
        .unwrap_or_else(|e| panic!("address {text:?}: {e}"))
}

pub fn service(
    protocol: Protocol,
    address: &str,
    port: u16,
) -> VirtualServerKey {
    VirtualServerKey {
        address: ip(address),
        port,
        protocol,
    }
}

pub fn tcp(address: &str, port: u16) -> VirtualServerKey {
    service(Protocol::Tcp, address, port)
}

pub fn dest(address: &str, port: u16) -> DestKey {
    DestKey {
        address: ip(address),
        port,
    }
}

fn spec(
    key: VirtualServerKey,
    scheduler: &str,
    persistence: Option<u32>,
) -> ServiceSpec {
    ServiceSpec::new(key, scheduler, persistence)
}

fn weighted(key: DestKey, weight: u32) -> DestSpec {
    DestSpec { key, weight }
}

fn state(weight: u32) -> DestState {
    DestState {
        weight,
        ..DestState::default()
    }
}

/// Applies `ops` and asserts their outcomes, with the operations in the
/// message so a failure says which one.
async fn apply_expecting<K: Ipvs>(
    k: &mut K,
    ops: &[IpvsOp],
    expected: &[Outcome],
) -> Vec<Result<(), KernelError>> {
    let results = k.apply(ops).await;
    let got: Vec<Outcome> = results.iter().map(outcome).collect();
    assert_eq!(got, expected, "outcomes of {ops:#?}\nerrors: {results:#?}");
    results
}

async fn assert_dump<K: Ipvs>(k: &mut K, expected: &IpvsTable) {
    let dump = match k.dump().await {
        Ok(dump) => dump,
        Err(e) => panic!("dump failed: {e}"),
    };
    assert_eq!(&dump, expected, "dump");
}

fn table(entries: Vec<(ServiceSpec, Vec<(DestKey, DestState)>)>) -> IpvsTable {
    IpvsTable {
        services: entries
            .into_iter()
            .map(|(spec, dests)| {
                (
                    spec.key,
                    ServiceEntry {
                        spec,
                        dests: dests.into_iter().collect(),
                    },
                )
            })
            .collect(),
    }
}

/// Services of every protocol and family, with and without persistence,
/// the `mh` flag, real servers at weight 1 and 0: all read back as
/// written.
pub async fn programs_services_and_real_servers<K: Ipvs>(k: &mut K) {
    let plain = spec(tcp("198.18.0.1", 80), "rr", None);
    let sticky =
        spec(service(Protocol::Udp, "198.18.0.2", 53), "rr", Some(10800));
    let sctp = spec(service(Protocol::Sctp, "198.18.0.3", 9000), "wrr", None);
    let v6 = spec(tcp("2001:db8::10", 443), "rr", Some(600));
    let maglev = spec(tcp("198.18.0.4", 8080), "mh", None);
    assert!(
        maglev.flags.contains(SchedulerFlags::PORT),
        "mh sets its flag, as kube-proxy"
    );
    let ops = vec![
        IpvsOp::AddService(plain.clone()),
        IpvsOp::AddDest(plain.key, weighted(dest("198.19.0.1", 8080), 1)),
        IpvsOp::AddDest(plain.key, weighted(dest("198.19.0.2", 8080), 0)),
        IpvsOp::AddService(sticky.clone()),
        IpvsOp::AddDest(sticky.key, weighted(dest("198.19.0.3", 5353), 1)),
        IpvsOp::AddService(sctp.clone()),
        IpvsOp::AddDest(sctp.key, weighted(dest("198.19.0.4", 9000), 1)),
        IpvsOp::AddService(v6.clone()),
        IpvsOp::AddDest(v6.key, weighted(dest("2001:db8::1:5", 8443), 1)),
        IpvsOp::AddService(maglev.clone()),
        IpvsOp::AddDest(maglev.key, weighted(dest("198.19.0.5", 80), 1)),
    ];
    apply_expecting(k, &ops, &[OK; 11]).await;
    let expected = table(vec![
        (
            plain.clone(),
            vec![
                (dest("198.19.0.1", 8080), state(1)),
                (dest("198.19.0.2", 8080), state(0)),
            ],
        ),
        (sticky, vec![(dest("198.19.0.3", 5353), state(1))]),
        (sctp, vec![(dest("198.19.0.4", 9000), state(1))]),
        (v6, vec![(dest("2001:db8::1:5", 8443), state(1))]),
        (maglev, vec![(dest("198.19.0.5", 80), state(1))]),
    ]);
    assert_dump(k, &expected).await;
    let dests = k.dests(&plain.key).await;
    assert_eq!(
        dests.ok().as_ref(),
        expected.services.get(&plain.key).map(|e| &e.dests),
        "dests of {}",
        plain.key
    );
}

/// Adding a service or real server twice is EEXIST and changes nothing.
pub async fn duplicates_are_refused_with_eexist<K: Ipvs>(k: &mut K) {
    let svc = spec(tcp("198.18.1.1", 80), "rr", None);
    let backend = dest("198.19.1.1", 8080);
    let ops = [
        IpvsOp::AddService(svc.clone()),
        IpvsOp::AddService(spec(svc.key, "wrr", Some(60))),
        IpvsOp::AddDest(svc.key, weighted(backend, 1)),
        IpvsOp::AddDest(svc.key, weighted(backend, 5)),
    ];
    let results = apply_expecting(k, &ops, &[OK, EEXIST, OK, EEXIST]).await;
    assert_objects(
        &results,
        &[
            "",
            "TCP 198.18.1.1:80",
            "",
            "198.19.1.1:8080 in TCP 198.18.1.1:80",
        ],
    );
    assert_dump(k, &table(vec![(svc, vec![(backend, state(1))])])).await;
}

/// A missing service is ESRCH whatever the operation (the kernel looks
/// the service up first); a missing real server of an existing service
/// is ENOENT.
pub async fn missing_objects_are_not_found<K: Ipvs>(k: &mut K) {
    let present = spec(tcp("198.18.2.1", 80), "rr", None);
    let absent = spec(tcp("198.18.2.2", 80), "rr", None);
    let backend = weighted(dest("198.19.2.1", 8080), 1);
    let ops = [
        IpvsOp::AddService(present.clone()),
        IpvsOp::UpdateService(absent.clone()),
        IpvsOp::DeleteService(absent.key),
        IpvsOp::AddDest(absent.key, backend),
        IpvsOp::UpdateDest(absent.key, backend),
        IpvsOp::DeleteDest(absent.key, backend.key),
        IpvsOp::UpdateDest(present.key, backend),
        IpvsOp::DeleteDest(present.key, backend.key),
    ];
    let expected = [OK, ESRCH, ESRCH, ESRCH, ESRCH, ESRCH, ENOENT, ENOENT];
    let results = apply_expecting(k, &ops, &expected).await;
    assert_objects(
        &results,
        &[
            "",
            "TCP 198.18.2.2:80",
            "TCP 198.18.2.2:80",
            "198.19.2.1:8080 in TCP 198.18.2.2:80",
            "198.19.2.1:8080 in TCP 198.18.2.2:80",
            "198.19.2.1:8080 in TCP 198.18.2.2:80",
            "198.19.2.1:8080 in TCP 198.18.2.1:80",
            "198.19.2.1:8080 in TCP 198.18.2.1:80",
        ],
    );
    assert_dump(k, &table(vec![(present, vec![])])).await;
}

/// Updating a service changes its scheduler and persistence and keeps
/// its real servers; updating a real server changes its weight.
pub async fn updates_change_settings_and_keep_real_servers<K: Ipvs>(k: &mut K) {
    let before = spec(tcp("198.18.3.1", 80), "rr", None);
    let sticky = spec(before.key, "wrr", Some(300));
    let maglev = spec(before.key, "mh", None);
    let a = dest("198.19.3.1", 8080);
    let b = dest("198.19.3.2", 8080);
    let ops = [
        IpvsOp::AddService(before.clone()),
        IpvsOp::AddDest(before.key, weighted(a, 1)),
        IpvsOp::AddDest(before.key, weighted(b, 1)),
        IpvsOp::UpdateService(sticky.clone()),
        IpvsOp::UpdateDest(before.key, weighted(a, 0)),
    ];
    apply_expecting(k, &ops, &[OK; 5]).await;
    let drained = vec![(a, state(0)), (b, state(1))];
    assert_dump(k, &table(vec![(sticky, drained.clone())])).await;

    let ops = [
        IpvsOp::UpdateService(maglev.clone()),
        IpvsOp::UpdateDest(before.key, weighted(a, 1)),
    ];
    apply_expecting(k, &ops, &[OK, OK]).await;
    let restored = vec![(a, state(1)), (b, state(1))];
    assert_dump(k, &table(vec![(maglev, restored.clone())])).await;

    // Back to a plain service: the persistence and the mh flag go.
    apply_expecting(k, &[IpvsOp::UpdateService(before.clone())], &[OK]).await;
    assert_dump(k, &table(vec![(before, restored)])).await;
}

/// Deleting a service takes its real servers with it.
pub async fn deletes_remove_services_with_their_real_servers<K: Ipvs>(
    k: &mut K,
) {
    let kept = spec(tcp("198.18.4.1", 80), "rr", None);
    let gone = spec(service(Protocol::Udp, "198.18.4.2", 53), "rr", None);
    let a = dest("198.19.4.1", 8080);
    let b = dest("198.19.4.2", 8080);
    let ops = [
        IpvsOp::AddService(kept.clone()),
        IpvsOp::AddDest(kept.key, weighted(a, 1)),
        IpvsOp::AddDest(kept.key, weighted(b, 1)),
        IpvsOp::AddService(gone.clone()),
        IpvsOp::AddDest(gone.key, weighted(a, 1)),
        IpvsOp::DeleteDest(kept.key, a),
        IpvsOp::DeleteService(gone.key),
    ];
    apply_expecting(k, &ops, &[OK; 7]).await;
    assert_dump(k, &table(vec![(kept, vec![(b, state(1))])])).await;
    let dests = k.dests(&gone.key).await;
    assert_eq!(
        dests.ok(),
        Some(BTreeMap::new()),
        "a deleted service has no real servers (an empty dump, no error)"
    );
}

/// One failure in a batch fails only its own slot; the operations after
/// it still run, in order.
pub async fn a_failure_does_not_stop_the_batch<K: Ipvs>(k: &mut K) {
    let a = spec(tcp("198.18.5.1", 80), "rr", None);
    let missing = tcp("198.18.5.2", 80);
    let d1 = weighted(dest("198.19.5.1", 8080), 1);
    let d2 = weighted(dest("198.19.5.2", 8080), 1);
    let ops = [
        IpvsOp::AddService(a.clone()),
        IpvsOp::AddService(a.clone()),
        IpvsOp::AddDest(missing, d1),
        IpvsOp::AddDest(a.key, d1),
        IpvsOp::DeleteService(missing),
        IpvsOp::AddDest(a.key, d2),
    ];
    apply_expecting(k, &ops, &[OK, EEXIST, ESRCH, OK, ESRCH, OK]).await;
    let dests = vec![(d1.key, state(1)), (d2.key, state(1))];
    assert_dump(k, &table(vec![(a, dests)])).await;
}

/// A scheduler the kernel does not have is ENOENT, on add and update.
pub async fn unknown_scheduler_is_not_found<K: Ipvs>(k: &mut K) {
    let good = spec(tcp("198.18.6.1", 80), "rr", None);
    let ops = [
        IpvsOp::AddService(spec(tcp("198.18.6.2", 80), "nosuch", None)),
        IpvsOp::AddService(good.clone()),
        IpvsOp::UpdateService(spec(good.key, "nosuch", None)),
    ];
    apply_expecting(k, &ops, &[ENOENT, OK, ENOENT]).await;
    assert_dump(k, &table(vec![(good, vec![])])).await;
}

/// Masquerading cannot cross address families: a real server of the
/// other family is EINVAL.
pub async fn real_server_of_the_other_family_is_invalid<K: Ipvs>(k: &mut K) {
    let v4 = spec(tcp("198.18.7.1", 80), "rr", None);
    let v6 = spec(tcp("2001:db8::7", 80), "rr", None);
    let ops = [
        IpvsOp::AddService(v4.clone()),
        IpvsOp::AddService(v6.clone()),
        IpvsOp::AddDest(v4.key, weighted(dest("2001:db8::7:1", 8080), 1)),
        IpvsOp::AddDest(v6.key, weighted(dest("198.19.7.1", 8080), 1)),
    ];
    apply_expecting(k, &ops, &[OK, OK, EINVAL, EINVAL]).await;
    assert_dump(k, &table(vec![(v4, vec![]), (v6, vec![])])).await;
}

fn assert_objects(results: &[Result<(), KernelError>], objects: &[&str]) {
    let got: Vec<&str> = results
        .iter()
        .map(|r| r.as_ref().err().map(|e| e.object.as_str()).unwrap_or(""))
        .collect();
    assert_eq!(got, objects, "objects named by the errors");
}

/// The kernel keeps weights in a signed int and refuses larger ones with
/// ERANGE (not EINVAL).
pub async fn weight_above_int_max_is_refused<K: Ipvs>(k: &mut K) {
    let svc = spec(tcp("198.18.8.1", 80), "rr", None);
    let backend = dest("198.19.8.1", 8080);
    let ops = [
        IpvsOp::AddService(svc.clone()),
        IpvsOp::AddDest(svc.key, weighted(backend, 1 << 31)),
        IpvsOp::AddDest(svc.key, weighted(backend, i32::MAX as u32)),
        IpvsOp::UpdateDest(svc.key, weighted(backend, u32::MAX)),
    ];
    let erange = Err((ErrorKind::Other, Some(super::model::ERANGE)));
    apply_expecting(k, &ops, &[OK, erange, OK, erange]).await;
    let max = state(i32::MAX as u32);
    assert_dump(k, &table(vec![(svc, vec![(backend, max)])])).await;
}
