//! The scenarios, written once against [`Cluster`] and [`Node`]: the guest
//! (`make e2e`), the real node (`make node-e2e`) and kind (`make
//! kind-e2e`) each implement them, so all check the same things the same
//! way.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::json;
use testkit::Tally;

/// Long enough for a change after an API server outage: the watchers'
/// retry backoff (client-go's: doubling from 0.8 s to 30 s, with jitter)
/// took 75 s to catch up after a one-minute outage. Also covers a real
/// Pod's image pull and start in kind.
pub const SETTLE: Duration = Duration::from_secs(150);

/// The node the proxy under test runs on, and the pods live on: where
/// `ipvsadm` is read and traffic starts. Shared with the traffic thread of
/// the restart scenario.
pub trait Node: Send + Sync {
    /// Runs a shell script on the node and returns its standard output;
    /// an error when it exits non-zero.
    fn sh(&self, script: &str) -> Result<String>;

    /// Opens `n` TCP connections to `addr` from the node, all open until
    /// every answer is in, and tallies the pod names that answered.
    fn tcp_tally(&self, addr: SocketAddr, n: usize) -> Result<Tally>;

    /// The running proxy's `/metrics` page.
    fn metrics(&self) -> Result<String>;
}

/// One test's view of a cluster: its namespace, whose Pods and Services
/// the scenarios create, and the proxy on [`Cluster::node`].
pub trait Cluster {
    fn node(&self) -> Arc<dyn Node>;

    /// Creates a Service selecting `app=<name>` with `ports` (a Service's
    /// `spec.ports`) and returns its cluster IP.
    fn service(
        &mut self,
        name: &str,
        ports: serde_json::Value,
    ) -> Result<String>;

    fn delete_service(&mut self, name: &str) -> Result<()>;

    /// A Pod labelled `app=<app>` on the node, answering with its name on
    /// each of `ports` (name, container port), and Ready once it serves.
    /// Returns its IP, as the real servers will show it.
    fn add_pod(
        &mut self,
        name: &str,
        app: &str,
        ports: &[(&str, u16)],
    ) -> Result<String>;

    /// Deletes the Pod for good.
    fn remove_pod(&mut self, name: &str) -> Result<()>;

    /// Makes the Pod's Ready condition `ready`, the Pod itself unchanged.
    fn set_ready(&mut self, name: &str, ready: bool) -> Result<()>;

    /// Replaces the running proxy with a new one and returns once the new
    /// one has synced.
    fn restart_proxy(&mut self) -> Result<()>;

    /// What to show when a wait times out: the proxy's log.
    fn proxy_log(&self) -> String;
}

/// The real servers of a TCP virtual server that take new connections
/// (weight above 0), sorted; empty when there is no such server.
pub fn serving(node: &dyn Node, vs: &str) -> Result<Vec<String>> {
    let Ok(table) = node.sh(&format!("ipvsadm -Ln -t {vs}")) else {
        return Ok(Vec::new());
    };
    Ok(real_servers(&table))
}

fn real_servers(table: &str) -> Vec<String> {
    let mut servers: Vec<String> = table
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("->"))
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            match fields.as_slice() {
                [address, _, weight, ..] if *weight != "0" => {
                    weight.parse::<u32>().ok()?;
                    Some((*address).to_string())
                }
                _ => None,
            }
        })
        .collect();
    servers.sort();
    servers
}

/// The sum of a metric's samples on the running proxy's `/metrics`.
pub fn metric(node: &dyn Node, name: &str) -> Result<f64> {
    Ok(testkit::metric_sum(&node.metrics()?, name))
}

/// The proxy's network programming latency observations so far:
/// (count, sum of seconds).
pub fn programming(node: &dyn Node) -> Result<(f64, f64)> {
    const NAME: &str = "kubeproxy_network_programming_duration_seconds";
    Ok((
        metric(node, &format!("{NAME}_count"))?,
        metric(node, &format!("{NAME}_sum"))?,
    ))
}

pub fn wait_for(
    cluster: &dyn Cluster,
    what: &str,
    mut done: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < SETTLE {
        match done() {
            Ok(true) => return Ok(()),
            Ok(false) => last = None,
            Err(e) => last = Some(e),
        }
        thread::sleep(Duration::from_millis(200));
    }
    let kernel = cluster
        .node()
        .sh("ipvsadm -Ln; ip -brief addr show kube-ipvs0")
        .unwrap_or_else(|e| e.to_string());
    bail!(
        "timed out waiting for {what} (last error: {last:?})\n\
         proxy log:\n{}\nkernel:\n{kernel}",
        cluster.proxy_log()
    )
}

/// Waits until `vs` serves exactly `want`, and prints how long the proxy
/// says the change took from the API write.
pub fn expect_serving(
    cluster: &dyn Cluster,
    what: &str,
    vs: &str,
    want: &[&str],
    before: (f64, f64),
) -> Result<()> {
    let node = cluster.node();
    let mut want: Vec<String> = want.iter().map(|s| (*s).to_string()).collect();
    want.sort();
    let started = Instant::now();
    wait_for(cluster, what, || Ok(serving(node.as_ref(), vs)? == want))?;
    let seen = started.elapsed();
    let (count, sum) = programming(node.as_ref())?;
    let new = count - before.0;
    let latency = if new > 0.0 {
        format!(
            "{:.2} s mean over {new} observation(s)",
            (sum - before.1) / new
        )
    } else {
        "no observation".to_string()
    };
    println!(
        "cluster_e2e: {what}: in the kernel {seen:.1?} after the test's \
         check began; network programming: {latency}"
    );
    Ok(())
}

pub fn only(tally: &Tally) -> Vec<&str> {
    tally.keys().map(String::as_str).collect()
}

pub fn endpoint(ip: &str, port: u16) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

/// Create → reachable; scale up and down → the real servers follow;
/// readiness flips → the real server leaves and returns; delete → the
/// virtual server, its address and its set entry are gone.
pub fn a_service_follows_its_pods(c: &mut dyn Cluster) -> Result<()> {
    let node = c.node();
    let node = node.as_ref();
    let ports = json!([{"name": "http", "port": 80, "targetPort": 8080}]);
    let ip = c.service("web", ports)?;
    let vs = endpoint(&ip, 80);

    let before = programming(node)?;
    let web1 = endpoint(&c.add_pod("web-1", "web", &[("http", 8080)])?, 8080);
    let web2 = endpoint(&c.add_pod("web-2", "web", &[("http", 8080)])?, 8080);
    expect_serving(c, "create: two pods", &vs, &[&web1, &web2], before)?;
    let tally = node.tcp_tally(vs.parse()?, 4)?;
    assert_eq!(only(&tally), ["web-1", "web-2"], "{tally:?}");

    let before = programming(node)?;
    let web3 = endpoint(&c.add_pod("web-3", "web", &[("http", 8080)])?, 8080);
    expect_serving(
        c,
        "scale up to three",
        &vs,
        &[&web1, &web2, &web3],
        before,
    )?;

    let before = programming(node)?;
    c.remove_pod("web-1")?;
    expect_serving(c, "scale down to two", &vs, &[&web2, &web3], before)?;

    let before = programming(node)?;
    c.set_ready("web-2", false)?;
    expect_serving(c, "web-2 not ready", &vs, &[&web3], before)?;
    let tally = node.tcp_tally(vs.parse()?, 2)?;
    assert_eq!(only(&tally), ["web-3"], "{tally:?}");

    let before = programming(node)?;
    c.set_ready("web-2", true)?;
    expect_serving(c, "web-2 ready again", &vs, &[&web2, &web3], before)?;

    c.delete_service("web")?;
    let prefix = if ip.contains(':') { 128 } else { 32 };
    wait_for(c, "the virtual server, address and set entry gone", || {
        Ok(node.sh(&format!("ipvsadm -Ln -t {vs}")).is_err()
            && !node
                .sh("ip -o addr show dev kube-ipvs0")?
                .contains(&format!("{ip}/{prefix}"))
            && !node
                .sh("ipset list KUBE-CLUSTER-IP")?
                .lines()
                .any(|entry| entry.starts_with(&format!("{ip},"))))
    })
}

/// A named target port that the pods number differently: the controller
/// writes one slice per number, and each real server has its own port.
pub fn named_target_ports_span_several_slices(
    c: &mut dyn Cluster,
) -> Result<()> {
    let node = c.node();
    let node = node.as_ref();
    let ports = json!([{"name": "http", "port": 80, "targetPort": "web"}]);
    let ip = c.service("named", ports)?;
    let vs = endpoint(&ip, 80);
    let before = programming(node)?;
    let a = endpoint(&c.add_pod("named-a", "named", &[("web", 8080)])?, 8080);
    let b = endpoint(&c.add_pod("named-b", "named", &[("web", 8081)])?, 8081);
    expect_serving(c, "two pods, two port numbers", &vs, &[&a, &b], before)?;
    let tally = node.tcp_tally(vs.parse()?, 4)?;
    assert_eq!(only(&tally), ["named-a", "named-b"], "{tally:?}");
    Ok(())
}

/// Requests through the service keep succeeding while the proxy is
/// replaced: the kernel state outlives the process, and the new one
/// adopts it without tearing anything down.
pub fn a_proxy_restart_loses_no_request(c: &mut dyn Cluster) -> Result<()> {
    let node = c.node();
    let ports = json!([{"name": "http", "port": 80, "targetPort": 8080}]);
    let ip = c.service("kept", ports)?;
    let vs = endpoint(&ip, 80);
    let before = programming(node.as_ref())?;
    let one = endpoint(&c.add_pod("kept-1", "kept", &[("http", 8080)])?, 8080);
    let two = endpoint(&c.add_pod("kept-2", "kept", &[("http", 8080)])?, 8080);
    expect_serving(c, "two pods", &vs, &[&one, &two], before)?;

    let traffic = under_traffic(&node, vs.parse()?, || c.restart_proxy())?;
    traffic.expect_no_failure("the proxy restarted")?;
    let mut want = vec![one, two];
    want.sort();
    assert_eq!(serving(node.as_ref(), &vs)?, want);
    Ok(())
}

/// What the steady client of [`under_traffic`] saw.
#[derive(Debug)]
pub struct Traffic {
    pub ok: usize,
    pub failed: Vec<String>,
}

impl Traffic {
    /// Prints the counts under `what`; an error if a request failed or too
    /// few were made for the window to mean anything.
    pub fn expect_no_failure(&self, what: &str) -> Result<()> {
        println!(
            "cluster_e2e: {what}: {} requests answered, {} failed",
            self.ok,
            self.failed.len()
        );
        if !self.failed.is_empty() {
            bail!(
                "{what}: {} of {} requests failed: {:?}",
                self.failed.len(),
                self.ok + self.failed.len(),
                self.failed
            );
        }
        if self.ok < 10 {
            bail!("{what}: only {} requests in the window", self.ok);
        }
        Ok(())
    }
}

/// Runs `change` while a client on the node connects to `addr` every 20
/// ms (from a second before until two seconds after), and returns what
/// the client saw; `change`'s error, if any, comes first.
pub fn under_traffic(
    node: &Arc<dyn Node>,
    addr: SocketAddr,
    change: impl FnOnce() -> Result<()>,
) -> Result<Traffic> {
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let stop = Arc::clone(&stop);
        let node = Arc::clone(node);
        thread::spawn(move || {
            let (mut ok, mut failed) = (0usize, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                match node.tcp_tally(addr, 1) {
                    Ok(_) => ok += 1,
                    Err(e) => failed.push(e.to_string()),
                }
                thread::sleep(Duration::from_millis(20));
            }
            Traffic { ok, failed }
        })
    };
    thread::sleep(Duration::from_secs(1));
    let changed = change();
    thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let traffic = client
        .join()
        .map_err(|_| anyhow::anyhow!("the client thread panicked"))?;
    changed?;
    Ok(traffic)
}

#[test]
fn real_servers_are_the_weighted_destinations() {
    let table = "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  198.18.0.10:80 rr
  -> 198.19.0.3:8080              Masq    1      0          0
  -> 198.19.0.2:8080              Masq    1      0          0
  -> 198.19.0.4:8080              Masq    0      0          1
";
    assert_eq!(real_servers(table), ["198.19.0.2:8080", "198.19.0.3:8080"]);
}
