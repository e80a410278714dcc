//! Conntrack cleanup against the guest's kernel: the contract scenario on
//! flows inserted with `conntrack -I`, and a real UDP flow through IPVS
//! whose entry the cleanup removes once its endpoint is gone, and the
//! cleanup a sync runs, for a changed endpoint and a Service scaled to
//! zero.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket},
    process::Command,
    sync::Arc,
    time::{Duration, SystemTime},
};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use kube_ipvs_proxy::{
    backend::{Backend, NoKernel, SyncBatch},
    kernel::{
        addresses::{AddressOp, Addresses, NetlinkAddresses},
        conntrack::{
            clean_stale_udp_flows, contract, Conntrack, Flow, NetlinkConntrack,
            UdpServing,
        },
        sysctl::{self, ProcSysctls, Sysctls},
    },
    model::{Protocol, ServicePortInfo, ServicePortName},
    proxier::conntrack::WithConntrack,
    runner::{SyncReason, SyncTrigger},
    source::store::ObjectChange,
    sync::{NodeSettings, SyncState},
};
use testkit::{guest, run, run_with_input, start_pods, PodSpec};

fn conntrack_insert(flow: &Flow) -> Result<()> {
    let (o, r) = (flow.original, flow.reply);
    let args = [
        "-I",
        "-p",
        "udp",
        "-t",
        "120",
        "-s",
        &o.src.ip().to_string(),
        "-d",
        &o.dst.ip().to_string(),
        "--sport",
        &o.src.port().to_string(),
        "--dport",
        &o.dst.port().to_string(),
        "-r",
        &r.src.ip().to_string(),
        "-q",
        &r.dst.ip().to_string(),
        "--reply-port-src",
        &r.src.port().to_string(),
        "--reply-port-dst",
        &r.dst.port().to_string(),
    ];
    run(Command::new("conntrack").args(args))
        .with_context(|| format!("inserting {flow}"))?;
    Ok(())
}

#[tokio::test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
async fn kernel_passes_the_contract() -> Result<()> {
    guest::require();
    let mut ct = NetlinkConntrack::new()?;
    // Leftovers of an earlier failed run would make the inserts fail.
    let _ = ct.delete(&contract::seeded_flows()).await;
    for flow in contract::seeded_flows() {
        conntrack_insert(&flow)?;
    }
    contract::dump_and_delete(&mut ct).await;
    Ok(())
}

const LINK: &str = "kipt-ct0";
const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 70);
const PORT: u16 = 53;
const POD_PORT: u16 = 5353;
const TIMEOUT: Duration = Duration::from_secs(10);

/// On a node the proxy's iptables rules (xt_conntrack, MASQUERADE) are
/// what make the kernel track connections at all; this test has none, so
/// one conntrack match on the test's traffic stands in for them.
const TRACK_RULE: [&str; 11] = [
    "OUTPUT",
    "-d",
    "198.18.0.70/32",
    "-p",
    "udp",
    "-m",
    "conntrack",
    "--ctstate",
    "NEW,ESTABLISHED",
    "-j",
    "ACCEPT",
];

fn iptables(op: &str) -> Result<String, testkit::Error> {
    run(Command::new("iptables").args(["-w", op]).args(TRACK_RULE))
}

struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = iptables("-D");
        let _ = ProcSysctls::new().write(sysctl::VS_EXPIRE_NODEST_CONN, "1");
        let _ = run(Command::new("ipvsadm").args([
            "-D",
            "-u",
            &format!("{VIP}:{PORT}"),
        ]));
        let _ = run(Command::new("ip").args(["link", "del", LINK]));
    }
}

fn ask(socket: &UdpSocket) -> Result<String> {
    socket.send(b"ping\n")?;
    let mut buf = [0u8; 512];
    let len = socket.recv(&mut buf).context("no answer")?;
    let answer = String::from_utf8_lossy(buf.get(..len).unwrap_or_default());
    Ok(answer.lines().next().unwrap_or_default().to_owned())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn cleanup_removes_the_flow_of_a_removed_endpoint() -> Result<()> {
    guest::require();
    // Held outside the runtime: a std guard must not live across awaits.
    let _root = guest::lock_root_netns();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(removed_endpoint())
}

async fn removed_endpoint() -> Result<()> {
    let pods = start_pods(&[
        PodSpec::new("pod-a").port(POD_PORT),
        PodSpec::new("pod-b").port(POD_PORT),
    ])?;
    let [a, b] = [&pods[0], &pods[1]];
    let _cleanup = Cleanup;

    iptables("-A")?;
    let mut s = ProcSysctls::new();
    s.write(sysctl::VS_CONNTRACK, "1")?;
    // Since Linux 5.9, with expire_nodest_conn=1 IPVS itself expires a
    // deleted real server's connections shortly after and drops their
    // conntrack entries (seen here: the flow vanished on its own). Off,
    // the entry stays, as on older kernels, and only the cleanup can
    // remove it.
    s.write(sysctl::VS_EXPIRE_NODEST_CONN, "0")?;
    let mut addrs = NetlinkAddresses::new()?;
    let _ = addrs.delete_link(LINK).await;
    addrs.ensure_dummy(LINK).await?;
    for r in addrs.apply(LINK, &[AddressOp::Add(VIP.into())]).await {
        r?;
    }
    let vs = format!("{VIP}:{PORT}");
    run_with_input(
        Command::new("ipvsadm").arg("-R"),
        &format!("-A -u {vs} -s rr\n-a -u {vs} -r {} -m\n", a.addr(POD_PORT)),
    )?;

    let socket = UdpSocket::bind("0.0.0.0:0")?;
    socket.connect(SocketAddr::from((VIP, PORT)))?;
    socket.set_read_timeout(Some(TIMEOUT))?;
    assert_eq!(ask(&socket)?, "pod-a");
    let client = socket.local_addr()?;

    let mut ct = NetlinkConntrack::new()?;
    let ours = |flows: Vec<Flow>| -> Vec<Flow> {
        flows
            .into_iter()
            .filter(|f| {
                f.original.dst == SocketAddr::from((VIP, PORT))
                    && f.original.src.port() == client.port()
            })
            .collect()
    };
    let all = ct.dump_udp().await?;
    let flows = ours(all.clone());
    let [flow] = flows.as_slice() else {
        let listed = run(Command::new("conntrack").args(["-L"]));
        bail!(
            "expected one flow from {client}, dumped {all:?}; \
             conntrack -L: {listed:?}"
        );
    };
    assert_eq!(flow.reply.src, a.addr(POD_PORT), "{flow}");

    // pod-a's endpoint goes, pod-b's arrives.
    run_with_input(
        Command::new("ipvsadm").arg("-R"),
        &format!(
            "-a -u {vs} -r {} -m\n-d -u {vs} -r {}\n",
            b.addr(POD_PORT),
            a.addr(POD_PORT)
        ),
    )?;
    let service = ServicePortInfo {
        cluster_ips: vec![VIP.into()],
        port: PORT,
        protocol: Protocol::Udp,
        node_port: 0,
        session_affinity_timeout: None,
        external_ips: vec![],
        load_balancer_vips: vec![],
        load_balancer_source_ranges: vec![],
        external_policy_local: false,
        internal_policy_local: false,
        health_check_node_port: 0,
        is_load_balancer: false,
        scheduling: None,
    };
    let mut serving = UdpServing::new();
    let name = ServicePortName::new("ns", "dns", "dns", Protocol::Udp);
    serving.update(&name, Some(&service), &[IpAddr::V4(b.ip())]);
    let report = clean_stale_udp_flows(&mut ct, &serving).await?;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.deleted, 1, "{report:?}, stale in {flow}");

    let listed = run(Command::new("conntrack").args([
        "-L",
        "-p",
        "udp",
        "--orig-dst",
        &VIP.to_string(),
    ]))?;
    assert!(!listed.contains(&a.ip().to_string()), "{listed}");
    assert!(ours(ct.dump_udp().await?).is_empty());
    Ok(())
}

/// A UDP Service `ns/{name}` on `cluster_ip:53` (with `node_port` when
/// not 0) and its slice with `endpoints`, as the API server would list
/// them.
fn udp_service(
    name: &str,
    cluster_ip: &str,
    node_port: u16,
    endpoints: &[&str],
) -> Result<(Service, EndpointSlice)> {
    let mut port =
        serde_json::json!({"name": "dns", "port": 53, "protocol": "UDP"});
    let mut kind = "ClusterIP";
    if node_port != 0 {
        port["nodePort"] = node_port.into();
        kind = "NodePort";
    }
    let service = serde_json::from_value(serde_json::json!({
        "metadata": {"namespace": "ns", "name": name},
        "spec": {"clusterIP": cluster_ip, "clusterIPs": [cluster_ip],
                 "type": kind, "ports": [port]}
    }))?;
    let endpoints: Vec<_> = endpoints
        .iter()
        .map(|ip| serde_json::json!({"addresses": [ip]}))
        .collect();
    let slice = serde_json::from_value(serde_json::json!({
        "metadata": {"namespace": "ns", "name": format!("{name}-1"),
                     "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "ports": [{"name": "dns", "port": 5353, "protocol": "UDP"}],
        "endpoints": endpoints
    }))?;
    Ok((service, slice))
}

fn node_state() -> SyncState {
    SyncState::new(
        "node-a",
        NodeSettings::default(),
        Some(vec![IpAddr::V4(Ipv4Addr::new(198, 18, 100, 1))]),
        SystemTime::now(),
    )
}

/// One sync of `state` through `backend`, after `changes`.
async fn sync_with(
    state: &mut SyncState,
    backend: &mut WithConntrack<NoKernel, NetlinkConntrack>,
    changes: &[ObjectChange],
) -> Result<()> {
    for change in changes {
        state.apply_objects(change);
    }
    let outcome = state.sync();
    let batch = SyncBatch {
        trigger: SyncTrigger {
            seq: 1,
            reason: SyncReason::Requested,
        },
        outcome: &outcome,
        state,
    };
    backend
        .apply(batch)
        .await
        .map_err(|e| anyhow::anyhow!("apply: {e}"))
}

/// The sync-time wiring on the real table: after a sync that gave a UDP
/// service its endpoints, once the inner backend applied, the flow
/// answered by an endpoint that does not serve is removed and the live
/// one kept.
#[tokio::test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
async fn with_conntrack_cleans_after_a_sync() -> Result<()> {
    guest::require();
    // Another frontend than the contract's, whose test runs alongside.
    let live = contract::nat_flow(
        "198.18.9.2:40011",
        "198.18.9.101:53",
        "198.19.9.11:5353",
    );
    let stale = contract::nat_flow(
        "198.18.9.2:40012",
        "198.18.9.101:53",
        "198.19.9.12:5353",
    );
    let mut ct = NetlinkConntrack::new()?;
    let _ = ct.delete(&[live, stale]).await;
    for flow in [live, stale] {
        conntrack_insert(&flow)?;
    }
    let (dns, slice) = udp_service("dns", "198.18.9.101", 0, &["198.19.9.11"])?;
    let mut state = node_state();
    let mut backend = WithConntrack::new(NoKernel, ct);
    let applied = sync_with(
        &mut state,
        &mut backend,
        &[
            ObjectChange::Service {
                previous: None,
                current: Some(Arc::new(dns)),
            },
            ObjectChange::EndpointSlice {
                previous: None,
                current: Some(Arc::new(slice)),
            },
        ],
    )
    .await;
    let mut ct = NetlinkConntrack::new()?;
    let dumped = ct.dump_udp().await?;
    let _ = ct.delete(&[live]).await;
    applied?;
    assert!(dumped.contains(&live), "{live} missing from {dumped:?}");
    assert!(!dumped.contains(&stale), "{stale} still in {dumped:?}");
    Ok(())
}

/// A UDP Service scaled to zero (kube-proxy since 1.37): every flow to
/// its cluster IP goes, though no endpoint is left to serve it, so that a
/// one-way sender stops feeding a gone Pod; the flows to its node port
/// stay, since they match by port alone.
#[tokio::test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
async fn a_udp_service_scaled_to_zero_loses_its_cluster_ip_flows() -> Result<()>
{
    guest::require();
    let to_cluster_ip = contract::nat_flow(
        "198.18.9.2:40021",
        "198.18.9.102:53",
        "198.19.9.21:5353",
    );
    let to_node_port = contract::nat_flow(
        "198.18.9.2:40022",
        "198.18.100.1:30153",
        "198.19.9.21:5353",
    );
    let flows = [to_cluster_ip, to_node_port];
    let mut ct = NetlinkConntrack::new()?;
    let _ = ct.delete(&flows).await;
    let (svc, serving) =
        udp_service("statsd", "198.18.9.102", 30153, &["198.19.9.21"])?;
    let (_, empty) = udp_service("statsd", "198.18.9.102", 30153, &[])?;
    let (svc, serving, empty) =
        (Arc::new(svc), Arc::new(serving), Arc::new(empty));
    let mut state = node_state();
    let mut backend = WithConntrack::new(NoKernel, ct);
    sync_with(
        &mut state,
        &mut backend,
        &[
            ObjectChange::Service {
                previous: None,
                current: Some(svc),
            },
            ObjectChange::EndpointSlice {
                previous: None,
                current: Some(Arc::clone(&serving)),
            },
        ],
    )
    .await?;
    for flow in &flows {
        conntrack_insert(flow)?;
    }
    let scaled = sync_with(
        &mut state,
        &mut backend,
        &[ObjectChange::EndpointSlice {
            previous: Some(serving),
            current: Some(empty),
        }],
    )
    .await;
    let mut ct = NetlinkConntrack::new()?;
    let dumped = ct.dump_udp().await?;
    let _ = ct.delete(&flows).await;
    scaled?;
    assert!(
        !dumped.contains(&to_cluster_ip),
        "{to_cluster_ip} still in {dumped:?}"
    );
    assert!(
        dumped.contains(&to_node_port),
        "{to_node_port} missing from {dumped:?}"
    );
    Ok(())
}
