//! kube-proxy IPVS mode's iptables rules, as pure functions of the
//! configuration and of which ipsets are non-empty.
//!
//! Everything here follows `pkg/proxy/ipvs/proxier.go` upstream (the
//! version with KUBE-PROXY-FIREWALL and KUBE-IPVS-OUT-FILTER):
//! `iptablesChains`, `iptablesJumpChain`, `ipsetWithIptablesChain`,
//! `writeIptablesRules`, `acceptIPVSTraffic` and `createAndLinkKubeChain`.
//! The rule text, the rule order and the comments are upstream's, so that
//! `iptables-save` on a node run by us and on one run by kube-proxy print
//! the same chains.
//!
//! Because the per-service work lives in ipsets, the rules change only when
//! the configuration changes, when a set turns empty or non-empty, or when
//! the list of load balancers closed to the node changes: compare two
//! [`RulesInput`]s (equal inputs, equal rules: see
//! [`RulesApplier::sync`](super::RulesApplier::sync)) and most syncs run no
//! iptables tool.

use std::{collections::BTreeSet, fmt::Write as _, net::IpAddr};

use ipnet::IpNet;

use crate::kernel::iptables::{canon, IpFamily};
use crate::{
    config::DetectLocal,
    desired::{SetKind, SetName},
    model::Protocol,
};

pub const NAT: &str = "nat";
pub const FILTER: &str = "filter";

// Chain names: the constants at the top of upstream's proxier.go.
pub const KUBE_SERVICES: &str = "KUBE-SERVICES";
pub const KUBE_PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
pub const KUBE_SOURCE_RANGES_FIREWALL: &str = "KUBE-SOURCE-RANGES-FIREWALL";
pub const KUBE_POSTROUTING: &str = "KUBE-POSTROUTING";
pub const KUBE_MARK_MASQ: &str = "KUBE-MARK-MASQ";
pub const KUBE_NODE_PORT: &str = "KUBE-NODE-PORT";
pub const KUBE_FORWARD: &str = "KUBE-FORWARD";
pub const KUBE_LOAD_BALANCER: &str = "KUBE-LOAD-BALANCER";
pub const KUBE_IPVS_FILTER: &str = "KUBE-IPVS-FILTER";
pub const KUBE_IPVS_OUT_FILTER: &str = "KUBE-IPVS-OUT-FILTER";

/// Our chains per table, in upstream's `iptablesChains` order (which is
/// also the order of the `:CHAIN - [0:0]` lines it writes). The same list
/// is upstream's `iptablesCleanupChains`.
pub const NAT_CHAINS: [&str; 5] = [
    KUBE_SERVICES,
    KUBE_POSTROUTING,
    KUBE_NODE_PORT,
    KUBE_LOAD_BALANCER,
    KUBE_MARK_MASQ,
];
pub const FILTER_CHAINS: [&str; 6] = [
    KUBE_FORWARD,
    KUBE_NODE_PORT,
    KUBE_PROXY_FIREWALL,
    KUBE_SOURCE_RANGES_FIREWALL,
    KUBE_IPVS_FILTER,
    KUBE_IPVS_OUT_FILTER,
];

/// Our chains in `table`; empty for a table we do not use.
pub fn chains(table: &str) -> &'static [&'static str] {
    match table {
        NAT => &NAT_CHAINS,
        FILTER => &FILTER_CHAINS,
        _ => &[],
    }
}

/// A rule in a built-in chain that sends packets into one of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Jump {
    pub table: &'static str,
    pub from: &'static str,
    pub to: &'static str,
    pub comment: &'static str,
}

impl Jump {
    /// The rule as iptables-save prints it, after `-A FROM `.
    pub fn spec(&self) -> String {
        format!(
            "-m comment --comment {} -j {}",
            canon::quote(self.comment),
            self.to
        )
    }
}

/// Upstream's `iptablesJumpChain`, in its order. Upstream prepends each
/// missing one (`EnsureRule(Prepend, ...)`), so the last of a built-in
/// chain's jumps ends up first; [`payloads`] inserts in the same order.
pub const JUMPS: [Jump; 9] = [
    Jump {
        table: NAT,
        from: "OUTPUT",
        to: KUBE_SERVICES,
        comment: "kubernetes service portals",
    },
    Jump {
        table: NAT,
        from: "PREROUTING",
        to: KUBE_SERVICES,
        comment: "kubernetes service portals",
    },
    Jump {
        table: NAT,
        from: "POSTROUTING",
        to: KUBE_POSTROUTING,
        comment: "kubernetes postrouting rules",
    },
    Jump {
        table: FILTER,
        from: "FORWARD",
        to: KUBE_FORWARD,
        comment: "kubernetes forwarding rules",
    },
    Jump {
        table: FILTER,
        from: "INPUT",
        to: KUBE_NODE_PORT,
        comment: "kubernetes health check rules",
    },
    Jump {
        table: FILTER,
        from: "INPUT",
        to: KUBE_PROXY_FIREWALL,
        comment: "kube-proxy firewall rules",
    },
    Jump {
        table: FILTER,
        from: "FORWARD",
        to: KUBE_PROXY_FIREWALL,
        comment: "kube-proxy firewall rules",
    },
    Jump {
        table: FILTER,
        from: "INPUT",
        to: KUBE_IPVS_FILTER,
        comment: "kubernetes ipvs access filter",
    },
    Jump {
        table: FILTER,
        from: "OUTPUT",
        to: KUBE_IPVS_OUT_FILTER,
        comment: "kubernetes ipvs access filter",
    },
];

/// The `-m comment` text upstream attaches to rules matching each set
/// (the `*Comment` constants of upstream's `pkg/proxy/ipvs/ipset.go`).
pub fn set_comment(kind: SetKind) -> &'static str {
    match kind {
        SetKind::LoopBack => {
            "Kubernetes endpoints dst ip:port, source ip for solving hairpin \
             purpose"
        }
        SetKind::ClusterIp => {
            "Kubernetes service cluster ip + port for masquerade purpose"
        }
        SetKind::ExternalIp => {
            "Kubernetes service external ip + port for masquerade and filter \
             purpose"
        }
        SetKind::ExternalIpLocal => {
            "Kubernetes service external ip + port with \
             externalTrafficPolicy=local"
        }
        SetKind::LoadBalancer => "Kubernetes service lb portal",
        SetKind::LoadBalancerFw => {
            "Kubernetes service load balancer ip + port for load balancer \
             with sourceRange"
        }
        SetKind::LoadBalancerLocal => {
            "Kubernetes service load balancer ip + port with \
             externalTrafficPolicy=local"
        }
        SetKind::LoadBalancerSourceIp => {
            "Kubernetes service load balancer ip + port + source IP for \
             packet filter purpose"
        }
        SetKind::LoadBalancerSourceCidr => {
            "Kubernetes service load balancer ip + port + source cidr for \
             packet filter purpose"
        }
        SetKind::NodePortTcp => {
            "Kubernetes nodeport TCP port for masquerade purpose"
        }
        SetKind::NodePortLocalTcp => {
            "Kubernetes nodeport TCP port with externalTrafficPolicy=local"
        }
        SetKind::NodePortUdp => {
            "Kubernetes nodeport UDP port for masquerade purpose"
        }
        SetKind::NodePortLocalUdp => {
            "Kubernetes nodeport UDP port with externalTrafficPolicy=local"
        }
        SetKind::NodePortSctp => {
            "Kubernetes nodeport SCTP port for masquerade purpose with type \
             'hash ip:port'"
        }
        SetKind::NodePortLocalSctp => {
            "Kubernetes nodeport SCTP port with externalTrafficPolicy=local \
             with type 'hash ip:port'"
        }
        SetKind::HealthCheckNodePort => "Kubernetes health check node port",
        SetKind::IpvsIps => "Addresses on the ipvs interface",
    }
}

/// One row of upstream's `ipsetWithIptablesChain`: when `set` is not
/// empty, `-A from [-p proto] -m comment ... -m set --match-set SET
/// match_type -j to` goes into `table`.
struct SetRule {
    set: SetKind,
    table: &'static str,
    from: &'static str,
    to: &'static str,
    match_type: &'static str,
    protocol: Option<&'static str>,
}

/// Upstream's `ipsetWithIptablesChain`, in its order (the local node-port
/// sets must come before the general ones).
const SET_RULES: [SetRule; 12] = [
    SetRule {
        set: SetKind::LoopBack,
        table: NAT,
        from: KUBE_POSTROUTING,
        to: "MASQUERADE",
        match_type: "dst,dst,src",
        protocol: None,
    },
    SetRule {
        set: SetKind::LoadBalancer,
        table: NAT,
        from: KUBE_SERVICES,
        to: KUBE_LOAD_BALANCER,
        match_type: "dst,dst",
        protocol: None,
    },
    SetRule {
        set: SetKind::LoadBalancerLocal,
        table: NAT,
        from: KUBE_LOAD_BALANCER,
        to: "RETURN",
        match_type: "dst,dst",
        protocol: None,
    },
    SetRule {
        set: SetKind::NodePortLocalTcp,
        table: NAT,
        from: KUBE_NODE_PORT,
        to: "RETURN",
        match_type: "dst",
        protocol: Some("tcp"),
    },
    SetRule {
        set: SetKind::NodePortTcp,
        table: NAT,
        from: KUBE_NODE_PORT,
        to: KUBE_MARK_MASQ,
        match_type: "dst",
        protocol: Some("tcp"),
    },
    SetRule {
        set: SetKind::NodePortLocalUdp,
        table: NAT,
        from: KUBE_NODE_PORT,
        to: "RETURN",
        match_type: "dst",
        protocol: Some("udp"),
    },
    SetRule {
        set: SetKind::NodePortUdp,
        table: NAT,
        from: KUBE_NODE_PORT,
        to: KUBE_MARK_MASQ,
        match_type: "dst",
        protocol: Some("udp"),
    },
    SetRule {
        set: SetKind::NodePortLocalSctp,
        table: NAT,
        from: KUBE_NODE_PORT,
        to: "RETURN",
        match_type: "dst,dst",
        protocol: Some("sctp"),
    },
    SetRule {
        set: SetKind::NodePortSctp,
        table: NAT,
        from: KUBE_NODE_PORT,
        to: KUBE_MARK_MASQ,
        match_type: "dst,dst",
        protocol: Some("sctp"),
    },
    SetRule {
        set: SetKind::LoadBalancerFw,
        table: FILTER,
        from: KUBE_PROXY_FIREWALL,
        to: KUBE_SOURCE_RANGES_FIREWALL,
        match_type: "dst,dst",
        protocol: None,
    },
    SetRule {
        set: SetKind::LoadBalancerSourceCidr,
        table: FILTER,
        from: KUBE_SOURCE_RANGES_FIREWALL,
        to: "RETURN",
        match_type: "dst,dst,src",
        protocol: None,
    },
    SetRule {
        set: SetKind::LoadBalancerSourceIp,
        table: FILTER,
        from: KUBE_SOURCE_RANGES_FIREWALL,
        to: "RETURN",
        match_type: "dst,dst,src",
        protocol: None,
    },
];

/// How traffic from local pods is told apart (upstream's
/// `LocalTrafficDetector`, per family).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LocalDetector {
    /// Nothing to go by (no CIDR of this family): upstream's no-op
    /// detector, under which cluster IP traffic is masqueraded by source.
    #[default]
    NoOp,
    /// `ClusterCIDR` or `NodeCIDR`: source inside this range.
    SourceCidr(IpNet),
    /// `BridgeInterface`: arriving on this interface.
    Interface(String),
    /// `InterfaceNamePrefix`: arriving on an interface with this prefix.
    InterfacePrefix(String),
}

impl LocalDetector {
    /// Upstream's `GetLocalTrafficDetectors` for one family: the first
    /// CIDR of the family from the cluster CIDRs (ClusterCIDR) or from the
    /// Node's pod CIDRs (NodeCIDR); the interface modes apply to both
    /// families.
    pub fn for_family(
        mode: &DetectLocal,
        cluster_cidrs: &[IpNet],
        node_pod_cidrs: &[IpNet],
        family: IpFamily,
    ) -> Self {
        let first_of_family = |cidrs: &[IpNet]| {
            cidrs
                .iter()
                .find(|c| IpFamily::of(c.addr()) == family)
                .map(|c| LocalDetector::SourceCidr(c.trunc()))
                .unwrap_or_default()
        };
        match mode {
            DetectLocal::ClusterCidr => first_of_family(cluster_cidrs),
            DetectLocal::NodeCidr => first_of_family(node_pod_cidrs),
            DetectLocal::BridgeInterface(name) if !name.is_empty() => {
                LocalDetector::Interface(name.clone())
            }
            DetectLocal::InterfaceNamePrefix(prefix) if !prefix.is_empty() => {
                LocalDetector::InterfacePrefix(prefix.clone())
            }
            _ => LocalDetector::NoOp,
        }
    }

    /// Upstream's `IfNotLocal()` arguments; `None` for the no-op detector.
    fn if_not_local(&self) -> Option<String> {
        match self {
            LocalDetector::NoOp => None,
            LocalDetector::SourceCidr(net) => Some(format!("! -s {net}")),
            LocalDetector::Interface(name) => Some(format!("! -i {name}")),
            LocalDetector::InterfacePrefix(prefix) => {
                Some(format!("! -i {prefix}+"))
            }
        }
    }
}

/// A load balancer ingress `address:port/protocol` with source ranges that
/// do not include the node's IP: upstream's
/// `lbNoNodeAccessIPPortProtocolEntries`, one DROP rule each in
/// KUBE-IPVS-OUT-FILTER (kubernetes#119656).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NoNodeAccess {
    pub address: IpAddr,
    pub protocol: Protocol,
    pub port: u16,
}

/// What one family's rules depend on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyInput {
    pub family: IpFamily,
    pub local_detector: LocalDetector,
    /// The sets of this family that hold at least one entry.
    pub non_empty_sets: BTreeSet<SetKind>,
    /// Upstream writes these in map order; we sort them.
    pub lb_no_node_access: BTreeSet<NoNodeAccess>,
}

impl FamilyInput {
    #[cfg(test)]
    pub fn new(family: IpFamily) -> Self {
        Self {
            family,
            local_detector: LocalDetector::NoOp,
            non_empty_sets: BTreeSet::new(),
            lb_no_node_access: BTreeSet::new(),
        }
    }

    fn has(&self, kind: SetKind) -> bool {
        self.non_empty_sets.contains(&kind)
    }

    fn set_name(&self, kind: SetKind) -> String {
        SetName {
            kind,
            ipv6: self.family == IpFamily::V6,
        }
        .name()
    }
}

/// Everything the rules depend on: when two inputs are equal, so are the
/// rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulesInput {
    pub masquerade_all: bool,
    /// `0..=31`; the mark is `1 << masquerade_bit` (0x4000 by default).
    pub masquerade_bit: u8,
    /// Whether the MASQUERADE rule gets `--random-fully`: always on a node
    /// (kube-proxy since 1.37); off only in tests of the rule's shape.
    pub random_fully: bool,
    /// One entry per family the proxy serves, in order.
    pub families: Vec<FamilyInput>,
}

impl RulesInput {
    /// The mark as upstream formats it (`%#08x`: `0x004000`).
    pub fn masquerade_mark(&self) -> String {
        let value = 1u32.checked_shl(self.masquerade_bit.into()).unwrap_or(0);
        format!("{value:#08x}")
    }
}

/// One rule: `-A chain spec`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub chain: &'static str,
    pub spec: String,
}

/// Our chains and rules in one table of one family, rules in the order
/// upstream writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRules {
    pub family: IpFamily,
    pub table: &'static str,
    pub chains: &'static [&'static str],
    pub rules: Vec<Rule>,
}

/// One `iptables-restore --noflush` input: a single table of one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    pub family: IpFamily,
    pub table: &'static str,
    pub text: String,
}

/// The rules of every family and table: for each family in input order,
/// nat then filter (upstream restores nat first).
pub fn table_rules(input: &RulesInput) -> Vec<TableRules> {
    let mut out = Vec::new();
    for f in &input.families {
        let (nat, filter) = family_rules(input, f);
        out.push(TableRules {
            family: f.family,
            table: NAT,
            chains: &NAT_CHAINS,
            rules: nat,
        });
        out.push(TableRules {
            family: f.family,
            table: FILTER,
            chains: &FILTER_CHAINS,
            rules: filter,
        });
    }
    out
}

/// The restore payloads that bring every table to `input`'s rules.
///
/// Declaring a chain flushes it under `--noflush`, so each payload
/// rewrites our chains whole and touches no other. `missing_jumps` (from
/// [`super::saved::missing_jumps`]) are inserted at the top of their
/// built-in chains; a jump that is present must not be listed, since
/// restore has no "insert unless present".
pub fn payloads(
    input: &RulesInput,
    missing_jumps: &[FamilyJump],
) -> Vec<Payload> {
    table_rules(input)
        .into_iter()
        .map(|t| {
            let jumps: Vec<&Jump> = missing_jumps
                .iter()
                .filter(|j| j.family == t.family && j.jump.table == t.table)
                .map(|j| &j.jump)
                .collect();
            Payload {
                family: t.family,
                table: t.table,
                text: render_table(&t, &jumps),
            }
        })
        .collect()
}

/// A jump of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FamilyJump {
    pub family: IpFamily,
    pub jump: Jump,
}

/// The restore payload of one table, inserting `jumps` (which must be
/// missing: see [`payloads`]).
pub fn render_table(t: &TableRules, jumps: &[&Jump]) -> String {
    let mut text = format!("*{}\n", t.table);
    for chain in t.chains {
        let _ = writeln!(text, ":{chain} - [0:0]");
    }
    // Prepending in list order leaves the last jump first, as upstream's
    // successive EnsureRule(Prepend) calls do.
    for j in jumps {
        let _ = writeln!(text, "-I {} 1 {}", j.from, j.spec());
    }
    for r in &t.rules {
        let _ = writeln!(text, "-A {} {}", r.chain, r.spec);
    }
    text.push_str("COMMIT\n");
    text
}

/// Upstream's `writeIptablesRules` (with `acceptIPVSTraffic`) for one
/// family: (nat rules, filter rules), each in upstream's write order,
/// which interleaves chains: each step below writes one concern.
fn family_rules(input: &RulesInput, f: &FamilyInput) -> (Vec<Rule>, Vec<Rule>) {
    let mut w = FamilyRules {
        input,
        f,
        mark: input.masquerade_mark(),
        nat: Vec::new(),
        filter: Vec::new(),
    };
    w.loopback_return();
    w.set_rules();
    w.cluster_ip_masquerade();
    w.external_ips();
    w.node_port_and_load_balancer_tails();
    w.load_balancers_closed_to_the_node();
    w.accept_ipvs_traffic();
    w.forward();
    w.health_check_node_ports();
    w.ipvs_filter();
    w.postrouting();
    w.mark_masquerade();
    (w.nat, w.filter)
}

/// One family's rules as they are written.
struct FamilyRules<'a> {
    input: &'a RulesInput,
    f: &'a FamilyInput,
    mark: String,
    nat: Vec<Rule>,
    filter: Vec<Rule>,
}

impl FamilyRules<'_> {
    fn nat(&mut self, chain: &'static str, spec: String) {
        self.nat.push(Rule { chain, spec });
    }

    fn filter(&mut self, chain: &'static str, spec: String) {
        self.filter.push(Rule { chain, spec });
    }

    fn comment(kind: SetKind) -> String {
        canon::quote(set_comment(kind))
    }

    /// Connections from localhost leave the services chain early.
    fn loopback_return(&mut self) {
        let lo = match self.f.family {
            IpFamily::V4 => "127.0.0.0/8",
            IpFamily::V6 => "::1/128",
        };
        self.nat(KUBE_SERVICES, format!("-s {lo} -j RETURN"));
    }

    /// Upstream's `ipsetWithIptablesChain`: one rule per non-empty set.
    fn set_rules(&mut self) {
        for r in &SET_RULES {
            if !self.f.has(r.set) {
                continue;
            }
            let proto =
                r.protocol.map(|p| format!("-p {p} ")).unwrap_or_default();
            let spec = format!(
                "{proto}-m comment --comment {} -m set --match-set {} {} -j {}",
                Self::comment(r.set),
                self.f.set_name(r.set),
                r.match_type,
                r.to
            );
            if r.table == FILTER {
                self.filter(r.from, spec);
            } else {
                self.nat(r.from, spec);
            }
        }
    }

    fn cluster_ip_masquerade(&mut self) {
        if !self.f.has(SetKind::ClusterIp) {
            return;
        }
        let head = format!(
            "-m comment --comment {} -m set --match-set {}",
            Self::comment(SetKind::ClusterIp),
            self.f.set_name(SetKind::ClusterIp)
        );
        let spec = if self.input.masquerade_all {
            format!("{head} dst,dst -j {KUBE_MARK_MASQ}")
        } else if let Some(not_local) = self.f.local_detector.if_not_local() {
            // Off-cluster traffic to a service IP may come back through
            // another node: masquerade it.
            format!("{head} dst,dst {not_local} -j {KUBE_MARK_MASQ}")
        } else {
            // Without a detector, masquerade node-originated traffic that
            // picked a service IP (on kube-ipvs0) as its source.
            format!("{head} src,dst -j {KUBE_MARK_MASQ}")
        };
        self.nat(KUBE_SERVICES, spec);
    }

    /// Upstream's `externalIPRules`: accept external-IP traffic that is
    /// neither from a bridge (a container) nor local, and traffic to
    /// external IPs that are local addresses.
    fn external_ips(&mut self) {
        for (kind, masquerade) in [
            (SetKind::ExternalIp, true),
            (SetKind::ExternalIpLocal, false),
        ] {
            if !self.f.has(kind) {
                continue;
            }
            let head = format!(
                "-m comment --comment {} -m set --match-set {} dst,dst",
                Self::comment(kind),
                self.f.set_name(kind)
            );
            if masquerade {
                self.nat(KUBE_SERVICES, format!("{head} -j {KUBE_MARK_MASQ}"));
            }
            self.nat(
                KUBE_SERVICES,
                format!(
                    "{head} -m physdev ! --physdev-is-in -m addrtype ! \
                     --src-type LOCAL -j ACCEPT"
                ),
            );
            self.nat(
                KUBE_SERVICES,
                format!("{head} -m addrtype --dst-type LOCAL -j ACCEPT"),
            );
        }
    }

    /// What follows the per-set rules of the node-port, load-balancer and
    /// source-range chains.
    fn node_port_and_load_balancer_tails(&mut self) {
        self.nat(
            KUBE_SERVICES,
            format!("-m addrtype --dst-type LOCAL -j {KUBE_NODE_PORT}"),
        );
        self.nat(KUBE_LOAD_BALANCER, format!("-j {KUBE_MARK_MASQ}"));
        self.filter(KUBE_SOURCE_RANGES_FIREWALL, "-j DROP".to_owned());
    }

    /// kubernetes#119656: the node reaches a load balancer IP through IPVS
    /// directly (source and destination both the LB IP), bypassing the
    /// source-range check; drop it unless the node is in a range.
    fn load_balancers_closed_to_the_node(&mut self) {
        let f = self.f;
        for e in &f.lb_no_node_access {
            let spec = format!(
                "-s {} -m ipvs --vaddr {} --vproto {} --vport {} -j DROP",
                e.address,
                e.address,
                e.protocol.ipset_name(),
                e.port
            );
            self.filter(KUBE_IPVS_OUT_FILTER, spec);
        }
    }

    /// Upstream's `acceptIPVSTraffic`: last in KUBE-SERVICES, so that no
    /// later rule of someone else's drops traffic to a virtual server.
    fn accept_ipvs_traffic(&mut self) {
        for kind in [SetKind::ClusterIp, SetKind::LoadBalancer] {
            if self.f.has(kind) {
                let spec = format!(
                    "-m set --match-set {} dst,dst -j ACCEPT",
                    self.f.set_name(kind)
                );
                self.nat(KUBE_SERVICES, spec);
            }
        }
    }

    fn forward(&mut self) {
        let mark = &self.mark;
        let marked = format!(
            "-m comment --comment \"kubernetes forwarding rules\" -m mark \
             --mark {mark}/{mark} -j ACCEPT"
        );
        self.filter(KUBE_FORWARD, marked);
        self.filter(
            KUBE_FORWARD,
            "-m comment --comment \"kubernetes forwarding conntrack rule\" -m \
             conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
                .to_owned(),
        );
    }

    fn health_check_node_ports(&mut self) {
        let spec = format!(
            "-m comment --comment {} -m set --match-set {} dst -j ACCEPT",
            Self::comment(SetKind::HealthCheckNodePort),
            self.f.set_name(SetKind::HealthCheckNodePort)
        );
        self.filter(KUBE_NODE_PORT, spec);
    }

    /// kubernetes#72236: no access to host ports through service
    /// addresses, except to the services themselves.
    fn ipvs_filter(&mut self) {
        for (kind, match_type) in [
            (SetKind::LoadBalancer, "dst,dst"),
            (SetKind::ClusterIp, "dst,dst"),
            (SetKind::ExternalIp, "dst,dst"),
            (SetKind::ExternalIpLocal, "dst,dst"),
            (SetKind::HealthCheckNodePort, "dst"),
        ] {
            let spec = format!(
                "-m set --match-set {} {match_type} -j RETURN",
                self.f.set_name(kind)
            );
            self.filter(KUBE_IPVS_FILTER, spec);
        }
        let spec = format!(
            "-m conntrack --ctstate NEW -m set --match-set {} dst -j REJECT",
            self.f.set_name(SetKind::IpvsIps)
        );
        self.filter(KUBE_IPVS_FILTER, spec);
    }

    fn postrouting(&mut self) {
        let mark = self.mark.clone();
        self.nat(
            KUBE_POSTROUTING,
            format!("-m mark ! --mark {mark}/{mark} -j RETURN"),
        );
        // Clear the mark so a packet that goes through the stack again is
        // not masqueraded twice.
        self.nat(KUBE_POSTROUTING, format!("-j MARK --xor-mark {mark}"));
        let random = if self.input.random_fully {
            " --random-fully"
        } else {
            ""
        };
        self.nat(
            KUBE_POSTROUTING,
            format!(
                "-m comment --comment \"kubernetes service traffic requiring \
                 SNAT\" -j MASQUERADE{random}"
            ),
        );
    }

    fn mark_masquerade(&mut self) {
        let spec = format!("-j MARK --or-mark {}", self.mark);
        self.nat(KUBE_MARK_MASQ, spec);
    }
}

#[cfg(test)]
mod tests;
