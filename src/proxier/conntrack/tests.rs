use std::{
    future::Future,
    net::IpAddr,
    sync::{Arc, Mutex},
};

use futures::executor::block_on;
use pretty_assertions::assert_eq;

use super::WithConntrack;
use crate::{
    daemon::{Backend, BackendError, LogBackend, SyncBatch},
    desired::{DesiredState, NodeContext},
    kernel::{
        conntrack::{
            contract::nat_flow, Conntrack, ConntrackModel, Flow, UdpServing,
        },
        ErrorKind, KernelError,
    },
    model::{fixtures, Protocol},
    runner::{SyncReason, SyncTrigger},
    sync::SyncOutcome,
};

const DELETED_V4: &str =
    "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=IPv4}";
const DELETED_V6: &str =
    "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=IPv6}";

fn ctx(ipv4: bool, ipv6: bool) -> NodeContext {
    NodeContext {
        node_name: "node-a".into(),
        ipv4,
        ipv6,
        ..NodeContext::default()
    }
}

fn batch(
    desired: Option<DesiredState>,
    udp_serving: Option<UdpServing>,
) -> SyncBatch {
    SyncBatch {
        trigger: SyncTrigger {
            seq: 1,
            reason: SyncReason::Requested,
        },
        outcome: SyncOutcome::default(),
        service_ports: 0,
        desired,
        udp_serving,
    }
}

fn full(ipv4: bool, ipv6: bool) -> SyncBatch {
    batch(
        Some(DesiredState::new(ctx(ipv4, ipv6))),
        Some(dns_serving()),
    )
}

/// UDP 198.18.0.10:53 and [2001:db8::10]:53, served by 198.19.0.1 and
/// 2001:db8:1::1 only.
fn dns_serving() -> UdpServing {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let dns = fixtures::port_info(|s| {
        s.protocol = Protocol::Udp;
        s.port = 53;
        s.cluster_ips = vec![ip("198.18.0.10"), ip("2001:db8::10")];
    });
    let eps = [
        fixtures::ep("198.19.0.1", 5353, |_| {}),
        fixtures::ep("2001:db8:1::1", 5353, |_| {}),
    ];
    let mut serving = UdpServing::new();
    serving.add_service(&dns, eps.iter().map(|e| &**e));
    serving
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
    async fn apply(&mut self, _: &SyncBatch) -> Result<(), BackendError> {
        Err(BackendError("injected".into()))
    }
}

fn flows<B>(b: &WithConntrack<B, Spy>) -> Vec<Flow> {
    b.conntrack().model.flows.iter().copied().collect()
}

fn dumps<B>(b: &WithConntrack<B, Spy>) -> u32 {
    *b.conntrack().dumps.lock().unwrap()
}

#[test]
fn a_batch_with_udp_serving_deletes_the_stale_flows() {
    let recorder = fixtures::TestRecorder::default();
    let mut b = WithConntrack::new(
        LogBackend,
        spy([live_v4(), stale_v4(), stale_v6(), foreign()]),
    );
    let result = recorder.run(|| block_on(b.apply(&full(true, true))));
    assert!(result.is_ok(), "{result:?}");
    let mut expected = vec![live_v4(), foreign()];
    expected.sort();
    assert_eq!(flows(&b), expected);
    assert_eq!(dumps(&b), 1);
    assert_eq!(recorder.counter(DELETED_V4), 1);
    assert_eq!(recorder.counter(DELETED_V6), 1);
}

#[test]
fn a_batch_without_udp_serving_runs_no_dump() {
    let recorder = fixtures::TestRecorder::default();
    let mut b = WithConntrack::new(LogBackend, spy([stale_v4()]));
    for desired in [Some(DesiredState::new(ctx(true, false))), None] {
        let batch = batch(desired, None);
        let result = recorder.run(|| block_on(b.apply(&batch)));
        assert!(result.is_ok(), "{result:?}");
    }
    assert_eq!(dumps(&b), 0);
    assert_eq!(flows(&b), vec![stale_v4()]);
    assert_eq!(recorder.counter(DELETED_V4), 0);
}

#[test]
fn metrics_follow_the_families_of_the_last_full_sync() {
    let recorder = fixtures::TestRecorder::default();
    let mut b = WithConntrack::new(LogBackend, spy([stale_v4()]));
    let result = recorder.run(|| block_on(b.apply(&full(true, false))));
    assert!(result.is_ok(), "{result:?}");
    // An incremental batch carries no context: the families stay.
    b.conntrack.model.flows.insert(stale_v4());
    let incremental = batch(None, Some(dns_serving()));
    let result = recorder.run(|| block_on(b.apply(&incremental)));
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(recorder.counter(DELETED_V4), 2);
    assert!(flows(&b).is_empty());
}

#[test]
fn a_failed_apply_leaves_the_flows_to_the_retry() {
    let mut b = WithConntrack::new(Failing, spy([stale_v4()]));
    let result = block_on(b.apply(&full(true, false)));
    assert_eq!(result.map_err(|e| e.0), Err("injected".to_owned()));
    assert_eq!(dumps(&b), 0);
    assert_eq!(flows(&b), vec![stale_v4()]);
}

#[test]
fn a_failed_dump_fails_the_sync_so_that_it_is_retried() {
    let mut b = WithConntrack::new(
        LogBackend,
        Spy {
            fail_dump: true,
            ..spy([stale_v4()])
        },
    );
    let result = block_on(b.apply(&batch(None, Some(dns_serving()))));
    let error = result.expect_err("the dump failed").0;
    assert!(error.contains("injected"), "{error}");
    assert_eq!(flows(&b), vec![stale_v4()]);
}
