use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    sync::Arc,
};

use pretty_assertions::assert_eq;

use super::{
    ledger::spec_of,
    lists::{self, IpvsLists},
    repair::Reconciled,
    *,
};
use crate::{
    desired::{
        service_state, NodeContext, RealServer, SchedulerPolicy, ServiceDelta,
        ServiceState, SetEntry, SetKind, SetName, VirtualServer,
    },
    kernel::{
        ipsets::{SetSpec, SetState},
        ipvs::{
            DestKey, DestSpec, DestState, IpvsTable, ServiceEntry, ServiceSpec,
            VirtualServerKey,
        },
    },
    model::{
        fixtures, EndpointInfo, Protocol, ServicePortInfo, ServicePortName,
    },
    selection::select,
};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

const NODE_IP: &str = "198.18.100.1";

fn ctx(f: impl FnOnce(&mut NodeContext)) -> NodeContext {
    let mut c = NodeContext {
        node_name: "node-a".into(),
        zone: String::new(),
        node_port_addresses: vec![ip(NODE_IP)],
        primary_ips: vec![ip(NODE_IP)],
        local_addresses: [ip(NODE_IP)].into(),
        schedulers: SchedulerPolicy::default(),
        ipv4: true,
        ipv6: false,
        pod_cidrs: vec![],
        without_external_ips: false,
    };
    f(&mut c);
    c
}

type Entry = (ServicePortName, Arc<ServiceState>);

/// Service `ns/NAME` port `PORT_NAME`: cluster IP 198.18.0.10, TCP 80,
/// endpoints on port 8080; `f` adjusts the port, `c` the node.
fn svc_with(
    name: &str,
    port_name: &str,
    endpoints: &[&str],
    f: impl FnOnce(&mut ServicePortInfo),
    c: impl FnOnce(&mut NodeContext),
) -> Entry {
    let info = fixtures::port_info(|s| {
        s.cluster_ips = vec![ip("198.18.0.10")];
        f(s)
    });
    let spn = ServicePortName::new("ns", name, port_name, info.protocol);
    let eps: Vec<Arc<EndpointInfo>> = endpoints
        .iter()
        .map(|a| fixtures::ep(a, 8080, |_| {}))
        .collect();
    let ctx = ctx(c);
    let selected = select(&info, &eps, &ctx.node_name, &ctx.zone);
    let state = service_state(&spn, &info, &selected, &ctx);
    (spn, Arc::new(state))
}

fn svc(
    name: &str,
    port_name: &str,
    endpoints: &[&str],
    f: impl FnOnce(&mut ServicePortInfo),
) -> Entry {
    svc_with(name, port_name, endpoints, f, |_| {})
}

fn key(addr: &str, port: u16) -> VirtualServerKey {
    key_p(addr, port, Protocol::Tcp)
}

fn key_p(addr: &str, port: u16, protocol: Protocol) -> VirtualServerKey {
    VirtualServerKey {
        address: ip(addr),
        port,
        protocol,
    }
}

fn spec(addr: &str, port: u16) -> ServiceSpec {
    spec_of(key(addr, port), "rr", None)
}

fn dk(addr: &str) -> DestKey {
    DestKey {
        address: ip(addr),
        port: 8080,
    }
}

fn dest(addr: &str, weight: u32) -> DestSpec {
    DestSpec {
        key: dk(addr),
        weight,
    }
}

fn add_entry(set: &str, entry: SetEntry) -> IpsetOp {
    IpsetOp::Add(set.into(), entry)
}

fn del_entry(set: &str, entry: SetEntry) -> IpsetOp {
    IpsetOp::Delete(set.into(), entry)
}

fn cip(addr: &str, port: u16) -> SetEntry {
    SetEntry::IpPort(ip(addr), Protocol::Tcp, port)
}

fn ipvs_ip(addr: &str) -> SetEntry {
    SetEntry::Ip(ip(addr))
}

struct Case {
    name: &'static str,
    before: Vec<Entry>,
    after: Vec<Entry>,
    expected: KernelOps,
}

/// Plans the change from `before` to `after` as the desired state
/// reports it:
/// one delta per service port that differs.
fn plan_change(before: &[Entry], after: &[Entry]) -> (Ledger, KernelOps) {
    let mut ledger = Ledger::from_services(before.iter().map(|(n, s)| (n, s)));
    let names: BTreeSet<&ServicePortName> =
        before.iter().chain(after).map(|(n, _)| n).collect();
    let find = |list: &[Entry], n: &ServicePortName| {
        list.iter()
            .find(|(m, _)| m == n)
            .map(|(_, s)| Arc::clone(s))
    };
    let deltas: Vec<ServiceDelta> = names
        .into_iter()
        .map(|n| ServiceDelta {
            service: n.clone(),
            previous: find(before, n),
            current: find(after, n),
        })
        .filter(|d| d.previous != d.current)
        .collect();
    let ops = ledger.plan(&deltas);
    (ledger, ops)
}

#[test]
fn plan_turns_deltas_into_exactly_the_change() {
    let web = |eps: &[&str]| svc("web", "http", eps, |_| {});
    let https = |eps: &[&str]| {
        svc("web", "https", eps, |s| {
            s.port = 443;
        })
    };
    let cases = vec![
        Case {
            name: "new cluster IP service",
            before: vec![],
            after: vec![web(&["198.19.0.5", "198.19.0.6"])],
            expected: KernelOps {
                ipvs: vec![
                    IpvsOp::AddService(spec("198.18.0.10", 80)),
                    IpvsOp::AddDest(
                        key("198.18.0.10", 80),
                        dest("198.19.0.5", 1),
                    ),
                    IpvsOp::AddDest(
                        key("198.18.0.10", 80),
                        dest("198.19.0.6", 1),
                    ),
                ],
                addresses: vec![AddressOp::Add(ip("198.18.0.10"))],
                ipsets: vec![
                    add_entry("KUBE-IPVS-IPS", ipvs_ip("198.18.0.10")),
                    add_entry("KUBE-CLUSTER-IP", cip("198.18.0.10", 80)),
                ],
            },
        },
        Case {
            name: "endpoint replaced: the new one is added first",
            before: vec![web(&["198.19.0.5", "198.19.0.6"])],
            after: vec![web(&["198.19.0.6", "198.19.0.7"])],
            expected: KernelOps {
                ipvs: vec![
                    IpvsOp::AddDest(
                        key("198.18.0.10", 80),
                        dest("198.19.0.7", 1),
                    ),
                    IpvsOp::DeleteDest(
                        key("198.18.0.10", 80),
                        dk("198.19.0.5"),
                    ),
                ],
                ..KernelOps::default()
            },
        },
        Case {
            name: "service deleted: its real servers go with it",
            before: vec![web(&["198.19.0.5"])],
            after: vec![],
            expected: KernelOps {
                ipvs: vec![IpvsOp::DeleteService(key("198.18.0.10", 80))],
                addresses: vec![AddressOp::Delete(ip("198.18.0.10"))],
                ipsets: vec![
                    del_entry("KUBE-IPVS-IPS", ipvs_ip("198.18.0.10")),
                    del_entry("KUBE-CLUSTER-IP", cip("198.18.0.10", 80)),
                ],
            },
        },
        Case {
            name: "second port on a bound cluster IP binds nothing",
            before: vec![web(&["198.19.0.5"])],
            after: vec![web(&["198.19.0.5"]), https(&["198.19.0.5"])],
            expected: KernelOps {
                ipvs: vec![
                    IpvsOp::AddService(spec("198.18.0.10", 443)),
                    IpvsOp::AddDest(
                        key("198.18.0.10", 443),
                        dest("198.19.0.5", 1),
                    ),
                ],
                addresses: vec![],
                ipsets: vec![add_entry(
                    "KUBE-CLUSTER-IP",
                    cip("198.18.0.10", 443),
                )],
            },
        },
        Case {
            name: "removing one of two ports keeps the address",
            before: vec![web(&["198.19.0.5"]), https(&["198.19.0.5"])],
            after: vec![web(&["198.19.0.5"])],
            expected: KernelOps {
                ipvs: vec![IpvsOp::DeleteService(key("198.18.0.10", 443))],
                addresses: vec![],
                ipsets: vec![del_entry(
                    "KUBE-CLUSTER-IP",
                    cip("198.18.0.10", 443),
                )],
            },
        },
        Case {
            name: "removing the last port unbinds the address",
            before: vec![web(&["198.19.0.5"]), https(&["198.19.0.5"])],
            after: vec![],
            expected: KernelOps {
                ipvs: vec![
                    IpvsOp::DeleteService(key("198.18.0.10", 80)),
                    IpvsOp::DeleteService(key("198.18.0.10", 443)),
                ],
                addresses: vec![AddressOp::Delete(ip("198.18.0.10"))],
                ipsets: vec![
                    del_entry("KUBE-IPVS-IPS", ipvs_ip("198.18.0.10")),
                    del_entry("KUBE-CLUSTER-IP", cip("198.18.0.10", 80)),
                    del_entry("KUBE-CLUSTER-IP", cip("198.18.0.10", 443)),
                ],
            },
        },
        Case {
            name: "ClientIP affinity turned on updates the service",
            before: vec![web(&["198.19.0.5"])],
            after: vec![svc("web", "http", &["198.19.0.5"], |s| {
                s.session_affinity_timeout = Some(10800);
            })],
            expected: KernelOps {
                ipvs: vec![IpvsOp::UpdateService(spec_of(
                    key("198.18.0.10", 80),
                    "rr",
                    Some(10800),
                ))],
                ..KernelOps::default()
            },
        },
        Case {
            name: "scheduler change updates the service",
            before: vec![web(&["198.19.0.5"])],
            after: vec![svc_with(
                "web",
                "http",
                &["198.19.0.5"],
                |_| {},
                |c| c.schedulers.scheduler = "mh".into(),
            )],
            expected: KernelOps {
                ipvs: vec![IpvsOp::UpdateService(spec_of(
                    key("198.18.0.10", 80),
                    "mh",
                    None,
                ))],
                ..KernelOps::default()
            },
        },
        Case {
            name: "unchanged service plans nothing",
            before: vec![web(&["198.19.0.5"])],
            after: vec![web(&["198.19.0.5"])],
            expected: KernelOps::default(),
        },
        Case {
            name: "NodePort listens on the node address without binding it",
            before: vec![web(&["198.19.0.5"])],
            after: vec![svc("web", "http", &["198.19.0.5"], |s| {
                s.node_port = 30080;
            })],
            expected: KernelOps {
                ipvs: vec![
                    IpvsOp::AddService(spec(NODE_IP, 30080)),
                    IpvsOp::AddDest(key(NODE_IP, 30080), dest("198.19.0.5", 1)),
                ],
                addresses: vec![],
                ipsets: vec![add_entry(
                    "KUBE-NODE-PORT-TCP",
                    SetEntry::Port(30080),
                )],
            },
        },
        Case {
            name: "an external IP the node has is not bound",
            before: vec![],
            after: vec![svc("web", "http", &[], |s| {
                s.external_ips = vec![ip(NODE_IP)];
            })],
            expected: KernelOps {
                ipvs: vec![
                    IpvsOp::AddService(spec("198.18.0.10", 80)),
                    IpvsOp::AddService(spec(NODE_IP, 80)),
                ],
                addresses: vec![AddressOp::Add(ip("198.18.0.10"))],
                ipsets: vec![
                    add_entry("KUBE-IPVS-IPS", ipvs_ip("198.18.0.10")),
                    add_entry("KUBE-CLUSTER-IP", cip("198.18.0.10", 80)),
                    add_entry("KUBE-EXTERNAL-IP", cip(NODE_IP, 80)),
                ],
            },
        },
        Case {
            name: "a shared virtual server passes to the next claimant",
            before: vec![
                svc("a", "http", &["198.19.0.5"], |s| {
                    s.external_ips = vec![ip("198.18.1.50")];
                }),
                svc("b", "http", &["198.19.0.6"], |s| {
                    s.cluster_ips = vec![ip("198.18.0.11")];
                    s.external_ips = vec![ip("198.18.1.50")];
                }),
            ],
            after: vec![svc("b", "http", &["198.19.0.6"], |s| {
                s.cluster_ips = vec![ip("198.18.0.11")];
                s.external_ips = vec![ip("198.18.1.50")];
            })],
            expected: KernelOps {
                ipvs: vec![
                    IpvsOp::AddDest(
                        key("198.18.1.50", 80),
                        dest("198.19.0.6", 1),
                    ),
                    IpvsOp::DeleteDest(
                        key("198.18.1.50", 80),
                        dk("198.19.0.5"),
                    ),
                    IpvsOp::DeleteService(key("198.18.0.10", 80)),
                ],
                // 198.18.1.50 is still bound for b.
                addresses: vec![AddressOp::Delete(ip("198.18.0.10"))],
                ipsets: vec![
                    del_entry("KUBE-IPVS-IPS", ipvs_ip("198.18.0.10")),
                    del_entry("KUBE-CLUSTER-IP", cip("198.18.0.10", 80)),
                ],
            },
        },
        Case {
            name: "dual-stack: each family gets its address and its sets",
            before: vec![],
            after: vec![svc_with(
                "web",
                "http",
                &[],
                |s| s.cluster_ips = vec![ip("198.18.0.10"), ip("2001:db8::10")],
                |c| c.ipv6 = true,
            )],
            expected: KernelOps {
                ipvs: vec![
                    IpvsOp::AddService(spec("198.18.0.10", 80)),
                    IpvsOp::AddService(spec("2001:db8::10", 80)),
                ],
                addresses: vec![
                    AddressOp::Add(ip("198.18.0.10")),
                    AddressOp::Add(ip("2001:db8::10")),
                ],
                ipsets: vec![
                    add_entry("KUBE-IPVS-IPS", ipvs_ip("198.18.0.10")),
                    add_entry("KUBE-6-IPVS-IPS", ipvs_ip("2001:db8::10")),
                    add_entry("KUBE-CLUSTER-IP", cip("198.18.0.10", 80)),
                    add_entry("KUBE-6-CLUSTER-IP", cip("2001:db8::10", 80)),
                ],
            },
        },
        Case {
            name: "ports sharing a health-check node port keep its entry",
            before: vec![
                svc("lb", "http", &[], |s| s.health_check_node_port = 31000),
                svc("lb", "https", &[], |s| {
                    s.port = 443;
                    s.health_check_node_port = 31000;
                }),
            ],
            after: vec![svc("lb", "http", &[], |s| {
                s.health_check_node_port = 31000
            })],
            expected: KernelOps {
                ipvs: vec![IpvsOp::DeleteService(key("198.18.0.10", 443))],
                addresses: vec![],
                ipsets: vec![del_entry(
                    "KUBE-CLUSTER-IP",
                    cip("198.18.0.10", 443),
                )],
            },
        },
    ];
    for case in cases {
        let (ledger, ops) = plan_change(&case.before, &case.after);
        assert_eq!(ops, case.expected, "{}", case.name);
        // The ledger now describes `after`, whatever `before` was.
        let fresh =
            Ledger::from_services(case.after.iter().map(|(n, s)| (n, s)));
        assert_eq!(
            ledger.set_entries(),
            fresh.set_entries(),
            "{}: set entries",
            case.name
        );
        assert_eq!(
            ledger.bound_addresses().collect::<Vec<_>>(),
            fresh.bound_addresses().collect::<Vec<_>>(),
            "{}: addresses",
            case.name
        );
        let vs = |l: &Ledger| {
            l.virtual_servers()
                .map(|(k, v)| (k, v.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(vs(&ledger), vs(&fresh), "{}: virtual servers", case.name);
    }
}

#[test]
fn plan_uses_its_own_record_not_the_deltas_previous() {
    // The ledger never saw `web`; a delta claiming an older state of it
    // must not lead to deleting what was never programmed.
    let mut ledger = Ledger::new();
    let (name, current) = svc("web", "http", &["198.19.0.5"], |_| {});
    let (_, stale) = svc("web", "http", &["198.19.0.9"], |_| {});
    let ops = ledger.plan(&[ServiceDelta {
        service: name,
        previous: Some(stale),
        current: Some(current),
    }]);
    assert_eq!(
        ops.ipvs,
        [
            IpvsOp::AddService(spec("198.18.0.10", 80)),
            IpvsOp::AddDest(key("198.18.0.10", 80), dest("198.19.0.5", 1)),
        ]
    );
}

#[test]
fn an_endpoint_change_keeps_the_claims_a_port_shares() {
    // Two ports share the cluster IP. After one port's endpoints change
    // (only its real servers move), the address stays bound while either
    // port claims it, and goes with the last.
    let http = |eps: &[&str]| svc("web", "http", eps, |_| {});
    let https = |eps: &[&str]| svc("web", "https", eps, |s| s.port = 443);
    let (h, h1) = http(&["198.19.0.5"]);
    let (s, s1) = https(&["198.19.0.5"]);
    let mut ledger = Ledger::from_services([(&h, &h1), (&s, &s1)]);
    let (_, h2) = http(&["198.19.0.5", "198.19.0.6"]);
    let change = |service: &ServicePortName, previous, current| ServiceDelta {
        service: service.clone(),
        previous,
        current,
    };
    let ops = ledger.plan(&[change(&h, Some(h1), Some(Arc::clone(&h2)))]);
    assert_eq!(
        ops.ipvs,
        [IpvsOp::AddDest(
            key("198.18.0.10", 80),
            dest("198.19.0.6", 1)
        )]
    );
    assert!(ops.addresses.is_empty() && ops.ipsets.is_empty(), "{ops:?}");
    let ops = ledger.plan(&[change(&s, Some(s1), None)]);
    assert_eq!(ops.ipvs, [IpvsOp::DeleteService(key("198.18.0.10", 443))]);
    assert!(ops.addresses.is_empty(), "{ops:?}");
    let ops = ledger.plan(&[change(&h, Some(h2), None)]);
    assert_eq!(ops.ipvs, [IpvsOp::DeleteService(key("198.18.0.10", 80))]);
    assert_eq!(ops.addresses, [AddressOp::Delete(ip("198.18.0.10"))]);
    assert!(
        ops.ipsets
            .contains(&del_entry("KUBE-IPVS-IPS", ipvs_ip("198.18.0.10"))),
        "{ops:?}"
    );
}

#[test]
fn real_servers_walked_side_by_side_change_what_the_maps_would() {
    let rs = |list: &[(&str, u32)]| -> Vec<RealServer> {
        list.iter()
            .map(|&(address, weight)| RealServer {
                address: ip(address),
                port: 8080,
                weight,
            })
            .collect()
    };
    let lists = [
        rs(&[]),
        rs(&[("198.19.0.1", 1)]),
        rs(&[("198.19.0.1", 1), ("198.19.0.3", 1)]),
        rs(&[("198.19.0.2", 1), ("198.19.0.3", 2)]),
        rs(&[("198.19.0.1", 2), ("198.19.0.4", 1), ("198.19.0.5", 1)]),
        // Out of order, and one address twice: the maps' way.
        rs(&[("198.19.0.3", 1), ("198.19.0.1", 1)]),
        rs(&[("198.19.0.1", 1), ("198.19.0.1", 3)]),
    ];
    let (_, state) = svc("web", "http", &["198.19.0.1"], |_| {});
    let with = |real_servers: &Vec<RealServer>| VirtualServer {
        real_servers: real_servers.clone(),
        ..state.virtual_servers[0].clone()
    };
    let vs_key = key("198.18.0.10", 80);
    let mut changed = 0;
    for old in &lists {
        for new in &lists {
            let (old, new) = (with(old), with(new));
            let mut walked = IpvsLists::default();
            walked.diff(vs_key, Some(&old), Some(&new));
            let mut mapped = IpvsLists::default();
            mapped.dests(vs_key, &lists::dests(&old), &lists::dests(&new));
            let walked = walked.into_ops();
            changed += usize::from(!walked.is_empty());
            assert_eq!(walked, mapped.into_ops(), "{old:?} -> {new:?}");
        }
    }
    assert!(
        changed > 30,
        "the pairs compared change something: {changed}"
    );
}

/// The kernel exactly as a ledger describes it: the reconcile cases
/// start from here and break one thing.
fn kernel_of(ledger: &Ledger) -> Observed {
    let mut table = IpvsTable::default();
    for (key, vs) in ledger.virtual_servers() {
        table.services.insert(
            key,
            ServiceEntry {
                spec: service_spec(vs),
                dests: vs
                    .real_servers
                    .iter()
                    .map(|rs| {
                        (
                            DestKey {
                                address: rs.address,
                                port: rs.port,
                            },
                            DestState {
                                weight: rs.weight,
                                ..DestState::default()
                            },
                        )
                    })
                    .collect(),
            },
        );
    }
    let mut entries = ledger.set_entries();
    let sets = expected_sets(true, false)
        .into_iter()
        .map(|set| {
            let state = SetState {
                spec: set_spec(set),
                entries: entries.remove(&set).unwrap_or_default(),
            };
            (set.name(), state)
        })
        .collect();
    Observed {
        ipvs: Some(table),
        link_addresses: Some(ledger.bound_addresses().collect()),
        sets: Some(sets),
    }
}

fn ownership() -> Ownership {
    Ownership {
        exclude_cidrs: vec!["198.18.250.0/24".parse().unwrap()],
        programmed: BTreeSet::new(),
        node_addresses: [ip(NODE_IP)].into(),
        listed: Listed::default(),
    }
}

fn foreign_vs(table: &mut IpvsTable, addr: &str, port: u16) {
    table.services.insert(
        key(addr, port),
        ServiceEntry {
            spec: spec(addr, port),
            dests: [(dk("198.19.9.9"), DestState::default())].into(),
        },
    );
}

struct ReconcileCase {
    name: &'static str,
    drift: Box<dyn Fn(&mut Observed)>,
    expected: Reconciled,
}

fn table(o: &mut Observed) -> &mut IpvsTable {
    o.ipvs.get_or_insert_with(IpvsTable::default)
}

fn set_mut<'a>(o: &'a mut Observed, name: &str) -> &'a mut SetState {
    o.sets
        .get_or_insert_with(BTreeMap::new)
        .get_mut(name)
        .unwrap()
}

#[test]
fn reconcile_repairs_drift_and_touches_only_what_is_ours() {
    let desired = [
        svc("web", "http", &["198.19.0.5", "198.19.0.6"], |s| {
            s.node_port = 30080;
        }),
        svc("web", "https", &["198.19.0.5"], |s| s.port = 443),
    ];
    let ledger = Ledger::from_services(desired.iter().map(|(n, s)| (n, s)));
    let cases = vec![
        ReconcileCase {
            name: "kernel in sync",
            drift: Box::new(|_| {}),
            expected: Reconciled::default(),
        },
        ReconcileCase {
            name: "virtual server deleted by hand",
            drift: Box::new(|o| {
                table(o).services.remove(&key("198.18.0.10", 443));
            }),
            expected: Reconciled {
                ops: KernelOps {
                    ipvs: vec![
                        IpvsOp::AddService(spec("198.18.0.10", 443)),
                        IpvsOp::AddDest(
                            key("198.18.0.10", 443),
                            dest("198.19.0.5", 1),
                        ),
                    ],
                    ..KernelOps::default()
                },
                ..Reconciled::default()
            },
        },
        ReconcileCase {
            name: "address removed from the dummy link",
            drift: Box::new(|o| {
                o.link_addresses = Some(BTreeSet::new());
            }),
            expected: Reconciled {
                ops: KernelOps {
                    addresses: vec![AddressOp::Add(ip("198.18.0.10"))],
                    ..KernelOps::default()
                },
                ..Reconciled::default()
            },
        },
        ReconcileCase {
            name: "set flushed",
            drift: Box::new(|o| {
                set_mut(o, "KUBE-CLUSTER-IP").entries.clear();
            }),
            expected: Reconciled {
                ops: KernelOps {
                    ipsets: vec![
                        add_entry("KUBE-CLUSTER-IP", cip("198.18.0.10", 80)),
                        add_entry("KUBE-CLUSTER-IP", cip("198.18.0.10", 443)),
                    ],
                    ..KernelOps::default()
                },
                ..Reconciled::default()
            },
        },
        ReconcileCase {
            name: "set destroyed",
            drift: Box::new(|o| {
                o.sets.as_mut().unwrap().remove("KUBE-NODE-PORT-TCP");
            }),
            expected: Reconciled {
                ops: KernelOps {
                    ipsets: vec![
                        IpsetOp::Create(set_spec(SetName::v4(
                            SetKind::NodePortTcp,
                        ))),
                        add_entry("KUBE-NODE-PORT-TCP", SetEntry::Port(30080)),
                    ],
                    ..KernelOps::default()
                },
                ..Reconciled::default()
            },
        },
        ReconcileCase {
            name: "stray entry in our set deleted",
            drift: Box::new(|o| {
                let stray = cip("198.18.0.99", 80);
                set_mut(o, "KUBE-CLUSTER-IP").entries.insert(stray);
            }),
            expected: Reconciled {
                ops: KernelOps {
                    ipsets: vec![del_entry(
                        "KUBE-CLUSTER-IP",
                        cip("198.18.0.99", 80),
                    )],
                    ..KernelOps::default()
                },
                ..Reconciled::default()
            },
        },
        ReconcileCase {
            name: "set of the wrong type is reported, not touched",
            drift: Box::new(|o| {
                let set = set_mut(o, "KUBE-CLUSTER-IP");
                set.spec.set_type = crate::desired::SetType::HashIp;
                set.entries.clear();
            }),
            expected: Reconciled {
                warnings: vec![
                    "ipset KUBE-CLUSTER-IP has type hash:ip instead of \
                     hash:ip,port; left as it is"
                        .into(),
                ],
                ..Reconciled::default()
            },
        },
        ReconcileCase {
            name: "foreign virtual servers and sets are left alone",
            drift: Box::new(|o| {
                foreign_vs(table(o), "198.18.200.1", 80);
                // On a node address, but no set lists its port.
                foreign_vs(table(o), NODE_IP, 8443);
                o.sets.as_mut().unwrap().insert(
                    "KUBE-SOMEONE-ELSE".into(),
                    SetState {
                        spec: SetSpec {
                            name: "KUBE-SOMEONE-ELSE".into(),
                            set_type: crate::desired::SetType::HashIp,
                            ipv6: false,
                        },
                        entries: [ipvs_ip("198.18.0.77")].into(),
                    },
                );
            }),
            expected: Reconciled {
                foreign: vec![key(NODE_IP, 8443), key("198.18.200.1", 80)],
                ..Reconciled::default()
            },
        },
        ReconcileCase {
            name: "stale virtual server and address of ours are removed",
            drift: Box::new(|o| {
                foreign_vs(table(o), "198.18.0.20", 80);
                o.link_addresses.as_mut().unwrap().insert(ip("198.18.0.20"));
            }),
            expected: Reconciled {
                ops: KernelOps {
                    ipvs: vec![IpvsOp::DeleteService(key("198.18.0.20", 80))],
                    addresses: vec![AddressOp::Delete(ip("198.18.0.20"))],
                    ..KernelOps::default()
                },
                ..Reconciled::default()
            },
        },
        ReconcileCase {
            name: "an IPv6 link-local address on the link is not ours",
            drift: Box::new(|o| {
                let link = o.link_addresses.as_mut().unwrap();
                link.insert(ip("fe80::1"));
            }),
            expected: Reconciled::default(),
        },
        ReconcileCase {
            name: "a port in the default NodePort range that no set lists is foreign",
            drift: Box::new(|o| foreign_vs(table(o), NODE_IP, 30999)),
            expected: Reconciled {
                foreign: vec![key(NODE_IP, 30999)],
                ..Reconciled::default()
            },
        },
        ReconcileCase {
            name: "excludeCIDRs protect even a virtual server on our link",
            drift: Box::new(|o| {
                foreign_vs(table(o), "198.18.250.5", 80);
                let link = o.link_addresses.as_mut().unwrap();
                link.insert(ip("198.18.250.5"));
            }),
            expected: Reconciled {
                ops: KernelOps {
                    // The address is not wanted on the link, though.
                    addresses: vec![AddressOp::Delete(ip("198.18.250.5"))],
                    ..KernelOps::default()
                },
                ..Reconciled::default()
            },
        },
        ReconcileCase {
            name: "weight 0 left by an earlier run is restored",
            drift: Box::new(|o| {
                let vs =
                    table(o).services.get_mut(&key("198.18.0.10", 80)).unwrap();
                vs.dests.get_mut(&dk("198.19.0.6")).unwrap().weight = 0;
            }),
            expected: Reconciled {
                ops: KernelOps {
                    ipvs: vec![IpvsOp::UpdateDest(
                        key("198.18.0.10", 80),
                        dest("198.19.0.6", 1),
                    )],
                    ..KernelOps::default()
                },
                ..Reconciled::default()
            },
        },
        ReconcileCase {
            name: "a real server no longer wanted is listed for deletion",
            drift: Box::new(|o| {
                let vs =
                    table(o).services.get_mut(&key("198.18.0.10", 80)).unwrap();
                vs.dests.insert(
                    dk("198.19.0.7"),
                    DestState {
                        weight: 0,
                        active_conns: 3,
                        inactive_conns: 0,
                    },
                );
            }),
            expected: Reconciled {
                ops: KernelOps {
                    ipvs: vec![IpvsOp::DeleteDest(
                        key("198.18.0.10", 80),
                        dk("198.19.0.7"),
                    )],
                    ..KernelOps::default()
                },
                ..Reconciled::default()
            },
        },
        ReconcileCase {
            name: "scheduler changed by hand is put back",
            drift: Box::new(|o| {
                let vs =
                    table(o).services.get_mut(&key("198.18.0.10", 80)).unwrap();
                vs.spec.scheduler = "wlc".into();
            }),
            expected: Reconciled {
                ops: KernelOps {
                    ipvs: vec![IpvsOp::UpdateService(spec("198.18.0.10", 80))],
                    ..KernelOps::default()
                },
                ..Reconciled::default()
            },
        },
        ReconcileCase {
            name: "a facility that could not be read is left alone",
            drift: Box::new(|o| {
                table(o).services.clear();
                o.ipvs = None;
                o.link_addresses = None;
                o.sets = None;
            }),
            expected: Reconciled::default(),
        },
    ];
    let sets = expected_sets(true, false);
    for case in cases {
        let mut observed = kernel_of(&ledger);
        (case.drift)(&mut observed);
        let got = reconcile(&ledger, &sets, &observed, &ownership());
        assert_eq!(got, case.expected, "{}", case.name);
    }
}

#[test]
fn reconcile_on_an_empty_kernel_programs_everything_and_creates_sets() {
    let desired = [svc("web", "http", &["198.19.0.5"], |_| {})];
    let ledger = Ledger::from_services(desired.iter().map(|(n, s)| (n, s)));
    let observed = Observed {
        ipvs: Some(IpvsTable::default()),
        link_addresses: Some(BTreeSet::new()),
        sets: Some(BTreeMap::new()),
    };
    let got = reconcile(
        &ledger,
        &expected_sets(true, false),
        &observed,
        &ownership(),
    );
    assert_eq!(
        got.ops.ipvs,
        [
            IpvsOp::AddService(spec("198.18.0.10", 80)),
            IpvsOp::AddDest(key("198.18.0.10", 80), dest("198.19.0.5", 1)),
        ]
    );
    assert_eq!(got.ops.addresses, [AddressOp::Add(ip("198.18.0.10"))]);
    let creates = got
        .ops
        .ipsets
        .iter()
        .filter(|op| matches!(op, IpsetOp::Create(_)))
        .count();
    assert_eq!(creates, SetKind::ALL.len());
    // Every create precedes every add.
    let first_add = got
        .ops
        .ipsets
        .iter()
        .position(|op| matches!(op, IpsetOp::Add(..)));
    assert_eq!(first_add, Some(SetKind::ALL.len()));
    assert_eq!(
        got.ops.ipsets[SetKind::ALL.len()..],
        [
            add_entry("KUBE-CLUSTER-IP", cip("198.18.0.10", 80)),
            add_entry("KUBE-IPVS-IPS", ipvs_ip("198.18.0.10")),
        ]
    );
}

#[test]
fn cleanup_removes_ours_and_nothing_else() {
    let desired = [svc("web", "http", &["198.19.0.5"], |s| {
        s.node_port = 30080;
    })];
    let ledger = Ledger::from_services(desired.iter().map(|(n, s)| (n, s)));
    let mut observed = kernel_of(&ledger);
    foreign_vs(table(&mut observed), "198.18.200.1", 80);
    foreign_vs(table(&mut observed), NODE_IP, 22);
    observed.sets.as_mut().unwrap().insert(
        "KUBE-SOMEONE-ELSE".into(),
        SetState {
            spec: SetSpec {
                name: "KUBE-SOMEONE-ELSE".into(),
                set_type: crate::desired::SetType::HashIp,
                ipv6: false,
            },
            entries: BTreeSet::new(),
        },
    );
    let ops = cleanup(&observed, &ownership());
    assert_eq!(
        ops.ipvs,
        [
            IpvsOp::DeleteService(key("198.18.0.10", 80)),
            IpvsOp::DeleteService(key(NODE_IP, 30080)),
        ]
    );
    assert!(ops.addresses.is_empty());
    let destroyed: Vec<&str> = ops
        .ipsets
        .iter()
        .map(|op| match op {
            IpsetOp::Destroy(name) => name.as_str(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(destroyed.len(), SetKind::ALL.len());
    assert!(destroyed.contains(&"KUBE-IPVS-IPS"));
    assert!(!destroyed.contains(&"KUBE-SOMEONE-ELSE"));
}

#[test]
fn expected_sets_follow_the_families() {
    assert_eq!(expected_sets(true, false).len(), SetKind::ALL.len());
    assert_eq!(expected_sets(true, true).len(), 2 * SetKind::ALL.len());
    assert!(expected_sets(false, true).iter().all(|s| s.ipv6));
    let udp = key_p("198.18.0.10", 53, Protocol::Udp);
    assert_eq!(service_name(&udp), "UDP 198.18.0.10:53");
}

/// Many services with drift of every kind, on a kernel of `kernel_of`.
fn drifted(n: u8) -> (Ledger, Observed) {
    let desired: Vec<Entry> = (0..n)
        .map(|i| {
            svc(
                &format!("svc-{i}"),
                "http",
                &["198.19.0.5", "198.19.0.6"],
                |s| {
                    s.cluster_ips = vec![ip(&format!("198.18.0.{}", i + 1))];
                    s.node_port = 30000 + u16::from(i);
                },
            )
        })
        .collect();
    let ledger = Ledger::from_services(desired.iter().map(|(n, s)| (n, s)));
    let mut observed = kernel_of(&ledger);
    let t = table(&mut observed);
    t.services.remove(&key("198.18.0.2", 80));
    if let Some(vs) = t.services.get_mut(&key("198.18.0.3", 80)) {
        vs.dests.remove(&dk("198.19.0.5"));
        vs.dests.insert(dk("198.19.0.99"), DestState::default());
    }
    foreign_vs(t, "198.18.200.1", 80);
    let link = observed.link_addresses.as_mut().unwrap();
    link.remove(&ip("198.18.0.4"));
    link.insert(ip("198.18.0.250"));
    set_mut(&mut observed, "KUBE-CLUSTER-IP")
        .entries
        .remove(&cip("198.18.0.5", 80));
    set_mut(&mut observed, "KUBE-NODE-PORT-TCP")
        .entries
        .insert(SetEntry::Port(31999));
    observed.sets.as_mut().unwrap().remove("KUBE-LOOP-BACK");
    (ledger, observed)
}

fn sorted(ops: &KernelOps) -> Vec<String> {
    let mut all: Vec<String> = ops
        .ipvs
        .iter()
        .map(|op| format!("{op:?} {}", op.object()))
        .chain(ops.addresses.iter().map(|op| format!("{op:?}")))
        .chain(ops.ipsets.iter().map(|op| format!("{op:?}")))
        .collect();
    all.sort();
    all
}

/// A round from `cursor` to its end in steps of `budget`, each step
/// shown to `check`: every step's operations and foreign virtual servers
/// together, and how many steps it took.
fn round_in_steps(
    ledger: &Ledger,
    sets: &[SetName],
    observed: &Observed,
    mut cursor: RepairCursor,
    budget: usize,
    mut check: impl FnMut(&Reconciled),
) -> (Reconciled, usize) {
    let mut out = Reconciled::default();
    let mut steps = 0;
    while !cursor.is_done() {
        let step = repair_step(
            ledger,
            sets,
            observed,
            &ownership(),
            &Touched::new(),
            &mut cursor,
            budget,
        );
        check(&step);
        out.ops.ipvs.extend(step.ops.ipvs);
        out.ops.addresses.extend(step.ops.addresses);
        out.ops.ipsets.extend(step.ops.ipsets);
        out.foreign.extend(step.foreign);
        steps += 1;
    }
    (out, steps)
}

/// A round in small steps repairs exactly what one comparison of
/// everything does, each step within its budget of keys.
#[test]
fn a_repair_round_in_steps_repairs_what_one_whole_comparison_does() {
    let (ledger, observed) = drifted(12);
    let sets = expected_sets(true, false);
    let whole = reconcile(&ledger, &sets, &observed, &ownership());
    assert!(whole.ops.len() > 5, "{whole:?}");
    for budget in [1, 2, 3, 7, 50] {
        let (round, steps) = round_in_steps(
            &ledger,
            &sets,
            &observed,
            RepairCursor::new(),
            budget,
            // One key repaired at most adds a service and its dests.
            |step| {
                assert!(
                    step.ops.len() <= budget * 3,
                    "budget {budget}: {step:?}"
                )
            },
        );
        assert_eq!(sorted(&round.ops), sorted(&whole.ops), "budget {budget}");
        assert_eq!(round.foreign, whole.foreign, "budget {budget}");
        assert!(steps > 12 / budget, "budget {budget}: {steps} steps");
    }
}

/// A round split in two, the link's addresses apart from the rest (a
/// full reconcile writes them side by side), repairs exactly what one
/// whole comparison does: the addresses on one side, all else on the
/// other.
#[test]
fn a_round_split_at_the_addresses_repairs_what_one_whole_comparison_does() {
    let (ledger, observed) = drifted(12);
    let sets = expected_sets(true, false);
    let whole = reconcile(&ledger, &sets, &observed, &ownership());
    assert!(!whole.ops.addresses.is_empty(), "{whole:?}");
    let walk = |cursor, budget| {
        round_in_steps(&ledger, &sets, &observed, cursor, budget, |_| {}).0
    };
    for budget in [1, 3, usize::MAX] {
        let alone = walk(RepairCursor::addresses_alone(), budget);
        assert!(alone.ops.ipvs.is_empty() && alone.ops.ipsets.is_empty());
        assert!(alone.foreign.is_empty(), "{alone:?}");
        let rest = walk(RepairCursor::all_but_addresses(), budget);
        assert!(rest.ops.addresses.is_empty(), "{rest:?}");
        let mut both = rest.ops;
        both.addresses = alone.ops.addresses;
        assert_eq!(sorted(&both), sorted(&whole.ops), "budget {budget}");
        assert_eq!(rest.foreign, whole.foreign, "budget {budget}");
    }
}

/// What a sync wrote since the round began is left alone: the round's
/// read may predate the write.
#[test]
fn a_repair_step_leaves_touched_objects_alone() {
    let (ledger, observed) = drifted(6);
    let sets = expected_sets(true, false);
    let mut touched = Touched::new();
    touched.record(&KernelOps {
        ipvs: vec![IpvsOp::DeleteService(key("198.18.0.2", 80))],
        addresses: vec![AddressOp::Add(ip("198.18.0.4"))],
        ipsets: vec![
            IpsetOp::Add("KUBE-CLUSTER-IP".into(), cip("198.18.0.5", 80)),
            IpsetOp::Create(set_spec(SetName {
                kind: SetKind::LoopBack,
                ipv6: false,
            })),
        ],
    });
    let got = repair_step(
        &ledger,
        &sets,
        &observed,
        &ownership(),
        &touched,
        &mut RepairCursor::new(),
        usize::MAX,
    );
    let ops = sorted(&got.ops);
    for untouched in ["198.18.0.2:80", "198.18.0.4", "198.18.0.5, Tcp, 80"] {
        assert!(
            !ops.iter().any(|op| op.contains(untouched)),
            "{untouched} repaired: {ops:?}"
        );
    }
    assert!(
        !ops.iter().any(|op| op.contains("KUBE-LOOP-BACK")),
        "{ops:?}"
    );
    // The rest of the drift is still repaired.
    assert!(ops.iter().any(|op| op.contains("198.19.0.99")), "{ops:?}");
    assert!(ops.iter().any(|op| op.contains("198.18.0.250")), "{ops:?}");
}

/// An external IP that is the node's own address: its virtual server is
/// off kube-ipvs0 and off the NodePort range, yet the set of external
/// IPs lists it, so cleanup and a repair after a restart know it for a
/// kube-proxy's; a foreign one on the same address stays.
#[test]
fn a_virtual_server_on_a_node_address_that_a_set_lists_is_ours() {
    let ledger = Ledger::new();
    let mut observed = kernel_of(&ledger);
    foreign_vs(table(&mut observed), NODE_IP, 80);
    foreign_vs(table(&mut observed), NODE_IP, 22);
    let external = SetName {
        kind: SetKind::ExternalIp,
        ipv6: false,
    };
    observed
        .sets
        .as_mut()
        .unwrap()
        .get_mut(&external.name())
        .unwrap()
        .entries
        .insert(SetEntry::IpPort(ip(NODE_IP), Protocol::Tcp, 80));
    let ops = cleanup(&observed, &ownership());
    assert_eq!(ops.ipvs, [IpvsOp::DeleteService(key(NODE_IP, 80))]);

    let listed = Ownership {
        listed: listed_in_sets(observed.sets.as_ref().unwrap()),
        ..ownership()
    };
    let repaired =
        reconcile(&ledger, &expected_sets(true, false), &observed, &listed);
    assert!(
        repaired
            .ops
            .ipvs
            .contains(&IpvsOp::DeleteService(key(NODE_IP, 80))),
        "{:?}",
        repaired.ops.ipvs
    );
    assert_eq!(repaired.foreign, [key(NODE_IP, 22)]);
}

/// A NodePort deleted while the proxy was down (or before a takeover):
/// the process has no record of it, but the NodePort sets still list its
/// port, whatever the cluster's `--service-node-port-range`. Each set
/// claims its own protocol only, and only on a node address.
#[test]
fn a_node_port_that_the_sets_list_is_ours_in_any_range() {
    let ledger = Ledger::new();
    let mut observed = kernel_of(&ledger);
    // Outside 30000-32767: a custom range.
    foreign_vs(table(&mut observed), NODE_IP, 40080);
    table(&mut observed).services.insert(
        key_p(NODE_IP, 40080, Protocol::Udp),
        ServiceEntry {
            spec: spec_of(key_p(NODE_IP, 40080, Protocol::Udp), "rr", None),
            dests: BTreeMap::new(),
        },
    );
    foreign_vs(table(&mut observed), NODE_IP, 40443);
    foreign_vs(table(&mut observed), "198.18.200.1", 40080);
    let local_tcp = SetName {
        kind: SetKind::NodePortLocalTcp,
        ipv6: false,
    };
    observed
        .sets
        .as_mut()
        .unwrap()
        .get_mut(&local_tcp.name())
        .unwrap()
        .entries
        .insert(SetEntry::Port(40080));
    let listed = listed_in_sets(observed.sets.as_ref().unwrap());
    assert_eq!(
        listed.node_ports,
        [(Protocol::Tcp, 40080)].into_iter().collect()
    );
    let ownership = Ownership {
        listed,
        ..ownership()
    };

    let repaired =
        reconcile(&ledger, &expected_sets(true, false), &observed, &ownership);
    assert_eq!(
        repaired.ops.ipvs,
        [IpvsOp::DeleteService(key(NODE_IP, 40080))]
    );
    assert_eq!(
        repaired.foreign,
        [
            key_p(NODE_IP, 40080, Protocol::Udp),
            key(NODE_IP, 40443),
            key("198.18.200.1", 40080),
        ]
    );
    let ops = cleanup(&observed, &ownership);
    assert_eq!(ops.ipvs, [IpvsOp::DeleteService(key(NODE_IP, 40080))]);
}
