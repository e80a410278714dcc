//! The proxier against the kernel facilities' in-memory models
//! (`IpvsModel`, `AddressesModel`, `IpsetsModel`), which the contract
//! tests hold to the real kernel: they refuse what the kernel refuses
//! (EEXIST on a duplicate add, ESRCH/ENOENT/ENODEV/EADDRNOTAVAIL on a
//! missing object) rather than forgive it. State a test starts from is
//! put in through the facility's trait where the kernel would take it
//! that way.

use std::{net::IpAddr, sync::Arc};

use futures::executor::block_on;
use pretty_assertions::assert_eq;

use super::*;
use crate::{
    desired::{NodeContext, SchedulerPolicy, SetEntry},
    kernel::{
        addresses::AddressesModel,
        ipsets::{IpsetsModel, SetSpec},
        ipvs::{
            DestKey, DestSpec, DestState, IpvsModel, IpvsTable, ServiceEntry,
        },
    },
    model::{
        fixtures::{self, TestRecorder},
        EndpointInfo, EndpointsMap, Protocol, ServicePortInfo, ServicePortMap,
        ServicePortName,
    },
    telemetry::KERNEL_OPERATIONS_TOTAL,
};

/// The IPVS model with faults injected: the listed operations fail with
/// EINVAL, as a kernel refusing them would, and never reach the model.
/// Everything else is the model's answer, errno for errno.
#[derive(Debug, Default)]
struct RefusingIpvs {
    model: IpvsModel,
    refuse: Vec<IpvsOp>,
}

impl Ipvs for RefusingIpvs {
    async fn dump(&mut self) -> Result<IpvsTable, KernelError> {
        self.model.dump().await
    }

    fn dump_detached(
        &self,
    ) -> impl std::future::Future<Output = Result<IpvsTable, KernelError>>
           + Send
           + 'static
           + use<> {
        self.model.dump_detached()
    }

    async fn service(
        &mut self,
        key: &VirtualServerKey,
    ) -> Result<Option<ServiceEntry>, KernelError> {
        self.model.service(key).await
    }

    async fn dests(
        &mut self,
        service: &VirtualServerKey,
    ) -> Result<BTreeMap<DestKey, DestState>, KernelError> {
        self.model.dests(service).await
    }

    async fn apply(&mut self, ops: &[IpvsOp]) -> Vec<OpResult> {
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            if self.refuse.contains(op) {
                results.push(Err(KernelError::invalid(op.object(), "refused")));
            } else {
                results
                    .extend(self.model.apply(std::slice::from_ref(op)).await);
            }
        }
        results
    }
}

type TestProxier = Proxier<RefusingIpvs, AddressesModel, IpsetsModel>;

const NODE_IP: &str = "198.18.100.1";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn proxier() -> TestProxier {
    Proxier::new(
        RefusingIpvs::default(),
        AddressesModel::new().with_link("eth0", [ip(NODE_IP)]),
        IpsetsModel::new(),
        ProxierConfig::default(),
    )
}

fn ctx() -> NodeContext {
    NodeContext {
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
    }
}

/// The cluster: service ports and their endpoints; `desired` turns it
/// into a desired state, `change` into the deltas a sync hands over.
#[derive(Default)]
struct Cluster {
    services: ServicePortMap,
    endpoints: EndpointsMap,
}

fn port_name(name: &str) -> ServicePortName {
    ServicePortName::new("ns", name, "http", Protocol::Tcp)
}

impl Cluster {
    fn set(
        &mut self,
        name: &str,
        endpoints: &[&str],
        f: impl FnOnce(&mut ServicePortInfo),
    ) {
        let info = fixtures::port_info(f);
        let eps: Vec<Arc<EndpointInfo>> = endpoints
            .iter()
            .map(|a| fixtures::ep(a, 8080, |_| {}))
            .collect();
        self.services.insert(port_name(name), Arc::new(info));
        self.endpoints.insert(port_name(name), eps);
    }

    fn remove(&mut self, name: &str) {
        self.services.remove(&port_name(name));
        self.endpoints.remove(&port_name(name));
    }

    /// Updates `state` for the named ports and returns the deltas.
    fn change(
        &self,
        state: &mut DesiredState,
        names: &[&str],
    ) -> Vec<ServiceDelta> {
        let names: Vec<ServicePortName> =
            names.iter().map(|n| port_name(n)).collect();
        state.update(&self.services, &self.endpoints, &names)
    }

    fn desired(&self) -> DesiredState {
        let mut state = DesiredState::new(ctx());
        let names: Vec<ServicePortName> =
            self.services.keys().cloned().collect();
        state.update(&self.services, &self.endpoints, &names);
        state
    }
}

fn key(addr: &str, port: u16) -> VirtualServerKey {
    VirtualServerKey {
        address: ip(addr),
        port,
        protocol: Protocol::Tcp,
    }
}

fn dk(addr: &str) -> DestKey {
    DestKey {
        address: ip(addr),
        port: 8080,
    }
}

fn entry(
    addr: &str,
    port: u16,
    dests: &[(&str, DestState)],
) -> (VirtualServerKey, ServiceEntry) {
    (
        key(addr, port),
        ServiceEntry {
            spec: plan::ledger::spec_of(key(addr, port), "rr", None),
            dests: dests.iter().map(|(a, s)| (dk(a), *s)).collect(),
        },
    )
}

fn weight(w: u32, active: u32) -> DestState {
    DestState {
        weight: w,
        active_conns: active,
        inactive_conns: 0,
    }
}

/// What the kernel shows, compactly: `TCP a:p -> d:p@w` per virtual
/// server.
fn ipvs_lines(p: &mut TestProxier) -> Vec<String> {
    let (ipvs, _, _) = p.handles();
    ipvs.model
        .table()
        .services
        .values()
        .map(|e| {
            let dests: Vec<String> = e
                .dests
                .iter()
                .map(|(k, s)| format!("{k}@{}", s.weight))
                .collect();
            format!(
                "{} -> {}",
                plan::service_name(&e.spec.key),
                dests.join(",")
            )
        })
        .collect()
}

fn link(p: &mut TestProxier) -> Option<Vec<IpAddr>> {
    let (_, addrs, _) = p.handles();
    addrs
        .links
        .get(DUMMY_LINK)
        .map(|l| l.addresses.iter().copied().collect())
}

fn set_entries(p: &mut TestProxier, name: &str) -> Vec<String> {
    let (_, _, sets) = p.handles();
    sets.sets()
        .get(name)
        .map(|s| s.entries.iter().map(SetEntry::to_string).collect())
        .unwrap_or_default()
}

#[test]
fn start_creates_link_and_sets_and_deletes_nothing() {
    let mut p = proxier();
    {
        let (ipvs, _, sets) = p.handles();
        ipvs.model = IpvsModel::with_table(IpvsTable {
            services: [entry(
                "198.18.0.10",
                80,
                &[("198.19.0.5", weight(1, 3))],
            )]
            .into(),
        });
        let created = block_on(sets.apply(&[IpsetOp::Create(plan::set_spec(
            crate::desired::SetName::v4(crate::desired::SetKind::ClusterIp),
        ))]));
        assert!(created.iter().all(Result::is_ok), "{created:?}");
    }
    let report = block_on(p.start());
    assert!(report.is_ok(), "{report:?}");
    // Every set but the one already there is created.
    assert_eq!(report.ipset_ops, crate::desired::SetKind::ALL.len() - 1);
    assert_eq!(link(&mut p), Some(vec![]));
    assert_eq!(
        ipvs_lines(&mut p),
        ["TCP 198.18.0.10:80 -> 198.19.0.5:8080@1"]
    );
    assert!(p.needs_full_reconcile());
    // Starting again changes nothing.
    assert_eq!(block_on(p.start()).op_count(), 0);
}

#[test]
fn first_full_reconcile_keeps_live_servers_restores_weights_and_drains() {
    let mut p = proxier();
    {
        let (ipvs, addrs, _) = p.handles();
        ipvs.model = IpvsModel::with_table(IpvsTable {
            services: [
                // An earlier run's service: one real server left at weight
                // 0 that is still wanted, one gone with connections.
                entry(
                    "198.18.0.10",
                    80,
                    &[
                        ("198.19.0.5", weight(0, 0)),
                        ("198.19.0.6", weight(1, 0)),
                        ("198.19.0.9", weight(1, 4)),
                    ],
                ),
                // A service deleted while the proxy was down.
                entry("198.18.0.20", 80, &[("198.19.0.7", weight(1, 0))]),
                // Somebody else's.
                entry("198.18.200.1", 80, &[("198.19.9.9", weight(1, 0))]),
            ]
            .into(),
        });
        block_on(addrs.ensure_dummy(DUMMY_LINK)).unwrap();
        let bound = block_on(addrs.apply(
            DUMMY_LINK,
            &[
                AddressOp::Add(ip("198.18.0.10")),
                AddressOp::Add(ip("198.18.0.20")),
            ],
        ));
        assert!(bound.iter().all(Result::is_ok), "{bound:?}");
    }
    block_on(p.start());
    let mut cluster = Cluster::default();
    cluster.set("web", &["198.19.0.5", "198.19.0.6"], |s| {
        s.cluster_ips = vec![ip("198.18.0.10")];
    });
    let report = block_on(p.full_reconcile(&cluster.desired()));
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.foreign, [key("198.18.200.1", 80)]);
    assert_eq!(
        ipvs_lines(&mut p),
        [
            "TCP 198.18.0.10:80 -> 198.19.0.5:8080@1,198.19.0.6:8080@1,\
             198.19.0.9:8080@0",
            "TCP 198.18.200.1:80 -> 198.19.9.9:8080@1",
        ]
    );
    assert!(p
        .graceful()
        .is_draining(&key("198.18.0.10", 80), &dk("198.19.0.9")));
    assert_eq!(link(&mut p), Some(vec![ip("198.18.0.10")]));
    assert_eq!(set_entries(&mut p, "KUBE-IPVS-IPS"), ["198.18.0.10"]);
    assert_eq!(
        set_entries(&mut p, "KUBE-CLUSTER-IP"),
        ["198.18.0.10,tcp:80"]
    );
    assert!(!p.needs_full_reconcile());

    // A second reconcile finds nothing to do and reports the foreign
    // virtual server no more.
    let again = block_on(p.full_reconcile(&cluster.desired()));
    assert_eq!(again.op_count(), 0, "{again:?}");
    assert!(again.foreign.is_empty());
}

#[test]
fn sync_applies_only_the_change_and_drains_removed_tcp_servers() {
    let mut p = proxier();
    block_on(p.start());
    let mut cluster = Cluster::default();
    cluster.set("web", &["198.19.0.5", "198.19.0.6"], |_| {});
    cluster.set("api", &["198.19.0.7"], |s| {
        s.cluster_ips = vec![ip("198.18.0.2")];
    });
    let mut desired = cluster.desired();
    block_on(p.full_reconcile(&desired));
    // A client still connected to the one about to go.
    let web = key("198.18.0.1", 80);
    assert!(p.handles().0.model.set_conns(&web, &dk("198.19.0.5"), 1, 0));

    cluster.set("web", &["198.19.0.6", "198.19.0.8"], |_| {});
    let deltas = cluster.change(&mut desired, &["web"]);
    let report = block_on(p.sync(&deltas));
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.op_count(), 2, "{report:?}");
    assert!(report.address_ops == 0 && report.ipset_ops == 0);
    assert_eq!(
        ipvs_lines(&mut p),
        [
            "TCP 198.18.0.1:80 -> 198.19.0.5:8080@0,198.19.0.6:8080@1,\
             198.19.0.8:8080@1",
            "TCP 198.18.0.2:80 -> 198.19.0.7:8080@1",
        ]
    );

    // Still connected: stays. Idle: deleted at the next poll.
    assert!(p.handles().0.model.set_conns(&web, &dk("198.19.0.5"), 2, 0));
    assert_eq!(block_on(p.poll_graceful(Instant::now())).op_count(), 0);
    assert!(p.handles().0.model.set_conns(&web, &dk("198.19.0.5"), 0, 0));
    let polled = block_on(p.poll_graceful(Instant::now()));
    assert_eq!(polled.op_count(), 1);
    assert!(polled.is_ok());
    assert!(p.graceful().is_empty());
    assert_eq!(
        ipvs_lines(&mut p)[0],
        "TCP 198.18.0.1:80 -> 198.19.0.6:8080@1,198.19.0.8:8080@1"
    );

    // Removing a service unbinds its address only.
    cluster.remove("api");
    let deltas = cluster.change(&mut desired, &["api"]);
    let report = block_on(p.sync(&deltas));
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(link(&mut p), Some(vec![ip("198.18.0.1")]));
    assert_eq!(set_entries(&mut p, "KUBE-IPVS-IPS"), ["198.18.0.1"]);
}

/// A failed write is retried at the next sync by reading back just the
/// service it was for: one operation, no full reconcile.
#[test]
fn the_next_sync_retries_only_what_failed() {
    let mut p = proxier();
    block_on(p.start());
    let mut cluster = Cluster::default();
    cluster.set("web", &["198.19.0.5", "198.19.0.6"], |_| {});
    cluster.set("api", &["198.19.0.7"], |i| {
        i.cluster_ips = vec![ip("198.18.0.2")]
    });
    let mut desired = DesiredState::new(ctx());
    block_on(p.full_reconcile(&desired));
    let refused = IpvsOp::AddDest(
        key("198.18.0.1", 80),
        DestSpec {
            key: dk("198.19.0.5"),
            weight: 1,
        },
    );
    p.handles().0.refuse.push(refused);
    let report =
        block_on(p.sync(&cluster.change(&mut desired, &["web", "api"])));
    assert_eq!(report.failures(), 1, "{report:?}");
    p.handles().0.refuse.clear();

    let before = p.handles().0.model.applied_ops();
    let retry = block_on(p.sync(&[]));
    assert!(retry.is_ok(), "{retry:?}");
    assert_eq!(p.handles().0.model.applied_ops() - before, 1);
    assert!(!p.needs_full_reconcile());
    assert_eq!(
        ipvs_lines(&mut p),
        [
            "TCP 198.18.0.1:80 -> 198.19.0.5:8080@1,198.19.0.6:8080@1",
            "TCP 198.18.0.2:80 -> 198.19.0.7:8080@1"
        ]
    );
    // Nothing is left to retry.
    let before = p.handles().0.model.applied_ops();
    assert!(block_on(p.sync(&[])).is_ok());
    assert_eq!(p.handles().0.model.applied_ops(), before);
}

/// An address or set entry that is already as asked is no failure: a
/// retry that finds its earlier write went through after all is done.
#[test]
fn an_address_already_bound_is_as_asked() {
    let mut p = proxier();
    block_on(p.start());
    let mut cluster = Cluster::default();
    let mut desired = DesiredState::new(ctx());
    block_on(p.full_reconcile(&desired));
    // Someone bound the address first.
    block_on(p.handles().1.apply(
        DUMMY_LINK,
        &[crate::kernel::addresses::AddressOp::Add(ip("198.18.0.1"))],
    ));
    cluster.set("web", &["198.19.0.5"], |_| {});
    let report = block_on(p.sync(&cluster.change(&mut desired, &["web"])));
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(link(&mut p), Some(vec![ip("198.18.0.1")]));
}

/// A node that gains IPv6 (an address read by a repair round) gets the
/// IPv6 sets with the sync that starts programming it, before any rule
/// can name them.
#[test]
fn a_family_the_node_gains_gets_its_sets() {
    use crate::{backend::testing::batch, sync::SyncState};
    let mut p = proxier();
    block_on(p.start());
    let mut state = SyncState::new(
        "node-a",
        crate::sync::NodeSettings::default(),
        Some(vec![ip(NODE_IP)]),
        std::time::SystemTime::now(),
    );
    let outcome = state.sync();
    assert!(
        block_on(Backend::apply(&mut p, batch(&state, &outcome, 1))).is_ok()
    );
    let sets = |p: &mut TestProxier| -> Vec<String> {
        block_on(p.handles().2.dump("KUBE-6-"))
            .unwrap()
            .into_keys()
            .collect()
    };
    assert_eq!(sets(&mut p), Vec::<String>::new());
    assert!(state.set_local_addresses(vec![ip(NODE_IP), ip("2001:db8:100::1")]));
    let outcome = state.sync();
    let report = block_on(Backend::apply(&mut p, batch(&state, &outcome, 2)));
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(sets(&mut p).len(), crate::desired::SetKind::ALL.len());
}

/// A round whose read predates a full reconcile (or a later round)
/// repairs nothing: the kernel has moved on since.
#[test]
fn a_stale_repair_round_does_nothing() {
    let mut p = proxier();
    block_on(p.start());
    let mut cluster = Cluster::default();
    cluster.set("web", &["198.19.0.5"], |_| {});
    let desired = cluster.desired();
    let mut stale = block_on(p.begin_repair());
    assert!(block_on(p.full_reconcile(&desired)).is_ok());
    let before = p.handles().0.model.applied_ops();
    let report = block_on(p.repair_step(&mut stale, REPAIR_STEP_BUDGET));
    assert_eq!(report.op_count(), 0, "{report:?}");
    assert!(stale.is_done());
    assert_eq!(p.handles().0.model.applied_ops(), before);
}

/// A repair round reads the kernel, then compares it a few keys at a
/// time; what a sync writes meanwhile is left alone, everything else is
/// repaired.
#[test]
fn a_repair_round_leaves_alone_what_syncs_touched_since_it_began() {
    let mut p = proxier();
    block_on(p.start());
    let mut cluster = Cluster::default();
    let names: Vec<String> = (0..10).map(|i| format!("svc-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        cluster.set(name, &["198.19.0.5"], |s| {
            s.cluster_ips = vec![ip(&format!("198.18.0.{}", i + 1))]
        });
    }
    let mut desired = cluster.desired();
    assert!(block_on(p.full_reconcile(&desired)).is_ok());
    // Drift: someone deleted two virtual servers.
    let gone = [key("198.18.0.3", 80), key("198.18.0.7", 80)];
    block_on(p.handles().0.model.apply(&[
        IpvsOp::DeleteService(gone[0]),
        IpvsOp::DeleteService(gone[1]),
    ]));
    let mut observed = block_on(p.begin_repair());
    // After the read, a sync changes svc-6 (198.18.0.7): its ledger and
    // the kernel move on without the round.
    cluster.set("svc-6", &["198.19.0.9"], |s| {
        s.cluster_ips = vec![ip("198.18.0.7")]
    });
    let report = block_on(p.sync(&cluster.change(&mut desired, &["svc-6"])));
    assert!(
        !report.is_ok(),
        "the sync's writes to a missing service fail"
    );
    let mut steps = 0;
    while !observed.is_done() {
        let report = block_on(p.repair_step(&mut observed, 3));
        assert!(report.op_count() <= 3 * 2, "{report:?}");
        steps += 1;
    }
    assert!(steps >= 10 / 3, "{steps} steps");
    let lines = ipvs_lines(&mut p);
    assert!(
        lines.contains(&"TCP 198.18.0.3:80 -> 198.19.0.5:8080@1".to_owned()),
        "{lines:?}"
    );
    // svc-6 was the sync's to fix: its failure is retried by the next.
    assert!(!lines.iter().any(|l| l.starts_with("TCP 198.18.0.7:80")));
    assert!(block_on(p.sync(&[])).is_ok());
    assert!(ipvs_lines(&mut p)
        .contains(&"TCP 198.18.0.7:80 -> 198.19.0.9:8080@1".to_owned()));
}

/// A real server without connections is deleted with the sync that
/// removes it: read back first, as upstream does, not left to drain.
#[test]
fn an_idle_real_server_goes_at_once() {
    let mut p = proxier();
    block_on(p.start());
    let mut cluster = Cluster::default();
    cluster.set("web", &["198.19.0.5", "198.19.0.6"], |_| {});
    let mut desired = cluster.desired();
    block_on(p.full_reconcile(&desired));
    cluster.set("web", &["198.19.0.6"], |_| {});
    let report = block_on(p.sync(&cluster.change(&mut desired, &["web"])));
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(
        ipvs_lines(&mut p),
        ["TCP 198.18.0.1:80 -> 198.19.0.6:8080@1"]
    );
    assert!(p.graceful().is_empty());
}

#[test]
fn endpoint_back_while_draining_returns_to_weight_one() {
    let mut p = proxier();
    block_on(p.start());
    let mut cluster = Cluster::default();
    cluster.set("web", &["198.19.0.5", "198.19.0.6"], |_| {});
    let mut desired = cluster.desired();
    block_on(p.full_reconcile(&desired));
    let web = key("198.18.0.1", 80);
    assert!(p.handles().0.model.set_conns(&web, &dk("198.19.0.5"), 1, 0));
    cluster.set("web", &["198.19.0.6"], |_| {});
    block_on(p.sync(&cluster.change(&mut desired, &["web"])));
    assert_eq!(
        ipvs_lines(&mut p),
        ["TCP 198.18.0.1:80 -> 198.19.0.5:8080@0,198.19.0.6:8080@1"]
    );
    cluster.set("web", &["198.19.0.5", "198.19.0.6"], |_| {});
    let report = block_on(p.sync(&cluster.change(&mut desired, &["web"])));
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(
        ipvs_lines(&mut p),
        ["TCP 198.18.0.1:80 -> 198.19.0.5:8080@1,198.19.0.6:8080@1"]
    );
    assert!(p.graceful().is_empty());
}

#[test]
fn failures_are_reported_counted_and_repaired_by_the_next_reconcile() {
    let recorder = TestRecorder::default();
    let mut p = proxier();
    block_on(p.start());
    let mut cluster = Cluster::default();
    cluster.set("web", &["198.19.0.5", "198.19.0.6"], |_| {});
    let mut desired = DesiredState::new(ctx());
    let refused = IpvsOp::AddDest(
        key("198.18.0.1", 80),
        DestSpec {
            key: dk("198.19.0.5"),
            weight: 1,
        },
    );
    p.handles().0.refuse.push(refused.clone());
    // The ledger must have seen a full reconcile for syncs to be
    // incremental; an empty cluster is one.
    block_on(p.full_reconcile(&desired));
    let deltas = cluster.change(&mut desired, &["web"]);
    let report = recorder.run(|| block_on(p.sync(&deltas)));
    assert_eq!(report.failures(), 1, "{report:?}");
    let failed: Vec<&IpvsOp> =
        report.failed_ipvs.iter().map(|(op, _)| op).collect();
    assert_eq!(failed, [&refused]);
    // The rest went through.
    assert_eq!(
        ipvs_lines(&mut p),
        ["TCP 198.18.0.1:80 -> 198.19.0.6:8080@1"]
    );
    assert_eq!(link(&mut p), Some(vec![ip("198.18.0.1")]));
    let counter = |op: &str, result: &str| {
        recorder.counter(&format!(
            "{KERNEL_OPERATIONS_TOTAL}{{facility=ipvs,op={op},result={result}}}"
        ))
    };
    assert_eq!(counter("add_dest", "ok"), 1);
    assert_eq!(counter("add_dest", "invalid"), 1);
    assert_eq!(counter("add_service", "ok"), 1);

    p.handles().0.refuse.clear();
    let repaired = block_on(p.full_reconcile(&desired));
    assert!(repaired.is_ok(), "{repaired:?}");
    assert_eq!(repaired.op_count(), 1);
    assert_eq!(
        ipvs_lines(&mut p),
        ["TCP 198.18.0.1:80 -> 198.19.0.5:8080@1,198.19.0.6:8080@1"]
    );
}

#[test]
fn cleanup_removes_what_is_ours_and_nothing_else() {
    let mut p = proxier();
    block_on(p.start());
    let mut cluster = Cluster::default();
    cluster.set("web", &["198.19.0.5"], |s| s.node_port = 30080);
    block_on(p.full_reconcile(&cluster.desired()));
    {
        let (ipvs, _, sets) = p.handles();
        let foreign = key("198.18.200.1", 80);
        let added = block_on(ipvs.apply(&[
            IpvsOp::AddService(plan::ledger::spec_of(foreign, "rr", None)),
            IpvsOp::AddDest(
                foreign,
                DestSpec {
                    key: dk("198.19.9.9"),
                    weight: 1,
                },
            ),
        ]));
        assert!(added.iter().all(Result::is_ok), "{added:?}");
        let created = block_on(sets.apply(&[IpsetOp::Create(SetSpec {
            name: "KUBE-SOMEONE-ELSE".into(),
            set_type: crate::desired::SetType::HashIp,
            ipv6: false,
        })]));
        assert!(created.iter().all(Result::is_ok), "{created:?}");
    }
    assert_eq!(ipvs_lines(&mut p).len(), 3);

    // A fresh process, as `--cleanup` runs, knows nothing of the
    // NodePort it programmed but finds it by the node-port range.
    let mut fresh = proxier();
    std::mem::swap(fresh.handles().0, p.handles().0);
    std::mem::swap(fresh.handles().1, p.handles().1);
    std::mem::swap(fresh.handles().2, p.handles().2);
    let report = block_on(fresh.cleanup());
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(
        ipvs_lines(&mut fresh),
        ["TCP 198.18.200.1:80 -> 198.19.9.9:8080@1"]
    );
    assert_eq!(link(&mut fresh), None);
    let (_, _, sets) = fresh.handles();
    assert_eq!(
        sets.sets().keys().collect::<Vec<_>>(),
        ["KUBE-SOMEONE-ELSE"]
    );
    // Nothing left of ours: a second cleanup has nothing to do.
    let again = block_on(fresh.cleanup());
    assert!(again.is_ok(), "{again:?}");
    assert_eq!(again.op_count(), 0);
}

/// Through the backend contract: the first sync compares everything with
/// the kernel, later ones apply their deltas only.
#[test]
fn backend_apply_reconciles_fully_first_then_follows_the_deltas() {
    use crate::{
        backend::testing::batch, source::store::ObjectChange, sync::SyncState,
    };
    let mut p = proxier();
    block_on(p.start());
    let mut state = SyncState::new(
        "node-a",
        crate::sync::NodeSettings::default(),
        Some(vec![ip(NODE_IP)]),
        std::time::SystemTime::now(),
    );
    let web = fixtures::service("ns", "web", |s| {
        fixtures::add_port(s, "http", 80, "TCP")
    });
    let slice = |addresses: &[&str]| {
        Arc::new(fixtures::slice("ns", "web-1", "web", |s| {
            fixtures::add_slice_port(s, "http", 8080, "TCP");
            for a in addresses {
                s.endpoints
                    .get_or_insert_default()
                    .push(fixtures::endpoint(a, |_| {}));
            }
        }))
    };
    state.apply_objects(&crate::source::store::ObjectChange::Service {
        previous: None,
        current: Some(Arc::new(web)),
    });
    state.apply_objects(&ObjectChange::EndpointSlice {
        previous: None,
        current: Some(slice(&["198.19.0.5"])),
    });
    // What an earlier run left: found and kept by the full comparison.
    block_on(p.handles().0.model.apply(&[IpvsOp::AddService(
        plan::ledger::spec_of(key("198.18.0.1", 80), "rr", None),
    )]));
    let outcome = state.sync();
    let first = block_on(Backend::apply(&mut p, batch(&state, &outcome, 1)));
    assert!(first.is_ok(), "{first:?}");
    assert!(!p.needs_full_reconcile());
    assert_eq!(
        ipvs_lines(&mut p),
        ["TCP 198.18.0.1:80 -> 198.19.0.5:8080@1"]
    );
    state.apply_objects(&ObjectChange::EndpointSlice {
        previous: Some(slice(&["198.19.0.5"])),
        current: Some(slice(&["198.19.0.5", "198.19.0.6"])),
    });
    let outcome = state.sync();
    let before = p.handles().0.model.applied_ops();
    let second = block_on(Backend::apply(&mut p, batch(&state, &outcome, 2)));
    assert!(second.is_ok(), "{second:?}");
    assert_eq!(p.handles().0.model.applied_ops() - before, 1);
    assert_eq!(
        ipvs_lines(&mut p),
        ["TCP 198.18.0.1:80 -> 198.19.0.5:8080@1,198.19.0.6:8080@1"]
    );
    assert_eq!(
        Backend::poll_interval(&p),
        Some(GracefulConfig::default().check_interval)
    );
}

mod incremental_matches_full {
    //! Whatever the sequence of changes, incremental syncs never make the
    //! kernel refuse an operation (the models refuse what the kernel
    //! refuses), and leave nothing for a full reconcile to repair.

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Step {
        Set {
            service: usize,
            cluster_ip: usize,
            port: u16,
            endpoints: Vec<bool>,
            node_port: bool,
            external_ip: Option<usize>,
            affinity: bool,
            udp: bool,
        },
        Remove(usize),
        /// Every draining real server loses its connections and the
        /// graceful poll runs.
        Drain,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            6 => (
                0..4usize,
                0..3usize,
                prop_oneof![Just(80u16), Just(443u16)],
                proptest::collection::vec(any::<bool>(), 4),
                any::<bool>(),
                proptest::option::of(0..2usize),
                any::<bool>(),
                prop::bool::weighted(0.2),
            )
                .prop_map(
                    |(
                        service,
                        cluster_ip,
                        port,
                        endpoints,
                        node_port,
                        external_ip,
                        affinity,
                        udp,
                    )| Step::Set {
                        service,
                        cluster_ip,
                        port,
                        endpoints,
                        node_port,
                        external_ip,
                        affinity,
                        udp,
                    }
                ),
            2 => (0..4usize).prop_map(Step::Remove),
            1 => Just(Step::Drain),
        ]
    }

    fn apply_step(
        p: &mut TestProxier,
        cluster: &mut Cluster,
        desired: &mut DesiredState,
        step: &Step,
    ) -> Result<(), TestCaseError> {
        let name = |i: usize| format!("svc-{i}");
        let changed = match step {
            Step::Set {
                service,
                cluster_ip,
                port,
                endpoints,
                node_port,
                external_ip,
                affinity,
                udp,
            } => {
                let eps: Vec<String> = endpoints
                    .iter()
                    .enumerate()
                    .filter(|(_, on)| **on)
                    .map(|(i, _)| format!("198.19.0.{}", i + 1))
                    .collect();
                let eps: Vec<&str> = eps.iter().map(String::as_str).collect();
                cluster.set(&name(*service), &eps, |s| {
                    s.cluster_ips =
                        vec![IpAddr::from([198, 18, 0, *cluster_ip as u8 + 1])];
                    s.port = *port;
                    if *node_port {
                        s.node_port = 30000 + *service as u16;
                    }
                    s.external_ips = external_ip
                        .iter()
                        .map(|i| IpAddr::from([198, 18, 1, *i as u8 + 1]))
                        .collect();
                    s.session_affinity_timeout = affinity.then_some(10800);
                    if *udp {
                        s.protocol = Protocol::Udp;
                    }
                });
                name(*service)
            }
            Step::Remove(service) => {
                cluster.remove(&name(*service));
                name(*service)
            }
            Step::Drain => {
                let model = &mut p.handles().0.model;
                let dests: Vec<(VirtualServerKey, DestKey)> = model
                    .table()
                    .services
                    .iter()
                    .flat_map(|(s, e)| e.dests.keys().map(|d| (*s, *d)))
                    .collect();
                for (service, dest) in &dests {
                    prop_assert!(model.set_conns(service, dest, 0, 0));
                }
                let report = block_on(p.poll_graceful(Instant::now()));
                prop_assert!(report.is_ok(), "{report:?}");
                prop_assert!(p.graceful().is_empty());
                return Ok(());
            }
        };
        let deltas = cluster.change(desired, &[changed.as_str()]);
        let report = block_on(p.sync(&deltas));
        prop_assert!(report.is_ok(), "{step:?}: {report:?}");
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn incremental_syncs_leave_nothing_to_repair(
            steps in proptest::collection::vec(step(), 1..25)
        ) {
            let mut p = proxier();
            block_on(p.start());
            let mut cluster = Cluster::default();
            let mut desired = DesiredState::new(ctx());
            block_on(p.full_reconcile(&desired));
            for step in &steps {
                apply_step(&mut p, &mut cluster, &mut desired, step)?;
            }
            let report = block_on(p.full_reconcile(&desired));
            prop_assert!(report.is_ok(), "{report:?}");
            prop_assert_eq!(report.op_count(), 0, "{:?}", report);
        }
    }
}

/// The address model behind a lock, its detached writes still in flight
/// when first polled (the kernel read that follows does not show them),
/// and the addresses in `refuse` refused with EINVAL, as a kernel
/// refusing them would.
#[derive(Clone, Default)]
struct SlowAddresses {
    model: Arc<std::sync::Mutex<AddressesModel>>,
    refuse: Arc<std::sync::Mutex<Vec<IpAddr>>>,
}

impl SlowAddresses {
    fn with<T>(&self, f: impl FnOnce(&mut AddressesModel) -> T) -> T {
        f(&mut self.model.lock().unwrap())
    }
}

/// Answers at the second poll: in flight in between.
async fn in_flight_once() {
    let mut polled = false;
    std::future::poll_fn(|cx| {
        if std::mem::replace(&mut polled, true) {
            return std::task::Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await
}

fn at_once<T>(f: impl std::future::Future<Output = T>) -> T {
    use futures::FutureExt;
    f.now_or_never().expect("the model answers at once")
}

fn apply_refusing(
    model: &std::sync::Mutex<AddressesModel>,
    refuse: &[IpAddr],
    link: &str,
    ops: &[AddressOp],
) -> Vec<OpResult> {
    let mut model = model.lock().unwrap();
    ops.iter()
        .map(|op| match refuse.contains(&op.address()) {
            true => Err(KernelError::invalid(format!("{op:?}"), "refused")),
            false => {
                at_once(model.apply(link, std::slice::from_ref(op))).remove(0)
            }
        })
        .collect()
}

impl Addresses for SlowAddresses {
    async fn ensure_dummy(&mut self, link: &str) -> Result<(), KernelError> {
        self.with(|m| at_once(m.ensure_dummy(link)))
    }

    async fn delete_link(&mut self, link: &str) -> Result<(), KernelError> {
        self.with(|m| at_once(m.delete_link(link)))
    }

    async fn list(
        &mut self,
        link: &str,
    ) -> Result<std::collections::BTreeSet<IpAddr>, KernelError> {
        self.with(|m| at_once(m.list(link)))
    }

    async fn local_addresses(
        &mut self,
        except_link: &str,
    ) -> Result<Vec<IpAddr>, KernelError> {
        self.with(|m| at_once(m.local_addresses(except_link)))
    }

    fn list_detached(
        &self,
        link: &str,
    ) -> impl crate::kernel::DetachedRead<std::collections::BTreeSet<IpAddr>> + use<>
    {
        std::future::ready(self.with(|m| at_once(m.list(link))))
    }

    fn local_addresses_detached(
        &self,
        except_link: &str,
    ) -> impl crate::kernel::DetachedRead<Vec<IpAddr>> + use<> {
        std::future::ready(
            self.with(|m| at_once(m.local_addresses(except_link))),
        )
    }

    async fn apply(&mut self, link: &str, ops: &[AddressOp]) -> Vec<OpResult> {
        let refuse = self.refuse.lock().unwrap().clone();
        apply_refusing(&self.model, &refuse, link, ops)
    }

    fn apply_detached(
        &mut self,
        link: &str,
        ops: Vec<AddressOp>,
    ) -> impl std::future::Future<Output = Vec<OpResult>> + Send + 'static + use<>
    {
        let (model, link) = (Arc::clone(&self.model), link.to_owned());
        let refuse = self.refuse.lock().unwrap().clone();
        async move {
            in_flight_once().await;
            apply_refusing(&model, &refuse, &link, &ops)
        }
    }
}

/// Addresses bound while the list arrives are bound once: the first sync
/// counts those in flight as bound, settles their answers (a refused one
/// is retried by the next sync, as any failed write), takes back one whose
/// Service went away meanwhile, and sends nothing for what the link had.
#[test]
fn addresses_bound_ahead_are_settled_by_the_first_sync() {
    let recorder = TestRecorder::default();
    let addresses = SlowAddresses::default();
    let mut p = Proxier::new(
        RefusingIpvs::default(),
        addresses.clone(),
        IpsetsModel::new(),
        ProxierConfig::default(),
    );
    block_on(p.start());
    // What a previous run left bound: kept if wanted, never sent again.
    let left = ip("198.18.0.1");
    addresses.with(|m| at_once(m.apply(DUMMY_LINK, &[AddressOp::Add(left)])));
    addresses.refuse.lock().unwrap().push(ip("198.18.0.4"));
    let mut cluster = Cluster::default();
    let mut desired = DesiredState::new(ctx());
    for (i, name) in ["web", "api", "gone", "refused"].iter().enumerate() {
        cluster.set(name, &["198.19.0.5"], |s| {
            s.cluster_ips = vec![ip(&format!("198.18.0.{}", i + 1))]
        });
    }
    let listed = cluster.change(&mut desired, &["web", "gone"]);
    block_on(p.bind_ahead(&listed));
    let listed = cluster.change(&mut desired, &["api", "refused", "web"]);
    block_on(p.bind_ahead(&listed));
    // The Service went away before the first sync; the refusal passed.
    cluster.remove("gone");
    cluster.change(&mut desired, &["gone"]);
    addresses.refuse.lock().unwrap().clear();

    let add = |result: &str| {
        recorder.counter(&format!(
            "{KERNEL_OPERATIONS_TOTAL}{{facility=addresses,op=add,result={result}}}"
        ))
    };
    let first = recorder.run(|| block_on(p.full_reconcile(&desired)));
    let failed: Vec<IpAddr> = first
        .failed_addresses
        .iter()
        .map(|(op, _)| op.address())
        .collect();
    assert_eq!(failed, [ip("198.18.0.4")], "{first:?}");
    let bound = addresses.with(|m| m.links[DUMMY_LINK].addresses.clone());
    assert_eq!(
        bound.into_iter().collect::<Vec<_>>(),
        [ip("198.18.0.1"), ip("198.18.0.2")],
        "the link has what is wanted and bound, not the Service gone"
    );
    assert_eq!(add("ok"), 2, "198.18.0.2 and .3, each once");
    assert_eq!(add("invalid"), 1);
    assert_eq!(add("exists"), 0, "no address sent twice");

    let retried = block_on(p.sync(&[]));
    assert!(retried.is_ok(), "{retried:?}");
    let bound = addresses.with(|m| m.links[DUMMY_LINK].addresses.clone());
    assert_eq!(
        bound.into_iter().collect::<Vec<_>>(),
        [ip("198.18.0.1"), ip("198.18.0.2"), ip("198.18.0.4")]
    );
}
