//! The scenarios in the real-kernel guest (`make e2e`): the proxy runs
//! here as a process against tests/e2e/control-plane.sh's API server on
//! the host, reached through QEMU's guestfwd. Pods are API objects bound
//! to the guest's node whose status the test sets through the status
//! subresource (there is no kubelet), so the real EndpointSlice controller
//! writes the slices; netns "pods" with the same addresses serve the
//! traffic. The node is the guest itself: commands run locally.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kube::api::{Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{json, Value};
use testkit::{start_pods, PodSpec, Tally};

use crate::api::{container_ports, Namespaced};

mod dashboards;
mod inspection;
mod split;
use crate::scenarios::{
    self, expect_serving, metric, only, programming, serving, wait_for,
    Cluster, Node,
};

const PROXY: &str = env!("CARGO_BIN_EXE_kube-ipvs-proxy");
pub(crate) const NODE: &str = "node-a";
pub(crate) const NODE_IP: &str = "198.18.100.1";
const TIMEOUT: Duration = Duration::from_secs(3);
/// control-plane.sh's control port (E2E_CONTROL_PORT, 6440 unless moved
/// so that control planes can run side by side), through guestfwd.
fn control_addr() -> Result<SocketAddr> {
    let port =
        std::env::var("E2E_CONTROL_PORT").unwrap_or_else(|_| "6440".into());
    Ok(format!("10.0.2.100:{port}").parse()?)
}

pub(crate) fn env_path(name: &str) -> Result<PathBuf> {
    std::env::var_os(name)
        .map(PathBuf::from)
        .with_context(|| format!("{name} is not set: run `make e2e`"))
}

pub(crate) fn sh(script: &str) -> Result<String> {
    Ok(testkit::run(Command::new("sh").args(["-c", script]))?)
}

/// The guest: commands and traffic are local, the proxy's metrics on
/// loopback.
pub(crate) struct Guest;

impl Node for Guest {
    fn sh(&self, script: &str) -> Result<String> {
        sh(script)
    }

    fn tcp_tally(&self, addr: SocketAddr, n: usize) -> Result<Tally> {
        Ok(testkit::tcp_tally(addr, n, TIMEOUT)?)
    }

    fn metrics(&self) -> Result<String> {
        let (status, body) =
            testkit::http_get("127.0.0.1:10249".parse()?, "/metrics", TIMEOUT)?;
        if status != 200 {
            bail!("GET /metrics answered {status}");
        }
        Ok(body)
    }
}

/// Sends a line to control-plane.sh's control port and waits for its
/// "ok". The write side stays open until the answer: guestfwd's socat
/// gives up on a half-closed connection.
pub(crate) fn control(command: &str) -> Result<()> {
    let addr = control_addr()?;
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT)?;
    stream.set_read_timeout(Some(Duration::from_secs(300)))?;
    writeln!(stream, "{command}")?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer)?;
    if !answer.starts_with("ok") {
        bail!("{command}: {answer}");
    }
    Ok(())
}

fn now_rfc3339() -> String {
    // Truncated to the second, as the controller's annotation is.
    let now = k8s_openapi::jiff::Timestamp::now();
    k8s_openapi::jiff::Timestamp::from_second(now.as_second())
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// One test's namespace, pods and proxy. Dropping it stops the proxy,
/// runs `--cleanup`, force-deletes the Pods and the namespace, and removes
/// node0 and the netns pods.
pub(crate) struct GuestCluster {
    // Dropped first: the namespace's Pods go before the netns pods.
    pub(crate) api: Namespaced,
    log: PathBuf,
    pub(crate) proxy: Option<Child>,
    /// More flags for the proxy, after the kubeconfig and node name.
    proxy_args: Vec<String>,
    pods: Vec<testkit::Pod>,
    /// Pod addresses, each test in its own /24 of 198.19.0.0/16.
    subnet: u8,
    ips: BTreeMap<String, String>,
    _root: MutexGuard<'static, ()>,
}

impl GuestCluster {
    /// A fresh namespace `ns` whose pods take addresses in
    /// 198.19.`subnet`.0/24, and the proxy started on node0.
    fn new(ns: &str, subnet: u8) -> Result<Self> {
        Self::with_proxy_args(ns, subnet, &[])
    }

    /// As [`Self::new`], the proxy started with `args` as well.
    pub(crate) fn with_proxy_args(
        ns: &str,
        subnet: u8,
        args: &[&str],
    ) -> Result<Self> {
        testkit::guest::require();
        let root = testkit::guest::lock_root_netns();
        let _ = Command::new(PROXY).arg("--cleanup").output();
        sh(&format!(
            "ip link del node0 2>/dev/null; \
             ip link add node0 type dummy && \
             ip addr add {NODE_IP}/24 dev node0 && ip link set node0 up"
        ))?;
        let rt = Namespaced::runtime()?;
        let kubeconfig = env_path("E2E_ADMIN_GUEST_KUBECONFIG")?;
        let config = rt.block_on(kube::Config::from_custom_kubeconfig(
            Kubeconfig::read_from(&kubeconfig)?,
            &KubeConfigOptions::default(),
        ))?;
        let dir = std::env::temp_dir().join("cluster-e2e");
        std::fs::create_dir_all(&dir)?;
        let mut cluster = Self {
            api: Namespaced::new(rt, config, ns)?,
            log: dir.join(format!("{ns}.log")),
            proxy: None,
            proxy_args: args.iter().map(|a| (*a).to_owned()).collect(),
            pods: Vec::new(),
            subnet,
            ips: BTreeMap::new(),
            _root: root,
        };
        cluster.start_proxy()?;
        Ok(cluster)
    }

    fn start_proxy(&mut self) -> Result<()> {
        self.spawn_proxy()?;
        self.wait_for_first_sync()
    }

    fn wait_for_first_sync(&self) -> Result<()> {
        wait_for(self, "the proxy's first sync", || {
            Ok(metric(
                &Guest,
                "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            )? > 0.0)
        })
    }

    /// Starts the proxy without waiting for anything.
    fn spawn_proxy(&mut self) -> Result<()> {
        let kubeconfig = env_path("E2E_PROXY_KUBECONFIG")?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = Command::new(PROXY)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--hostname-override", NODE])
            .args(&self.proxy_args)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting the proxy")?;
        self.proxy = Some(child);
        Ok(())
    }

    pub(crate) fn stop_proxy(&mut self) {
        if let Some(mut child) = self.proxy.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sets the Pod's status; the Ready condition's transition time is
    /// now, which the controller passes on as the slice's trigger time and
    /// the proxy measures network programming from.
    fn set_status(&self, name: &str, ready: bool) -> Result<()> {
        let ip = self
            .ips
            .get(name)
            .with_context(|| format!("no pod {name} in this test"))?;
        let status = json!({"status": {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": [{
                "type": "Ready",
                "status": if ready { "True" } else { "False" },
                "lastTransitionTime": now_rfc3339(),
            }],
        }});
        self.api.rt.block_on(self.api.pods().patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(status),
        ))?;
        Ok(())
    }
}

impl Cluster for GuestCluster {
    fn node(&self) -> Arc<dyn Node> {
        Arc::new(Guest)
    }

    fn service(&mut self, name: &str, ports: Value) -> Result<String> {
        self.api.service(name, ports)
    }

    fn delete_service(&mut self, name: &str) -> Result<()> {
        self.api.delete_service(name)
    }

    fn add_pod(
        &mut self,
        name: &str,
        app: &str,
        ports: &[(&str, u16)],
    ) -> Result<String> {
        let host = u8::try_from(self.ips.len() + 2)
            .context("too many pods for one test's /24")?;
        let ip = format!("198.19.{}.{host}", self.subnet);
        let mut spec = PodSpec::new(name).ip(ip.parse()?);
        for (_, port) in ports {
            spec = spec.port(*port);
        }
        self.pods.extend(start_pods(&[spec])?);
        self.api.create_pod(json!({
            "metadata": {"name": name, "labels": {"app": app}},
            "spec": {
                "nodeName": NODE,
                "containers": [{
                    "name": "c",
                    "image": "e2e.invalid/none",
                    "ports": container_ports(ports),
                }],
            },
        }))?;
        self.ips.insert(name.to_string(), ip.clone());
        self.set_status(name, true)?;
        Ok(ip)
    }

    /// Deletes the Pod without grace (no kubelet would confirm a graceful
    /// deletion) and stops its netns pod.
    fn remove_pod(&mut self, name: &str) -> Result<()> {
        self.api.delete_pod(name)?;
        self.pods.retain(|p| p.name() != name);
        Ok(())
    }

    fn set_ready(&mut self, name: &str, ready: bool) -> Result<()> {
        self.set_status(name, ready)
    }

    fn restart_proxy(&mut self) -> Result<()> {
        self.stop_proxy();
        thread::sleep(Duration::from_millis(500));
        self.start_proxy()
    }

    fn proxy_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for GuestCluster {
    fn drop(&mut self) {
        self.stop_proxy();
        let _ = Command::new(PROXY).arg("--cleanup").output();
        let _ = self.api.release_pods();
        let _ = sh("ip link del node0");
    }
}

#[test]
#[cfg_attr(
    not(all(feature = "kernel-tests", feature = "e2e-tests")),
    ignore = "needs the guest and the control plane: run `make e2e`"
)]
fn a_service_follows_its_pods() -> Result<()> {
    scenarios::a_service_follows_its_pods(&mut GuestCluster::new(
        "e2e-life", 40,
    )?)
}

#[test]
#[cfg_attr(
    not(all(feature = "kernel-tests", feature = "e2e-tests")),
    ignore = "needs the guest and the control plane: run `make e2e`"
)]
fn named_target_ports_span_several_slices() -> Result<()> {
    scenarios::named_target_ports_span_several_slices(&mut GuestCluster::new(
        "e2e-named",
        41,
    )?)
}

#[test]
#[cfg_attr(
    not(all(feature = "kernel-tests", feature = "e2e-tests")),
    ignore = "needs the guest and the control plane: run `make e2e`"
)]
fn a_proxy_restart_loses_no_request() -> Result<()> {
    scenarios::a_proxy_restart_loses_no_request(&mut GuestCluster::new(
        "e2e-restart",
        43,
    )?)
}

/// Only here: control-plane.sh can stop and restart its API server on
/// request, a kind cluster's is a static Pod.
#[test]
#[cfg_attr(
    not(all(feature = "kernel-tests", feature = "e2e-tests")),
    ignore = "needs the guest and the control plane: run `make e2e`"
)]
fn the_kernel_state_outlives_an_api_server_outage() -> Result<()> {
    let mut c = GuestCluster::new("e2e-outage", 42)?;
    let ports = json!([{"name": "http", "port": 80, "targetPort": 8080}]);
    let ip = c.service("steady", ports)?;
    let vs = format!("{ip}:80");
    let before = programming(&Guest)?;
    let one = c.add_pod("steady-1", "steady", &[("http", 8080)])?;
    let one = format!("{one}:8080");
    expect_serving(&c, "one pod", &vs, &[&one], before)?;

    control("apiserver-stop")?;
    let outage = (|| -> Result<()> {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            assert_eq!(serving(&Guest, &vs)?, [one.as_str()]);
            let tally = Guest.tcp_tally(vs.parse()?, 1)?;
            assert_eq!(only(&tally), ["steady-1"]);
            thread::sleep(Duration::from_secs(5));
        }
        Ok(())
    })();
    control("apiserver-start")?;
    outage?;
    if let Some(child) = c.proxy.as_mut() {
        assert!(
            child.try_wait()?.is_none(),
            "the proxy exited while its API server was away"
        );
    }

    let before = programming(&Guest)?;
    let two = c.add_pod("steady-2", "steady", &[("http", 8080)])?;
    let two = format!("{two}:8080");
    expect_serving(
        &c,
        "a change after the outage",
        &vs,
        &[&one, &two],
        before,
    )?;
    Ok(())
}
