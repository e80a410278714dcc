use pretty_assertions::assert_eq;

use super::*;
use crate::model::fixtures::{ep, port_info};

const NODE: &str = "node-a";
const ZONE: &str = "zone-a";

fn svc(f: impl FnOnce(&mut ServicePortInfo)) -> ServicePortInfo {
    port_info(f)
}

fn itp_local(s: &mut ServicePortInfo) {
    s.internal_policy_local = true;
}

fn etp_local(s: &mut ServicePortInfo) {
    s.node_port = 30080;
    s.external_policy_local = true;
}

fn ready(ip: &str) -> Arc<EndpointInfo> {
    ep(ip, 8080, |_| {})
}

fn local(ip: &str) -> Arc<EndpointInfo> {
    ep(ip, 8080, |e| e.is_local = true)
}

fn not_ready(ip: &str) -> Arc<EndpointInfo> {
    ep(ip, 8080, |e| {
        e.ready = false;
        e.serving = false;
    })
}

/// Serving and terminating: the fallback kind.
fn draining(ip: &str, is_local: bool) -> Arc<EndpointInfo> {
    ep(ip, 8080, |e| {
        e.ready = false;
        e.terminating = true;
        e.is_local = is_local;
    })
}

/// Terminating and no longer serving: never used.
fn gone(ip: &str) -> Arc<EndpointInfo> {
    ep(ip, 8080, |e| {
        e.ready = false;
        e.serving = false;
        e.terminating = true;
    })
}

fn zoned(ip: &str, zones: &[&str]) -> Arc<EndpointInfo> {
    ep(ip, 8080, |e| {
        e.zone_hints = zones.iter().map(|z| (*z).to_owned()).collect()
    })
}

fn noded(ip: &str, nodes: &[&str], zones: &[&str]) -> Arc<EndpointInfo> {
    ep(ip, 8080, |e| {
        e.node_hints = nodes.iter().map(|n| (*n).to_owned()).collect();
        e.zone_hints = zones.iter().map(|z| (*z).to_owned()).collect();
    })
}

fn with_local(e: Arc<EndpointInfo>) -> Arc<EndpointInfo> {
    let mut e = (*e).clone();
    e.is_local = true;
    Arc::new(e)
}

struct Case {
    name: &'static str,
    svc: ServicePortInfo,
    endpoints: Vec<Arc<EndpointInfo>>,
    cluster: Vec<&'static str>,
    local: Vec<&'static str>,
    all: Vec<&'static str>,
    has_any: bool,
}

fn ips(list: &[Arc<EndpointInfo>]) -> Vec<String> {
    list.iter().map(|e| e.ip.to_string()).collect()
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn categorize_endpoints_table() {
    let cases = vec![
        Case {
            name: "no endpoints",
            svc: svc(|_| {}),
            endpoints: vec![],
            cluster: vec![],
            local: vec![],
            all: vec![],
            has_any: false,
        },
        Case {
            name: "only ready endpoints are used",
            svc: svc(|_| {}),
            endpoints: vec![
                ready("198.19.0.1"),
                not_ready("198.19.0.2"),
                draining("198.19.0.3", false),
                local("198.19.0.4"),
            ],
            cluster: vec!["198.19.0.1", "198.19.0.4"],
            local: vec![],
            all: vec!["198.19.0.1", "198.19.0.4"],
            has_any: true,
        },
        Case {
            name: "no ready endpoint: fall back to serving-terminating ones",
            svc: svc(|_| {}),
            endpoints: vec![
                not_ready("198.19.0.1"),
                draining("198.19.0.2", false),
                gone("198.19.0.3"),
            ],
            cluster: vec!["198.19.0.2"],
            local: vec![],
            all: vec!["198.19.0.2"],
            has_any: true,
        },
        Case {
            name: "nothing usable",
            svc: svc(|_| {}),
            endpoints: vec![not_ready("198.19.0.1"), gone("198.19.0.2")],
            cluster: vec![],
            local: vec![],
            all: vec![],
            has_any: false,
        },
        Case {
            name: "zone hints on every ready endpoint, one for our zone",
            svc: svc(|_| {}),
            endpoints: vec![
                zoned("198.19.0.1", &[ZONE]),
                zoned("198.19.0.2", &["zone-b"]),
                zoned("198.19.0.3", &["zone-b", ZONE]),
                // Not ready: its missing hint does not matter.
                not_ready("198.19.0.4"),
            ],
            cluster: vec!["198.19.0.1", "198.19.0.3"],
            local: vec![],
            all: vec!["198.19.0.1", "198.19.0.3"],
            has_any: true,
        },
        Case {
            name: "a ready endpoint without zone hint disables hints",
            svc: svc(|_| {}),
            endpoints: vec![
                zoned("198.19.0.1", &[ZONE]),
                zoned("198.19.0.2", &["zone-b"]),
                ready("198.19.0.3"),
            ],
            cluster: vec!["198.19.0.1", "198.19.0.2", "198.19.0.3"],
            local: vec![],
            all: vec!["198.19.0.1", "198.19.0.2", "198.19.0.3"],
            has_any: true,
        },
        Case {
            name: "no hint for our zone disables hints",
            svc: svc(|_| {}),
            endpoints: vec![
                zoned("198.19.0.1", &["zone-b"]),
                zoned("198.19.0.2", &["zone-c"]),
            ],
            cluster: vec!["198.19.0.1", "198.19.0.2"],
            local: vec![],
            all: vec!["198.19.0.1", "198.19.0.2"],
            has_any: true,
        },
        Case {
            name: "node hints win over zone hints",
            svc: svc(|_| {}),
            endpoints: vec![
                noded("198.19.0.1", &[NODE], &[ZONE]),
                noded("198.19.0.2", &["node-b"], &[ZONE]),
            ],
            cluster: vec!["198.19.0.1"],
            local: vec![],
            all: vec!["198.19.0.1"],
            has_any: true,
        },
        Case {
            name: "no node hint for us: zone hints still apply",
            svc: svc(|_| {}),
            endpoints: vec![
                noded("198.19.0.1", &["node-b"], &[ZONE]),
                noded("198.19.0.2", &["node-c"], &["zone-b"]),
            ],
            cluster: vec!["198.19.0.1"],
            local: vec![],
            all: vec!["198.19.0.1"],
            has_any: true,
        },
        Case {
            name: "ITP=Local: only local ready endpoints",
            svc: svc(itp_local),
            endpoints: vec![
                ready("198.19.0.1"),
                local("198.19.0.2"),
                draining("198.19.0.3", true),
            ],
            cluster: vec![],
            local: vec!["198.19.0.2"],
            all: vec!["198.19.0.2"],
            has_any: true,
        },
        Case {
            name: "ITP=Local: local serving-terminating fallback",
            svc: svc(itp_local),
            endpoints: vec![
                ready("198.19.0.1"),
                draining("198.19.0.3", true),
                gone("198.19.0.4"),
            ],
            cluster: vec![],
            local: vec!["198.19.0.3"],
            all: vec!["198.19.0.3"],
            has_any: true,
        },
        Case {
            name: "ITP=Local without local endpoints still has endpoints",
            svc: svc(itp_local),
            endpoints: vec![ready("198.19.0.1")],
            cluster: vec![],
            local: vec![],
            all: vec![],
            has_any: true,
        },
        Case {
            name: "ETP=Local: cluster set for short-circuit, local set",
            svc: svc(etp_local),
            endpoints: vec![ready("198.19.0.1"), local("198.19.0.2")],
            cluster: vec!["198.19.0.1", "198.19.0.2"],
            local: vec!["198.19.0.2"],
            all: vec!["198.19.0.1", "198.19.0.2"],
            has_any: true,
        },
        Case {
            name: "ETP=Local with zone hints: all is the union",
            svc: svc(etp_local),
            endpoints: vec![
                zoned("198.19.0.1", &[ZONE]),
                with_local(zoned("198.19.0.2", &["zone-b"])),
                zoned("198.19.0.3", &["zone-b"]),
            ],
            cluster: vec!["198.19.0.1"],
            local: vec!["198.19.0.2"],
            all: vec!["198.19.0.1", "198.19.0.2"],
            has_any: true,
        },
        Case {
            name: "ETP=Local with only a draining local endpoint",
            svc: svc(etp_local),
            endpoints: vec![ready("198.19.0.1"), draining("198.19.0.2", true)],
            cluster: vec!["198.19.0.1"],
            local: vec!["198.19.0.2"],
            all: vec!["198.19.0.1", "198.19.0.2"],
            has_any: true,
        },
        Case {
            name:
                "ITP=Local with an external IP of this family: cluster set too",
            svc: svc(|s| {
                s.internal_policy_local = true;
                s.external_ips = vec!["198.18.250.1".parse().unwrap()];
            }),
            endpoints: vec![ready("198.19.0.1"), not_ready("198.19.0.2")],
            cluster: vec!["198.19.0.1"],
            local: vec![],
            all: vec!["198.19.0.1"],
            has_any: true,
        },
        Case {
            // Upstream's IPv4 proxier never sees the IPv6 external IP, so
            // the service is internal only there (random walk 1317073247).
            name: "ITP=Local with only an external IP of the other family",
            svc: svc(|s| {
                s.internal_policy_local = true;
                s.external_ips = vec!["2001:db8:240::".parse().unwrap()];
                s.load_balancer_vips = vec!["2001:db8:250::".parse().unwrap()];
            }),
            endpoints: vec![ready("198.19.0.1"), not_ready("198.19.0.2")],
            cluster: vec![],
            local: vec![],
            all: vec![],
            has_any: true,
        },
        Case {
            name: "ETP=Local on a service without external addresses is moot",
            svc: svc(|s| s.external_policy_local = true),
            endpoints: vec![ready("198.19.0.1"), local("198.19.0.2")],
            cluster: vec!["198.19.0.1", "198.19.0.2"],
            local: vec![],
            all: vec!["198.19.0.1", "198.19.0.2"],
            has_any: true,
        },
    ];
    for case in cases {
        let got = categorize_endpoints(&case.endpoints, &case.svc, NODE, ZONE);
        assert_eq!(ips(&got.cluster), strings(&case.cluster), "{}", case.name);
        assert_eq!(ips(&got.local), strings(&case.local), "{}", case.name);
        assert_eq!(
            ips(&got.all_reachable),
            strings(&case.all),
            "{}",
            case.name
        );
        assert_eq!(got.has_any_endpoints, case.has_any, "{}", case.name);
    }
}

#[test]
fn ipvs_real_servers_table() {
    struct Case {
        name: &'static str,
        svc: ServicePortInfo,
        endpoints: Vec<Arc<EndpointInfo>>,
        only_local: bool,
        expected: Vec<&'static str>,
        lacks_local: bool,
    }
    let cases = vec![
        Case {
            name: "Cluster policy: the cluster set",
            svc: svc(etp_local),
            endpoints: vec![ready("198.19.0.1"), local("198.19.0.2")],
            only_local: false,
            expected: vec!["198.19.0.1", "198.19.0.2"],
            lacks_local: false,
        },
        Case {
            name: "Local policy with local endpoints: the local set",
            svc: svc(etp_local),
            endpoints: vec![ready("198.19.0.1"), local("198.19.0.2")],
            only_local: true,
            expected: vec!["198.19.0.2"],
            lacks_local: false,
        },
        Case {
            name: "Local policy without local endpoints: falls back to cluster",
            svc: svc(etp_local),
            endpoints: vec![ready("198.19.0.1"), ready("198.19.0.3")],
            only_local: true,
            expected: vec!["198.19.0.1", "198.19.0.3"],
            lacks_local: true,
        },
        Case {
            name: "ITP=Local only: the fallback set is empty",
            svc: svc(itp_local),
            endpoints: vec![ready("198.19.0.1")],
            only_local: true,
            expected: vec![],
            lacks_local: true,
        },
        Case {
            name: "no endpoints anywhere is not a lack of local ones",
            svc: svc(etp_local),
            endpoints: vec![not_ready("198.19.0.1")],
            only_local: true,
            expected: vec![],
            lacks_local: false,
        },
    ];
    for case in cases {
        let c = categorize_endpoints(&case.endpoints, &case.svc, NODE, ZONE);
        assert_eq!(
            ips(ipvs_real_servers(&c, case.only_local)),
            strings(&case.expected),
            "{}",
            case.name
        );
        assert_eq!(
            ipvs_lacks_local_endpoints(&c, case.only_local),
            case.lacks_local,
            "{}",
            case.name
        );
    }
}

#[test]
fn families_are_categorized_apart() {
    // Zone hints on every IPv4 endpoint but not on the IPv6 one: the IPv4
    // virtual server uses them, as upstream's IPv4 proxier would.
    let endpoints = vec![
        zoned("198.19.0.1", &[ZONE]),
        zoned("198.19.0.2", &["zone-b"]),
        ready("2001:db8::1"),
    ];
    let selected = select(&svc(|_| {}), &endpoints, NODE, ZONE);
    assert_eq!(ips(&selected.ipv4.cluster), strings(&["198.19.0.1"]));
    assert_eq!(ips(&selected.ipv6.cluster), strings(&["2001:db8::1"]));
    let mixed = categorize_endpoints(&endpoints, &svc(|_| {}), NODE, ZONE);
    assert_eq!(mixed.cluster.len(), 3, "hints ignored when mixed");
}
