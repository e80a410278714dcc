use std::{path::Path, sync::Arc, time::SystemTime};

use super::*;
use crate::{
    daemon::LogBackend,
    kernel::iptables::{contract::set_names, model::Model},
    runner::{SyncReason, SyncTrigger},
    source::{file, store::ObjectChange},
    sync::{NodeSettings, SyncState},
};

fn loaded_state() -> (SyncState, file::Snapshot) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/cluster.yaml");
    let snapshot = file::load(&path).unwrap();
    let mut state = SyncState::new(
        "node-a",
        NodeSettings::default(),
        None,
        SystemTime::now(),
    );
    state.apply_snapshot(&snapshot);
    (state, snapshot)
}

fn batch(state: &mut SyncState, seq: u64, full: bool) -> SyncBatch {
    let outcome = state.sync();
    SyncBatch {
        trigger: SyncTrigger {
            seq,
            reason: SyncReason::Requested,
        },
        outcome,
        service_ports: state.desired().len(),
        desired: full.then(|| state.desired().clone()),
        udp_serving: None,
    }
}

fn backend() -> WithIptables<LogBackend, Model> {
    let sets = set_names(Family::V4).into_iter().map(|(name, _)| name);
    WithIptables::new(
        LogBackend,
        Model::new().with_sets(sets),
        RulesSettings::from_config(&Config::default(), true),
    )
}

fn nat(b: &mut WithIptables<LogBackend, Model>) -> String {
    futures::executor::block_on(b.iptables.save(Family::V4, "nat")).unwrap()
}

#[tokio::test]
async fn the_first_sync_writes_the_rules_and_quiet_syncs_write_nothing() {
    let (mut state, snapshot) = loaded_state();
    let mut b = backend();
    b.apply(&batch(&mut state, 1, true)).await.unwrap();
    let restores = b.iptables().restores;
    assert!(restores > 0);
    let rules = nat(&mut b);
    assert!(rules.contains("-A KUBE-SERVICES"), "{rules}");
    assert!(rules.contains("KUBE-NODE-PORT-TCP"), "{rules}");

    // Scaling web down changes real servers, not which sets are empty:
    // no iptables process runs.
    let old = snapshot
        .endpoint_slices
        .iter()
        .find(|s| {
            s.metadata.labels.as_ref().unwrap()["kubernetes.io/service-name"]
                == "web"
        })
        .unwrap();
    let mut new = old.clone();
    new.endpoints.truncate(1);
    state.apply(&ObjectChange::EndpointSlice {
        previous: Some(Arc::new(old.clone())),
        current: Some(Arc::new(new)),
    });
    let b2 = batch(&mut state, 2, false);
    assert_eq!(b2.outcome.deltas.len(), 1);
    b.apply(&b2).await.unwrap();
    assert_eq!(b.iptables().restores, restores);
}

#[tokio::test]
async fn a_set_becoming_non_empty_rewrites_the_rules() {
    let (mut state, snapshot) = loaded_state();
    let mut b = backend();
    b.apply(&batch(&mut state, 1, true)).await.unwrap();
    let restores = b.iptables().restores;
    assert!(!nat(&mut b).contains("KUBE-EXTERNAL-IP "));

    // The first external IP in the cluster fills KUBE-EXTERNAL-IP, whose
    // rules upstream writes only for a non-empty set.
    let web = snapshot
        .services
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some("web"))
        .unwrap();
    let mut with_external = web.clone();
    with_external.spec.as_mut().unwrap().external_ips =
        Some(vec!["198.18.50.1".into()]);
    state.apply(&ObjectChange::Service {
        previous: Some(Arc::new(web.clone())),
        current: Some(Arc::new(with_external)),
    });
    b.apply(&batch(&mut state, 2, false)).await.unwrap();
    assert!(b.iptables().restores > restores);
    assert!(nat(&mut b).contains("KUBE-EXTERNAL-IP "), "{}", nat(&mut b));
}
