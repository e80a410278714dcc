//! The proxy in the real-kernel guest against a real control plane: the
//! kube-apiserver and kube-controller-manager of tests/e2e/control-plane.sh
//! on the host, reached through QEMU's guestfwd. Each test creates Services
//! and Pods bound to the guest's node, starts the matching netns "pods",
//! sets each Pod's status through the status subresource so that the real
//! EndpointSlice controller writes the slices, and checks the kernel
//! (`ipvsadm`, kube-ipvs0, ipsets) and real traffic.
//!
//! Run by `make e2e` (features `kernel-tests` and `e2e-tests`, in the
//! guest, with the control plane's kubeconfigs in E2E_* variables).

// Named after the file so that a name filter of `cluster_e2e` selects
// these tests and nothing from the other test binaries.
mod cluster_e2e {
    use std::io::{BufRead, BufReader, Write};
    use std::net::{SocketAddr, TcpStream};
    use std::path::PathBuf;
    use std::process::{Child, Command, Stdio};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, MutexGuard};
    use std::thread;
    use std::time::{Duration, Instant};

    use anyhow::{bail, Context, Result};
    use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
    use kube::api::{
        Api, DeleteParams, ListParams, Patch, PatchParams, PostParams,
    };
    use kube::config::{KubeConfigOptions, Kubeconfig};
    use kube::Client;
    use serde_json::{json, Value};
    use testkit::{start_pods, tcp_tally, PodSpec, Tally};

    const PROXY: &str = env!("CARGO_BIN_EXE_kube-ipvs-proxy");
    const NODE: &str = "node-a";
    const NODE_IP: &str = "198.18.100.1";
    const TIMEOUT: Duration = Duration::from_secs(3);
    /// Long enough for a change after an API server outage: the watchers'
    /// retry backoff (client-go's: doubling from 0.8 s to 30 s, with
    /// jitter) took 75 s to catch up after a one-minute outage.
    const SETTLE: Duration = Duration::from_secs(150);
    /// control-plane.sh's control port, through guestfwd.
    const CONTROL: &str = "10.0.2.100:6440";

    fn env_path(name: &str) -> Result<PathBuf> {
        std::env::var_os(name)
            .map(PathBuf::from)
            .with_context(|| format!("{name} is not set: run `make e2e`"))
    }

    fn sh(script: &str) -> Result<String> {
        let out = Command::new("sh").args(["-c", script]).output()?;
        if !out.status.success() {
            bail!(
                "`{script}` failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The real servers of a TCP virtual server that take new connections
    /// (weight above 0), sorted; empty when there is no such server.
    fn serving(vs: &str) -> Result<Vec<String>> {
        let Ok(table) = sh(&format!("ipvsadm -Ln -t {vs}")) else {
            return Ok(Vec::new());
        };
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
        Ok(servers)
    }

    fn virtual_server_exists(vs: &str) -> bool {
        sh(&format!("ipvsadm -Ln -t {vs}")).is_ok()
    }

    /// The sum of a metric's samples on the running proxy's `/metrics`.
    fn metric(name: &str) -> Result<f64> {
        let (status, body) =
            testkit::http_get("127.0.0.1:10249".parse()?, "/metrics", TIMEOUT)?;
        if status != 200 {
            bail!("GET /metrics answered {status}");
        }
        Ok(body
            .lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with(['{', ' ']))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    /// The proxy's network programming latency observations so far:
    /// (count, sum of seconds).
    fn programming() -> Result<(f64, f64)> {
        const NAME: &str = "kubeproxy_network_programming_duration_seconds";
        Ok((
            metric(&format!("{NAME}_count"))?,
            metric(&format!("{NAME}_sum"))?,
        ))
    }

    /// Sends a line to control-plane.sh's control port and waits for its
    /// "ok". The write side stays open until the answer: guestfwd's socat
    /// gives up on a half-closed connection.
    fn control(command: &str) -> Result<()> {
        let addr: SocketAddr = CONTROL.parse()?;
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
    /// runs `--cleanup`, force-deletes the Pods and the namespace, and
    /// removes node0 and the netns pods.
    struct World {
        rt: tokio::runtime::Runtime,
        client: Client,
        ns: String,
        log: PathBuf,
        proxy: Option<Child>,
        pods: Vec<testkit::Pod>,
        _root: MutexGuard<'static, ()>,
    }

    impl World {
        fn new(ns: &str) -> Result<Self> {
            testkit::guest::require();
            let root = testkit::guest::lock_root_netns();
            let _ = Command::new(PROXY).arg("--cleanup").output();
            sh(&format!(
                "ip link del node0 2>/dev/null; \
                 ip link add node0 type dummy && \
                 ip addr add {NODE_IP}/24 dev node0 && ip link set node0 up"
            ))?;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            let kubeconfig = env_path("E2E_ADMIN_GUEST_KUBECONFIG")?;
            let client = rt.block_on(async {
                let config = kube::Config::from_custom_kubeconfig(
                    Kubeconfig::read_from(&kubeconfig)?,
                    &KubeConfigOptions::default(),
                )
                .await?;
                anyhow::Ok(Client::try_from(config)?)
            })?;
            let dir = std::env::temp_dir().join("cluster-e2e");
            std::fs::create_dir_all(&dir)?;
            let world = Self {
                rt,
                client,
                ns: ns.to_string(),
                log: dir.join(format!("{ns}.log")),
                proxy: None,
                pods: Vec::new(),
                _root: root,
            };
            world.reset_namespace()?;
            Ok(world)
        }

        fn pods_api(&self) -> Api<Pod> {
            Api::namespaced(self.client.clone(), &self.ns)
        }

        fn services_api(&self) -> Api<Service> {
            Api::namespaced(self.client.clone(), &self.ns)
        }

        fn release_pods(&self) -> Result<()> {
            let api = self.pods_api();
            self.rt.block_on(async {
                for pod in api.list(&ListParams::default()).await? {
                    let Some(name) = pod.metadata.name.as_deref() else {
                        continue;
                    };
                    let _ = api
                        .delete(
                            name,
                            &DeleteParams {
                                grace_period_seconds: Some(0),
                                ..DeleteParams::default()
                            },
                        )
                        .await;
                }
                anyhow::Ok(())
            })
        }

        fn reset_namespace(&self) -> Result<()> {
            let namespaces: Api<Namespace> = Api::all(self.client.clone());
            let exists = self.rt.block_on(namespaces.get_opt(&self.ns))?;
            if exists.is_some() {
                self.release_pods()?;
                let _ = self.rt.block_on(
                    namespaces.delete(&self.ns, &DeleteParams::default()),
                );
                let start = Instant::now();
                while self.rt.block_on(namespaces.get_opt(&self.ns))?.is_some()
                {
                    if start.elapsed() > SETTLE {
                        bail!("namespace {} does not go away", self.ns);
                    }
                    thread::sleep(Duration::from_millis(500));
                }
            }
            let body = json!({"metadata": {"name": self.ns}});
            self.rt.block_on(namespaces.create(
                &PostParams::default(),
                &serde_json::from_value(body)?,
            ))?;
            // Pods cannot be admitted before the namespace's default
            // ServiceAccount exists.
            let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
                Api::namespaced(self.client.clone(), &self.ns);
            let start = Instant::now();
            while self.rt.block_on(accounts.get_opt("default"))?.is_none() {
                if start.elapsed() > SETTLE {
                    bail!("no default ServiceAccount in {}", self.ns);
                }
                thread::sleep(Duration::from_millis(200));
            }
            Ok(())
        }

        fn start_proxy(&mut self) -> Result<()> {
            let kubeconfig = env_path("E2E_PROXY_KUBECONFIG")?;
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)?;
            let child = Command::new(PROXY)
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args(["--hostname-override", NODE])
                .env("RUST_LOG", "info")
                .env("NO_COLOR", "1")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .context("starting the proxy")?;
            self.proxy = Some(child);
            self.wait_for("the proxy's first sync", || {
                Ok(metric("kubeproxy_sync_proxy_rules_last_timestamp_seconds")?
                    > 0.0)
            })
        }

        fn stop_proxy(&mut self) {
            if let Some(mut child) = self.proxy.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }

        /// Creates a Service selecting `app=<name>` and returns its
        /// cluster IP.
        fn service(&self, name: &str, ports: Value) -> Result<String> {
            let body = json!({
                "metadata": {"name": name},
                "spec": {"selector": {"app": name}, "ports": ports},
            });
            let created = self.rt.block_on(self.services_api().create(
                &PostParams::default(),
                &serde_json::from_value(body)?,
            ))?;
            created
                .spec
                .and_then(|s| s.cluster_ip)
                .context("the Service got no cluster IP")
        }

        fn delete_service(&self, name: &str) -> Result<()> {
            self.rt.block_on(
                self.services_api().delete(name, &DeleteParams::default()),
            )?;
            Ok(())
        }

        /// A Pod of `app` bound to the guest's node, its netns pod
        /// listening on the container ports, and a Ready status.
        fn add_pod(
            &mut self,
            name: &str,
            app: &str,
            ip: &str,
            ports: &[(&str, u16)],
        ) -> Result<()> {
            let container_ports: Vec<Value> = ports
                .iter()
                .map(|(n, p)| json!({"name": n, "containerPort": p}))
                .collect();
            let body = json!({
                "metadata": {"name": name, "labels": {"app": app}},
                "spec": {
                    "nodeName": NODE,
                    "containers": [{
                        "name": "c",
                        "image": "e2e.invalid/none",
                        "ports": container_ports,
                    }],
                },
            });
            let mut spec = PodSpec::new(name).ip(ip.parse()?);
            for (_, port) in ports {
                spec = spec.port(*port);
            }
            self.pods.extend(start_pods(&[spec])?);
            self.rt.block_on(self.pods_api().create(
                &PostParams::default(),
                &serde_json::from_value(body)?,
            ))?;
            self.set_status(name, ip, true)
        }

        /// Sets the Pod's status; the Ready condition's transition time is
        /// now, which the controller passes on as the slice's trigger time
        /// and the proxy measures network programming from.
        fn set_status(&self, name: &str, ip: &str, ready: bool) -> Result<()> {
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
            self.rt.block_on(self.pods_api().patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(status),
            ))?;
            Ok(())
        }

        /// Deletes the Pod for good (no kubelet would confirm a graceful
        /// deletion) and stops its netns pod.
        fn remove_pod(&mut self, name: &str) -> Result<()> {
            self.rt.block_on(self.pods_api().delete(
                name,
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::default()
                },
            ))?;
            self.pods.retain(|p| p.name() != name);
            Ok(())
        }

        fn wait_for(
            &self,
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
            let kernel = sh("ipvsadm -Ln; ip -brief addr show kube-ipvs0")
                .unwrap_or_else(|e| e.to_string());
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            bail!(
                "timed out waiting for {what} (last error: {last:?})\n\
                 proxy log:\n{log}\nkernel:\n{kernel}"
            )
        }

        /// Waits until `vs` serves exactly `want`, and prints how long the
        /// proxy says the change took from the API write.
        fn expect_serving(
            &self,
            what: &str,
            vs: &str,
            want: &[&str],
            before: (f64, f64),
        ) -> Result<()> {
            let mut want: Vec<String> =
                want.iter().map(|s| (*s).to_string()).collect();
            want.sort();
            let started = Instant::now();
            self.wait_for(what, || Ok(serving(vs)? == want))?;
            let seen = started.elapsed();
            let (count, sum) = programming()?;
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
                "cluster_e2e: {what}: in the kernel {seen:.1?} after the \
                 test's check began; network programming: {latency}"
            );
            Ok(())
        }
    }

    impl Drop for World {
        fn drop(&mut self) {
            self.stop_proxy();
            let _ = Command::new(PROXY).arg("--cleanup").output();
            let _ = self.release_pods();
            let namespaces: Api<Namespace> = Api::all(self.client.clone());
            let _ = self.rt.block_on(
                namespaces.delete(&self.ns, &DeleteParams::default()),
            );
            let _ = sh("ip link del node0");
        }
    }

    fn only(tally: &Tally) -> Vec<&str> {
        tally.keys().map(String::as_str).collect()
    }

    #[test]
    #[cfg_attr(
        not(all(feature = "kernel-tests", feature = "e2e-tests")),
        ignore = "needs the guest and the control plane: run `make e2e`"
    )]
    fn a_service_follows_its_pods() -> Result<()> {
        let mut w = World::new("e2e-life")?;
        w.start_proxy()?;
        let ports = json!([{"name": "http", "port": 80, "targetPort": 8080}]);
        let ip = w.service("web", ports)?;
        let vs = format!("{ip}:80");

        let before = programming()?;
        w.add_pod("web-1", "web", "198.19.40.2", &[("http", 8080)])?;
        w.add_pod("web-2", "web", "198.19.40.3", &[("http", 8080)])?;
        w.expect_serving(
            "create: two pods",
            &vs,
            &["198.19.40.2:8080", "198.19.40.3:8080"],
            before,
        )?;
        let tally = tcp_tally(vs.parse()?, 4, TIMEOUT)?;
        assert_eq!(only(&tally), ["web-1", "web-2"], "{tally:?}");

        let before = programming()?;
        w.add_pod("web-3", "web", "198.19.40.4", &[("http", 8080)])?;
        w.expect_serving(
            "scale up to three",
            &vs,
            &["198.19.40.2:8080", "198.19.40.3:8080", "198.19.40.4:8080"],
            before,
        )?;

        let before = programming()?;
        w.remove_pod("web-1")?;
        w.expect_serving(
            "scale down to two",
            &vs,
            &["198.19.40.3:8080", "198.19.40.4:8080"],
            before,
        )?;

        let before = programming()?;
        w.set_status("web-2", "198.19.40.3", false)?;
        w.expect_serving(
            "web-2 not ready",
            &vs,
            &["198.19.40.4:8080"],
            before,
        )?;
        let tally = tcp_tally(vs.parse()?, 2, TIMEOUT)?;
        assert_eq!(only(&tally), ["web-3"], "{tally:?}");

        let before = programming()?;
        w.set_status("web-2", "198.19.40.3", true)?;
        w.expect_serving(
            "web-2 ready again",
            &vs,
            &["198.19.40.3:8080", "198.19.40.4:8080"],
            before,
        )?;

        w.delete_service("web")?;
        w.wait_for("the virtual server, address and set entry gone", || {
            Ok(!virtual_server_exists(&vs)
                && !sh("ip -o addr show dev kube-ipvs0")?
                    .contains(&format!("{ip}/32"))
                && !sh("ipset list KUBE-CLUSTER-IP")?.contains(&ip))
        })?;
        Ok(())
    }

    #[test]
    #[cfg_attr(
        not(all(feature = "kernel-tests", feature = "e2e-tests")),
        ignore = "needs the guest and the control plane: run `make e2e`"
    )]
    fn named_target_ports_span_several_slices() -> Result<()> {
        let mut w = World::new("e2e-named")?;
        w.start_proxy()?;
        let ports = json!([{"name": "http", "port": 80, "targetPort": "web"}]);
        let ip = w.service("named", ports)?;
        let vs = format!("{ip}:80");
        let before = programming()?;
        w.add_pod("named-a", "named", "198.19.41.2", &[("web", 8080)])?;
        w.add_pod("named-b", "named", "198.19.41.3", &[("web", 8081)])?;
        w.expect_serving(
            "two pods, two port numbers",
            &vs,
            &["198.19.41.2:8080", "198.19.41.3:8081"],
            before,
        )?;
        let tally = tcp_tally(vs.parse()?, 4, TIMEOUT)?;
        assert_eq!(only(&tally), ["named-a", "named-b"], "{tally:?}");
        Ok(())
    }

    #[test]
    #[cfg_attr(
        not(all(feature = "kernel-tests", feature = "e2e-tests")),
        ignore = "needs the guest and the control plane: run `make e2e`"
    )]
    fn the_kernel_state_outlives_an_api_server_outage() -> Result<()> {
        let mut w = World::new("e2e-outage")?;
        w.start_proxy()?;
        let ports = json!([{"name": "http", "port": 80, "targetPort": 8080}]);
        let ip = w.service("steady", ports)?;
        let vs = format!("{ip}:80");
        let before = programming()?;
        w.add_pod("steady-1", "steady", "198.19.42.2", &[("http", 8080)])?;
        w.expect_serving("one pod", &vs, &["198.19.42.2:8080"], before)?;

        control("apiserver-stop")?;
        let outage = (|| -> Result<()> {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(60) {
                assert_eq!(serving(&vs)?, ["198.19.42.2:8080"]);
                let tally = tcp_tally(vs.parse()?, 1, TIMEOUT)?;
                assert_eq!(only(&tally), ["steady-1"]);
                thread::sleep(Duration::from_secs(5));
            }
            Ok(())
        })();
        control("apiserver-start")?;
        outage?;
        if let Some(child) = w.proxy.as_mut() {
            assert!(
                child.try_wait()?.is_none(),
                "the proxy exited while its API server was away"
            );
        }

        let before = programming()?;
        w.add_pod("steady-2", "steady", "198.19.42.3", &[("http", 8080)])?;
        w.expect_serving(
            "a change after the outage",
            &vs,
            &["198.19.42.2:8080", "198.19.42.3:8080"],
            before,
        )?;
        Ok(())
    }

    #[test]
    #[cfg_attr(
        not(all(feature = "kernel-tests", feature = "e2e-tests")),
        ignore = "needs the guest and the control plane: run `make e2e`"
    )]
    fn a_proxy_restart_loses_no_request() -> Result<()> {
        let mut w = World::new("e2e-restart")?;
        w.start_proxy()?;
        let ports = json!([{"name": "http", "port": 80, "targetPort": 8080}]);
        let ip = w.service("kept", ports)?;
        let vs = format!("{ip}:80");
        let before = programming()?;
        w.add_pod("kept-1", "kept", "198.19.43.2", &[("http", 8080)])?;
        w.add_pod("kept-2", "kept", "198.19.43.3", &[("http", 8080)])?;
        w.expect_serving(
            "two pods",
            &vs,
            &["198.19.43.2:8080", "198.19.43.3:8080"],
            before,
        )?;

        let addr: SocketAddr = vs.parse()?;
        let stop = Arc::new(AtomicBool::new(false));
        let client = {
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                let (mut ok, mut failed) = (0usize, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    match tcp_tally(addr, 1, TIMEOUT) {
                        Ok(_) => ok += 1,
                        Err(e) => failed.push(e.to_string()),
                    }
                    thread::sleep(Duration::from_millis(20));
                }
                (ok, failed)
            })
        };
        thread::sleep(Duration::from_secs(1));
        w.stop_proxy();
        thread::sleep(Duration::from_millis(500));
        w.start_proxy()?;
        thread::sleep(Duration::from_secs(2));
        stop.store(true, Ordering::Relaxed);
        let (ok, failed) = client
            .join()
            .map_err(|_| anyhow::anyhow!("the client thread panicked"))?;
        assert_eq!(failed, Vec::<String>::new(), "failed requests ({ok} ok)");
        assert!(ok >= 10, "only {ok} requests in the window");
        assert_eq!(serving(&vs)?, ["198.19.43.2:8080", "198.19.43.3:8080"]);
        Ok(())
    }
}
