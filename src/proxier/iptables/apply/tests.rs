use std::collections::BTreeSet;

use pretty_assertions::assert_eq;

use super::*;
use crate::{
    desired::SetKind,
    kernel::iptables::model::IptablesModel,
    proxier::iptables::{contract, rules::FamilyInput},
};

fn model() -> IptablesModel {
    IptablesModel::new().with_sets(
        contract::set_names(IpFamily::V4)
            .into_iter()
            .map(|(name, _)| name),
    )
}

fn input(sets: &[SetKind]) -> RulesInput {
    RulesInput {
        masquerade_all: false,
        masquerade_bit: 14,
        random_fully: true,
        families: vec![FamilyInput {
            non_empty_sets: sets.iter().copied().collect::<BTreeSet<_>>(),
            ..FamilyInput::new(IpFamily::V4)
        }],
    }
}

fn runs(r: &RulesReport) -> (usize, usize) {
    (r.saves, r.restores)
}

#[tokio::test]
async fn syncs_run_tools_only_for_what_changed() {
    let mut m = model();
    let mut applier = RulesApplier::new();
    let first = applier.sync(&mut m, &input(&[]), false).await;
    assert_eq!(
        runs(&first),
        (2, 1),
        "first sync reads both, writes both at once"
    );

    let same = applier.sync(&mut m, &input(&[]), false).await;
    assert_eq!(runs(&same), (0, 0), "nothing changed, nothing runs");

    // A cluster IP set turning non-empty changes only nat rules.
    let nat_only = applier
        .sync(&mut m, &input(&[SetKind::ClusterIp]), false)
        .await;
    assert!(nat_only.is_ok(), "{:?}", nat_only.errors);
    assert_eq!(runs(&nat_only), (0, 1));

    // A firewall set changes only filter rules.
    let filter_only = applier
        .sync(
            &mut m,
            &input(&[SetKind::ClusterIp, SetKind::LoadBalancerFw]),
            false,
        )
        .await;
    assert_eq!(runs(&filter_only), (0, 1));
    assert_eq!((m.saves, m.restores), (2, 3));
}

#[tokio::test]
async fn tables_read_beforehand_are_not_read_again() {
    let mut m = model();
    let mut applier = RulesApplier::new();
    let want = input(&[]);
    let reads = applier.reads(&want, false);
    assert_eq!(reads, vec![(IpFamily::V4, "nat"), (IpFamily::V4, "filter")]);
    // The nat table read early; the filter's early read failed.
    let nat = m.save_detached(IpFamily::V4, "nat").await;
    let failed = Err(KernelError::new(
        crate::kernel::ErrorKind::Transport,
        "iptables-save -t filter",
        "killed",
    ));
    let saved =
        vec![(IpFamily::V4, "filter", failed), (IpFamily::V4, "nat", nat)];
    let first = applier.sync_saved(&mut m, &want, false, saved).await;
    assert!(first.is_ok(), "{:?}", first.errors);
    assert_eq!(runs(&first), (2, 1), "both tables checked, written at once");
    assert_eq!(m.saves, 1, "only the failed read is made again");
    assert_eq!(applier.applied(), Some(&want));

    // Once applied, a sync reads nothing: nothing to read beforehand.
    assert_eq!(applier.reads(&want, false), vec![]);
    assert_eq!(applier.reads(&input(&[SetKind::ClusterIp]), false), vec![]);
    assert_eq!(applier.reads(&want, true).len(), 2, "a verify reads all");
}

#[tokio::test]
async fn a_failed_apply_is_retried_from_the_kernel_state() {
    // No set exists: every rule matching one is refused.
    let mut m = IptablesModel::new().with_sets(Vec::<String>::new());
    let mut applier = RulesApplier::new();
    let failed = applier.sync(&mut m, &input(&[]), false).await;
    assert!(!failed.is_ok());
    assert_eq!(applier.applied(), None);

    // The next sync of the same input does not trust the last one.
    let mut m = model();
    let retry = applier.sync(&mut m, &input(&[]), false).await;
    assert!(retry.is_ok(), "{:?}", retry.errors);
    assert_eq!(runs(&retry), (2, 1));
    assert_eq!(applier.applied(), Some(&input(&[])));
}

#[tokio::test]
async fn verify_repairs_what_a_trusting_sync_would_miss() {
    let mut m = model();
    let mut applier = RulesApplier::new();
    assert!(applier.sync(&mut m, &input(&[]), false).await.is_ok());
    m.apply(IpFamily::V4, "*filter\n-F KUBE-FORWARD\nCOMMIT\n")
        .expect("flush by hand");
    let trusting = applier.sync(&mut m, &input(&[]), false).await;
    assert_eq!(runs(&trusting), (0, 0));
    let verify = applier.sync(&mut m, &input(&[]), true).await;
    assert_eq!(runs(&verify), (2, 1), "only filter is rewritten");
    let filter = m.save(IpFamily::V4, "filter").await.expect("save");
    assert!(filter.contains("-A KUBE-FORWARD"), "{filter}");
}
