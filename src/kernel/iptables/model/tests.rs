use pretty_assertions::assert_eq;

use super::*;
use crate::kernel::iptables::{contract, failed_line, save};

#[tokio::test]
async fn contract_noflush_replaces_only_declared_chains() {
    for family in [IpFamily::V4, IpFamily::V6] {
        let mut m = IptablesModel::new();
        contract::noflush_replaces_only_declared_chains(&mut m, family).await;
    }
}

#[tokio::test]
async fn contract_failed_restore_changes_nothing() {
    for family in [IpFamily::V4, IpFamily::V6] {
        let mut m = IptablesModel::new();
        contract::failed_restore_changes_nothing(&mut m, family).await;
    }
}

#[tokio::test]
async fn contract_refusals() {
    for family in [IpFamily::V4, IpFamily::V6] {
        contract::refusals(&mut IptablesModel::new(), family).await;
    }
}

#[test]
fn save_prints_builtins_then_sorted_user_chains_in_canonical_form() {
    let mut m = IptablesModel::new();
    let payload = "*nat
:KUBE-SERVICES - [0:0]
:KUBE-MARK-MASQ - [0:0]
-I OUTPUT 1 -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst ! -s 198.19.0.0/16 -j KUBE-MARK-MASQ
-A KUBE-MARK-MASQ -j MARK --or-mark 0x004000
COMMIT
";
    m.apply(IpFamily::V4, payload).expect("valid payload");
    assert_eq!(
        m.dump(IpFamily::V4, "nat").expect("nat"),
        "*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SERVICES - [0:0]
-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-SERVICES ! -s 198.19.0.0/16 -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ
COMMIT
"
    );
}

#[test]
fn families_are_separate() {
    let mut m = IptablesModel::new();
    m.apply(IpFamily::V6, "*filter\n:KUBE-FORWARD - [0:0]\nCOMMIT\n")
        .expect("v6");
    let v4 = m.dump(IpFamily::V4, "filter").expect("v4");
    assert!(!v4.contains("KUBE-FORWARD"), "{v4}");
    let v6 = m.dump(IpFamily::V6, "filter").expect("v6");
    assert!(v6.contains(":KUBE-FORWARD - [0:0]"), "{v6}");
}

#[test]
fn refuses_what_the_kernel_refuses() {
    let cases = [
        (
            "rule on a missing set",
            "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -m set --match-set NOPE dst \
             -j ACCEPT\nCOMMIT\n",
            3,
        ),
        (
            "MASQUERADE outside nat",
            "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -j MASQUERADE\nCOMMIT\n",
            3,
        ),
        (
            "IPv6 address in an IPv4 rule",
            "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -s 2001:db8::1 -j DROP\n\
             COMMIT\n",
            3,
        ),
        ("missing COMMIT", "*filter\n:KUBE-A - [0:0]\n", 2),
        ("rule outside a table", "-A INPUT -j DROP\n", 1),
    ];
    for (name, payload, line) in cases {
        let mut m = IptablesModel::new().with_sets(["KUBE-CLUSTER-IP"]);
        let err = m.apply(IpFamily::V4, payload).expect_err(name);
        assert_eq!(failed_line(&err), Some(line), "{name}: {err}");
        let filter = m.dump(IpFamily::V4, "filter").expect("filter");
        assert!(!filter.contains("KUBE-A"), "{name} left traces: {filter}");
    }
}

#[test]
fn delete_finds_a_rule_by_any_spelling() {
    let mut m = IptablesModel::new();
    m.apply(
        IpFamily::V4,
        "*nat\n:KUBE-MARK-MASQ - [0:0]\n-A KUBE-MARK-MASQ -j MARK --or-mark \
         0x4000\nCOMMIT\n",
    )
    .expect("setup");
    // The spelling iptables-save printed deletes the rule we wrote.
    m.apply(
        IpFamily::V4,
        "*nat\n-D KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\nCOMMIT\n",
    )
    .expect("delete");
    let nat = m.dump(IpFamily::V4, "nat").expect("nat");
    assert_eq!(
        save::normalise(IpFamily::V4, &nat, |_, c| c.starts_with("KUBE-")),
        "*nat\n:KUBE-MARK-MASQ\n"
    );
}
