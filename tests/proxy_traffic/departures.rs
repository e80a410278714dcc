//! What clients see when a pod leaves a service: a TCP connection to it
//! drains, a UDP flow moves to another pod.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use testkit::{tcp_tally, PodSpec};

use super::harness::{
    endpoint_slice, node, real_servers, service, weighted_real_servers,
    Cluster, Port, TIMEOUT,
};

/// The pod names and addresses of a two-pod service.
const PODS: [(&str, &str); 2] = [("a", "198.19.13.2"), ("b", "198.19.13.3")];

fn other(pod: &str) -> anyhow::Result<(&'static str, &'static str)> {
    PODS.into_iter()
        .find(|(name, _)| *name != pod)
        .with_context(|| format!("no pod other than {pod}"))
}

fn address_of(pod: &str) -> anyhow::Result<&'static str> {
    PODS.into_iter()
        .find(|(name, _)| *name == pod)
        .map(|(_, ip)| ip)
        .with_context(|| format!("no pod {pod}"))
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn a_removed_pod_drains_its_live_tcp_connection() -> anyhow::Result<()> {
    testkit::guest::require();
    let ports = [Port::tcp("http", 80, 8080)];
    let svc = service("drain", "198.18.13.10", &ports, "");
    let both = [
        node(),
        svc.clone(),
        endpoint_slice(
            "drain",
            &ports,
            &[(PODS[0].1, "node-a"), (PODS[1].1, "node-a")],
        ),
    ];
    let pods = PODS.map(|(name, ip)| {
        PodSpec::new(name)
            .ip(ip.parse().expect("a fixture address"))
            .port(8080)
    });
    let mut cluster = Cluster::new("graceful", &pods, &both)?;
    cluster.start_proxy(&[])?;
    let vip: SocketAddr = "198.18.13.10:80".parse()?;

    let stream = TcpStream::connect_timeout(&vip, TIMEOUT)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    let mut live = BufReader::new(stream);
    let mut greeting = String::new();
    live.read_line(&mut greeting)?;
    let leaving = greeting.trim().to_string();
    let (staying, staying_ip) = other(&leaving)?;
    let leaving_rs = format!("{}:8080", address_of(&leaving)?);

    cluster.write_state(&[
        node(),
        svc,
        endpoint_slice("drain", &ports, &[(staying_ip, "node-a")]),
    ])?;
    cluster.wait_for("the leaving pod's real server at weight 0", || {
        Ok(weighted_real_servers("-t", "198.18.13.10:80")?
            .contains(&(leaving_rs.clone(), 0)))
    })?;

    // The live connection still reaches its pod (testpod echoes lines)...
    live.get_mut().write_all(b"still there?\n")?;
    let mut echo = String::new();
    live.read_line(&mut echo)?;
    assert_eq!(echo, "still there?\n");
    // ...while new connections go to the pod that stays.
    let tally = tcp_tally(vip, 3, TIMEOUT)?;
    assert_eq!(tally.keys().collect::<Vec<_>>(), [staying], "{tally:?}");
    assert!(
        real_servers("-t", "198.18.13.10:80")?.contains(&leaving_rs),
        "the real server went while a connection was open"
    );

    // Closing with a reset ends IPVS's entry at once (a FIN would leave
    // it in TIME_WAIT for two minutes, which counts as a connection).
    socket2::SockRef::from(live.get_ref()).set_linger(Some(Duration::ZERO))?;
    drop(live);
    // IPVS keeps the reset connection for its CLOSE timeout (10 s), then
    // the proxy's next check finds none and deletes the real server.
    cluster.wait_for("the drained real server to go", || {
        Ok(!real_servers("-t", "198.18.13.10:80")?.contains(&leaving_rs))
    })?;
    Ok(())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn a_udp_flow_moves_when_its_pod_leaves() -> anyhow::Result<()> {
    testkit::guest::require();
    let ports = [Port::udp("dns", 53, 5353)];
    let svc = service("flow", "198.18.14.10", &ports, "");
    let pods_at = [("a", "198.19.14.2"), ("b", "198.19.14.3")];
    let both = [
        node(),
        svc.clone(),
        endpoint_slice(
            "flow",
            &ports,
            &[(pods_at[0].1, "node-a"), (pods_at[1].1, "node-a")],
        ),
    ];
    let pods = pods_at.map(|(name, ip)| {
        PodSpec::new(name)
            .ip(ip.parse().expect("a fixture address"))
            .port(5353)
    });
    let mut cluster = Cluster::new("udp-flow", &pods, &both)?;
    cluster.start_proxy(&[])?;

    // One socket, so one flow (one source port) throughout.
    let client = UdpSocket::bind("0.0.0.0:0")?;
    client.connect("198.18.14.10:53")?;
    client.set_read_timeout(Some(Duration::from_millis(500)))?;
    // The answering pod's name, or why there was none: while a flow
    // moves, a datagram may be lost or refused, which is not a failure.
    let ask = |client: &UdpSocket| -> Result<String, String> {
        client.send(b"which?").map_err(|e| format!("send: {e}"))?;
        let mut buf = [0u8; 512];
        let n = client.recv(&mut buf).map_err(|e| format!("recv: {e}"))?;
        let answer = String::from_utf8_lossy(buf.get(..n).unwrap_or_default())
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        Ok(answer)
    };
    let first = ask(&client)
        .map_err(|e| anyhow::anyhow!("no answer before the change: {e}"))?;
    // The flow sticks to its pod while nothing changes.
    for _ in 0..3 {
        assert_eq!(ask(&client), Ok(first.clone()));
    }
    let (stays, stays_ip) = pods_at
        .into_iter()
        .find(|(name, _)| *name != first)
        .context("an unknown pod answered")?;

    // The pod that answered leaves the service but keeps running, so the
    // flow moves only if its IPVS connection and conntrack entry go. On
    // this kernel IPVS flushes both itself once the proxy deletes the
    // real server (expire_nodest_conn=1, which the proxy sets), and the
    // proxy's own conntrack cleanup usually finds nothing left: measured,
    // and why this test asserts the move, not who made it. The cleanup
    // is tested on a flow IPVS keeps in tests/kernel_conntrack.rs.
    cluster.write_state(&[
        node(),
        svc,
        endpoint_slice("flow", &ports, &[(stays_ip, "node-a")]),
    ])?;
    cluster.wait_for("the leaving pod's real server gone", || {
        Ok(real_servers("-u", "198.18.14.10:53")?
            == [format!("{stays_ip}:5353")])
    })?;
    let moved = Instant::now();
    let mut answers = Vec::new();
    while moved.elapsed() < Duration::from_secs(10) {
        let answer = ask(&client);
        if answer.as_deref() == Ok(stays) {
            return Ok(());
        }
        answers.push(answer);
    }
    bail!(
        "the flow did not move to {stays} within 10 s; answers: {answers:?}\n\
         proxy log:\n{}",
        cluster.log()?
    )
}
