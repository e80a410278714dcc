//! Whole payloads per variant. The expected text was written by reading
//! upstream `pkg/proxy/ipvs/proxier.go`: `createAndLinkKubeChain` (chain
//! lines, jumps), `writeIptablesRules` (rule order, comments, matches),
//! `acceptIPVSTraffic` and the `ipsetWithIptablesChain` table.

use std::collections::BTreeSet;

use pretty_assertions::assert_eq;

use super::*;
use crate::config::DetectLocal;

const NAT_CHAINS_TEXT: &str = "*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-LOAD-BALANCER - [0:0]
:KUBE-MARK-MASQ - [0:0]
";

const FILTER_CHAINS_TEXT: &str = "*filter
:KUBE-FORWARD - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SOURCE-RANGES-FIREWALL - [0:0]
:KUBE-IPVS-FILTER - [0:0]
:KUBE-IPVS-OUT-FILTER - [0:0]
";

/// The nat rules written whatever the sets hold, with the default mark,
/// after those that depend on sets (upstream writes these last).
const NAT_TAIL_DEFAULT: &str = "\
-A KUBE-POSTROUTING -m mark ! --mark 0x004000/0x004000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x004000
-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully
-A KUBE-MARK-MASQ -j MARK --or-mark 0x004000
COMMIT
";

/// The filter table with every set empty and the default mark.
const FILTER_DEFAULT_V4: &str = "*filter
:KUBE-FORWARD - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SOURCE-RANGES-FIREWALL - [0:0]
:KUBE-IPVS-FILTER - [0:0]
:KUBE-IPVS-OUT-FILTER - [0:0]
-A KUBE-SOURCE-RANGES-FIREWALL -j DROP
-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x004000/0x004000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-NODE-PORT -m comment --comment \"Kubernetes health check node port\" -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j ACCEPT
-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP-LOCAL dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j RETURN
-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT
COMMIT
";

fn cidr(s: &str) -> IpNet {
    s.parse().expect("test CIDR")
}

fn v4(detector: LocalDetector, sets: &[SetKind]) -> FamilyInput {
    FamilyInput {
        family: IpFamily::V4,
        local_detector: detector,
        non_empty_sets: sets.iter().copied().collect(),
        lb_no_node_access: BTreeSet::new(),
    }
}

fn input(families: Vec<FamilyInput>) -> RulesInput {
    RulesInput {
        masquerade_all: false,
        masquerade_bit: 14,
        random_fully: true,
        families,
    }
}

fn cluster_cidr() -> LocalDetector {
    LocalDetector::SourceCidr(cidr("198.19.0.0/16"))
}

struct Case {
    name: &'static str,
    input: RulesInput,
    missing_jumps: Vec<FamilyJump>,
    /// (family, table, whole payload), in output order.
    want: Vec<(IpFamily, &'static str, String)>,
}

fn all_jumps(family: IpFamily) -> Vec<FamilyJump> {
    JUMPS
        .iter()
        .map(|&jump| FamilyJump { family, jump })
        .collect()
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "default: ClusterCIDR detector, every set empty",
            input: input(vec![v4(cluster_cidr(), &[])]),
            missing_jumps: vec![],
            want: vec![
                (
                    IpFamily::V4,
                    NAT,
                    format!(
                        "{NAT_CHAINS_TEXT}\
-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
{NAT_TAIL_DEFAULT}"
                    ),
                ),
                (IpFamily::V4, FILTER, FILTER_DEFAULT_V4.to_owned()),
            ],
        },
        Case {
            name: "cluster IPs, ClusterCIDR detector, first sync inserts \
                   every jump",
            input: input(vec![v4(
                cluster_cidr(),
                &[SetKind::ClusterIp, SetKind::IpvsIps],
            )]),
            missing_jumps: all_jumps(IpFamily::V4),
            want: vec![
                (
                    IpFamily::V4,
                    NAT,
                    format!(
                        "{NAT_CHAINS_TEXT}\
-I OUTPUT 1 -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-I PREROUTING 1 -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-I POSTROUTING 1 -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING
-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN
-A KUBE-SERVICES -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst ! -s 198.19.0.0/16 -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
{NAT_TAIL_DEFAULT}"
                    ),
                ),
                (
                    IpFamily::V4,
                    FILTER,
                    FILTER_DEFAULT_V4.replacen(
                        "-A KUBE-SOURCE-RANGES-FIREWALL",
                        "-I FORWARD 1 -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD
-I INPUT 1 -m comment --comment \"kubernetes health check rules\" -j KUBE-NODE-PORT
-I INPUT 1 -m comment --comment \"kube-proxy firewall rules\" -j KUBE-PROXY-FIREWALL
-I FORWARD 1 -m comment --comment \"kube-proxy firewall rules\" -j KUBE-PROXY-FIREWALL
-I INPUT 1 -m comment --comment \"kubernetes ipvs access filter\" -j KUBE-IPVS-FILTER
-I OUTPUT 1 -m comment --comment \"kubernetes ipvs access filter\" -j KUBE-IPVS-OUT-FILTER
-A KUBE-SOURCE-RANGES-FIREWALL",
                        1,
                    ),
                ),
            ],
        },
        Case {
            name: "no detector (ClusterCIDR mode without a CIDR): \
                   masquerade by source",
            input: input(vec![v4(LocalDetector::NoOp, &[SetKind::ClusterIp])]),
            missing_jumps: vec![],
            want: vec![
                (
                    IpFamily::V4,
                    NAT,
                    format!(
                        "{NAT_CHAINS_TEXT}\
-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN
-A KUBE-SERVICES -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP src,dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
{NAT_TAIL_DEFAULT}"
                    ),
                ),
                (IpFamily::V4, FILTER, FILTER_DEFAULT_V4.to_owned()),
            ],
        },
        Case {
            name: "BridgeInterface detector",
            input: input(vec![v4(
                LocalDetector::Interface("cbr0".into()),
                &[SetKind::ClusterIp],
            )]),
            missing_jumps: vec![],
            want: vec![
                (
                    IpFamily::V4,
                    NAT,
                    format!(
                        "{NAT_CHAINS_TEXT}\
-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN
-A KUBE-SERVICES -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst ! -i cbr0 -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
{NAT_TAIL_DEFAULT}"
                    ),
                ),
                (IpFamily::V4, FILTER, FILTER_DEFAULT_V4.to_owned()),
            ],
        },
        Case {
            name: "InterfaceNamePrefix detector, no --random-fully",
            input: RulesInput {
                random_fully: false,
                ..input(vec![v4(
                    LocalDetector::InterfacePrefix("veth".into()),
                    &[SetKind::ClusterIp],
                )])
            },
            missing_jumps: vec![],
            want: vec![
                (
                    IpFamily::V4,
                    NAT,
                    format!(
                        "{NAT_CHAINS_TEXT}\
-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN
-A KUBE-SERVICES -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst ! -i veth+ -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
{}",
                        NAT_TAIL_DEFAULT.replace(" --random-fully", "")
                    ),
                ),
                (IpFamily::V4, FILTER, FILTER_DEFAULT_V4.to_owned()),
            ],
        },
        Case {
            name: "masqueradeAll, every set non-empty, mark bit 0, a load \
                   balancer closed to the node",
            input: RulesInput {
                masquerade_all: true,
                masquerade_bit: 0,
                random_fully: true,
                families: vec![FamilyInput {
                    lb_no_node_access: [NoNodeAccess {
                        address: "198.18.1.1".parse().expect("ip"),
                        protocol: Protocol::Tcp,
                        port: 443,
                    }]
                    .into_iter()
                    .collect(),
                    ..v4(cluster_cidr(), &SetKind::ALL)
                }],
            },
            missing_jumps: vec![],
            want: vec![
                (
                    IpFamily::V4,
                    NAT,
                    format!(
                        "{NAT_CHAINS_TEXT}\
-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN
-A KUBE-POSTROUTING -m comment --comment \"Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose\" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE
-A KUBE-SERVICES -m comment --comment \"Kubernetes service lb portal\" -m set --match-set KUBE-LOAD-BALANCER dst,dst -j KUBE-LOAD-BALANCER
-A KUBE-LOAD-BALANCER -m comment --comment \"Kubernetes service load balancer ip + port with externalTrafficPolicy=local\" -m set --match-set KUBE-LOAD-BALANCER-LOCAL dst,dst -j RETURN
-A KUBE-NODE-PORT -p tcp -m comment --comment \"Kubernetes nodeport TCP port with externalTrafficPolicy=local\" -m set --match-set KUBE-NODE-PORT-LOCAL-TCP dst -j RETURN
-A KUBE-NODE-PORT -p tcp -m comment --comment \"Kubernetes nodeport TCP port for masquerade purpose\" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ
-A KUBE-NODE-PORT -p udp -m comment --comment \"Kubernetes nodeport UDP port with externalTrafficPolicy=local\" -m set --match-set KUBE-NODE-PORT-LOCAL-UDP dst -j RETURN
-A KUBE-NODE-PORT -p udp -m comment --comment \"Kubernetes nodeport UDP port for masquerade purpose\" -m set --match-set KUBE-NODE-PORT-UDP dst -j KUBE-MARK-MASQ
-A KUBE-NODE-PORT -p sctp -m comment --comment \"Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'\" -m set --match-set KUBE-NODE-PORT-LOCAL-SCTP-HASH dst,dst -j RETURN
-A KUBE-NODE-PORT -p sctp -m comment --comment \"Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'\" -m set --match-set KUBE-NODE-PORT-SCTP-HASH dst,dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m comment --comment \"Kubernetes service external ip + port for masquerade and filter purpose\" -m set --match-set KUBE-EXTERNAL-IP dst,dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m comment --comment \"Kubernetes service external ip + port for masquerade and filter purpose\" -m set --match-set KUBE-EXTERNAL-IP dst,dst -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT
-A KUBE-SERVICES -m comment --comment \"Kubernetes service external ip + port for masquerade and filter purpose\" -m set --match-set KUBE-EXTERNAL-IP dst,dst -m addrtype --dst-type LOCAL -j ACCEPT
-A KUBE-SERVICES -m comment --comment \"Kubernetes service external ip + port with externalTrafficPolicy=local\" -m set --match-set KUBE-EXTERNAL-IP-LOCAL dst,dst -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT
-A KUBE-SERVICES -m comment --comment \"Kubernetes service external ip + port with externalTrafficPolicy=local\" -m set --match-set KUBE-EXTERNAL-IP-LOCAL dst,dst -m addrtype --dst-type LOCAL -j ACCEPT
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
-A KUBE-SERVICES -m set --match-set KUBE-LOAD-BALANCER dst,dst -j ACCEPT
-A KUBE-POSTROUTING -m mark ! --mark 0x000001/0x000001 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x000001
-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully
-A KUBE-MARK-MASQ -j MARK --or-mark 0x000001
COMMIT
"
                    ),
                ),
                (
                    IpFamily::V4,
                    FILTER,
                    format!(
                        "{FILTER_CHAINS_TEXT}\
-A KUBE-PROXY-FIREWALL -m comment --comment \"Kubernetes service load balancer ip + port for load balancer with sourceRange\" -m set --match-set KUBE-LOAD-BALANCER-FW dst,dst -j KUBE-SOURCE-RANGES-FIREWALL
-A KUBE-SOURCE-RANGES-FIREWALL -m comment --comment \"Kubernetes service load balancer ip + port + source cidr for packet filter purpose\" -m set --match-set KUBE-LOAD-BALANCER-SOURCE-CIDR dst,dst,src -j RETURN
-A KUBE-SOURCE-RANGES-FIREWALL -m comment --comment \"Kubernetes service load balancer ip + port + source IP for packet filter purpose\" -m set --match-set KUBE-LOAD-BALANCER-SOURCE-IP dst,dst,src -j RETURN
-A KUBE-SOURCE-RANGES-FIREWALL -j DROP
-A KUBE-IPVS-OUT-FILTER -s 198.18.1.1 -m ipvs --vaddr 198.18.1.1 --vproto tcp --vport 443 -j DROP
-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x000001/0x000001 -j ACCEPT
-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-NODE-PORT -m comment --comment \"Kubernetes health check node port\" -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j ACCEPT
-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP-LOCAL dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j RETURN
-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT
COMMIT
"
                    ),
                ),
            ],
        },
        Case {
            name: "IPv6: loopback ::1, KUBE-6- set names (one truncated), \
                   NodeCIDR detector",
            input: input(vec![FamilyInput {
                family: IpFamily::V6,
                local_detector: LocalDetector::SourceCidr(cidr(
                    "2001:db8:1::/64",
                )),
                non_empty_sets: [SetKind::ClusterIp, SetKind::NodePortLocalSctp]
                    .into_iter()
                    .collect(),
                lb_no_node_access: [NoNodeAccess {
                    address: "2001:db8::1:1".parse().expect("ip"),
                    protocol: Protocol::Udp,
                    port: 53,
                }]
                .into_iter()
                .collect(),
            }]),
            missing_jumps: vec![],
            want: vec![
                (
                    IpFamily::V6,
                    NAT,
                    format!(
                        "{NAT_CHAINS_TEXT}\
-A KUBE-SERVICES -s ::1/128 -j RETURN
-A KUBE-NODE-PORT -p sctp -m comment --comment \"Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'\" -m set --match-set KUBE-6-NODE-PORT-LOCAL-SCTP-HAS dst,dst -j RETURN
-A KUBE-SERVICES -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-6-CLUSTER-IP dst,dst ! -s 2001:db8:1::/64 -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m set --match-set KUBE-6-CLUSTER-IP dst,dst -j ACCEPT
{NAT_TAIL_DEFAULT}"
                    ),
                ),
                (
                    IpFamily::V6,
                    FILTER,
                    format!(
                        "{FILTER_CHAINS_TEXT}\
-A KUBE-SOURCE-RANGES-FIREWALL -j DROP
-A KUBE-IPVS-OUT-FILTER -s 2001:db8::1:1 -m ipvs --vaddr 2001:db8::1:1 --vproto udp --vport 53 -j DROP
-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x004000/0x004000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-NODE-PORT -m comment --comment \"Kubernetes health check node port\" -m set --match-set KUBE-6-HEALTH-CHECK-NODE-PORT dst -j ACCEPT
-A KUBE-IPVS-FILTER -m set --match-set KUBE-6-LOAD-BALANCER dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-6-CLUSTER-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-6-EXTERNAL-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-6-EXTERNAL-IP-LOCAL dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-6-HEALTH-CHECK-NODE-PORT dst -j RETURN
-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-6-IPVS-IPS dst -j REJECT
COMMIT
"
                    ),
                ),
            ],
        },
    ]
}

#[test]
fn payloads_match_upstream() {
    for case in cases() {
        let got: Vec<(IpFamily, &str, String)> =
            payloads(&case.input, &case.missing_jumps)
                .into_iter()
                .map(|p| (p.family, p.table, p.text))
                .collect();
        assert_eq!(got, case.want, "{}", case.name);
    }
}

#[test]
fn dual_stack_writes_each_family_in_input_order_with_its_own_jumps() {
    let rules = input(vec![
        v4(cluster_cidr(), &[]),
        FamilyInput::new(IpFamily::V6),
    ]);
    let missing = all_jumps(IpFamily::V6);
    let got = payloads(&rules, &missing);
    let order: Vec<(IpFamily, &str)> =
        got.iter().map(|p| (p.family, p.table)).collect();
    assert_eq!(
        order,
        vec![
            (IpFamily::V4, NAT),
            (IpFamily::V4, FILTER),
            (IpFamily::V6, NAT),
            (IpFamily::V6, FILTER)
        ]
    );
    let inserts =
        |p: &Payload| p.text.lines().filter(|l| l.starts_with("-I ")).count();
    let counts: Vec<usize> = got.iter().map(inserts).collect();
    assert_eq!(counts, vec![0, 0, 3, 6]);
}

#[test]
fn masquerade_mark_is_formatted_as_upstream() {
    for (bit, want) in [
        (0, "0x000001"),
        (14, "0x004000"),
        (15, "0x008000"),
        (31, "0x80000000"),
    ] {
        let rules = RulesInput {
            masquerade_bit: bit,
            ..input(vec![])
        };
        assert_eq!(rules.masquerade_mark(), want, "bit {bit}");
    }
}

#[test]
fn local_detector_follows_the_mode_per_family() {
    let cluster = [cidr("198.19.0.0/16"), cidr("2001:db8:1::/48")];
    let pods = [cidr("198.19.4.0/24")];
    let cases = [
        (
            DetectLocal::ClusterCidr,
            IpFamily::V4,
            LocalDetector::SourceCidr(cidr("198.19.0.0/16")),
        ),
        (
            DetectLocal::ClusterCidr,
            IpFamily::V6,
            LocalDetector::SourceCidr(cidr("2001:db8:1::/48")),
        ),
        (
            DetectLocal::NodeCidr,
            IpFamily::V4,
            LocalDetector::SourceCidr(cidr("198.19.4.0/24")),
        ),
        // No pod CIDR of the family: upstream falls back to the no-op
        // detector.
        (DetectLocal::NodeCidr, IpFamily::V6, LocalDetector::NoOp),
        (
            DetectLocal::BridgeInterface("cbr0".into()),
            IpFamily::V6,
            LocalDetector::Interface("cbr0".into()),
        ),
        (
            DetectLocal::InterfaceNamePrefix("veth".into()),
            IpFamily::V4,
            LocalDetector::InterfacePrefix("veth".into()),
        ),
        (
            DetectLocal::BridgeInterface(String::new()),
            IpFamily::V4,
            LocalDetector::NoOp,
        ),
    ];
    for (mode, family, want) in cases {
        assert_eq!(
            LocalDetector::for_family(&mode, &cluster, &pods, family),
            want,
            "{mode:?} {family}"
        );
    }
}

#[test]
fn cluster_cidr_is_masked_like_upstream_parses_it() {
    let got = LocalDetector::for_family(
        &DetectLocal::ClusterCidr,
        &[cidr("198.19.7.1/16")],
        &[],
        IpFamily::V4,
    );
    assert_eq!(got, LocalDetector::SourceCidr(cidr("198.19.0.0/16")));
}
