//! The guest's proxy fed by the API/node split: an API side
//! (`kube-ipvs-proxy api-server`) in the guest watches the real control
//! plane and serves the node's view on a unix socket, and the proxy takes
//! its input from there (`--api-endpoint`). The API side is then killed
//! and, while it is away, the cluster changes: the node keeps what it
//! programmed and serves it, and once the API side is back it catches up.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;

use super::{env_path, Guest, GuestCluster, PROXY};
use crate::scenarios::{
    expect_serving, only, programming, serving, wait_for, Cluster, Node,
};

/// The API side, killed when dropped.
struct ApiSide {
    child: Option<Child>,
    socket: PathBuf,
    log: PathBuf,
}

impl ApiSide {
    fn start(socket: &Path, log: &Path) -> Result<Self> {
        let mut side = Self {
            child: None,
            socket: socket.to_owned(),
            log: log.to_owned(),
        };
        side.spawn()?;
        Ok(side)
    }

    fn spawn(&mut self) -> Result<()> {
        // The proxy's own credentials: the API side reads what every node's
        // proxy reads, for the whole cluster.
        let kubeconfig = env_path("E2E_PROXY_KUBECONFIG")?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = Command::new(PROXY)
            .arg("api-server")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--listen")
            .arg(format!("unix://{}", self.socket.display()))
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting the API side")?;
        self.child = Some(child);
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ApiSide {
    fn drop(&mut self) {
        self.kill();
    }
}

#[test]
#[cfg_attr(
    not(all(feature = "kernel-tests", feature = "e2e-tests")),
    ignore = "needs the guest and the control plane: run `make e2e`"
)]
fn a_node_fed_by_the_split_outlives_its_api_side() -> Result<()> {
    let dir = std::env::temp_dir().join("cluster-e2e");
    std::fs::create_dir_all(&dir)?;
    let socket = dir.join("api-side.sock");
    let mut api = ApiSide::start(&socket, &dir.join("e2e-split-api-side.log"))?;
    let endpoint = format!("unix://{}", socket.display());
    let mut c = GuestCluster::with_proxy_args(
        "e2e-split",
        45,
        &["--api-endpoint", &endpoint],
    )?;
    let ports = json!([{"name": "http", "port": 80, "targetPort": 8080}]);
    let ip = c.service("split", ports)?;
    let vs = format!("{ip}:80");
    let before = programming(&Guest)?;
    let one = c.add_pod("split-1", "split", &[("http", 8080)])?;
    let one = format!("{one}:8080");
    expect_serving(&c, "one pod, through the split", &vs, &[&one], before)?;
    // The node tells the release it behaves as: the API side's, which is
    // the API server's.
    let version = c.api.rt.block_on(c.api.client.apiserver_version())?;
    expect_one_build_info(&version.git_version)?;
    // The slice's trigger time came through the split: the node reports
    // the change's network programming latency as a proxy watching the
    // slices would.
    wait_for(&c, "a network programming observation", || {
        Ok(programming(&Guest)?.0 > before.0)
    })?;

    api.kill();
    // A change the node cannot hear of while its API side is away.
    let two = c.add_pod("split-2", "split", &[("http", 8080)])?;
    let two = format!("{two}:8080");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        assert_eq!(serving(&Guest, &vs)?, [one.as_str()]);
        let tally = Guest.tcp_tally(vs.parse()?, 1)?;
        assert_eq!(only(&tally), ["split-1"]);
        thread::sleep(Duration::from_secs(4));
    }
    if let Some(child) = c.proxy.as_mut() {
        assert!(
            child.try_wait()?.is_none(),
            "the proxy exited while its API side was away"
        );
    }

    let before = programming(&Guest)?;
    api.spawn()?;
    expect_serving(
        &c,
        "caught up once the API side is back",
        &vs,
        &[&one, &two],
        before,
    )?;
    let tally = Guest.tcp_tally(vs.parse()?, 20)?;
    assert_eq!(only(&tally), ["split-1", "split-2"]);

    // And it follows the cluster again. A pod's deletion brings the
    // slice no new trigger time, so a proxy watching the slices observes
    // none either (the plain e2e's scale-down shows it); a new pod's
    // does, through the new API side as through the first.
    let before = programming(&Guest)?;
    c.remove_pod("split-1")?;
    expect_serving(&c, "a pod gone after the restart", &vs, &[&two], before)?;
    let before = programming(&Guest)?;
    let three = c.add_pod("split-3", "split", &[("http", 8080)])?;
    let three = format!("{three}:8080");
    expect_serving(
        &c,
        "a new pod after the restart",
        &vs,
        &[&two, &three],
        before,
    )?;
    wait_for(&c, "a network programming observation", || {
        Ok(programming(&Guest)?.0 > before.0)
    })?;
    // The API side that came back named the same release: still one
    // series.
    expect_one_build_info(&version.git_version)?;
    Ok(())
}

/// The node's `kubernetes_build_info`: one series, naming `git_version`.
fn expect_one_build_info(git_version: &str) -> Result<()> {
    let metrics = Guest.metrics()?;
    let series: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("kubernetes_build_info{"))
        .collect();
    anyhow::ensure!(
        series.len() == 1
            && series[0].contains(&format!("git_version=\"{git_version}\"")),
        "the node's kubernetes_build_info is {series:?}, not one series of {git_version}"
    );
    Ok(())
}
