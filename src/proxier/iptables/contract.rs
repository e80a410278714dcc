//! Our rules on any [`Iptables`]: the model in `cargo test` and the real
//! tools in a network namespace (`tests/kernel_iptables.rs`). Applying,
//! changing, repairing and cleaning up kube-proxy's chains must end in the
//! same state on both, so the model, which the proxier's tests use, cannot
//! drift from the tools on the rules we actually write. Each scenario
//! returns the normalised dump ([`saved::normalise`]) of the state it ends
//! in. iptables' own behaviour has its contract in the kernel layer
//! (`kernel/iptables/contract.rs`).

use std::{collections::BTreeSet, net::IpAddr};

use ipnet::IpNet;

use super::{
    apply::{cleanup, RulesApplier},
    rules::{FamilyInput, LocalDetector, NoNodeAccess, RulesInput, JUMPS},
    saved,
};
use crate::{
    desired::{SetKind, SetName},
    kernel::iptables::{IpFamily, Iptables},
    model::Protocol,
};

/// Every set name of kube-proxy in `family`: what must exist before rules
/// that match on them can be restored.
pub fn set_names(family: IpFamily) -> Vec<(String, &'static str)> {
    SetKind::ALL
        .iter()
        .map(|&kind| {
            let name = SetName {
                kind,
                ipv6: family == IpFamily::V6,
            };
            (name.name(), kind.set_type().as_str())
        })
        .collect()
}

fn addr(s: &str) -> IpAddr {
    s.parse().unwrap_or(IpAddr::from([198, 18, 0, 1]))
}

fn net(s: &str) -> IpNet {
    s.parse()
        .unwrap_or_else(|_| IpNet::from(addr("198.19.0.0")))
}

/// Inputs covering the rule variants. `ipvs_match` says whether the
/// kernel has `xt_ipvs` (the KUBE-IPVS-OUT-FILTER rules need it; the
/// development host lacks it, the guest has it).
pub fn inputs(ipvs_match: bool) -> Vec<(&'static str, RulesInput)> {
    let some: BTreeSet<SetKind> =
        [SetKind::ClusterIp, SetKind::NodePortTcp, SetKind::LoopBack]
            .into_iter()
            .collect();
    let all: BTreeSet<SetKind> = SetKind::ALL.into_iter().collect();
    let v4 = |detector, sets: &BTreeSet<SetKind>| FamilyInput {
        family: IpFamily::V4,
        local_detector: detector,
        non_empty_sets: sets.clone(),
        lb_no_node_access: BTreeSet::new(),
    };
    let mut everything_v4 = v4(LocalDetector::NoOp, &all);
    let mut everything_v6 = FamilyInput {
        family: IpFamily::V6,
        local_detector: LocalDetector::SourceCidr(net("2001:db8:1::/64")),
        non_empty_sets: all.clone(),
        lb_no_node_access: BTreeSet::new(),
    };
    if ipvs_match {
        everything_v4.lb_no_node_access.insert(NoNodeAccess {
            address: addr("198.18.1.1"),
            protocol: Protocol::Tcp,
            port: 443,
        });
        everything_v6.lb_no_node_access.insert(NoNodeAccess {
            address: addr("2001:db8::1:1"),
            protocol: Protocol::Udp,
            port: 53,
        });
    }
    let base = |families| RulesInput {
        masquerade_all: false,
        masquerade_bit: 14,
        random_fully: true,
        families,
    };
    vec![
        (
            "cluster CIDR, a few sets",
            base(vec![v4(
                LocalDetector::SourceCidr(net("198.19.0.0/16")),
                &some,
            )]),
        ),
        (
            "masquerade all, every set",
            RulesInput {
                masquerade_all: true,
                masquerade_bit: 0,
                ..base(vec![everything_v4.clone()])
            },
        ),
        (
            "interface prefix, no random-fully",
            RulesInput {
                random_fully: false,
                ..base(vec![v4(
                    LocalDetector::InterfacePrefix("veth".into()),
                    &some,
                )])
            },
        ),
        ("dual stack", base(vec![everything_v4, everything_v6])),
    ]
}

fn families(input: &RulesInput) -> Vec<IpFamily> {
    input.families.iter().map(|f| f.family).collect()
}

async fn dump<K: Iptables>(k: &mut K, families: &[IpFamily]) -> String {
    let mut out = String::new();
    for &family in families {
        for table in ["nat", "filter"] {
            let text = k.save(family, table).await.unwrap_or_else(|e| {
                panic!("save {family} {table}: {e}");
            });
            out.push_str(&format!("# {family}\n"));
            out.push_str(&saved::normalise(family, &text));
        }
    }
    out
}

async fn assert_in_sync<K: Iptables>(k: &mut K, input: &RulesInput) {
    for t in super::rules::table_rules(input) {
        let saved = k.save(t.family, t.table).await.unwrap_or_default();
        assert!(
            saved::missing_jumps(t.family, t.table, &saved).is_empty(),
            "{} {}: jumps missing in\n{saved}",
            t.family,
            t.table
        );
        assert!(
            !saved::drifted(&t, &saved),
            "{} {}: chains differ from the rules:\n{saved}\nwanted {:#?}",
            t.family,
            t.table,
            t.rules
        );
    }
}

/// Applying an input installs exactly its chains, rules and jumps; doing
/// it again runs nothing, and verifying an intact kernel restores nothing.
pub async fn apply_and_verify<K: Iptables>(
    k: &mut K,
    input: &RulesInput,
) -> String {
    let mut applier = RulesApplier::new();
    let report = applier.sync(k, input, false).await;
    assert!(report.is_ok(), "first apply: {:?}", report.errors);
    assert_eq!(report.restores, input.families.len(), "one per family");
    assert_in_sync(k, input).await;

    let again = applier.sync(k, input, false).await;
    assert_eq!((again.saves, again.restores), (0, 0));
    let verify = applier.sync(k, input, true).await;
    assert!(verify.is_ok(), "verify: {:?}", verify.errors);
    assert_eq!(verify.restores, 0, "an intact kernel needs no restore");

    let out = dump(k, &families(input)).await;
    for family in families(input) {
        let section = out
            .split("# ")
            .filter(|s| s.starts_with(family.as_str()))
            .collect::<String>();
        for j in JUMPS {
            let line = format!("-A {} {}", j.from, j.spec());
            assert_eq!(
                section.lines().filter(|l| *l == line).count(),
                1,
                "{family}: {line} once"
            );
        }
    }
    out
}

/// Changing the input rewrites our chains in place: rules of sets that
/// became empty go, jumps are not duplicated.
pub async fn change_input<K: Iptables>(
    k: &mut K,
    from: &RulesInput,
    to: &RulesInput,
) -> String {
    let mut applier = RulesApplier::new();
    let first = applier.sync(k, from, false).await;
    assert!(first.is_ok(), "{:?}", first.errors);
    let second = applier.sync(k, to, false).await;
    assert!(second.is_ok(), "{:?}", second.errors);
    assert_in_sync(k, to).await;
    dump(k, &families(to)).await
}

/// A flushed chain or a deleted jump is put back by a verifying sync.
pub async fn repairs_drift<K: Iptables>(
    k: &mut K,
    input: &RulesInput,
) -> String {
    let mut applier = RulesApplier::new();
    let report = applier.sync(k, input, false).await;
    assert!(report.is_ok(), "{:?}", report.errors);
    let Some(family) = input.families.first().map(|f| f.family) else {
        return String::new();
    };
    let jump = JUMPS[0];
    let vandal = format!(
        "*nat\n-F KUBE-SERVICES\n-D {} {}\nCOMMIT\n",
        jump.from,
        jump.spec()
    );
    k.restore(family, &vandal)
        .await
        .unwrap_or_else(|e| panic!("flushing by hand: {e}"));
    let saved = k.save(family, "nat").await.unwrap_or_default();
    assert_eq!(saved::missing_jumps(family, "nat", &saved).len(), 1);

    let repair = applier.sync(k, input, true).await;
    assert!(repair.is_ok(), "{:?}", repair.errors);
    assert_eq!(repair.restores, 1, "only the damaged table is restored");
    assert_in_sync(k, input).await;
    dump(k, &families(input)).await
}

/// `--cleanup` removes our chains and jumps and nothing else; a chain of
/// ours that someone else's rule jumps to is flushed and kept.
pub async fn cleanup_removes_only_ours<K: Iptables>(
    k: &mut K,
    input: &RulesInput,
) -> String {
    let mut applier = RulesApplier::new();
    let report = applier.sync(k, input, false).await;
    assert!(report.is_ok(), "{:?}", report.errors);
    let fams = families(input);
    let family = fams.first().copied().unwrap_or(IpFamily::V4);
    let foreign = "*filter\n:FOREIGN - [0:0]\n-A FOREIGN -j KUBE-NODE-PORT\n\
                   -A INPUT -j FOREIGN\nCOMMIT\n";
    k.restore(family, foreign)
        .await
        .unwrap_or_else(|e| panic!("foreign rules: {e}"));

    let (report, kept) = cleanup(k, &fams).await;
    assert!(report.is_ok(), "cleanup: {:?}", report.errors);
    assert_eq!(kept, vec![(family, "filter", "KUBE-NODE-PORT".to_owned())]);
    let left = dump(k, &fams).await;
    let ours: Vec<&str> = left
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('*'))
        .collect();
    assert_eq!(
        ours,
        vec!["-A FOREIGN -j KUBE-NODE-PORT", ":KUBE-NODE-PORT"],
        "only the kept chain and the foreign reference remain"
    );
    let filter = k.save(family, "filter").await.unwrap_or_default();
    assert!(
        filter.lines().any(|l| l == "-A INPUT -j FOREIGN"),
        "{filter}"
    );

    k.restore(family, "*filter\n-F FOREIGN\nCOMMIT\n")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (report, kept) = cleanup(k, &fams).await;
    assert!(report.is_ok() && kept.is_empty(), "{report:?} {kept:?}");
    let (report, _) = cleanup(k, &fams).await;
    assert_eq!(report.restores, 0, "a clean kernel needs no restore");
    let end = dump(k, &fams).await;
    assert!(
        end.lines().all(|l| l.starts_with('#')),
        "leftovers after cleanup:\n{end}"
    );
    end
}

#[cfg(test)]
mod tests;
