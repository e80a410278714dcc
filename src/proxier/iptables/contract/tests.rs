//! The contract on the model; `tests/kernel_iptables.rs` runs it on the
//! real tools.

use super::*;
use crate::kernel::iptables::model::IptablesModel;

fn model_for(families: &[IpFamily]) -> IptablesModel {
    let names = families
        .iter()
        .flat_map(|&f| set_names(f))
        .map(|(name, _)| name);
    IptablesModel::new().with_sets(names)
}

fn both() -> IptablesModel {
    model_for(&[IpFamily::V4, IpFamily::V6])
}

#[tokio::test]
async fn contract_apply_and_verify() {
    for (name, input) in inputs(true) {
        let mut m = both();
        let out = apply_and_verify(&mut m, &input).await;
        assert!(out.contains(":KUBE-SERVICES"), "{name}: {out}");
    }
}

#[tokio::test]
async fn contract_change_input() {
    let inputs = inputs(true);
    for pair in inputs.windows(2) {
        if let [(a, from), (b, to)] = pair {
            let mut m = both();
            let out = change_input(&mut m, from, to).await;
            assert!(!out.is_empty(), "{a} -> {b}");
        }
    }
}

#[tokio::test]
async fn contract_repairs_drift() {
    for (_, input) in inputs(true) {
        repairs_drift(&mut both(), &input).await;
    }
}

#[tokio::test]
async fn contract_cleanup_removes_only_ours() {
    for (_, input) in inputs(true) {
        cleanup_removes_only_ours(&mut both(), &input).await;
    }
}
