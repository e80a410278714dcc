//! Which pods a service's addresses lead to: external IPs, load-balancer
//! source ranges, the internal traffic policy and terminating endpoints.

use testkit::{tcp_tally, PodSpec};

use super::harness::{
    endpoint_slice, endpoint_slice_with, greeting_from, load_balancer, node,
    real_servers, service, sh, weighted_real_servers, Cluster, Conditions,
    Port, TIMEOUT,
};

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn an_external_ip_reaches_both_pods() -> anyhow::Result<()> {
    testkit::guest::require();
    let ports = [Port::tcp("http", 80, 8080)];
    let state = [
        node(),
        service(
            "ext",
            "198.18.9.10",
            &ports,
            "  externalIPs: [198.18.9.20]\n",
        ),
        endpoint_slice(
            "ext",
            &ports,
            &[("198.19.9.2", "node-a"), ("198.19.9.3", "node-a")],
        ),
    ];
    let pods = [
        PodSpec::new("ext-1").ip("198.19.9.2".parse()?).port(8080),
        PodSpec::new("ext-2").ip("198.19.9.3".parse()?).port(8080),
    ];
    let mut cluster = Cluster::new("external-ip", &pods, &state)?;
    cluster.start_proxy(&[])?;

    assert_eq!(real_servers("-t", "198.18.9.20:80")?.len(), 2);
    let bound = sh("ip -o addr show dev kube-ipvs0")?;
    assert!(bound.contains("198.18.9.20/32"), "{bound}");
    let tally = tcp_tally("198.18.9.20:80".parse()?, 4, TIMEOUT)?;
    let want = [("ext-1".to_string(), 2), ("ext-2".to_string(), 2)];
    assert_eq!(tally, want.into_iter().collect());
    Ok(())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn load_balancer_source_ranges_admit_only_listed_clients() -> anyhow::Result<()>
{
    testkit::guest::require();
    let ports = [Port::tcp("http", 80, 8080).node_port(30090)];
    let state = [
        node(),
        load_balancer(
            "lb",
            "198.18.10.10",
            &ports,
            "198.18.10.20",
            "  loadBalancerSourceRanges: [198.19.10.5/32]\n",
        ),
        endpoint_slice("lb", &ports, &[("198.19.10.2", "node-a")]),
    ];
    // The clients are pods too: each connects from its own namespace, so
    // the load balancer sees its pod address as the source.
    let pods = [
        PodSpec::new("lb-backend")
            .ip("198.19.10.2".parse()?)
            .port(8080),
        PodSpec::new("allowed").ip("198.19.10.5".parse()?).port(9),
        PodSpec::new("denied").ip("198.19.10.6".parse()?).port(9),
    ];
    let mut cluster = Cluster::new("lb-ranges", &pods, &state)?;
    cluster.start_proxy(&[])?;
    assert_eq!(real_servers("-t", "198.18.10.20:80")?.len(), 1);

    let allowed = cluster.pod("allowed")?.netns();
    let denied = cluster.pod("denied")?.netns();
    assert_eq!(greeting_from(allowed, "198.18.10.20:80")?, "lb-backend");
    let refused = greeting_from(denied, "198.18.10.20:80");
    assert!(
        refused.is_err(),
        "a client outside the source ranges was answered: {refused:?}"
    );
    // The ranges guard the load balancer's address only: the same client
    // reaches the service through its cluster IP.
    assert_eq!(greeting_from(denied, "198.18.10.10:80")?, "lb-backend");
    Ok(())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn internal_traffic_policy_local_uses_only_local_pods() -> anyhow::Result<()> {
    testkit::guest::require();
    let ports = [Port::tcp("http", 80, 8080)];
    let policy = "  internalTrafficPolicy: Local\n";
    let both = [
        node(),
        service("itp", "198.18.11.10", &ports, policy),
        endpoint_slice(
            "itp",
            &ports,
            &[("198.19.11.2", "node-a"), ("198.19.11.3", "node-b")],
        ),
    ];
    let pods = [
        PodSpec::new("itp-here")
            .ip("198.19.11.2".parse()?)
            .port(8080),
        PodSpec::new("itp-there")
            .ip("198.19.11.3".parse()?)
            .port(8080),
    ];
    let mut cluster = Cluster::new("itp-local", &pods, &both)?;
    cluster.start_proxy(&[])?;

    assert_eq!(real_servers("-t", "198.18.11.10:80")?, ["198.19.11.2:8080"]);
    let tally = tcp_tally("198.18.11.10:80".parse()?, 4, TIMEOUT)?;
    assert_eq!(tally.keys().collect::<Vec<_>>(), ["itp-here"], "{tally:?}");

    // Without a local pod there is nothing to send to: the policy keeps
    // only local endpoints, and IPVS mode's fallback to the cluster's
    // endpoints (kubernetes#97081) does not apply to a service that uses
    // no cluster endpoints at all (upstream `CategorizeEndpoints`).
    let elsewhere = [
        node(),
        service("itp", "198.18.11.10", &ports, policy),
        endpoint_slice("itp", &ports, &[("198.19.11.3", "node-b")]),
    ];
    cluster.write_state(&elsewhere)?;
    cluster.wait_for("no real server taking new connections", || {
        Ok(weighted_real_servers("-t", "198.18.11.10:80")?
            .iter()
            .all(|(_, weight)| *weight == 0))
    })?;
    let refused = tcp_tally("198.18.11.10:80".parse()?, 1, TIMEOUT);
    assert!(
        refused.is_err(),
        "answered without a local pod: {refused:?}"
    );
    Ok(())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn terminating_pods_serve_only_while_none_is_ready() -> anyhow::Result<()> {
    testkit::guest::require();
    let ports = [Port::tcp("http", 80, 8080)];
    let svc = service("term", "198.18.12.10", &ports, "");
    let terminating = [
        node(),
        svc.clone(),
        endpoint_slice_with(
            "term",
            &ports,
            &[
                ("198.19.12.2", "node-a", Conditions::TERMINATING_SERVING),
                ("198.19.12.3", "node-a", Conditions::TERMINATING),
            ],
        ),
    ];
    let pods = [
        PodSpec::new("draining")
            .ip("198.19.12.2".parse()?)
            .port(8080),
        PodSpec::new("stopping")
            .ip("198.19.12.3".parse()?)
            .port(8080),
        PodSpec::new("fresh").ip("198.19.12.4".parse()?).port(8080),
    ];
    let mut cluster = Cluster::new("terminating", &pods, &terminating)?;
    cluster.start_proxy(&[])?;

    // No ready endpoint: the serving terminating one takes the traffic,
    // the one that no longer serves does not.
    assert_eq!(real_servers("-t", "198.18.12.10:80")?, ["198.19.12.2:8080"]);
    let tally = tcp_tally("198.18.12.10:80".parse()?, 2, TIMEOUT)?;
    assert_eq!(tally.keys().collect::<Vec<_>>(), ["draining"], "{tally:?}");

    // Once a ready pod exists, new connections go to it alone.
    let with_ready = [
        node(),
        svc,
        endpoint_slice_with(
            "term",
            &ports,
            &[
                ("198.19.12.2", "node-a", Conditions::TERMINATING_SERVING),
                ("198.19.12.3", "node-a", Conditions::TERMINATING),
                ("198.19.12.4", "node-a", Conditions::READY),
            ],
        ),
    ];
    cluster.write_state(&with_ready)?;
    cluster.wait_for("the ready pod's real server", || {
        Ok(real_servers("-t", "198.18.12.10:80")?
            .contains(&"198.19.12.4:8080".to_string()))
    })?;
    let tally = tcp_tally("198.18.12.10:80".parse()?, 3, TIMEOUT)?;
    assert_eq!(tally.keys().collect::<Vec<_>>(), ["fresh"], "{tally:?}");
    Ok(())
}
