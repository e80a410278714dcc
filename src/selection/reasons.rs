//! Why an endpoint is not among a virtual server's real servers: what
//! `explain` tells an on-call engineer for each endpoint the selection
//! left out. The reasons follow the same rules as [`categorize_endpoints`]
//! and [`ipvs_real_servers`], read backwards from their result; a test
//! holds them to it over random endpoint sets.
//!
//! [`categorize_endpoints`]: super::categorize_endpoints
//! [`ipvs_real_servers`]: super::ipvs_real_servers

use std::sync::Arc;

use serde::Serialize;

use super::{topology_from_hints, Categorized, Topology};
use crate::model::{EndpointInfo, ServicePortInfo};

/// Why an endpoint gets no traffic through one virtual server. The names
/// are a documented interface (`explain --output json`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Unused {
    /// Not ready, and not the serving-terminating endpoint used while
    /// nothing is ready.
    NotReady,
    /// Terminating while ready endpoints exist (or not serving).
    Terminating,
    /// Ready, but the topology hints send this node's traffic to its
    /// own zone's endpoints.
    OtherZone,
    /// Ready, but the hints (`trafficDistribution: PreferSameNode`) send
    /// this node's traffic to its own endpoints.
    OtherNode,
    /// On another node, and a Local traffic policy applies with local
    /// endpoints to use (or without the cluster's to fall back to).
    NotLocal,
    /// Of the other address family than the virtual server.
    OtherFamily,
    /// Another slice of the Service has the same address and port, and
    /// that copy is the one used (the one not terminating, else the
    /// later slice's by name).
    Duplicate,
    /// The rules above would use it and the plan does not: a fault of
    /// the proxy's, to report.
    Unexplained,
}

impl Unused {
    pub fn as_str(self) -> &'static str {
        match self {
            Unused::NotReady => "not-ready",
            Unused::Terminating => "terminating",
            Unused::OtherZone => "other-zone",
            Unused::OtherNode => "other-node",
            Unused::NotLocal => "not-local",
            Unused::OtherFamily => "other-family",
            Unused::Duplicate => "duplicate",
            Unused::Unexplained => "unexplained",
        }
    }
}

/// Why `ep`, one of `family` (the endpoints of the virtual server's
/// family, categorized as `categorized`), is not a real server of a
/// virtual server whose policy is Local when `only_local`. Only asked of
/// endpoints the real servers lack.
pub fn why_unused(
    ep: &EndpointInfo,
    family: &[Arc<EndpointInfo>],
    categorized: &Categorized,
    svc: &ServicePortInfo,
    only_local: bool,
    node: (&str, &str),
) -> Unused {
    let (node_name, zone) = node;
    let ipv6 = ep.ip.is_ipv6();
    if family
        .first()
        .is_some_and(|first| first.ip.is_ipv6() != ipv6)
    {
        return Unused::OtherFamily;
    }
    // ipvs_real_servers: the local set when it has any, else the cluster
    // set, which a Local-only port never computes.
    let local_only = only_local
        && (!categorized.local.is_empty() || !svc.uses_cluster_endpoints(ipv6));
    if local_only {
        return if !ep.is_local {
            Unused::NotLocal
        } else if ep.terminating {
            Unused::Terminating
        } else if !ep.ready {
            Unused::NotReady
        } else {
            Unused::Unexplained
        };
    }
    if ep.ready {
        return match topology_from_hints(family, node_name, zone) {
            Topology::PreferSameNode => Unused::OtherNode,
            Topology::PreferSameZone => Unused::OtherZone,
            Topology::All => Unused::Unexplained,
        };
    }
    if ep.terminating {
        Unused::Terminating
    } else {
        Unused::NotReady
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;
    use crate::{
        model::fixtures::{ep, port_info},
        selection::{categorize_endpoints, ipvs_real_servers},
    };

    fn endpoint() -> impl Strategy<Value = EndpointInfo> {
        (
            0u8..6,
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            prop::sample::subsequence(vec!["a", "b"], 0..=2),
            prop::sample::subsequence(vec!["node-a", "node-b"], 0..=2),
        )
            .prop_map(
                |(host, local, ready, serving, terminating, zones, nodes)| {
                    EndpointInfo {
                        ip: format!("198.19.0.{}", host + 2).parse().unwrap(),
                        port: 8080,
                        is_local: local,
                        node_name: None,
                        ready,
                        serving: serving || ready,
                        terminating: terminating && !ready,
                        zone_hints: zones
                            .iter()
                            .map(|z| z.to_string())
                            .collect(),
                        node_hints: nodes
                            .iter()
                            .map(|n| n.to_string())
                            .collect(),
                    }
                },
            )
    }

    proptest! {
        /// Every endpoint the selection leaves out has a reason, none of
        /// them "unexplained", whatever the conditions, hints and
        /// policies.
        #[test]
        fn every_endpoint_left_out_has_a_reason(
            endpoints in prop::collection::vec(endpoint(), 0..6),
            internal_local in any::<bool>(),
            external_local in any::<bool>(),
            node_port in any::<bool>(),
            external in any::<bool>(),
        ) {
            let mut seen = BTreeSet::new();
            let endpoints: Vec<Arc<EndpointInfo>> = endpoints
                .into_iter()
                .filter(|ep| seen.insert(ep.ip))
                .map(Arc::new)
                .collect();
            let svc = port_info(|s| {
                s.internal_policy_local = internal_local;
                s.external_policy_local = external_local;
                if node_port {
                    s.node_port = 30080;
                }
                if external {
                    s.external_ips = vec!["198.18.0.200".parse().unwrap()];
                }
            });
            let categorized =
                categorize_endpoints(&endpoints, &svc, "node-a", "a");
            // A cluster IP's policy is the internal one; the external
            // frontends' the external one, where the port has any.
            let mut policies = vec![internal_local];
            if external || node_port {
                policies.push(external_local);
            }
            for only_local in policies {
                let real = ipvs_real_servers(&categorized, only_local);
                for ep in &endpoints {
                    if real.iter().any(|r| r.ip == ep.ip) {
                        continue;
                    }
                    let why = why_unused(
                        ep, &endpoints, &categorized, &svc, only_local,
                        ("node-a", "a"),
                    );
                    prop_assert_ne!(
                        why, Unused::Unexplained,
                        "{:?} of {:?} (only_local {})", ep, endpoints, only_local
                    );
                }
            }
        }
    }

    #[test]
    fn an_endpoint_of_the_other_family_says_so() {
        let family = vec![ep("198.19.0.2", 8080, |e| e.is_local = true)];
        let v6 = ep("2001:db8::2", 8080, |e| e.is_local = true);
        let svc = port_info(|_| {});
        let categorized = categorize_endpoints(&family, &svc, "node-a", "a");
        let node = ("node-a", "a");
        assert_eq!(
            why_unused(&v6, &family, &categorized, &svc, false, node),
            Unused::OtherFamily
        );
    }

    #[test]
    fn each_rule_names_its_reason() {
        let node = ("node-a", "a");
        let cases: Vec<(&str, Vec<Arc<EndpointInfo>>, bool, Unused)> = vec![
            (
                "not ready beside a ready one",
                vec![
                    ep("198.19.0.2", 8080, |_| {}),
                    ep("198.19.0.3", 8080, |e| e.ready = false),
                ],
                false,
                Unused::NotReady,
            ),
            (
                "terminating beside a ready one",
                vec![
                    ep("198.19.0.2", 8080, |_| {}),
                    ep("198.19.0.3", 8080, |e| {
                        e.ready = false;
                        e.terminating = true;
                    }),
                ],
                false,
                Unused::Terminating,
            ),
            (
                "hinted for another zone",
                vec![
                    ep("198.19.0.2", 8080, |e| {
                        e.zone_hints.insert("a".into());
                    }),
                    ep("198.19.0.3", 8080, |e| {
                        e.zone_hints.insert("b".into());
                    }),
                ],
                false,
                Unused::OtherZone,
            ),
            (
                "hinted for another node",
                vec![
                    ep("198.19.0.2", 8080, |e| {
                        e.node_hints.insert("node-a".into());
                    }),
                    ep("198.19.0.3", 8080, |e| {
                        e.node_hints.insert("node-b".into());
                    }),
                ],
                false,
                Unused::OtherNode,
            ),
            (
                "remote under a Local policy with a local endpoint",
                vec![
                    ep("198.19.0.2", 8080, |e| e.is_local = true),
                    ep("198.19.0.3", 8080, |_| {}),
                ],
                true,
                Unused::NotLocal,
            ),
        ];
        for (what, endpoints, only_local, reason) in cases {
            let svc = port_info(|s| s.internal_policy_local = only_local);
            let categorized =
                categorize_endpoints(&endpoints, &svc, "node-a", "a");
            let real = ipvs_real_servers(&categorized, only_local);
            let left: Vec<Unused> = endpoints
                .iter()
                .filter(|e| !real.iter().any(|r| r.ip == e.ip))
                .map(|e| {
                    why_unused(
                        e,
                        &endpoints,
                        &categorized,
                        &svc,
                        only_local,
                        node,
                    )
                })
                .collect();
            assert_eq!(left, [reason], "{what}");
        }
    }
}
