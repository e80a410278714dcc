use std::{
    future::Future,
    net::IpAddr,
    sync::{Arc, Mutex},
    time::SystemTime,
};

use futures::executor::block_on;
use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use pretty_assertions::assert_eq;

use super::WithConntrack;
use crate::{
    backend::{
        testing::batch, Backend, BackendError, NoKernel, RepairStep, SyncBatch,
    },
    kernel::{
        conntrack::{contract::nat_flow, Conntrack, ConntrackModel, Flow},
        ErrorKind, KernelError,
    },
    model::fixtures,
    source::store::ObjectChange,
    sync::{NodeSettings, SyncState},
};

const DELETED_V4: &str =
    "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=IPv4}";
const DELETED_V6: &str =
    "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=IPv6}";

/// A node with an IPv4 address, and an IPv6 one if `ipv6`.
fn node(ipv6: bool) -> SyncState {
    let mut local: Vec<IpAddr> = vec!["198.18.100.1".parse().unwrap()];
    if ipv6 {
        local.push("2001:db8:100::1".parse().unwrap());
    }
    SyncState::new(
        "node-a",
        NodeSettings::default(),
        Some(local),
        SystemTime::now(),
    )
}

/// UDP 198.18.0.10:53 and [2001:db8::10]:53.
fn dns() -> Service {
    fixtures::service("ns", "dns", |s| {
        fixtures::set_cluster_ips(s, &["198.18.0.10", "2001:db8::10"]);
        fixtures::add_port(s, "dns", 53, "UDP")
    })
}

/// The DNS service's slice of one family, served by `addresses`.
fn dns_slice(ipv6: bool, addresses: &[&str]) -> EndpointSlice {
    let name = if ipv6 { "dns-v6" } else { "dns-v4" };
    fixtures::slice("ns", name, "dns", |s| {
        if ipv6 {
            s.address_type = "IPv6".into();
        }
        fixtures::add_slice_port(s, "dns", 5353, "UDP");
        for address in addresses {
            s.endpoints
                .get_or_insert_default()
                .push(fixtures::endpoint(address, |_| {}));
        }
    })
}

fn add_service(state: &mut SyncState, svc: Service) {
    state.apply_objects(&ObjectChange::Service {
        previous: None,
        current: Some(Arc::new(svc)),
    });
}

fn set_slice(
    state: &mut SyncState,
    previous: Option<EndpointSlice>,
    current: EndpointSlice,
) {
    state.apply_objects(&ObjectChange::EndpointSlice {
        previous: previous.map(Arc::new),
        current: Some(Arc::new(current)),
    });
}

/// The DNS service served by 198.19.0.1 and 2001:db8:1::1 only.
fn dns_node(ipv6: bool) -> SyncState {
    let mut state = node(ipv6);
    add_service(&mut state, dns());
    set_slice(&mut state, None, dns_slice(false, &["198.19.0.1"]));
    set_slice(&mut state, None, dns_slice(true, &["2001:db8:1::1"]));
    state
}

/// Syncs `state` through `b`.
fn sync<B: Backend>(
    b: &mut B,
    state: &mut SyncState,
    seq: u64,
) -> Result<(), BackendError> {
    let outcome = state.sync();
    block_on(b.apply(batch(state, &outcome, seq)))
}

fn live_v4() -> Flow {
    nat_flow("198.18.9.1:4000", "198.18.0.10:53", "198.19.0.1:5353")
}

fn stale_v4() -> Flow {
    nat_flow("198.18.9.2:4000", "198.18.0.10:53", "198.19.0.2:5353")
}

fn stale_v6() -> Flow {
    nat_flow(
        "[2001:db8::99]:4000",
        "[2001:db8::10]:53",
        "[2001:db8:1::2]:5353",
    )
}

/// Not to a service frontend: never ours to touch.
fn foreign() -> Flow {
    nat_flow("198.18.9.3:4000", "198.18.7.7:53", "198.19.0.2:5353")
}

/// The model, counting the dumps asked of it.
#[derive(Default)]
struct Spy {
    model: ConntrackModel,
    dumps: Arc<Mutex<u32>>,
    fail_dump: bool,
}

impl Conntrack for Spy {
    fn dump_udp(
        &mut self,
    ) -> impl Future<Output = Result<Vec<Flow>, KernelError>> + Send {
        *self.dumps.lock().unwrap() += 1;
        let fail = self.fail_dump;
        let dump = self.model.dump_udp();
        async move {
            if fail {
                return Err(KernelError::new(
                    ErrorKind::Transport,
                    "ctnetlink dump",
                    "injected",
                ));
            }
            dump.await
        }
    }

    fn delete(
        &mut self,
        flows: &[Flow],
    ) -> impl Future<Output = Vec<Result<(), KernelError>>> + Send {
        self.model.delete(flows)
    }
}

fn spy(flows: impl IntoIterator<Item = Flow>) -> Spy {
    Spy {
        model: ConntrackModel::new(flows),
        ..Spy::default()
    }
}

struct Failing;

impl Backend for Failing {
    type Observed = ();

    async fn apply(&mut self, _: SyncBatch<'_>) -> Result<(), BackendError> {
        Err(BackendError::KernelOperations {
            failed: 1,
            attempted: 1,
        })
    }

    fn begin_repair(
        &mut self,
    ) -> impl Future<Output = ()> + Send + 'static + use<> {
        std::future::ready(())
    }

    async fn repair_step(&mut self, _: &mut ()) -> RepairStep {
        RepairStep::Done
    }
}

fn flows<B>(b: &WithConntrack<B, Spy>) -> Vec<Flow> {
    b.conntrack().model.flows.iter().copied().collect()
}

fn dumps<B>(b: &WithConntrack<B, Spy>) -> u32 {
    *b.conntrack().dumps.lock().unwrap()
}

#[test]
fn a_sync_that_changes_udp_endpoints_deletes_the_stale_flows() {
    let recorder = fixtures::TestRecorder::default();
    let mut b = WithConntrack::new(
        NoKernel,
        spy([live_v4(), stale_v4(), stale_v6(), foreign()]),
    );
    let mut state = dns_node(true);
    let result = recorder.run(|| sync(&mut b, &mut state, 1));
    assert!(result.is_ok(), "{result:?}");
    let mut expected = vec![live_v4(), foreign()];
    expected.sort();
    assert_eq!(flows(&b), expected);
    assert_eq!(dumps(&b), 1);
    assert_eq!(recorder.counter(DELETED_V4), 1);
    assert_eq!(recorder.counter(DELETED_V6), 1);
}

#[test]
fn a_sync_that_changes_no_udp_service_runs_no_dump() {
    let recorder = fixtures::TestRecorder::default();
    let mut b = WithConntrack::new(NoKernel, spy([stale_v4()]));
    let mut state = dns_node(false);
    assert!(recorder.run(|| sync(&mut b, &mut state, 1)).is_ok());
    assert_eq!(dumps(&b), 1);
    b.conntrack.model.flows.insert(stale_v4());
    // A TCP service, and a sync with nothing new: no dump.
    add_service(
        &mut state,
        fixtures::service("ns", "web", |s| {
            fixtures::set_cluster_ips(s, &["198.18.0.11"]);
            fixtures::add_port(s, "http", 80, "TCP")
        }),
    );
    for seq in [2, 3] {
        let result = recorder.run(|| sync(&mut b, &mut state, seq));
        assert!(result.is_ok(), "{result:?}");
    }
    assert_eq!(dumps(&b), 1);
    assert_eq!(flows(&b), vec![stale_v4()]);
}

/// The serving endpoints follow each sync's changed ports: an endpoint
/// that leaves makes its flows stale.
#[test]
fn the_serving_endpoints_follow_the_changed_ports() {
    let recorder = fixtures::TestRecorder::default();
    let mut b = WithConntrack::new(NoKernel, spy([live_v4()]));
    let mut state = dns_node(false);
    assert!(recorder.run(|| sync(&mut b, &mut state, 1)).is_ok());
    assert_eq!(flows(&b), vec![live_v4()]);
    set_slice(
        &mut state,
        Some(dns_slice(false, &["198.19.0.1"])),
        dns_slice(false, &["198.19.0.2"]),
    );
    assert!(recorder.run(|| sync(&mut b, &mut state, 2)).is_ok());
    assert!(flows(&b).is_empty(), "{:?}", flows(&b));
    assert!(b.serving().is_stale(&live_v4()));
    assert!(!b.serving().is_stale(&stale_v4()));
}

#[test]
fn metrics_follow_the_node_families() {
    let recorder = fixtures::TestRecorder::default();
    let mut b = WithConntrack::new(NoKernel, spy([stale_v4(), stale_v6()]));
    let mut state = dns_node(false);
    let result = recorder.run(|| sync(&mut b, &mut state, 1));
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(recorder.counter(DELETED_V4), 1);
    // An IPv4-only node reports no IPv6 series.
    assert_eq!(recorder.counter(DELETED_V6), 0);
}

#[test]
fn a_failed_apply_leaves_the_flows_to_the_retry() {
    let mut b = WithConntrack::new(Failing, spy([stale_v4()]));
    let mut state = dns_node(false);
    let result = sync(&mut b, &mut state, 1);
    assert_eq!(
        result,
        Err(BackendError::KernelOperations {
            failed: 1,
            attempted: 1
        })
    );
    assert_eq!(dumps(&b), 0);
    assert_eq!(flows(&b), vec![stale_v4()]);
    // The retry changes nothing in the trackers, yet owes the cleanup.
    let mut b = WithConntrack {
        inner: NoKernel,
        conntrack: b.conntrack,
        families: b.families,
        serving: b.serving,
        owed: b.owed,
    };
    assert!(sync(&mut b, &mut state, 2).is_ok());
    assert!(flows(&b).is_empty());
}

#[test]
fn a_failed_dump_fails_the_sync_so_that_it_is_retried() {
    let mut b = WithConntrack::new(
        NoKernel,
        Spy {
            fail_dump: true,
            ..spy([stale_v4()])
        },
    );
    let mut state = dns_node(false);
    let error = sync(&mut b, &mut state, 1).expect_err("the dump failed");
    assert!(
        matches!(&error, BackendError::ConntrackDump(e) if e.to_string().contains("injected")),
        "{error:?}"
    );
    assert_eq!(flows(&b), vec![stale_v4()]);
    b.conntrack.fail_dump = false;
    assert!(sync(&mut b, &mut state, 2).is_ok());
    assert!(flows(&b).is_empty());
}
