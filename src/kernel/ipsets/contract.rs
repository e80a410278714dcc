//! Scenarios every [`Ipsets`] implementation must pass, the in-memory
//! model and the kernel alike. Each starts from a namespace without
//! `KUBE-` sets and asserts results by [`ErrorKind`] and the final dump.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use ipnet::IpNet;

use super::{IpsetOp, Ipsets, SetEntry, SetSpec, SetState};
use crate::{
    desired::{SetKind, SetName},
    kernel::{ErrorKind, KernelError},
    model::Protocol,
};

pub const PREFIX: &str = "KUBE-";

/// One set of each type kube-proxy uses, per family.
pub const KINDS: [SetKind; 5] = [
    SetKind::IpvsIps,
    SetKind::ClusterIp,
    SetKind::LoopBack,
    SetKind::LoadBalancerSourceCidr,
    SetKind::NodePortTcp,
];

pub fn spec(kind: SetKind, ipv6: bool) -> SetSpec {
    SetSpec {
        name: SetName { kind, ipv6 }.name(),
        set_type: kind.set_type(),
        ipv6,
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse()
        .unwrap_or_else(|e| panic!("fixture address {s}: {e}"))
}

/// Entries of the kind each set in [`KINDS`] holds, for one family.
pub fn entries(kind: SetKind, ipv6: bool) -> Vec<SetEntry> {
    let (svc, svc2, pod, cidr, host) = if ipv6 {
        (
            ip("2001:db8::18:10"),
            ip("2001:db8::18:11"),
            ip("2001:db8::19:5"),
            "2001:db8:19::/48",
            "2001:db8::19:7/128",
        )
    } else {
        (
            ip("198.18.0.10"),
            ip("198.18.0.11"),
            ip("198.19.0.5"),
            "198.19.0.0/16",
            "198.19.1.7/32",
        )
    };
    let net =
        |s: &str| -> IpNet { s.parse().unwrap_or_else(|e| panic!("{s}: {e}")) };
    match kind {
        SetKind::IpvsIps => vec![SetEntry::Ip(svc), SetEntry::Ip(svc2)],
        SetKind::LoopBack => vec![
            SetEntry::IpPortIp(pod, Protocol::Tcp, 8080, pod),
            SetEntry::IpPortIp(pod, Protocol::Udp, 53, pod),
        ],
        SetKind::LoadBalancerSourceCidr => vec![
            SetEntry::IpPortNet(svc, Protocol::Tcp, 443, net(cidr)),
            SetEntry::IpPortNet(svc, Protocol::Sctp, 9, net(host)),
        ],
        SetKind::NodePortTcp => vec![SetEntry::Port(30080), SetEntry::Port(0)],
        _ => vec![
            SetEntry::IpPort(svc, Protocol::Tcp, 80),
            SetEntry::IpPort(svc, Protocol::Udp, 53),
            SetEntry::IpPort(svc2, Protocol::Sctp, 65535),
        ],
    }
}

fn kinds(results: &[Result<(), KernelError>]) -> Vec<Result<(), ErrorKind>> {
    results
        .iter()
        .map(|r| r.as_ref().map(|_| ()).map_err(|e| e.kind))
        .collect()
}

async fn dump<K: Ipsets>(k: &mut K) -> BTreeMap<String, SetState> {
    match k.dump(PREFIX).await {
        Ok(sets) => sets,
        Err(e) => panic!("dump failed: {e}"),
    }
}

async fn apply_ok<K: Ipsets>(k: &mut K, ops: &[IpsetOp]) {
    let results = k.apply(ops).await;
    assert_eq!(results.len(), ops.len());
    for (op, result) in ops.iter().zip(&results) {
        if let Err(e) = result {
            panic!("{op:?} failed: {e}");
        }
    }
}

fn all_specs() -> Vec<SetSpec> {
    [false, true]
        .into_iter()
        .flat_map(|v6| KINDS.into_iter().map(move |k| spec(k, v6)))
        .collect()
}

fn empty_state(specs: &[SetSpec]) -> BTreeMap<String, SetState> {
    specs
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                SetState {
                    spec: s.clone(),
                    entries: BTreeSet::new(),
                },
            )
        })
        .collect()
}

async fn start_clean<K: Ipsets>(k: &mut K) {
    assert_eq!(
        dump(k).await,
        BTreeMap::new(),
        "scenario needs no KUBE- sets"
    );
}

/// Each type in both families is created with kube-proxy's parameters
/// and listed back; a second create of a name fails; destroy removes it.
pub async fn create_list_destroy<K: Ipsets>(k: &mut K) {
    start_clean(k).await;
    let specs = all_specs();
    let creates: Vec<_> = specs.iter().cloned().map(IpsetOp::Create).collect();
    apply_ok(k, &creates).await;
    assert_eq!(dump(k).await, empty_state(&specs));

    let again = k.apply(&creates[..1]).await;
    assert_eq!(kinds(&again), vec![Err(ErrorKind::Exists)]);
    // A different type under an existing name is still "exists".
    let mut clash = spec(SetKind::ClusterIp, false);
    clash.set_type = super::SetType::HashIp;
    let clash = k.apply(&[IpsetOp::Create(clash)]).await;
    assert_eq!(kinds(&clash), vec![Err(ErrorKind::Exists)]);

    let destroys: Vec<_> = specs
        .iter()
        .map(|s| IpsetOp::Destroy(s.name.clone()))
        .collect();
    apply_ok(k, &destroys).await;
    assert_eq!(dump(k).await, BTreeMap::new());
    let missing = k.apply(&destroys[..1]).await;
    assert_eq!(kinds(&missing), vec![Err(ErrorKind::NotFound)]);
}

/// Entries of every kind in both families are added and read back
/// exactly; duplicates and absent entries fail as the kernel says.
pub async fn add_delete_entries<K: Ipsets>(k: &mut K) {
    start_clean(k).await;
    let specs = all_specs();
    let creates: Vec<_> = specs.iter().cloned().map(IpsetOp::Create).collect();
    apply_ok(k, &creates).await;

    let mut expected = empty_state(&specs);
    let mut adds = Vec::new();
    for v6 in [false, true] {
        for kind in KINDS {
            let s = spec(kind, v6);
            for e in entries(kind, v6) {
                adds.push(IpsetOp::Add(s.name.clone(), e.clone()));
                if let Some(state) = expected.get_mut(&s.name) {
                    state.entries.insert(e);
                }
            }
        }
    }
    apply_ok(k, &adds).await;
    assert_eq!(dump(k).await, expected);

    // Every add again: each one is a duplicate.
    let dup = k.apply(&adds).await;
    assert_eq!(kinds(&dup), vec![Err(ErrorKind::Exists); adds.len()]);

    // Delete the first entry of each set, then delete it again.
    let dels: Vec<_> = specs
        .iter()
        .filter_map(|s| {
            let kind = KINDS.into_iter().find(|k| spec(*k, s.ipv6) == *s)?;
            let first = entries(kind, s.ipv6).into_iter().next()?;
            Some(IpsetOp::Delete(s.name.clone(), first))
        })
        .collect();
    assert_eq!(dels.len(), specs.len());
    apply_ok(k, &dels).await;
    let again = k.apply(&dels).await;
    assert_eq!(kinds(&again), vec![Err(ErrorKind::NotFound); dels.len()]);
    for op in &dels {
        if let IpsetOp::Delete(name, entry) = op {
            if let Some(state) = expected.get_mut(name) {
                state.entries.remove(entry);
            }
        }
    }
    assert_eq!(dump(k).await, expected);
    destroy_all(k, &specs).await;
}

/// Elements the set cannot hold, and sets that do not exist.
pub async fn rejected_entries<K: Ipsets>(k: &mut K) {
    start_clean(k).await;
    let v4_ip = spec(SetKind::IpvsIps, false);
    let v6_port = spec(SetKind::ClusterIp, true);
    let ports = spec(SetKind::NodePortTcp, false);
    let cidrs = spec(SetKind::LoadBalancerSourceCidr, false);
    let specs = [v4_ip.clone(), v6_port.clone(), ports.clone(), cidrs.clone()];
    let creates: Vec<_> = specs.iter().cloned().map(IpsetOp::Create).collect();
    apply_ok(k, &creates).await;

    let zero_net = "0.0.0.0/0".parse().unwrap_or_else(|e| panic!("{e}"));
    let ops = [
        // IPv6 address in an IPv4 set, and the reverse.
        IpsetOp::Add(v4_ip.name.clone(), SetEntry::Ip(ip("2001:db8::1"))),
        IpsetOp::Add(
            v6_port.name.clone(),
            SetEntry::IpPort(ip("198.18.0.1"), Protocol::Tcp, 80),
        ),
        // An element without the fields the type needs.
        IpsetOp::Add(v4_ip.name.clone(), SetEntry::Port(80)),
        IpsetOp::Add(ports.name.clone(), SetEntry::Ip(ip("198.18.0.1"))),
        // hash:ip,port,net refuses a /0 network.
        IpsetOp::Add(
            cidrs.name.clone(),
            SetEntry::IpPortNet(ip("198.18.0.1"), Protocol::Tcp, 80, zero_net),
        ),
        // No such set.
        IpsetOp::Add("KUBE-NO-SUCH-SET".into(), SetEntry::Port(1)),
        IpsetOp::Delete("KUBE-NO-SUCH-SET".into(), SetEntry::Port(1)),
        // Longer than the kernel's 31 characters.
        IpsetOp::Create(SetSpec {
            name: "KUBE-THIS-NAME-IS-LONGER-THAN-31".into(),
            set_type: super::SetType::HashIp,
            ipv6: false,
        }),
    ];
    let results = k.apply(&ops).await;
    use ErrorKind::*;
    assert_eq!(
        kinds(&results),
        vec![
            Err(Invalid),
            Err(Invalid),
            Err(Invalid),
            Err(Invalid),
            Err(Invalid),
            Err(NotFound),
            Err(NotFound),
            Err(Invalid),
        ]
    );
    for (op, result) in ops.iter().zip(&results) {
        if let Err(e) = result {
            assert_eq!(e.object, op.object(), "error {e} names its object");
        }
    }
    assert_eq!(dump(k).await, empty_state(&specs));
    destroy_all(k, &specs).await;
}

/// A set is destroyed with its entries: the proxy never empties one first.
pub async fn non_empty_sets_are_destroyed<K: Ipsets>(k: &mut K) {
    start_clean(k).await;
    let s = spec(SetKind::ClusterIp, false);
    let mut ops = vec![IpsetOp::Create(s.clone())];
    ops.extend(
        entries(SetKind::ClusterIp, false)
            .into_iter()
            .map(|e| IpsetOp::Add(s.name.clone(), e)),
    );
    apply_ok(k, &ops).await;
    assert_ne!(dump(k).await, empty_state(std::slice::from_ref(&s)));
    apply_ok(k, &[IpsetOp::Destroy(s.name.clone())]).await;
    assert_eq!(dump(k).await, BTreeMap::new());
}

/// In one batch a failed operation does not stop the ones after it, and
/// each result lands at its operation's position.
pub async fn failures_stay_in_place<K: Ipsets>(k: &mut K) {
    start_clean(k).await;
    let s = spec(SetKind::IpvsIps, false);
    let a = SetEntry::Ip(ip("198.18.0.1"));
    let b = SetEntry::Ip(ip("198.18.0.2"));
    let ops = [
        IpsetOp::Add(s.name.clone(), a.clone()),
        IpsetOp::Create(s.clone()),
        IpsetOp::Add(s.name.clone(), a.clone()),
        IpsetOp::Add(s.name.clone(), a.clone()),
        IpsetOp::Delete(s.name.clone(), b.clone()),
        IpsetOp::Add(s.name.clone(), b.clone()),
        IpsetOp::Create(s.clone()),
    ];
    let results = k.apply(&ops).await;
    use ErrorKind::*;
    assert_eq!(
        kinds(&results),
        vec![
            Err(NotFound),
            Ok(()),
            Ok(()),
            Err(Exists),
            Err(NotFound),
            Ok(()),
            Err(Exists),
        ]
    );
    let mut expected = empty_state(std::slice::from_ref(&s));
    if let Some(state) = expected.get_mut(&s.name) {
        state.entries = [a, b].into_iter().collect();
    }
    assert_eq!(dump(k).await, expected);
    destroy_all(k, std::slice::from_ref(&s)).await;
}

/// Sets outside the prefix are neither listed nor touched.
pub async fn dump_only_prefix<K: Ipsets>(k: &mut K) {
    start_clean(k).await;
    let ours = spec(SetKind::IpvsIps, false);
    let foreign = SetSpec {
        name: "OPERATOR-ALLOW".into(),
        set_type: super::SetType::HashIp,
        ipv6: false,
    };
    apply_ok(
        k,
        &[
            IpsetOp::Create(ours.clone()),
            IpsetOp::Create(foreign.clone()),
            IpsetOp::Add(foreign.name.clone(), SetEntry::Ip(ip("198.18.9.9"))),
        ],
    )
    .await;
    assert_eq!(dump(k).await, empty_state(std::slice::from_ref(&ours)));
    let all = match k.dump("").await {
        Ok(all) => all,
        Err(e) => panic!("dump failed: {e}"),
    };
    assert!(all.contains_key(&foreign.name));
    apply_ok(
        k,
        &[
            IpsetOp::Destroy(ours.name.clone()),
            IpsetOp::Destroy(foreign.name.clone()),
        ],
    )
    .await;
}

/// More operations than one pipelined window, all acknowledged.
pub async fn large_batch<K: Ipsets>(k: &mut K) {
    start_clean(k).await;
    let s = spec(SetKind::ClusterIp, false);
    let entries: Vec<_> = (0..2000u16)
        .map(|i| {
            let addr =
                IpAddr::from([198, 18, (i / 250) as u8, (i % 250) as u8]);
            SetEntry::IpPort(addr, Protocol::Tcp, 80 + i % 3)
        })
        .collect();
    let mut ops = vec![IpsetOp::Create(s.clone())];
    ops.extend(
        entries
            .iter()
            .map(|e| IpsetOp::Add(s.name.clone(), e.clone())),
    );
    apply_ok(k, &ops).await;
    let sets = dump(k).await;
    let listed = sets.get(&s.name).map(|st| st.entries.len());
    assert_eq!(listed, Some(entries.len()));
    destroy_all(k, std::slice::from_ref(&s)).await;
}

async fn destroy_all<K: Ipsets>(k: &mut K, specs: &[SetSpec]) {
    let ops: Vec<_> = specs
        .iter()
        .map(|s| IpsetOp::Destroy(s.name.clone()))
        .collect();
    apply_ok(k, &ops).await;
}

/// Each type takes its own kind of element and no other, except that
/// hash:ip,port,net takes an `ip,port,ip` element as a host network
/// (the prefix length is optional in the kernel's message).
pub async fn element_kinds_must_match_the_type<K: Ipsets>(k: &mut K) {
    start_clean(k).await;
    let svc = ip("198.18.0.1");
    let pod = ip("198.19.0.9");
    let net =
        |s: &str| -> IpNet { s.parse().unwrap_or_else(|e| panic!("{s}: {e}")) };
    let candidates = [
        SetEntry::Ip(svc),
        SetEntry::IpPort(svc, Protocol::Tcp, 80),
        SetEntry::IpPortIp(svc, Protocol::Tcp, 80, pod),
        SetEntry::IpPortNet(svc, Protocol::Tcp, 80, net("198.19.0.0/16")),
        SetEntry::Port(80),
    ];
    let ok = Ok(());
    let bad = Err(ErrorKind::Invalid);
    let table = [
        (SetKind::IpvsIps, [ok, bad, bad, bad, bad]),
        (SetKind::ClusterIp, [bad, ok, bad, bad, bad]),
        (SetKind::LoopBack, [bad, bad, ok, bad, bad]),
        (SetKind::LoadBalancerSourceCidr, [bad, bad, ok, ok, bad]),
        (SetKind::NodePortTcp, [bad, bad, bad, bad, ok]),
    ];
    let mut expected = BTreeMap::new();
    for (kind, results) in table {
        let s = spec(kind, false);
        apply_ok(k, &[IpsetOp::Create(s.clone())]).await;
        let ops: Vec<_> = candidates
            .iter()
            .map(|e| IpsetOp::Add(s.name.clone(), e.clone()))
            .collect();
        let got = k.apply(&ops).await;
        assert_eq!(kinds(&got), results.to_vec(), "adds to {}", s.name);
        // What the kernel stores for an accepted element.
        let stored = |e: &SetEntry| match e {
            SetEntry::IpPortIp(a, proto, port, b)
                if kind == SetKind::LoadBalancerSourceCidr =>
            {
                SetEntry::IpPortNet(*a, *proto, *port, IpNet::from(*b))
            }
            other => other.clone(),
        };
        let entries: BTreeSet<_> = candidates
            .iter()
            .zip(results)
            .filter(|(_, r)| r.is_ok())
            .map(|(e, _)| stored(e))
            .collect();
        expected.insert(s.name.clone(), SetState { spec: s, entries });
    }
    assert_eq!(dump(k).await, expected);
    let specs: Vec<_> = expected.values().map(|s| s.spec.clone()).collect();
    destroy_all(k, &specs).await;
}
