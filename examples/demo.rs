//! `make demo`, run inside the real-kernel guest: the example cluster's
//! pods come up in network namespaces, the proxy programs the kernel from
//! the state file, traffic goes through a ClusterIP and a NodePort, and an
//! edit of the file (web scaled down) lands in IPVS.

use std::{
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use kube_ipvs_proxy::source::file;
use testkit::{start_pods, tcp_tally, udp_tally, PodSpec};

const STATE: &str = "examples/cluster.yaml";
const NODE: &str = "node-a";
/// The example Node's InternalIP; NodePorts listen on it.
const NODE_IP: &str = "198.18.100.1/24";
const TIMEOUT: Duration = Duration::from_secs(3);

fn main() -> anyhow::Result<()> {
    testkit::guest::check()
        .context("the demo programs IPVS: run it with `make demo`")?;
    let work = PathBuf::from("/tmp/kube-ipvs-proxy-demo");
    std::fs::create_dir_all(&work)?;
    let state = work.join("cluster.yaml");
    let text = std::fs::read_to_string(STATE)?;
    std::fs::write(&state, &text)?;

    banner("pods from examples/cluster.yaml");
    let specs = pod_specs(&text)?;
    for spec in &specs {
        println!("  {spec:?}");
    }
    let _pods = start_pods(&specs)?;
    sh(&format!(
        "ip link add node0 type dummy && ip addr add {NODE_IP} dev node0 && \
         ip link set node0 up"
    ))?;

    banner("kube-ipvs-proxy --state cluster.yaml");
    let log = work.join("proxy.log");
    let mut proxy = Proxy::start(&state, &log)?;
    // Every service, on every local address for NodePorts (the pods'
    // gateway 198.19.0.1 included, as kube-proxy does).
    let started =
        wait_for("the virtual servers", || Ok(count_services()? >= 7));
    if started.is_err() {
        eprintln!("proxy log:\n{}", std::fs::read_to_string(&log)?);
        print!("{}", sh("ipvsadm -Ln; ip -brief addr; ipset list -n")?);
    }
    started?;

    banner("ipvsadm -Ln");
    print!("{}", sh("ipvsadm -Ln")?);
    banner("ip addr show kube-ipvs0");
    print!("{}", sh("ip -brief addr show kube-ipvs0")?);

    banner("traffic");
    let web: SocketAddr = "198.18.0.10:80".parse()?;
    let node_port: SocketAddr = "198.18.100.1:30080".parse()?;
    let dns: SocketAddr = "198.18.0.53:53".parse()?;
    println!(
        "  TCP {web} (ClusterIP), 6 connections: {:?}",
        tcp_tally(web, 6, TIMEOUT)?
    );
    println!(
        "  TCP {node_port} (NodePort), 6 connections: {:?}",
        tcp_tally(node_port, 6, TIMEOUT)?
    );
    println!(
        "  UDP {dns} (ClusterIP), 4 datagrams: {:?}",
        udp_tally(dns, 4, TIMEOUT)?
    );

    banner("edit: scale web down (delete Pod web-2 from the state file)");
    write_atomically(&state, &without_pod(&text, "web-2")?)?;
    // web-2 just served connections that IPVS still counts (TIME_WAIT):
    // graceful termination sets it to weight 0 and deletes it once they
    // are gone, so new connections go to web-1 meanwhile.
    wait_for("web-2 to take no new connections", || {
        let table = sh("ipvsadm -Ln -t 198.18.0.10:80")?;
        Ok(weight_of(&table, "198.19.0.3:8080").unwrap_or(0) == 0)
    })?;
    print!("{}", sh("ipvsadm -Ln -t 198.18.0.10:80")?);
    println!(
        "  TCP {web}, 6 connections: {:?}",
        tcp_tally(web, 6, TIMEOUT)?
    );

    proxy.stop();
    banner("done");
    Ok(())
}

fn banner(title: &str) {
    println!("\n== {title}");
}

/// One PodSpec per Pod in the state file: its name, first IP, and every
/// container port.
fn pod_specs(text: &str) -> anyhow::Result<Vec<PodSpec>> {
    let snapshot =
        file::parse(text).map_err(|e| anyhow::anyhow!("{STATE}:{e}"))?;
    let mut specs = Vec::new();
    for pod in snapshot.others.iter().filter(|o| o["kind"] == "Pod") {
        let name = pod["metadata"]["name"].as_str().context("pod name")?;
        let ip: Ipv4Addr =
            pod["status"]["podIP"].as_str().context("podIP")?.parse()?;
        let mut ports = std::collections::BTreeSet::new();
        for container in
            pod["spec"]["containers"].as_array().into_iter().flatten()
        {
            for port in container["ports"].as_array().into_iter().flatten() {
                let p =
                    port["containerPort"].as_u64().context("containerPort")?;
                ports.insert(u16::try_from(p)?);
            }
        }
        // testpod answers TCP and UDP on each port: one listen per number.
        let spec = ports
            .into_iter()
            .fold(PodSpec::new(name).ip(ip), PodSpec::port);
        specs.push(spec);
    }
    Ok(specs)
}

/// The state file without the YAML document of Pod `name`.
fn without_pod(text: &str, name: &str) -> anyhow::Result<String> {
    let docs: Vec<&str> = text.split("\n---\n").collect();
    let kept: Vec<&str> = docs
        .iter()
        .copied()
        .filter(|d| {
            !(d.contains("kind: Pod") && d.contains(&format!("name: {name}\n")))
        })
        .collect();
    if kept.len() != docs.len() - 1 {
        bail!("no single Pod {name} in {STATE}");
    }
    Ok(kept.join("\n---\n"))
}

/// Editors replace files by rename; so does the demo, so the proxy never
/// reads a half-written file.
fn write_atomically(path: &Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("yaml.new");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// The weight `ipvsadm -Ln` shows for a real server, if it is listed.
fn weight_of(table: &str, real_server: &str) -> Option<u32> {
    table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(1) == Some(&real_server))
        .and_then(|f| f.get(3)?.parse().ok())
}

fn count_services() -> anyhow::Result<usize> {
    Ok(sh("ipvsadm -Ln")?
        .lines()
        .filter(|l| l.starts_with("TCP") || l.starts_with("UDP"))
        .count())
}

fn wait_for(
    what: &str,
    mut done: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if done()? {
            println!("  ({what} after {:.1} s)", start.elapsed().as_secs_f64());
            return Ok(());
        }
        sleep(Duration::from_millis(200));
    }
    bail!("timed out waiting for {what}")
}

fn sh(script: &str) -> anyhow::Result<String> {
    let out = Command::new("sh").args(["-c", script]).output()?;
    if !out.status.success() {
        bail!(
            "`{script}` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

struct Proxy(Child);

impl Proxy {
    /// The binary built beside this example, or DEMO_PROXY's (the one an
    /// image holds, `make demo DEMO_IMAGE=...`).
    fn start(state: &Path, log: &Path) -> anyhow::Result<Self> {
        let binary = match std::env::var_os("DEMO_PROXY") {
            Some(path) => PathBuf::from(path),
            None => std::env::current_exe()?
                .parent()
                .and_then(Path::parent)
                .map(|dir| dir.join("kube-ipvs-proxy"))
                .context("locating the proxy binary")?,
        };
        let version = Command::new(&binary)
            .arg("--version")
            .output()
            .with_context(|| {
                format!("running {} --version", binary.display())
            })?;
        println!(
            "  {}: {}",
            binary.display(),
            String::from_utf8_lossy(&version.stdout).trim()
        );
        let log = std::fs::File::create(log)?;
        let child = Command::new(&binary)
            .arg("--state")
            .arg(state)
            .args(["--hostname-override", NODE])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Self(child))
    }

    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}
