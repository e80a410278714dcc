//! Test "pods": each is a network namespace joined to the root namespace by
//! a veth pair, with the `testpod` server answering inside it.
//!
//! Addressing (all in 198.19.0.0/16): every root-side veth carries the
//! gateway 198.19.0.1/32 with the pod's address as its peer, and the pod has
//! its address /32 with the gateway as peer and a default route through it
//! (the shape of the CNI ptp plugin). So the root namespace routes to each
//! pod over its own veth, and pods answer any source, including a virtual
//! service address on kube-ipvs0 after IPVS masquerading.
//!
//! Setup costs few processes, as each one is slow to start in the
//! emulated guest: one
//! `ip -batch` for the root-namespace side of all pods, one per pod inside
//! its namespace, and the server itself. [`Drop`] kills the server and
//! deletes the veth pair and the namespace.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::command::{describe, run_with_input};
use crate::error::Error;

/// The address every root-side veth has; the pods' default gateway.
pub const GATEWAY: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);

/// Pods get 198.19.1.1 upward; 250 per /24 keeps the last octet in 1..=250.
const PER_SUBNET: u32 = 250;
const MAX_PODS: u32 = PER_SUBNET * 254;

/// Pod slots handed out in this process. Names and addresses derive from
/// the slot, so pods of concurrent tests never collide.
static NEXT_SLOT: AtomicU32 = AtomicU32::new(0);

/// What to start: the name the pod answers with and the ports its server
/// listens on (TCP and UDP on each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSpec {
    name: String,
    ports: Vec<u16>,
    ip: Option<Ipv4Addr>,
}

impl PodSpec {
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ports: Vec::new(),
            ip: None,
        }
    }

    /// A fixed address (in 198.19.0.0/16, not the gateway), for pods that
    /// must match objects written elsewhere, such as a state file's Pods.
    #[must_use]
    pub fn ip(mut self, ip: Ipv4Addr) -> Self {
        self.ip = Some(ip);
        self
    }

    /// Listen on `port` (TCP and UDP).
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.ports.push(port);
        self
    }
}

/// A running pod; torn down on drop.
#[derive(Debug)]
pub struct Pod {
    name: String,
    ip: Ipv4Addr,
    netns: String,
    host_veth: String,
    server: Option<Child>,
}

impl Pod {
    /// The name its server answers with.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// `ip netns` name, for running more commands inside the pod.
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// The root-namespace end of its veth pair.
    pub fn host_veth(&self) -> &str {
        &self.host_veth
    }

    pub fn addr(&self, port: u16) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self.ip, port))
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
        // Deleting the veth explicitly is synchronous; a namespace's
        // devices are otherwise removed later, in the background, and the
        // next test could trip over the name.
        let script =
            format!("link del {}\nnetns del {}\n", self.host_veth, self.netns);
        // -force: go on to the namespace even if the veth is gone.
        let mut ip = Command::new("ip");
        ip.args(["-force", "-batch", "-"]);
        if let Err(e) = run_with_input(&mut ip, &script) {
            eprintln!("testkit: cleaning up pod {}: {e}", self.name);
        }
    }
}

/// The slot's address: 198.19.1.1, …, 198.19.1.250, 198.19.2.1, …
pub(crate) fn slot_ip(slot: u32) -> Option<Ipv4Addr> {
    if slot >= MAX_PODS {
        return None;
    }
    let third = u8::try_from(1 + slot / PER_SUBNET).ok()?;
    let fourth = u8::try_from(1 + slot % PER_SUBNET).ok()?;
    Some(Ipv4Addr::new(198, 19, third, fourth))
}

/// Where the `testpod` binary is: `TESTKIT_TESTPOD`, else next to the test
/// binary's directory (target/debug/testpod for target/debug/deps/x-hash),
/// which is where cargo puts it when it builds testkit's binaries.
pub fn testpod_path() -> Result<PathBuf, Error> {
    if let Some(path) = std::env::var_os("TESTKIT_TESTPOD") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| Error::Pod {
        pod: "-".into(),
        reason: format!("cannot find the test binary's path: {e}"),
    })?;
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("testpod"))
        .unwrap_or_else(|| PathBuf::from("testpod"));
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::NoTestpod { path })
    }
}

/// Starts one pod per spec and waits until each server listens.
pub fn start_pods(specs: &[PodSpec]) -> Result<Vec<Pod>, Error> {
    let testpod = testpod_path()?;
    let count = u32::try_from(specs.len()).unwrap_or(u32::MAX);
    let first = NEXT_SLOT.fetch_add(count, Ordering::Relaxed);

    // Build the Pod values first so that whatever fails below, dropping
    // them removes what was created.
    let mut pods = Vec::with_capacity(specs.len());
    for (slot, spec) in (first..).zip(specs) {
        let ip = match spec.ip {
            Some(ip) => ip,
            None => {
                slot_ip(slot).ok_or(Error::TooManyPods { max: MAX_PODS })?
            }
        };
        pods.push(Pod {
            name: spec.name.clone(),
            ip,
            netns: format!("testkit-{slot}"),
            host_veth: format!("tk{slot}"),
            server: None,
        });
    }

    let mut root = String::new();
    for pod in &pods {
        let _ = write!(
            root,
            "netns add {ns}\n\
             link add {veth} type veth peer name eth0 netns {ns}\n\
             addr add {GATEWAY}/32 peer {ip}/32 dev {veth}\n\
             link set {veth} up\n",
            ns = pod.netns,
            veth = pod.host_veth,
            ip = pod.ip,
        );
    }
    if let Err(e) =
        run_with_input(Command::new("ip").args(["-batch", "-"]), &root)
    {
        // Only what the batch created can be cleaned up; the rest would
        // log spurious errors.
        forget_missing(&mut pods);
        return Err(e);
    }

    for (pod, spec) in pods.iter_mut().zip(specs) {
        let inside = format!(
            "link set lo up\n\
             addr add {ip}/32 peer {GATEWAY}/32 dev eth0\n\
             link set eth0 up\n\
             route add default via {GATEWAY} dev eth0\n",
            ip = pod.ip,
        );
        run_with_input(
            Command::new("ip").args(["-n", &pod.netns, "-batch", "-"]),
            &inside,
        )?;
        pod.server = Some(start_server(&testpod, pod, spec)?);
    }
    Ok(pods)
}

/// Drops, without cleanup, the pods whose namespace does not exist.
fn forget_missing(pods: &mut Vec<Pod>) {
    let mut kept = Vec::new();
    for pod in pods.drain(..) {
        if std::path::Path::new("/run/netns").join(&pod.netns).exists() {
            kept.push(pod);
        } else {
            std::mem::forget(pod);
        }
    }
    *pods = kept;
}

fn start_server(
    testpod: &std::path::Path,
    pod: &Pod,
    spec: &PodSpec,
) -> Result<Child, Error> {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &pod.netns])
        .arg(testpod)
        .args(["--name", &pod.name]);
    for port in &spec.ports {
        cmd.arg("--listen").arg(pod.addr(*port).to_string());
    }
    let command = describe(&cmd);
    // stderr goes straight to the test's: the server reports little, and
    // an unread pipe could fill and stall it.
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|source| Error::Spawn {
            command: command.clone(),
            source,
        })?;
    let ready = match child.stdout.take() {
        Some(stdout) => wait_ready(stdout),
        None => Err("has no stdout".into()),
    };
    match ready {
        Ok(()) => Ok(child),
        Err(why) => {
            let _ = child.kill();
            let status = child.wait().map(|s| s.to_string());
            Err(Error::Pod {
                pod: pod.name.clone(),
                reason: format!(
                    "`{command}` {why} ({}; its stderr is above)",
                    status.unwrap_or_else(|e| e.to_string())
                ),
            })
        }
    }
}

/// Reads the server's first line, which is `ready` once it listens.
fn wait_ready(stdout: ChildStdout) -> Result<(), String> {
    let mut line = String::new();
    match BufReader::new(stdout).read_line(&mut line) {
        Ok(_) if line.split_whitespace().next() == Some("ready") => Ok(()),
        Ok(0) => Err("exited before it was ready".into()),
        Ok(_) => Err(format!("said {:?} instead of ready", line.trim())),
        Err(e) => Err(format!("cannot read its output: {e}")),
    }
}

#[cfg(test)]
mod tests;
