use std::{path::Path, sync::Arc, time::SystemTime};

use super::*;
use crate::{
    backend::{testing::batch, NoKernel},
    kernel::iptables::model::IptablesModel,
    proxier::iptables::contract::set_names,
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

fn backend() -> WithIptables<NoKernel, IptablesModel> {
    let sets = set_names(IpFamily::V4).into_iter().map(|(name, _)| name);
    WithIptables::new(
        NoKernel,
        IptablesModel::new().with_sets(sets),
        RulesSettings::from_config(&Config::default(), true),
    )
}

fn nat(b: &mut WithIptables<NoKernel, IptablesModel>) -> String {
    futures::executor::block_on(b.iptables.save(IpFamily::V4, "nat")).unwrap()
}

#[tokio::test]
async fn the_first_sync_writes_the_rules_and_quiet_syncs_write_nothing() {
    let (mut state, snapshot) = loaded_state();
    let mut b = backend();
    let outcome = state.sync();
    b.apply(batch(&state, &outcome, 1)).await.unwrap();
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
    new.endpoints.get_or_insert_default().truncate(1);
    state.apply_objects(&ObjectChange::EndpointSlice {
        previous: Some(Arc::new(old.clone())),
        current: Some(Arc::new(new)),
    });
    let outcome = state.sync();
    assert_eq!(outcome.deltas.len(), 1);
    b.apply(batch(&state, &outcome, 2)).await.unwrap();
    assert_eq!(b.iptables().restores, restores);
}

#[tokio::test]
async fn a_set_becoming_non_empty_rewrites_the_rules() {
    let (mut state, snapshot) = loaded_state();
    let mut b = backend();
    let outcome = state.sync();
    b.apply(batch(&state, &outcome, 1)).await.unwrap();
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
    state.apply_objects(&ObjectChange::Service {
        previous: Some(Arc::new(web.clone())),
        current: Some(Arc::new(with_external)),
    });
    let outcome = state.sync();
    b.apply(batch(&state, &outcome, 2)).await.unwrap();
    assert!(b.iptables().restores > restores);
    assert!(nat(&mut b).contains("KUBE-EXTERNAL-IP "), "{}", nat(&mut b));
}

/// A repair round reads the tables beside the syncs and restores what
/// was flushed meanwhile; a round whose saves predate a restore leaves
/// the tables to the next round.
#[tokio::test]
async fn a_repair_round_restores_flushed_chains_unless_a_sync_restored_since() {
    let (mut state, snapshot) = loaded_state();
    let mut b = backend();
    let outcome = state.sync();
    b.apply(batch(&state, &outcome, 1)).await.unwrap();
    let intact = nat(&mut b);
    let flush = "*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n";
    futures::executor::block_on(b.iptables.restore(IpFamily::V4, flush))
        .unwrap();
    assert_ne!(nat(&mut b), intact);

    let mut observed = b.begin_repair().await;
    while b.repair_step(&mut observed).await == RepairStep::Continue {}
    assert_eq!(nat(&mut b), intact, "the round restored the chain");

    // Flushed again; the round reads it, but a sync restores before the
    // round compares: the saves say nothing about the kernel any more.
    futures::executor::block_on(b.iptables.restore(IpFamily::V4, flush))
        .unwrap();
    let mut observed = b.begin_repair().await;
    let web = snapshot
        .services
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some("web"))
        .unwrap();
    let mut with_external = web.clone();
    with_external.spec.as_mut().unwrap().external_ips =
        Some(vec!["198.18.50.1".into()]);
    state.apply_objects(&ObjectChange::Service {
        previous: Some(Arc::new(web.clone())),
        current: Some(Arc::new(with_external)),
    });
    let outcome = state.sync();
    b.apply(batch(&state, &outcome, 2)).await.unwrap();
    let restores = b.iptables().restores;
    while b.repair_step(&mut observed).await == RepairStep::Continue {}
    assert_eq!(b.iptables().restores, restores, "nothing restored");
}
