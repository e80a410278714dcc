use pretty_assertions::assert_eq;

use super::*;

// The kernel layer's parsing fixture: a dump after kube-proxy ran, with
// one of our jumps gone and a foreign rule jumping to one of our chains.
use crate::kernel::iptables::save::tests::FILTER_DUMP;

#[test]
fn missing_jumps_lists_the_absent_ones_in_upstream_order() {
    let missing: Vec<(&str, &str)> =
        missing_jumps(IpFamily::V4, "filter", FILTER_DUMP)
            .iter()
            .map(|j| (j.jump.from, j.jump.to))
            .collect();
    assert_eq!(
        missing,
        vec![
            ("INPUT", "KUBE-NODE-PORT"),
            ("INPUT", "KUBE-PROXY-FIREWALL"),
            ("FORWARD", "KUBE-PROXY-FIREWALL"),
            ("OUTPUT", "KUBE-IPVS-OUT-FILTER"),
        ]
    );
    assert_eq!(missing_jumps(IpFamily::V4, "nat", "").len(), 3);
}

#[test]
fn cleanup_keeps_chains_foreign_rules_jump_to() {
    let plan = cleanup(IpFamily::V4, "filter", FILTER_DUMP);
    assert_eq!(plan.kept, vec!["KUBE-NODE-PORT".to_owned()]);
    assert_eq!(
        plan.payload.as_deref(),
        Some(
            "*filter
-D INPUT -m comment --comment \"kubernetes ipvs access filter\" -j KUBE-IPVS-FILTER
-D FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD
-F KUBE-FORWARD
-F KUBE-NODE-PORT
-X KUBE-FORWARD
COMMIT
"
        )
    );
    assert_eq!(cleanup(IpFamily::V4, "nat", FILTER_DUMP).payload, None);
}

#[test]
fn normalise_keeps_only_our_part() {
    assert_eq!(
        normalise(IpFamily::V4, FILTER_DUMP),
        "*filter
-A INPUT -m comment --comment \"kubernetes ipvs access filter\" -j KUBE-IPVS-FILTER
-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD
-A CALICO-INPUT -j KUBE-NODE-PORT
:KUBE-FORWARD
:KUBE-NODE-PORT
-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT
"
    );
}
