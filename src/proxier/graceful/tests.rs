use std::net::IpAddr;

use pretty_assertions::assert_eq;

use super::*;
use crate::kernel::ipvs::ServiceEntry;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn svc(protocol: Protocol) -> VirtualServerKey {
    VirtualServerKey {
        address: ip("198.18.0.10"),
        port: 80,
        protocol,
    }
}

fn tcp() -> VirtualServerKey {
    svc(Protocol::Tcp)
}

fn dk(last: u8) -> DestKey {
    DestKey {
        address: IpAddr::from([198, 19, 0, last]),
        port: 8080,
    }
}

fn conns(weight: u32, active: u32, inactive: u32) -> DestState {
    DestState {
        weight,
        active_conns: active,
        inactive_conns: inactive,
    }
}

fn seen(
    dests: &[(DestKey, DestState)],
) -> BTreeMap<VirtualServerKey, Observation> {
    [(tcp(), Observation::Dests(dests.iter().copied().collect()))].into()
}

const MINUTE: Duration = Duration::from_secs(60);

#[test]
fn removed_tcp_real_server_drains_at_weight_zero() {
    let mut q = GracefulQueue::new(15 * MINUTE);
    let t0 = Instant::now();
    let ops = route(&mut q, vec![IpvsOp::DeleteDest(tcp(), dk(5))], t0, None);
    assert_eq!(
        ops,
        [IpvsOp::UpdateDest(
            tcp(),
            DestSpec {
                key: dk(5),
                weight: 0
            }
        )]
    );
    assert!(q.is_draining(&tcp(), &dk(5)));
    assert_eq!(q.draining_services().collect::<Vec<_>>(), [&tcp()]);
}

#[test]
fn udp_and_sctp_real_servers_go_at_once() {
    for protocol in [Protocol::Udp, Protocol::Sctp] {
        let mut q = GracefulQueue::new(15 * MINUTE);
        let op = IpvsOp::DeleteDest(svc(protocol), dk(5));
        let ops = route(&mut q, vec![op.clone()], Instant::now(), None);
        assert_eq!(ops, [op], "{protocol}");
        assert!(q.is_empty(), "{protocol}");
    }
}

#[test]
fn route_uses_observed_connections_when_it_has_them() {
    let t0 = Instant::now();
    let mut table = IpvsTable::default();
    table.services.insert(
        tcp(),
        ServiceEntry {
            spec: crate::proxier::plan::ledger::spec_of(tcp(), "rr", None),
            dests: [
                (dk(1), conns(1, 0, 0)),
                (dk(2), conns(0, 2, 0)),
                (dk(3), conns(1, 0, 4)),
            ]
            .into(),
        },
    );
    let mut q = GracefulQueue::new(15 * MINUTE);
    let ops = route(
        &mut q,
        vec![
            IpvsOp::DeleteDest(tcp(), dk(1)),
            IpvsOp::DeleteDest(tcp(), dk(2)),
            IpvsOp::DeleteDest(tcp(), dk(3)),
        ],
        t0,
        Some(&table),
    );
    assert_eq!(
        ops,
        [
            // Idle: deleted now.
            IpvsOp::DeleteDest(tcp(), dk(1)),
            // dk(2) already at weight 0 (an earlier run): drains, no op.
            IpvsOp::UpdateDest(
                tcp(),
                DestSpec {
                    key: dk(3),
                    weight: 0
                }
            ),
        ]
    );
    assert!(!q.is_draining(&tcp(), &dk(1)));
    assert!(q.is_draining(&tcp(), &dk(2)));
    assert!(q.is_draining(&tcp(), &dk(3)));
    assert_eq!(q.len(), 2);
}

#[test]
fn endpoint_back_while_draining_is_restored_not_added() {
    let t0 = Instant::now();
    let mut q = GracefulQueue::new(15 * MINUTE);
    route(&mut q, vec![IpvsOp::DeleteDest(tcp(), dk(5))], t0, None);
    let spec = DestSpec {
        key: dk(5),
        weight: 1,
    };
    let ops = route(&mut q, vec![IpvsOp::AddDest(tcp(), spec)], t0, None);
    assert_eq!(ops, [IpvsOp::UpdateDest(tcp(), spec)]);
    assert!(q.is_empty());
    // Not draining: an add stays an add.
    let ops = route(&mut q, vec![IpvsOp::AddDest(tcp(), spec)], t0, None);
    assert_eq!(ops, [IpvsOp::AddDest(tcp(), spec)]);
}

#[test]
fn deleting_a_draining_real_server_again_is_dropped() {
    let t0 = Instant::now();
    let mut q = GracefulQueue::new(15 * MINUTE);
    route(&mut q, vec![IpvsOp::DeleteDest(tcp(), dk(5))], t0, None);
    let ops = route(
        &mut q,
        vec![IpvsOp::DeleteDest(tcp(), dk(5))],
        t0 + MINUTE,
        None,
    );
    assert_eq!(ops, []);
    // The first removal's deadline holds.
    let ops = q.poll(t0 + 15 * MINUTE, &BTreeMap::new());
    assert_eq!(ops, [IpvsOp::DeleteDest(tcp(), dk(5))]);
}

#[test]
fn service_deleted_or_recreated_ends_draining() {
    let t0 = Instant::now();
    let spec = crate::proxier::plan::ledger::spec_of(tcp(), "rr", None);
    for op in [IpvsOp::DeleteService(tcp()), IpvsOp::AddService(spec)] {
        let mut q = GracefulQueue::new(15 * MINUTE);
        route(&mut q, vec![IpvsOp::DeleteDest(tcp(), dk(5))], t0, None);
        let ops = route(&mut q, vec![op.clone()], t0, None);
        assert_eq!(ops, std::slice::from_ref(&op));
        assert!(q.is_empty(), "{op:?}");
    }
}

struct PollCase {
    name: &'static str,
    at: Duration,
    observed: BTreeMap<VirtualServerKey, Observation>,
    deleted: Vec<IpvsOp>,
    still_draining: bool,
}

#[test]
fn poll_deletes_when_connections_end_or_the_bound_passes() {
    let cases = vec![
        PollCase {
            name: "active connections: keeps draining",
            at: 5 * MINUTE,
            observed: seen(&[(dk(5), conns(0, 1, 0))]),
            deleted: vec![],
            still_draining: true,
        },
        PollCase {
            name: "inactive connections count too",
            at: 5 * MINUTE,
            observed: seen(&[(dk(5), conns(0, 0, 1))]),
            deleted: vec![],
            still_draining: true,
        },
        PollCase {
            name: "no connections left: deleted",
            at: Duration::from_secs(3),
            observed: seen(&[(dk(5), conns(0, 0, 0))]),
            deleted: vec![IpvsOp::DeleteDest(tcp(), dk(5))],
            still_draining: false,
        },
        PollCase {
            name: "bound passed with connections: deleted anyway",
            at: 15 * MINUTE,
            observed: seen(&[(dk(5), conns(0, 7, 2))]),
            deleted: vec![IpvsOp::DeleteDest(tcp(), dk(5))],
            still_draining: false,
        },
        PollCase {
            name: "just before the bound: kept",
            at: 15 * MINUTE - Duration::from_secs(1),
            observed: seen(&[(dk(5), conns(0, 7, 2))]),
            deleted: vec![],
            still_draining: true,
        },
        PollCase {
            name: "real server gone by other means: forgotten",
            at: MINUTE,
            observed: seen(&[(dk(6), conns(1, 3, 0))]),
            deleted: vec![],
            still_draining: false,
        },
        PollCase {
            name: "service gone: forgotten",
            at: MINUTE,
            observed: [(tcp(), Observation::ServiceGone)].into(),
            deleted: vec![],
            still_draining: false,
        },
        PollCase {
            name: "not observed (read failed): kept until the bound",
            at: MINUTE,
            observed: BTreeMap::new(),
            deleted: vec![],
            still_draining: true,
        },
        PollCase {
            name: "not observed past the bound: deleted",
            at: 16 * MINUTE,
            observed: BTreeMap::new(),
            deleted: vec![IpvsOp::DeleteDest(tcp(), dk(5))],
            still_draining: false,
        },
    ];
    for case in cases {
        let t0 = Instant::now();
        let mut q = GracefulQueue::new(15 * MINUTE);
        q.on_removed(tcp(), dk(5), t0);
        let ops = q.poll(t0 + case.at, &case.observed);
        assert_eq!(ops, case.deleted, "{}", case.name);
        assert_eq!(
            q.is_draining(&tcp(), &dk(5)),
            case.still_draining,
            "{}",
            case.name
        );
        assert_eq!(q.is_empty(), !case.still_draining, "{}", case.name);
    }
}

#[test]
fn poll_handles_several_services_independently() {
    let t0 = Instant::now();
    let other = VirtualServerKey { port: 443, ..tcp() };
    let mut q = GracefulQueue::new(15 * MINUTE);
    q.on_removed(tcp(), dk(5), t0);
    q.on_removed(tcp(), dk(6), t0 + MINUTE);
    q.on_removed(other, dk(5), t0);
    let observed: BTreeMap<VirtualServerKey, Observation> = [
        (
            tcp(),
            Observation::Dests(
                [(dk(5), conns(0, 0, 0)), (dk(6), conns(0, 1, 0))].into(),
            ),
        ),
        (other, Observation::Dests([(dk(5), conns(0, 4, 0))].into())),
    ]
    .into();
    assert_eq!(
        q.poll(t0 + 2 * MINUTE, &observed),
        [IpvsOp::DeleteDest(tcp(), dk(5))]
    );
    assert_eq!(q.len(), 2);
    // At 15 minutes only the entries removed at t0 are due.
    assert_eq!(
        q.poll(t0 + 15 * MINUTE, &observed),
        [IpvsOp::DeleteDest(other, dk(5))]
    );
    assert_eq!(q.len(), 1);
    assert!(q.is_draining(&tcp(), &dk(6)));
}

#[test]
fn default_config_checks_in_seconds_and_bounds_at_fifteen_minutes() {
    let config = GracefulConfig::default();
    assert!(config.check_interval < Duration::from_secs(10));
    assert_eq!(config.timeout, 15 * MINUTE);
}
