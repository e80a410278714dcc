//! The scenarios on a kind cluster (`make kind-e2e`, tests/e2e/kind.sh):
//! the proxy runs as deploy/'s DaemonSet on every node, Pods are real
//! (agnhost's `serve-hostname`, answering each TCP connection with the Pod's
//! name), scheduled onto one node whose container the checks `docker
//! exec` into: `ipvsadm`, `ip`, `ipset` and traffic start there.
//!
//! Readiness flips through a real readiness probe: it fails while
//! /tmp/unready exists in the Pod's first container, which the test
//! creates and removes with `kubectl exec`; the Pod keeps its labels and
//! stays selected, as in the guest.
//!
//! kind.sh sets KUBECONFIG (the kind cluster's, admin), KIND_E2E_NODE (the
//! node the Pods go to: the name of its container and of its Node) and
//! KIND_E2E_AGNHOST (the image, already loaded into the nodes).

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use testkit::Tally;

use crate::api::{container_ports, Namespaced};
use crate::daemonset::{is_running, pod_ip, DaemonSetPods, PROXY_LABEL};
use crate::scenarios::{self, Cluster, Node};

const UNREADY: &str = "/tmp/unready";

fn env(name: &str) -> Result<String> {
    std::env::var(name)
        .with_context(|| format!("{name} is not set: run `make kind-e2e`"))
}

fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A kind node: a Docker container, reached with `docker exec`.
struct KindNode {
    container: String,
}

impl KindNode {
    fn bash(&self, script: &str) -> Result<String> {
        // A bound on every call: /dev/tcp has no connect timeout of its
        // own.
        run(
            "docker",
            &[
                "exec",
                &self.container,
                "timeout",
                "20",
                "bash",
                "-c",
                script,
            ],
        )
    }
}

impl Node for KindNode {
    fn sh(&self, script: &str) -> Result<String> {
        run("docker", &["exec", &self.container, "sh", "-c", script])
    }

    /// bash's /dev/tcp: the node image has bash, and no client to count
    /// on. Every connection stays open until the last answer is in, so
    /// each has its own source port (see testkit's `tcp_tally`).
    fn tcp_tally(&self, addr: SocketAddr, n: usize) -> Result<Tally> {
        let script = format!(
            "for i in $(seq 1 {n}); do \
               exec {{fd}}<>/dev/tcp/{ip}/{port} || exit 1; \
               line=; IFS= read -r -t 3 line <&$fd; echo \"$line\"; \
             done",
            ip = addr.ip(),
            port = addr.port(),
        );
        let out = self.bash(&script)?;
        let mut tally = Tally::new();
        for (i, line) in out.lines().enumerate() {
            let name = line.trim();
            if name.is_empty() {
                bail!("tcp connection {}/{n} to {addr}: no answer", i + 1);
            }
            *tally.entry(name.to_string()).or_default() += 1;
        }
        let answers: usize = tally.values().sum();
        if answers != n {
            bail!("{answers} answers from {addr} to {n} connections");
        }
        Ok(tally)
    }

    fn metrics(&self) -> Result<String> {
        let response = self.bash(
            "exec 3<>/dev/tcp/127.0.0.1/10249 && \
             printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3",
        )?;
        let (head, body) = response
            .split_once("\r\n\r\n")
            .context("no HTTP header from /metrics")?;
        if !head.starts_with("HTTP/1.0 200")
            && !head.starts_with("HTTP/1.1 200")
        {
            bail!(
                "GET /metrics answered {}",
                head.lines().next().unwrap_or("")
            );
        }
        Ok(body.to_string())
    }
}

struct KindCluster {
    api: Namespaced,
    node: Arc<KindNode>,
    image: String,
}

impl KindCluster {
    fn new(ns: &str) -> Result<Self> {
        let rt = Namespaced::runtime()?;
        let config = rt.block_on(kube::Config::infer())?;
        Ok(Self {
            api: Namespaced::new(rt, config, ns)?,
            node: Arc::new(KindNode {
                container: env("KIND_E2E_NODE")?,
            }),
            image: env("KIND_E2E_AGNHOST")?,
        })
    }

    /// The proxy's Pods on our node.
    fn proxy(&self) -> DaemonSetPods<'_> {
        DaemonSetPods {
            api: &self.api,
            namespace: "kube-system",
            label: PROXY_LABEL,
            node: &self.node.container,
        }
    }

    fn poll(
        &self,
        what: &str,
        mut done: impl FnMut() -> Result<bool>,
    ) -> Result<()> {
        scenarios::wait_for(self, what, &mut done)
    }

    /// The first container of the Pod: the one with the readiness probe.
    fn exec_first(&self, pod: &str, script: &str) -> Result<()> {
        run(
            "kubectl",
            &[
                "-n",
                &self.api.ns,
                "exec",
                pod,
                "-c",
                "serve-0",
                "--",
                "sh",
                "-c",
                script,
            ],
        )?;
        Ok(())
    }
}

impl Cluster for KindCluster {
    fn node(&self) -> Arc<dyn Node> {
        Arc::clone(&self.node) as Arc<dyn Node>
    }

    fn service(&mut self, name: &str, ports: Value) -> Result<String> {
        self.api.service(name, ports)
    }

    fn delete_service(&mut self, name: &str) -> Result<()> {
        self.api.delete_service(name)
    }

    /// One agnhost container per port (serve-hostname listens on one),
    /// all ports declared on the first, which carries the probe.
    fn add_pod(
        &mut self,
        name: &str,
        app: &str,
        ports: &[(&str, u16)],
    ) -> Result<String> {
        let containers: Vec<Value> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, port))| {
                let mut c = json!({
                    "name": format!("serve-{i}"),
                    "image": self.image,
                    "imagePullPolicy": "IfNotPresent",
                    "args": [
                        "serve-hostname", "--tcp", "--http=false",
                        "--port", port.to_string(),
                    ],
                });
                if i == 0 {
                    c["ports"] = Value::from(container_ports(ports));
                    c["readinessProbe"] = json!({
                        "exec": {"command": [
                            "sh", "-c", format!("test ! -e {UNREADY}"),
                        ]},
                        "periodSeconds": 1,
                        "failureThreshold": 1,
                        "successThreshold": 1,
                    });
                }
                c
            })
            .collect();
        self.api.create_pod(json!({
            "metadata": {"name": name, "labels": {"app": app}},
            "spec": {
                "nodeName": self.node.container,
                "terminationGracePeriodSeconds": 0,
                "containers": containers,
            },
        }))?;
        let pods = self.api.pods();
        let mut ip = None;
        self.poll(&format!("pod {name} running with an IP"), || {
            let pod = self.api.rt.block_on(pods.get(name))?;
            ip = pod_ip(&pod)
                .filter(|_| is_running(&pod))
                .map(str::to_string);
            Ok(ip.is_some())
        })?;
        ip.with_context(|| format!("pod {name} has no IP"))
    }

    fn remove_pod(&mut self, name: &str) -> Result<()> {
        self.api.delete_pod(name)
    }

    fn set_ready(&mut self, name: &str, ready: bool) -> Result<()> {
        if ready {
            self.exec_first(name, &format!("rm -f {UNREADY}"))
        } else {
            self.exec_first(name, &format!("touch {UNREADY}"))
        }
    }

    /// Deletes the DaemonSet's Pod on our node, as a rollout or an
    /// eviction would, and waits for its replacement's first sync.
    fn restart_proxy(&mut self) -> Result<()> {
        self.proxy().replace(self)
    }

    fn proxy_log(&self) -> String {
        self.proxy().log()
    }
}

fn scenario(ns: &str, run: fn(&mut dyn Cluster) -> Result<()>) -> Result<()> {
    run(&mut KindCluster::new(ns)?)
}

#[test]
#[cfg_attr(
    not(feature = "kind-tests"),
    ignore = "needs a kind cluster: run `make kind-e2e`"
)]
fn a_service_follows_its_pods() -> Result<()> {
    scenario("kind-e2e-life", scenarios::a_service_follows_its_pods)
}

#[test]
#[cfg_attr(
    not(feature = "kind-tests"),
    ignore = "needs a kind cluster: run `make kind-e2e`"
)]
fn named_target_ports_span_several_slices() -> Result<()> {
    scenario(
        "kind-e2e-named",
        scenarios::named_target_ports_span_several_slices,
    )
}

#[test]
#[cfg_attr(
    not(feature = "kind-tests"),
    ignore = "needs a kind cluster: run `make kind-e2e`"
)]
fn a_proxy_restart_loses_no_request() -> Result<()> {
    scenario(
        "kind-e2e-restart",
        scenarios::a_proxy_restart_loses_no_request,
    )
}
