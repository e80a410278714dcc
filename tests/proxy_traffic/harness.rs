//! Setup shared by the tests: the state file, the pods, node0, the proxy
//! process, and the cleanup after each test.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::MutexGuard;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use testkit::{start_pods, Pod, PodSpec};

pub const NODE: &str = "node-a";
/// node-a's InternalIP, on the dummy link node0: NodePorts listen on
/// it.
pub const NODE_IP: &str = "198.18.100.1";
pub const TIMEOUT: Duration = Duration::from_secs(3);
/// How long the slow guest may take to program what a test waits for.
const SETTLE: Duration = Duration::from_secs(60);
const PROXY: &str = env!("CARGO_BIN_EXE_kube-ipvs-proxy");

#[derive(Debug, Clone, Copy)]
pub struct Port {
    name: &'static str,
    protocol: &'static str,
    port: u16,
    target: u16,
    node_port: Option<u16>,
}

impl Port {
    pub fn tcp(name: &'static str, port: u16, target: u16) -> Self {
        Self {
            name,
            protocol: "TCP",
            port,
            target,
            node_port: None,
        }
    }

    pub fn udp(name: &'static str, port: u16, target: u16) -> Self {
        Self {
            protocol: "UDP",
            ..Self::tcp(name, port, target)
        }
    }

    pub fn node_port(self, node_port: u16) -> Self {
        Self {
            node_port: Some(node_port),
            ..self
        }
    }
}

/// Pods `(name, address)` answering on 8080.
pub fn pods_on_8080(pods: &[(&str, &str)]) -> Vec<testkit::PodSpec> {
    pods.iter()
        .map(|(name, ip)| {
            testkit::PodSpec::new(*name)
                .ip(ip.parse().expect("a fixture address"))
                .port(8080)
        })
        .collect()
}

pub fn node() -> String {
    format!(
        "apiVersion: v1\nkind: Node\n\
         metadata:\n  name: {NODE}\n  \
         labels: {{kubernetes.io/hostname: {NODE}}}\n\
         status:\n  addresses:\n  \
         - {{type: InternalIP, address: {NODE_IP}}}\n"
    )
}

/// A Service in namespace default; `extra` is more of its spec, as
/// lines indented by two spaces.
pub fn service(
    name: &str,
    cluster_ip: &str,
    ports: &[Port],
    extra: &str,
) -> String {
    let kind = if ports.iter().any(|p| p.node_port.is_some()) {
        "NodePort"
    } else {
        "ClusterIP"
    };
    let mut doc = format!(
        "apiVersion: v1\nkind: Service\n\
         metadata: {{name: {name}, namespace: default}}\n\
         spec:\n  type: {kind}\n  clusterIP: {cluster_ip}\n  \
         clusterIPs: [{cluster_ip}]\n  ipFamilies: [IPv4]\n  ports:\n"
    );
    for p in ports {
        let _ = write!(
            doc,
            "  - {{name: {}, port: {}, targetPort: {}, protocol: {}",
            p.name, p.port, p.target, p.protocol
        );
        if let Some(node_port) = p.node_port {
            let _ = write!(doc, ", nodePort: {node_port}");
        }
        doc.push_str("}\n");
    }
    doc.push_str(extra);
    doc
}

/// The service's one slice: ready endpoints at `(ip, nodeName)`.
pub fn endpoint_slice(
    service: &str,
    ports: &[Port],
    endpoints: &[(&str, &str)],
) -> String {
    let mut doc = format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata:\n  name: {service}-1\n  namespace: default\n  \
         labels: {{kubernetes.io/service-name: {service}}}\n\
         addressType: IPv4\nports:\n"
    );
    for p in ports {
        let _ = writeln!(
            doc,
            "- {{name: {}, port: {}, protocol: {}}}",
            p.name, p.target, p.protocol
        );
    }
    doc.push_str("endpoints:\n");
    for (ip, node) in endpoints {
        let _ = writeln!(
            doc,
            "- {{addresses: [{ip}], nodeName: {node}, \
             conditions: {{{}}}}}",
            Conditions::READY.yaml()
        );
    }
    doc
}

/// An endpoint's conditions, as the EndpointSlice controller sets them.
#[derive(Debug, Clone, Copy)]
pub struct Conditions {
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
}

impl Conditions {
    pub const READY: Self = Self {
        ready: true,
        serving: true,
        terminating: false,
    };
    /// A pod that is shutting down but still passes its readiness probe.
    pub const TERMINATING_SERVING: Self = Self {
        ready: false,
        serving: true,
        terminating: true,
    };
    pub const TERMINATING: Self = Self {
        ready: false,
        serving: false,
        terminating: true,
    };

    fn yaml(self) -> String {
        format!(
            "ready: {}, serving: {}, terminating: {}",
            self.ready, self.serving, self.terminating
        )
    }
}

/// [`endpoint_slice`] with each endpoint's conditions given.
pub fn endpoint_slice_with(
    service: &str,
    ports: &[Port],
    endpoints: &[(&str, &str, Conditions)],
) -> String {
    let mut doc = endpoint_slice(service, ports, &[]);
    for (ip, node, conditions) in endpoints {
        let _ = writeln!(
            doc,
            "- {{addresses: [{ip}], nodeName: {node}, \
             conditions: {{{}}}}}",
            conditions.yaml()
        );
    }
    doc
}

/// A LoadBalancer Service in namespace default whose load balancer
/// reported `ingress_ip`; `extra` is more of its spec, as lines indented
/// by two spaces.
pub fn load_balancer(
    name: &str,
    cluster_ip: &str,
    ports: &[Port],
    ingress_ip: &str,
    extra: &str,
) -> String {
    let mut doc = service(name, cluster_ip, ports, extra)
        .replacen("type: NodePort", "type: LoadBalancer", 1)
        .replacen("type: ClusterIP", "type: LoadBalancer", 1);
    let _ = write!(
        doc,
        "status:\n  loadBalancer:\n    ingress: [{{ip: {ingress_ip}}}]\n"
    );
    doc
}

/// One test's world. Dropping it stops the proxy, runs `--cleanup`,
/// deletes node0 and the foreign virtual servers, stops the pods, and
/// only then lets the next test in.
pub struct Cluster {
    state: PathBuf,
    log: PathBuf,
    proxy: Option<Child>,
    foreign: Vec<String>,
    // Fields drop in order: the pods go before the lock is released.
    _pods: Vec<Pod>,
    _root: MutexGuard<'static, ()>,
}

impl Cluster {
    pub fn new(
        name: &str,
        pods: &[PodSpec],
        state: &[String],
    ) -> anyhow::Result<Self> {
        let root = testkit::guest::lock_root_netns();
        // A test that died before its cleanup left state behind.
        let _ = Command::new(PROXY).arg("--cleanup").output();
        sh(&format!(
            "ip link del node0 2>/dev/null; \
             ip link add node0 type dummy && \
             ip addr add {NODE_IP}/24 dev node0 && ip link set node0 up"
        ))?;
        let dir = std::env::temp_dir().join("proxy-traffic").join(name);
        std::fs::create_dir_all(&dir)?;
        let mut cluster = Self {
            state: dir.join("state.yaml"),
            log: dir.join("proxy.log"),
            proxy: None,
            foreign: Vec::new(),
            _pods: Vec::new(),
            _root: root,
        };
        cluster.write_state(state)?;
        cluster._pods = start_pods(pods)?;
        Ok(cluster)
    }

    /// The test's pod named `name`.
    pub fn pod(&self, name: &str) -> anyhow::Result<&Pod> {
        self._pods
            .iter()
            .find(|p| p.name() == name)
            .with_context(|| format!("no pod {name} in this test"))
    }

    /// Replaces the state file by rename, as editors do, so the proxy
    /// never reads half of it.
    pub fn write_state(&self, docs: &[String]) -> anyhow::Result<()> {
        let tmp = self.state.with_extension("yaml.new");
        std::fs::write(&tmp, docs.join("---\n"))?;
        std::fs::rename(&tmp, &self.state)?;
        Ok(())
    }

    /// A round-robin virtual server with one masqueraded real server,
    /// made with ipvsadm; deleted when the test ends.
    pub fn add_foreign(&mut self, vs: &str, real: &str) -> anyhow::Result<()> {
        let _ = sh(&format!("ipvsadm -D -t {vs} 2>/dev/null"));
        sh(&format!(
            "ipvsadm -A -t {vs} -s rr && ipvsadm -a -t {vs} -r {real} -m"
        ))?;
        self.foreign.push(vs.to_string());
        Ok(())
    }

    /// Starts the proxy and returns once its first sync has been
    /// applied in full. Waiting for IPVS alone is not enough: a
    /// connection made while the rest of that sync (addresses, sets,
    /// iptables) is still being written can be reset.
    pub fn start_proxy(&mut self, args: &[&str]) -> anyhow::Result<()> {
        self.start_proxy_under(&[], args)
    }

    /// [`Cluster::start_proxy`], with the proxy run by `wrapper` (a
    /// command that ends by executing its arguments, as `setpriv` does).
    pub fn start_proxy_under(
        &mut self,
        wrapper: &[&str],
        args: &[&str],
    ) -> anyhow::Result<()> {
        self.spawn_proxy(wrapper, args)?;
        self.wait_for("the proxy's first complete sync", first_sync_done)
    }

    /// Starts the proxy, run by `wrapper`, without waiting for anything.
    pub fn spawn_proxy(
        &mut self,
        wrapper: &[&str],
        args: &[&str],
    ) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut command = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut command = Command::new(program);
                command.args(rest).arg(PROXY);
                command
            }
            None => Command::new(PROXY),
        };
        let child = command
            .arg("--state")
            .arg(&self.state)
            .args(["--hostname-override", NODE])
            .args(args)
            // Debug for the proxier: it logs each apply ("... applied").
            .env("RUST_LOG", "info,kube_ipvs_proxy::proxier=debug")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {PROXY}"))?;
        self.proxy = Some(child);
        Ok(())
    }

    /// The running proxy's process id: a wrapper that executes the proxy
    /// leaves it the same process.
    pub fn proxy_pid(&self) -> anyhow::Result<u32> {
        self.proxy
            .as_ref()
            .map(Child::id)
            .context("the proxy is not running")
    }

    /// Waits for the proxy started last to exit, and returns its status.
    pub fn proxy_exit(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        let start = Instant::now();
        let child = self.proxy.as_mut().context("the proxy is not running")?;
        while start.elapsed() < SETTLE {
            if let Some(status) = child.try_wait()? {
                self.proxy = None;
                return Ok(status);
            }
            sleep(Duration::from_millis(200));
        }
        bail!(
            "the proxy still runs after {SETTLE:?}; its log:\n{}",
            self.log().unwrap_or_default()
        )
    }

    /// `kube-ipvs-proxy --init-only` on the state file, as root, as the
    /// privileged init container runs it; it must succeed.
    pub fn init_only(&self) -> anyhow::Result<()> {
        let out = Command::new(PROXY)
            .arg("--state")
            .arg(&self.state)
            .args(["--hostname-override", NODE, "--init-only"])
            .env("NO_COLOR", "1")
            .output()?;
        if !out.status.success() {
            bail!(
                "--init-only failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Runs `kube-ipvs-proxy SUBCOMMAND` on the state file as node-a's
    /// proxy, `args` after, and returns what it printed and its status.
    pub fn one_shot(
        &self,
        subcommand: &str,
        args: &[&str],
    ) -> anyhow::Result<std::process::Output> {
        Command::new(PROXY)
            .arg(subcommand)
            .arg("--state")
            .arg(&self.state)
            .args(["--hostname-override", NODE])
            .args(args)
            .env("NO_COLOR", "1")
            .output()
            .with_context(|| format!("running {PROXY} {subcommand}"))
    }

    pub fn stop_proxy(&mut self) {
        if let Some(mut child) = self.proxy.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `kube-ipvs-proxy --cleanup`, which must succeed.
    pub fn cleanup(&self) -> anyhow::Result<()> {
        let out = Command::new(PROXY).arg("--cleanup").output()?;
        if !out.status.success() {
            bail!("--cleanup failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }

    /// Empties the proxy's log, so that [`Cluster::log`] shows only what
    /// the next proxy writes.
    pub fn clear_log(&self) -> anyhow::Result<()> {
        std::fs::write(&self.log, "")?;
        Ok(())
    }

    /// The proxy's log so far, without colours.
    pub fn log(&self) -> anyhow::Result<String> {
        let raw = std::fs::read_to_string(&self.log)?;
        let mut plain = String::with_capacity(raw.len());
        let mut rest = raw.as_str();
        while let Some(at) = rest.find('\x1b') {
            plain.push_str(rest.get(..at).unwrap_or_default());
            let tail = rest.get(at..).unwrap_or_default();
            rest = tail.find('m').and_then(|m| tail.get(m + 1..)).unwrap_or("");
        }
        plain.push_str(rest);
        Ok(plain)
    }

    /// Polls `done` until it holds; on timeout the error carries the
    /// proxy's log and the kernel's tables.
    pub fn wait_for(
        &self,
        what: &str,
        mut done: impl FnMut() -> anyhow::Result<bool>,
    ) -> anyhow::Result<()> {
        let start = Instant::now();
        let mut last = None;
        while start.elapsed() < SETTLE {
            match done() {
                Ok(true) => return Ok(()),
                Ok(false) => last = None,
                Err(e) => last = Some(e),
            }
            sleep(Duration::from_millis(200));
        }
        let kernel = sh("ipvsadm -Ln; ip -brief addr; ipset list -n")
            .unwrap_or_else(|e| e.to_string());
        bail!(
            "timed out waiting for {what} (last error: {last:?})\n\
             proxy log:\n{}\nkernel:\n{kernel}",
            self.log().unwrap_or_default()
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_proxy();
        if let Err(e) = self.cleanup() {
            eprintln!("proxy_traffic: {e}");
        }
        for vs in &self.foreign {
            let _ = sh(&format!("ipvsadm -D -t {vs}"));
        }
        let _ = sh("ip link del node0");
    }
}

/// Whether the running proxy reports a completed sync: its
/// `kubeproxy_sync_proxy_rules_last_timestamp_seconds` is set only
/// once a sync's whole batch (IPVS, addresses, sets, iptables) is in.
fn first_sync_done() -> anyhow::Result<bool> {
    Ok(metric_sum("kubeproxy_sync_proxy_rules_last_timestamp_seconds")? > 0.0)
}

/// The sum of a metric's samples (over all label sets) on the running
/// proxy's `/metrics`; 0 for a metric it does not show.
pub fn metric_sum(name: &str) -> anyhow::Result<f64> {
    let metrics = "127.0.0.1:10249".parse()?;
    let (status, body) = testkit::http_get(metrics, "/metrics", TIMEOUT)?;
    if status != 200 {
        bail!("GET /metrics answered {status}");
    }
    Ok(testkit::metric_sum(&body, name))
}

/// The real servers of one virtual server (`-t`/`-u` and its
/// address), or an error if there is no such virtual server.
pub fn real_servers(protocol: &str, vs: &str) -> anyhow::Result<Vec<String>> {
    let table = sh(&format!("ipvsadm -Ln {protocol} {vs}"))?;
    Ok(table
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("->"))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|a| *a != "RemoteAddress:Port")
        .map(str::to_string)
        .collect())
}

/// The real servers of one virtual server with their weights.
pub fn weighted_real_servers(
    protocol: &str,
    vs: &str,
) -> anyhow::Result<Vec<(String, u32)>> {
    let table = sh(&format!("ipvsadm -Ln {protocol} {vs}"))?;
    let mut servers = Vec::new();
    for line in table.lines() {
        let Some(rest) = line.trim_start().strip_prefix("->") else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // RemoteAddress:Port Forward Weight ActiveConn InActConn
        if let [address, _, weight, ..] = fields.as_slice() {
            if let Ok(weight) = weight.parse() {
                servers.push(((*address).to_string(), weight));
            }
        }
    }
    Ok(servers)
}

/// Connects from inside network namespace `netns` to `addr` and returns
/// the greeting of the pod that answered, or the client's error.
pub fn greeting_from(netns: &str, addr: &str) -> anyhow::Result<String> {
    let (ip, port) = addr
        .rsplit_once(':')
        .with_context(|| format!("{addr} is not ADDRESS:PORT"))?;
    sh(&format!(
        "ip netns exec {netns} timeout 3 \
         bash -c 'exec 3<>/dev/tcp/{ip}/{port} && head -n 1 <&3'"
    ))
    .map(|answer| answer.trim().to_string())
}

/// Every virtual server's line, with whitespace runs kept as ipvsadm
/// prints them (`TCP  198.18.0.1:80 rr`).
pub fn ipvs_services() -> anyhow::Result<Vec<String>> {
    Ok(sh("ipvsadm -Ln")?
        .lines()
        .filter(|l| l.starts_with("TCP") || l.starts_with("UDP"))
        .map(|l| l.trim_end().to_string())
        .collect())
}

pub fn sh(script: &str) -> anyhow::Result<String> {
    Ok(testkit::run(Command::new("sh").args(["-c", script]))?)
}
