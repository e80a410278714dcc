//! The scenarios on a real node (`make node-e2e`, tests/node-e2e/): the
//! real-kernel guest is a Kubernetes node (containerd, runc, the CNI
//! bridge, a kubelet registered with tests/e2e/control-plane.sh's API
//! server), and the proxy is deploy/'s DaemonSet on it, from the image
//! built from deploy/Dockerfile. Pods are real: each of a scenario's pods
//! is a Deployment of testkit's `testpod` image (its IP from CNI), whose
//! readiness is a real HTTP readiness probe that the test makes fail by
//! telling the pod to answer 503. The tests run in the guest, so the node's
//! commands (`ipvsadm`, `ip`, traffic) are local, and the proxy's
//! `/metrics` is read on the node's address.
//!
//! The tests share the one node and its DaemonSets, so run.sh runs them one
//! at a time, in order: the DaemonSet's start first, the migration last.
//! tests/node-e2e/node.sh sets the environment (E2E_*).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{json, Value};
use testkit::Tally;

use crate::api::{container_ports, Namespaced};
use crate::daemonset::{
    is_ready, pod_ip, wait_synced, DaemonSetPods, PROXY_LABEL,
};
use crate::scenarios::{
    self, endpoint, expect_serving, only, programming, serving, under_traffic,
    wait_for, Cluster, Node,
};

const TIMEOUT: Duration = Duration::from_secs(3);
/// A `/metrics` read, as Prometheus' default `scrape_timeout`: CI's image
/// holds the debug build, whose text exposition took over 3 s once under
/// TCG beside the kubelet and containerd.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);
/// testpod's readiness endpoint in every test pod.
const READY_PORT: u16 = 8099;
/// kubeadm's DaemonSet and its Pods' label.
const UPSTREAM_LABEL: &str = "k8s-app=kube-proxy";
const PLACEHOLDER_IMAGE: &str = "kube-ipvs-proxy:dev";
const PLACEHOLDER_SERVER: &str = "https://control-plane.invalid:6443";

fn env(name: &str) -> Result<String> {
    std::env::var(name)
        .with_context(|| format!("{name} is not set: run `make node-e2e`"))
}

fn sh(script: &str) -> Result<String> {
    Ok(testkit::run(Command::new("sh").args(["-c", script]))?)
}

/// What node.sh and run.sh tell the tests.
struct Env {
    node: String,
    node_ip: String,
    /// The API server as the node reaches it (guestfwd).
    server: String,
    kubectl: PathBuf,
    kubeconfig: PathBuf,
    proxy_image: String,
    upstream_image: String,
    testpod_image: String,
}

impl Env {
    fn read() -> Result<Self> {
        Ok(Self {
            node: env("E2E_NODE_NAME")?,
            node_ip: env("E2E_NODE_IP")?,
            server: format!(
                "https://10.0.2.100:{}",
                env("E2E_APISERVER_PORT")?
            ),
            kubectl: PathBuf::from(env("E2E_K8S_BIN")?).join("kubectl"),
            kubeconfig: env("E2E_ADMIN_GUEST_KUBECONFIG")?.into(),
            proxy_image: env("E2E_PROXY_IMAGE")?,
            upstream_image: env("E2E_UPSTREAM_IMAGE")?,
            testpod_image: env("E2E_TESTPOD_IMAGE")?,
        })
    }

    /// kubectl as the cluster's admin, `input` on its standard input.
    fn kubectl(&self, args: &[&str], input: Option<&str>) -> Result<String> {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        Ok(match input {
            Some(input) => testkit::run_with_input(&mut cmd, input)?,
            None => testkit::run(&mut cmd)?,
        })
    }

    /// deploy/kube-ipvs-proxy.yaml with the image and the API server
    /// filled in, and nothing else changed: what a user applies.
    fn our_manifest(&self, image: &str) -> Result<String> {
        let path =
            concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kube-ipvs-proxy.yaml");
        let text = std::fs::read_to_string(path)?;
        ensure!(
            text.contains(&format!("image: {PLACEHOLDER_IMAGE}"))
                && text.contains(&format!("server: {PLACEHOLDER_SERVER}")),
            "{path} lost its placeholders"
        );
        Ok(text
            .replace(
                &format!("image: {PLACEHOLDER_IMAGE}"),
                &format!("image: {image}"),
            )
            .replace(
                &format!("server: {PLACEHOLDER_SERVER}"),
                &format!("server: {}", self.server),
            ))
    }

    /// tests/node-e2e/kube-proxy.yaml (kubeadm's kube-proxy addon) with
    /// its image and API server filled in.
    fn upstream_manifest(&self) -> Result<String> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/node-e2e/kube-proxy.yaml"
        );
        Ok(std::fs::read_to_string(path)?
            .replace("UPSTREAM_IMAGE", &self.upstream_image)
            .replace("API_SERVER", &self.server))
    }
}

/// The node the tests run on.
struct RealNode {
    ip: String,
}

impl Node for RealNode {
    fn sh(&self, script: &str) -> Result<String> {
        sh(script)
    }

    fn tcp_tally(&self, addr: SocketAddr, n: usize) -> Result<Tally> {
        Ok(testkit::tcp_tally(addr, n, TIMEOUT)?)
    }

    /// Through the node's address, as a Prometheus scraping the node does.
    fn metrics(&self) -> Result<String> {
        let addr = SocketAddr::new(self.ip.parse()?, 10249);
        let (status, body) =
            testkit::http_get(addr, "/metrics", SCRAPE_TIMEOUT)?;
        if status != 200 {
            bail!("GET {addr}/metrics answered {status}");
        }
        Ok(body)
    }
}

impl RealNode {
    /// Connects `n` times to `addr` from inside the network namespace of
    /// the test pod running `testpod --name <pod>` (bash's /dev/tcp, so
    /// each connection is a process of the node entering the pod's
    /// namespace), and tallies the answers.
    fn tcp_tally_from_pod(
        &self,
        pod: &str,
        addr: SocketAddr,
        n: usize,
    ) -> Result<Tally> {
        let pid = sh(&format!("pgrep -f -- '--name {pod} ' | head -n 1"))?;
        let pid = pid.trim();
        ensure!(!pid.is_empty(), "no testpod process for pod {pod}");
        let script = format!(
            "for i in $(seq 1 {n}); do \
               exec {{fd}}<>/dev/tcp/{ip}/{port} || exit 1; \
               line=; IFS= read -r -t 3 line <&$fd; echo \"$line\"; \
               exec {{fd}}<&-; \
             done",
            ip = addr.ip(),
            port = addr.port(),
        );
        let out = testkit::run(
            Command::new("nsenter")
                .args(["-t", pid, "-n", "timeout", "30", "bash", "-c"])
                .arg(&script),
        )?;
        let mut tally = Tally::new();
        for line in out.lines() {
            let name = line.trim();
            ensure!(
                !name.is_empty(),
                "a connection from {pod} to {addr} got no answer"
            );
            *tally.entry(name.to_string()).or_default() += 1;
        }
        ensure!(
            tally.values().sum::<usize>() == n,
            "{tally:?}: not {n} answers from {addr} to {pod}"
        );
        Ok(tally)
    }
}

/// One test's namespace on the real node, its pods' IPs by name.
struct NodeCluster {
    env: Env,
    api: Namespaced,
    node: Arc<RealNode>,
    ips: BTreeMap<String, String>,
}

impl NodeCluster {
    fn new(ns: &str) -> Result<Self> {
        testkit::guest::require();
        let env = Env::read()?;
        let rt = Namespaced::runtime()?;
        let config = rt.block_on(kube::Config::from_custom_kubeconfig(
            Kubeconfig::read_from(&env.kubeconfig)?,
            &KubeConfigOptions::default(),
        ))?;
        Ok(Self {
            node: Arc::new(RealNode {
                ip: env.node_ip.clone(),
            }),
            api: Namespaced::new(rt, config, ns)?,
            env,
            ips: BTreeMap::new(),
        })
    }

    fn proxy(&self) -> DaemonSetPods<'_> {
        DaemonSetPods {
            api: &self.api,
            namespace: "kube-system",
            label: PROXY_LABEL,
            node: &self.env.node,
        }
    }

    fn upstream(&self) -> DaemonSetPods<'_> {
        DaemonSetPods {
            api: &self.api,
            namespace: "kube-system",
            label: UPSTREAM_LABEL,
            node: &self.env.node,
        }
    }

    fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.api.client.clone(), &self.api.ns)
    }

    fn daemonsets(&self) -> Api<DaemonSet> {
        Api::namespaced(self.api.client.clone(), "kube-system")
    }

    fn poll(
        &self,
        what: &str,
        done: impl FnMut() -> Result<bool>,
    ) -> Result<()> {
        wait_for(self, what, done)
    }

    /// The pod named `pod` by its Deployment, once Ready.
    fn wait_pod_ready(&self, pod: &str) -> Result<Pod> {
        let pods = self.api.pods();
        let params = ListParams::default().labels(&format!("pod={pod}"));
        let mut found = None;
        self.poll(&format!("pod {pod} running and ready"), || {
            found = self
                .api
                .rt
                .block_on(pods.list(&params))?
                .items
                .into_iter()
                .find(|p| {
                    p.metadata.deletion_timestamp.is_none() && is_ready(p)
                });
            Ok(found.is_some())
        })?;
        found.with_context(|| format!("pod {pod}"))
    }

    /// A Service of type LoadBalancer selecting `app=<name>`, its
    /// load-balancer IP set as a cloud controller would: (cluster IP, node
    /// port, load-balancer IP).
    fn load_balancer(
        &self,
        name: &str,
        lb_ip: &str,
    ) -> Result<(String, u16, String)> {
        let services: Api<Service> =
            Api::namespaced(self.api.client.clone(), &self.api.ns);
        let body = json!({
            "metadata": {"name": name},
            "spec": {
                "type": "LoadBalancer",
                "selector": {"app": name},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
            },
        });
        let created = self.api.rt.block_on(
            services
                .create(&PostParams::default(), &serde_json::from_value(body)?),
        )?;
        let spec = created.spec.context("no spec")?;
        let cluster_ip = spec.cluster_ip.context("no cluster IP")?;
        let node_port = spec
            .ports
            .and_then(|p| p.first().and_then(|p| p.node_port))
            .context("no node port")?;
        let status =
            json!({"status": {"loadBalancer": {"ingress": [{"ip": lb_ip}]}}});
        self.api.rt.block_on(services.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(status),
        ))?;
        Ok((cluster_ip, u16::try_from(node_port)?, lb_ip.to_string()))
    }

    /// Sets the image of a DaemonSet's only container.
    fn set_image(&self, daemonset: &str, image: &str) -> Result<()> {
        let ds = self.api.rt.block_on(self.daemonsets().get(daemonset))?;
        let container = ds
            .spec
            .template
            .spec
            .and_then(|s| s.containers.into_iter().next())
            .context("the DaemonSet has no container")?
            .name;
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"name": container, "image": image},
        ]}}}});
        self.api.rt.block_on(self.daemonsets().patch(
            daemonset,
            &PatchParams::default(),
            &Patch::Strategic(patch),
        ))?;
        Ok(())
    }

    /// Waits until the DaemonSet's Pod on the node is Ready with `image`
    /// and nothing else of it is left, then for the proxy's first sync.
    fn wait_rolled_out(
        &self,
        pods: &DaemonSetPods<'_>,
        image: &str,
    ) -> Result<()> {
        let rolled = self.poll(
            &format!("the {} Pod ready with {image}", pods.label),
            || {
                let Some(pod) = pods.current()? else {
                    return Ok(false);
                };
                let runs_image = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.containers.first())
                    .is_some_and(|c| c.image.as_deref() == Some(image));
                let params = ListParams::default()
                    .labels(pods.label)
                    .fields(&format!("spec.nodeName={}", pods.node));
                let all = self
                    .api
                    .rt
                    .block_on(
                        Api::<Pod>::namespaced(
                            self.api.client.clone(),
                            pods.namespace,
                        )
                        .list(&params),
                    )?
                    .items
                    .len();
                Ok(runs_image && is_ready(&pod) && all == 1)
            },
        );
        if let Err(e) = rolled {
            let status = pods
                .current()
                .ok()
                .flatten()
                .and_then(|p| p.status)
                .and_then(|s| s.container_statuses);
            bail!(
                "{e}\nthe {} Pod's containers: {status:?}\nits log:\n{}",
                pods.label,
                pods.log()
            );
        }
        wait_synced(self)
    }

    /// Makes `pod` not ready and ready again through its probe and checks
    /// that the running proxy follows, whichever proxy that is.
    fn readiness_round_trip(
        &mut self,
        what: &str,
        vs: &str,
        pod: &str,
        others: &[&str],
        all: &[&str],
    ) -> Result<()> {
        let node = self.node();
        let before = programming(node.as_ref()).unwrap_or((0.0, 0.0));
        self.set_ready(pod, false)?;
        expect_serving(
            self,
            &format!("{what}: {pod} not ready"),
            vs,
            others,
            before,
        )?;
        let before = programming(node.as_ref()).unwrap_or((0.0, 0.0));
        self.set_ready(pod, true)?;
        expect_serving(
            self,
            &format!("{what}: {pod} ready again"),
            vs,
            all,
            before,
        )
    }
}

impl Cluster for NodeCluster {
    fn node(&self) -> Arc<dyn Node> {
        Arc::clone(&self.node) as Arc<dyn Node>
    }

    fn service(&mut self, name: &str, ports: Value) -> Result<String> {
        self.api.service(name, ports)
    }

    fn delete_service(&mut self, name: &str) -> Result<()> {
        self.api.delete_service(name)
    }

    /// A Deployment of one testpod replica named `name`: it answers with
    /// `name` on each port, and its readiness probe asks its readiness
    /// endpoint.
    fn add_pod(
        &mut self,
        name: &str,
        app: &str,
        ports: &[(&str, u16)],
    ) -> Result<String> {
        let mut args = vec![
            "--name".to_string(),
            name.to_string(),
            "--tcp".to_string(),
            "--http".to_string(),
            format!("0.0.0.0:{READY_PORT}"),
        ];
        for (_, port) in ports {
            args.extend(["--listen".to_string(), format!("0.0.0.0:{port}")]);
        }
        let body = json!({
            "metadata": {"name": name},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"pod": name}},
                "template": {
                    "metadata": {"labels": {"app": app, "pod": name}},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{
                            "name": "testpod",
                            "image": self.env.testpod_image,
                            "imagePullPolicy": "Never",
                            "args": args,
                            "ports": container_ports(ports),
                            "readinessProbe": {
                                "httpGet": {"path": "/ready", "port": READY_PORT},
                                "periodSeconds": 1,
                                "failureThreshold": 1,
                                "successThreshold": 1,
                            },
                        }],
                    },
                },
            },
        });
        self.api.rt.block_on(
            self.deployments()
                .create(&PostParams::default(), &serde_json::from_value(body)?),
        )?;
        let pod = self.wait_pod_ready(name)?;
        let ip = pod_ip(&pod)
            .with_context(|| format!("pod {name} has no IP"))?
            .to_string();
        self.ips.insert(name.to_string(), ip.clone());
        Ok(ip)
    }

    fn remove_pod(&mut self, name: &str) -> Result<()> {
        self.api.rt.block_on(
            self.deployments().delete(name, &DeleteParams::background()),
        )?;
        self.ips.remove(name);
        Ok(())
    }

    /// Switches the pod's readiness endpoint; the kubelet's probe (every
    /// second) sees it and the Pod's Ready condition follows.
    fn set_ready(&mut self, name: &str, ready: bool) -> Result<()> {
        let ip = self
            .ips
            .get(name)
            .with_context(|| format!("no pod {name} in this test"))?;
        let path = if ready { "/ready" } else { "/unready" };
        let addr = SocketAddr::new(ip.parse()?, READY_PORT);
        let (status, body) =
            testkit::http_request("POST", addr, path, TIMEOUT)?;
        ensure!(status == 200, "POST {path} to {name}: {status} {body}");
        Ok(())
    }

    /// Deletes the DaemonSet's Pod: the DaemonSet's new Pod takes over.
    fn restart_proxy(&mut self) -> Result<()> {
        self.proxy().replace(self)
    }

    fn proxy_log(&self) -> String {
        self.proxy().log()
    }
}

impl Drop for NodeCluster {
    fn drop(&mut self) {
        let _ = self.api.rt.block_on(self.deployments().delete_collection(
            &DeleteParams::background(),
            &ListParams::default(),
        ));
    }
}

fn node_test(ns: &str, run: fn(&mut NodeCluster) -> Result<()>) -> Result<()> {
    run(&mut NodeCluster::new(ns)?)
}

/// deploy/ applied as a user applies it (server-side dry run first), its
/// Pod Running and Ready under the kubelet and synced; then what an
/// operator checks: the kubelet's liveness probe passing, `/healthz` and
/// `/metrics` on the node's address, and the Pod's log through `kubectl
/// logs`.
#[test]
#[cfg_attr(
    not(feature = "node-tests"),
    ignore = "needs the real node: run `make node-e2e`"
)]
fn the_daemonset_runs_under_the_kubelet() -> Result<()> {
    node_test("node-e2e-start", |c| {
        let started = Instant::now();
        let manifest =
            c.env.our_manifest(&format!("{}-a", c.env.proxy_image))?;
        c.env.kubectl(
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&manifest),
        )?;
        c.env.kubectl(&["apply", "-f", "-"], Some(&manifest))?;
        c.env.kubectl(
            &[
                "-n",
                "kube-system",
                "rollout",
                "status",
                "daemonset/kube-ipvs-proxy",
                "--timeout=300s",
            ],
            None,
        )?;
        let image = format!("{}-a", c.env.proxy_image);
        c.wait_rolled_out(&c.proxy(), &image)?;
        println!(
            "node_e2e: the DaemonSet's Pod ready and synced {:.1?} after the apply",
            started.elapsed()
        );

        let healthz = SocketAddr::new(c.env.node_ip.parse()?, 10256);
        let (status, body) = testkit::http_get(healthz, "/healthz", TIMEOUT)?;
        ensure!(status == 200, "GET {healthz}/healthz: {status} {body}");
        ensure!(body.contains("lastUpdated"), "/healthz body: {body}");
        println!("node_e2e: GET {healthz}/healthz: {status} {}", body.trim());

        let metrics = c.node.metrics()?;
        for name in [
            "kubeproxy_sync_proxy_rules_duration_seconds_count",
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
        ] {
            ensure!(
                testkit::metric_sum(&metrics, name) > 0.0,
                "{name} is not above 0 on the node's /metrics"
            );
        }

        // The kubelet ran the liveness probe (10 s period, 10 s delay) and
        // it passed: its own probe metrics say so, and nothing restarted.
        let pod = c.proxy().current()?.context("no proxy Pod")?;
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        c.poll("the kubelet's liveness probe of the proxy to pass", || {
            let probes = c.env.kubectl(
                &[
                    "get",
                    "--raw",
                    &format!(
                        "/api/v1/nodes/{}/proxy/metrics/probes",
                        c.env.node
                    ),
                ],
                None,
            )?;
            Ok(probes.lines().any(|l| {
                l.starts_with("prober_probe_total{")
                    && l.contains("probe_type=\"Liveness\"")
                    && l.contains(&format!("pod=\"{pod_name}\""))
                    && l.contains("result=\"successful\"")
                    && !l.ends_with(" 0")
            }))
        })?;
        // The init container did the privileged steps and exited.
        let init_exit = pod
            .status
            .as_ref()
            .and_then(|s| s.init_container_statuses.as_ref())
            .and_then(|s| s.first())
            .and_then(|s| s.state.as_ref())
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.exit_code);
        ensure!(
            init_exit == Some(0),
            "the init container's exit: {init_exit:?}"
        );
        let restarts: i32 = pod
            .status
            .and_then(|s| s.container_statuses)
            .map(|s| s.iter().map(|c| c.restart_count).sum())
            .unwrap_or_default();
        ensure!(
            restarts == 0,
            "the proxy's container restarted {restarts} times"
        );

        let log = c
            .env
            .kubectl(&["-n", "kube-system", "logs", &pod_name], None)?;
        ensure!(!log.trim().is_empty(), "kubectl logs {pod_name} is empty");
        ensure!(
            !log.contains("sysctl not set"),
            "the unprivileged proxy found a sysctl the init container left:\n{log}"
        );
        let init_log = c.env.kubectl(
            &["-n", "kube-system", "logs", &pod_name, "-c", "init"],
            None,
        )?;
        ensure!(
            init_log.contains("--init-only specified"),
            "the init container's log:\n{init_log}"
        );

        // The long-running container as the runtime made it: the three
        // capabilities added, none of a privileged container's, and
        // /proc/sys read-only, and it serves (above) all the same.
        let pid = sh("pgrep -x kube-ipvs-proxy")?;
        let pid = pid.trim();
        ensure!(
            !pid.is_empty() && !pid.contains('\n'),
            "one proxy process on the node: {pid:?}"
        );
        let status = sh(&format!("cat /proc/{pid}/status"))?;
        let effective = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .map(|hex| u64::from_str_radix(hex.trim(), 16))
            .context("no CapEff")??;
        // linux/capability.h: NET_ADMIN 12, NET_RAW 13, SYS_RESOURCE 24;
        // SYS_MODULE 16, SYS_ADMIN 21.
        let has = |bit: u32| effective & (1 << bit) != 0;
        ensure!(
            has(12) && has(13) && has(24) && !has(16) && !has(21),
            "the proxy's effective capabilities {effective:#x}"
        );
        let mounts = sh(&format!("cat /proc/{pid}/mountinfo"))?;
        let proc_sys = mounts
            .lines()
            .find(|l| l.split(' ').nth(4) == Some("/proc/sys"))
            .context("no /proc/sys mount in the proxy's container")?;
        ensure!(
            proc_sys
                .split(' ')
                .nth(5)
                .is_some_and(|o| o.split(',').any(|o| o == "ro")),
            "/proc/sys is writable in the proxy's container: {proc_sys}"
        );
        println!(
            "node_e2e: the proxy runs unprivileged (CapEff {effective:#x}, /proc/sys read-only) after its init container"
        );
        println!(
            "node_e2e: kubectl logs {pod_name}: {} lines, the first: {}",
            log.lines().count(),
            log.lines().next().unwrap_or_default()
        );

        // `kubectl exec` (and exec probes) must run in the container's own
        // filesystem: only the image has the proxy at this path and the
        // kubeadm-style `kube-proxy` link beside it; a node whose runtime
        // cannot pivot into the image runs the command in its own root.
        let found = c.env.kubectl(
            &[
                "-n",
                "kube-system",
                "exec",
                &pod_name,
                "--",
                "readlink",
                "/usr/local/bin/kube-proxy",
            ],
            None,
        )?;
        ensure!(
            found.trim() == "kube-ipvs-proxy",
            "kubectl exec {pod_name} -- readlink /usr/local/bin/kube-proxy: \
             {found:?}, not the image's link"
        );
        println!("node_e2e: kubectl exec runs in the image's filesystem");
        Ok(())
    })
}

#[test]
#[cfg_attr(
    not(feature = "node-tests"),
    ignore = "needs the real node: run `make node-e2e`"
)]
fn a_service_follows_its_pods() -> Result<()> {
    scenarios::a_service_follows_its_pods(&mut NodeCluster::new(
        "node-e2e-life",
    )?)
}

#[test]
#[cfg_attr(
    not(feature = "node-tests"),
    ignore = "needs the real node: run `make node-e2e`"
)]
fn named_target_ports_span_several_slices() -> Result<()> {
    scenarios::named_target_ports_span_several_slices(&mut NodeCluster::new(
        "node-e2e-named",
    )?)
}

/// The restart scenario here deletes the DaemonSet's Pod: the DaemonSet's
/// new Pod takes over, and no request fails meanwhile.
#[test]
#[cfg_attr(
    not(feature = "node-tests"),
    ignore = "needs the real node: run `make node-e2e`"
)]
fn a_proxy_restart_loses_no_request() -> Result<()> {
    scenarios::a_proxy_restart_loses_no_request(&mut NodeCluster::new(
        "node-e2e-takeover",
    )?)
}

/// A LoadBalancer Service reached at its cluster IP, its node port on the
/// node's address and its load-balancer IP, from the node and from
/// another Pod, every pod answering each way.
#[test]
#[cfg_attr(
    not(feature = "node-tests"),
    ignore = "needs the real node: run `make node-e2e`"
)]
fn traffic_from_the_node_and_from_a_pod() -> Result<()> {
    node_test("node-e2e-traffic", |c| {
        let (cluster_ip, node_port, lb_ip) =
            c.load_balancer("lb", "198.18.200.10")?;
        let before = programming(c.node.as_ref())?;
        let one = endpoint(&c.add_pod("lb-1", "lb", &[("http", 8080)])?, 8080);
        let two = endpoint(&c.add_pod("lb-2", "lb", &[("http", 8080)])?, 8080);
        c.add_pod("client", "client", &[("http", 8080)])?;
        let targets = [
            endpoint(&cluster_ip, 80),
            endpoint(&c.env.node_ip, node_port),
            endpoint(&lb_ip, 80),
        ];
        for vs in &targets {
            expect_serving(
                c,
                &format!("{vs}: two pods"),
                vs,
                &[&one, &two],
                before,
            )?;
        }
        println!("{}", sh("ipvsadm -Ln")?);
        for vs in &targets {
            let addr: SocketAddr = vs.parse()?;
            let tally = c.node.tcp_tally(addr, 6)?;
            assert_eq!(
                only(&tally),
                ["lb-1", "lb-2"],
                "from the node to {vs}: {tally:?}"
            );
            let tally = c.node.tcp_tally_from_pod("client", addr, 6)?;
            assert_eq!(
                only(&tally),
                ["lb-1", "lb-2"],
                "from a pod to {vs}: {tally:?}"
            );
            println!("node_e2e: {vs} from the node and from a pod: {tally:?}");
        }
        Ok(())
    })
}

/// `list` and `explain` as the on-call engineer runs them: `kubectl exec`
/// into the DaemonSet's Pod, with the container's own capabilities, its
/// configuration file and its ServiceAccount, and no ipvsadm in the
/// image. `list` is the node's `ipvsadm -Ln` with this test's virtual
/// server named; `explain` gives the not-ready pod its reason and reads
/// the kernel, which agrees.
#[test]
#[cfg_attr(
    not(feature = "node-tests"),
    ignore = "needs the real node: run `make node-e2e`"
)]
fn list_and_explain_in_the_proxys_pod() -> Result<()> {
    node_test("node-e2e-explain", |c| {
        let ports = json!([{"name": "http", "port": 80, "targetPort": 8080}]);
        let vs = endpoint(&c.service("web", ports)?, 80);
        let before = programming(c.node.as_ref())?;
        let one =
            endpoint(&c.add_pod("web-1", "web", &[("http", 8080)])?, 8080);
        let two =
            endpoint(&c.add_pod("web-2", "web", &[("http", 8080)])?, 8080);
        expect_serving(c, "two pods", &vs, &[&one, &two], before)?;
        let before = programming(c.node.as_ref())?;
        c.set_ready("web-2", false)?;
        expect_serving(c, "web-2 not ready", &vs, &[&one], before)?;

        let pod = c.proxy().current()?.context("no proxy Pod")?;
        let pod_name = pod.metadata.name.unwrap_or_default();
        let in_pod = |args: &[&str]| {
            let mut command = vec![
                "-n",
                "kube-system",
                "exec",
                &pod_name,
                "-c",
                "kube-ipvs-proxy",
                "--",
                "kube-ipvs-proxy",
            ];
            command.extend_from_slice(args);
            command.extend(["--config", "/var/lib/kube-proxy/config.conf"]);
            c.env.kubectl(&command, None)
        };

        // The table is the kernel's; a sync between the two reads (the
        // repair round) changes nothing, so one retry covers a counter
        // that moved.
        let mut attempts = 0;
        let listed = loop {
            let listed = in_pod(&["list"])?;
            let ipvsadm = sh("ipvsadm -Ln")?;
            let table: String = listed
                .lines()
                .map(|l| l.split_once("  # ").map_or(l, |(kernel, _)| kernel))
                .flat_map(|l| [l, "\n"])
                .collect();
            attempts += 1;
            if table == ipvsadm || attempts == 3 {
                assert_eq!(table, ipvsadm, "list in the Pod:\n{listed}");
                break listed;
            }
        };
        let note = listed
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(vs.as_str()))
            .and_then(|l| l.split_once("  # "))
            .map(|(_, note)| note);
        assert_eq!(
            note,
            Some("node-e2e-explain/web:http clusterIP"),
            "{listed}"
        );

        let answer: Value = serde_json::from_str(&in_pod(&[
            "explain",
            "--output",
            "json",
            "node-e2e-explain/web",
        ])?)?;
        let frontend = answer["ports"][0]["frontends"]
            .as_array()
            .and_then(|f| f.iter().find(|f| f["kind"] == "clusterIP"))
            .with_context(|| format!("no clusterIP frontend: {answer:#}"))?;
        let endpoints = frontend["endpoints"].as_array().cloned();
        let by_address = |address: &str| {
            endpoints
                .iter()
                .flatten()
                .find(|e| e["address"] == address.split(':').next().unwrap())
                .cloned()
                .unwrap_or_default()
        };
        assert_eq!(by_address(&one)["used"], true, "{answer:#}");
        let not_ready = by_address(&two);
        assert_eq!(not_ready["used"], false, "{answer:#}");
        assert_eq!(not_ready["reason"], "not-ready", "{answer:#}");
        assert_eq!(not_ready["node"], c.env.node.as_str(), "{answer:#}");
        assert!(
            answer.get("kernelNotRead").is_none(),
            "the Pod could not read the kernel: {answer:#}"
        );
        let checks = answer["kernel"].as_array().cloned().unwrap_or_default();
        assert!(!checks.is_empty(), "{answer:#}");
        for check in &checks {
            assert_eq!(check["differences"], json!([]), "{answer:#}");
        }
        println!(
            "node_e2e: list and explain in {pod_name}: {} virtual servers \
             named, {} frontends of the Service checked against the kernel",
            listed.lines().filter(|l| l.contains("  # ")).count(),
            checks.len()
        );
        Ok(())
    })
}

/// The DaemonSet rolled from one image tag to the other under steady
/// traffic: no request fails, and the new Pod follows a change.
#[test]
#[cfg_attr(
    not(feature = "node-tests"),
    ignore = "needs the real node: run `make node-e2e`"
)]
fn a_rolling_update_loses_no_request() -> Result<()> {
    node_test("node-e2e-rollout", |c| {
        let ports = json!([{"name": "http", "port": 80, "targetPort": 8080}]);
        let ip = c.service("roll", ports)?;
        let vs = endpoint(&ip, 80);
        let before = programming(c.node.as_ref())?;
        let one =
            endpoint(&c.add_pod("roll-1", "roll", &[("http", 8080)])?, 8080);
        let two =
            endpoint(&c.add_pod("roll-2", "roll", &[("http", 8080)])?, 8080);
        expect_serving(c, "two pods", &vs, &[&one, &two], before)?;
        let current = c
            .proxy()
            .current()?
            .and_then(|p| p.spec)
            .and_then(|s| s.containers.into_iter().next())
            .and_then(|c| c.image)
            .context("no proxy Pod")?;
        let next = if current.ends_with("-a") {
            format!("{}-b", c.env.proxy_image)
        } else {
            format!("{}-a", c.env.proxy_image)
        };
        let node = c.node();
        let started = Instant::now();
        let traffic = under_traffic(&node, vs.parse()?, || {
            c.set_image("kube-ipvs-proxy", &next)?;
            c.wait_rolled_out(&c.proxy(), &next)
        })?;
        println!(
            "node_e2e: rolled from {current} to {next} in {:.1?}",
            started.elapsed()
        );
        traffic.expect_no_failure("the rolling update")?;
        c.readiness_round_trip(
            "after the update",
            &vs,
            "roll-1",
            &[&two],
            &[&one, &two],
        )
    })
}

/// docs/install.md's migration, under steady traffic: kubeadm's
/// kube-proxy DaemonSet (upstream's binary, IPVS mode) running; kept off
/// the node by a nodeSelector and ours applied; rolled back. Then
/// kubeadm's way of upgrading: only the image of kubeadm's DaemonSet
/// changed to ours, and back. After every switch the running proxy must
/// follow a readiness change, so it is not just the kernel state left
/// behind that serves. Each step's failed requests are printed; any
/// fails the test.
#[test]
#[cfg_attr(
    not(feature = "node-tests"),
    ignore = "needs the real node: run `make node-e2e`"
)]
fn a_migration_from_kube_proxy_and_back_loses_no_request() -> Result<()> {
    node_test("node-e2e-migration", |c| {
        // A node as kubeadm leaves it: kube-proxy's DaemonSet, no ours.
        let ours = c.env.our_manifest(&format!("{}-a", c.env.proxy_image))?;
        c.env.kubectl(
            &["delete", "--ignore-not-found", "--wait=true", "-f", "-"],
            Some(&ours),
        )?;
        c.poll("our proxy's Pods gone", || c.proxy().gone())?;
        let upstream = c.env.upstream_manifest()?;
        c.env.kubectl(&["apply", "-f", "-"], Some(&upstream))?;
        c.wait_rolled_out(&c.upstream(), &c.env.upstream_image)?;

        let ports = json!([{"name": "http", "port": 80, "targetPort": 8080}]);
        let ip = c.service("moved", ports)?;
        let vs = endpoint(&ip, 80);
        let one =
            endpoint(&c.add_pod("moved-1", "moved", &[("http", 8080)])?, 8080);
        let two =
            endpoint(&c.add_pod("moved-2", "moved", &[("http", 8080)])?, 8080);
        expect_serving(
            c,
            "kube-proxy: two pods",
            &vs,
            &[&one, &two],
            (0.0, 0.0),
        )?;
        let all = [one.as_str(), two.as_str()];
        let node = c.node();
        let addr: SocketAddr = vs.parse()?;
        let mut failed = 0;
        let mut step = |c: &mut NodeCluster,
                        what: &str,
                        change: &dyn Fn(&NodeCluster) -> Result<()>|
         -> Result<()> {
            let started = Instant::now();
            let traffic = under_traffic(&node, addr, || change(c))?;
            println!("node_e2e: {what} in {:.1?}", started.elapsed());
            failed += traffic.failed.len();
            traffic.expect_no_failure(what)?;
            c.readiness_round_trip(what, &vs, "moved-1", &[all[1]], &all)
        };

        let our_image = format!("{}-a", c.env.proxy_image);
        step(
            c,
            "kube-proxy replaced by kube-ipvs-proxy (docs/install.md)",
            &|c| {
                c.env.kubectl(
                &["-n", "kube-system", "patch", "daemonset", "kube-proxy", "--type=merge", "-p",
                  r#"{"spec":{"template":{"spec":{"nodeSelector":{"kube-ipvs-proxy/run-kube-proxy":"true"}}}}}"#],
                None,
            )?;
                c.poll("kube-proxy's Pod gone", || c.upstream().gone())?;
                c.env.kubectl(
                    &["apply", "-f", "-"],
                    Some(&c.env.our_manifest(&our_image)?),
                )?;
                c.wait_rolled_out(&c.proxy(), &our_image)
            },
        )?;
        step(c, "rolled back to kube-proxy (docs/install.md)", &|c| {
            c.env.kubectl(
                &["delete", "--wait=true", "-f", "-"],
                Some(&c.env.our_manifest(&our_image)?),
            )?;
            c.poll("our proxy's Pod gone", || c.proxy().gone())?;
            c.env.kubectl(
                &["-n", "kube-system", "patch", "daemonset", "kube-proxy", "--type=json", "-p",
                  r#"[{"op":"remove","path":"/spec/template/spec/nodeSelector/kube-ipvs-proxy~1run-kube-proxy"}]"#],
                None,
            )?;
            c.wait_rolled_out(&c.upstream(), &c.env.upstream_image)
        })?;
        step(c, "kubeadm's DaemonSet given our image only", &|c| {
            c.set_image("kube-proxy", &our_image)?;
            c.wait_rolled_out(&c.upstream(), &our_image)
        })?;
        step(
            c,
            "kubeadm's DaemonSet given kube-proxy's image back",
            &|c| {
                c.set_image("kube-proxy", &c.env.upstream_image)?;
                c.wait_rolled_out(&c.upstream(), &c.env.upstream_image)
            },
        )?;
        println!("node_e2e: migration: {failed} failed requests in all");

        // Leave the node as the other tests expect it: ours, not kube-proxy.
        c.env
            .kubectl(&["delete", "--wait=true", "-f", "-"], Some(&upstream))?;
        c.poll("kube-proxy's Pod gone", || c.upstream().gone())?;
        c.env.kubectl(&["apply", "-f", "-"], Some(&ours))?;
        c.wait_rolled_out(&c.proxy(), &our_image)?;
        assert_eq!(serving(c.node.as_ref(), &vs)?, all);
        Ok(())
    })
}

/// `ctr` on the node's containerd, in the kubelet's namespace (where the
/// images are).
fn ctr(args: &[&str]) -> Result<String> {
    Ok(testkit::run(
        Command::new("ctr")
            .args([
                "--address",
                "/run/containerd/containerd.sock",
                "-n",
                "k8s.io",
            ])
            .args(args),
    )?)
}

/// The image on a node whose iptables backend is legacy, then on one whose
/// backend is nft: each "node" a network namespace holding the kubelet's
/// hint chain (KUBE-IPTABLES-HINT in mangle) in that backend only, the
/// container joined to it. The image's `iptables` (the wrapper, on its
/// first call) must write to that backend, and so must the proxy, which
/// runs there on examples/cluster.yaml until its chains appear.
#[test]
#[cfg_attr(
    not(feature = "node-tests"),
    ignore = "needs the real node: run `make node-e2e`"
)]
fn the_image_follows_the_nodes_iptables_backend() -> Result<()> {
    testkit::guest::require();
    let env = Env::read()?;
    let image = format!("{}-a", env.proxy_image);
    let state = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/cluster.yaml");
    for (backend, other) in [("legacy", "nft"), ("nft", "legacy")] {
        let ns = format!("e2e-{backend}-node");
        let netns = format!("network:/run/netns/{ns}");
        let save = |which: &str, table: &str| {
            sh(&format!(
                "ip netns exec {ns} iptables-{which}-save -t {table}"
            ))
        };
        sh(&format!(
            "ip netns del {ns} 2>/dev/null; ip netns add {ns} && \
             ip -n {ns} link set lo up && \
             ip netns exec {ns} iptables-{backend} -t mangle -N KUBE-IPTABLES-HINT"
        ))?;
        let result = (|| -> Result<()> {
            let id = format!("wrapper-{backend}");
            let mode = ctr(&[
                "run",
                "--rm",
                "--privileged",
                "--with-ns",
                &netns,
                &image,
                &id,
                "sh",
                "-c",
                "iptables -t nat -N KUBE-E2E-PROBE && iptables -V",
            ])?;
            println!(
                "node_e2e: on a {backend} node the image's iptables is: {}",
                mode.trim()
            );
            ensure!(
                mode.contains(if backend == "nft" {
                    "(nf_tables)"
                } else {
                    "(legacy)"
                }),
                "the image's iptables on a {backend} node: {mode}"
            );
            ensure!(
                save(backend, "nat")?.contains(":KUBE-E2E-PROBE"),
                "the probe chain is not in {backend}"
            );
            ensure!(
                !save(other, "nat")?.contains(":KUBE-E2E-PROBE"),
                "the probe chain went to {other}"
            );

            let id = format!("proxy-{backend}");
            let mount = format!(
                "type=bind,src={state},dst=/state.yaml,options=rbind:ro"
            );
            let _ = ctr(&["task", "kill", "-s", "KILL", &id]);
            let _ = ctr(&["container", "rm", &id]);
            ctr(&[
                "run",
                "-d",
                "--privileged",
                "--with-ns",
                &netns,
                "--mount",
                &mount,
                &image,
                &id,
                "kube-ipvs-proxy",
                "--state",
                "/state.yaml",
            ])?;
            let start = Instant::now();
            let mut written = false;
            while start.elapsed() < Duration::from_secs(120) && !written {
                written = save(backend, "nat")?.contains(":KUBE-SERVICES");
                thread::sleep(Duration::from_millis(500));
            }
            let _ = ctr(&["task", "kill", "-s", "KILL", &id]);
            thread::sleep(Duration::from_secs(1));
            let _ = ctr(&["task", "rm", "-f", &id]);
            let _ = ctr(&["container", "rm", &id]);
            ensure!(
                written,
                "the proxy wrote no KUBE-SERVICES chain to {backend} in 120 s"
            );
            ensure!(
                !save(other, "nat")?.contains(":KUBE-SERVICES"),
                "the proxy wrote its chains to {other} on a {backend} node"
            );
            println!("node_e2e: on a {backend} node the proxy's chains are in {backend}");
            Ok(())
        })();
        let _ = sh(&format!("ip netns del {ns}"));
        result?;
    }
    Ok(())
}
