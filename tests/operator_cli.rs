//! The binary as an operator meets it first: `--version`, logs written to
//! a file or a pipe, `--write-config-to`, and a start on a kernel that
//! cannot run IPVS mode.

use std::{
    fs::{self, File},
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use kube_ipvs_proxy::config::{self, ConfigArgs};
use serde_json::Value;

const PROXY: &str = env!("CARGO_BIN_EXE_kube-ipvs-proxy");
const KUBEADM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/kube-proxy-config.yaml"
);

/// A scratch folder for one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir()
            .join(format!("kip-operator-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch folder");
        Scratch(dir)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        fs::write(&path, text).expect("write scratch file");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Runs the proxy with stderr going to a file, as a container's does.
fn run_to_file(args: &[&str], stderr: &Path) -> Output {
    let file = File::create(stderr).expect("stderr file");
    Command::new(PROXY)
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stderr(Stdio::from(file))
        .output()
        .expect("the proxy runs")
}

#[test]
fn version_prints_the_version_and_the_commit() {
    let out = Command::new(PROXY).arg("--version").output().expect("runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let commit = text
        .trim()
        .strip_suffix(')')
        .and_then(|t| t.rsplit_once("(git commit "))
        .map(|(_, commit)| commit)
        .unwrap_or_default();
    assert!(
        text.starts_with(&format!(
            "kube-ipvs-proxy v{} ",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
    assert!(
        commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "a full commit id: {text}"
    );
    let raw = Command::new(PROXY)
        .arg("--version=raw")
        .output()
        .expect("runs");
    assert!(String::from_utf8_lossy(&raw.stdout).contains(commit));
}

/// A configuration that warns (kubeadm's `mode: ""`) and a state file
/// with a Service the proxy must skip part of: something to log.
fn noisy_inputs(scratch: &Scratch) -> (PathBuf, PathBuf) {
    let kubeadm = fs::read_to_string(KUBEADM).expect("example config");
    let config = scratch
        .file("config.yaml", &kubeadm.replace("mode: ipvs", "mode: \"\""));
    let state = scratch.file(
        "state.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  \
         namespace: shop\nspec:\n  clusterIP: 198.18.0.10\n  \
         externalIPs: [not-an-ip]\n  ports:\n  - port: 80\n",
    );
    (config, state)
}

/// What `plan` logs on the noisy inputs with `extra` flags, stderr going
/// to a file as a container's does.
fn logged_by_plan(name: &str, extra: &[&str]) -> String {
    let scratch = Scratch::new(name);
    let (config, state) = noisy_inputs(&scratch);
    let log = scratch.0.join("stderr");
    let (config, state) =
        (config.display().to_string(), state.display().to_string());
    let mut args = vec![
        "plan",
        "--node=node-a",
        "--config",
        &config,
        "--state",
        &state,
    ];
    args.extend_from_slice(extra);
    let out = run_to_file(&args, &log);
    assert!(out.status.success(), "{out:?}");
    fs::read_to_string(&log).expect("log")
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))
        })
        .collect()
}

#[test]
fn logs_in_a_file_carry_no_escape_codes() {
    let text = logged_by_plan("text-logs", &[]);
    assert!(text.contains(" WARN "), "something was logged: {text}");
    assert!(text.contains("shop/web"), "{text}");
    assert!(!text.contains('\u{1b}'), "escape codes in {text:?}");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let text = logged_by_plan("json-logs", &["--logging-format=json"]);
    let lines = json_lines(&text);
    assert!(lines.len() >= 2, "{text}");
    for line in &lines {
        for key in ["time", "level", "message", "target"] {
            assert!(line[key].is_string(), "{key} in {line}");
        }
    }
    let mode = lines
        .iter()
        .find(|l| l["field"] == "mode")
        .unwrap_or_else(|| panic!("the mode warning: {text}"));
    assert_eq!(mode["level"], "warn");
    let skipped = lines
        .iter()
        .find(|l| l["kind"] == "Service")
        .unwrap_or_else(|| panic!("the invalid Service: {text}"));
    assert_eq!(skipped["namespace"], "shop");
    assert_eq!(skipped["name"], "web");
    assert_eq!(skipped["reason"], "invalid_ip");
}

#[test]
fn verbosity_two_logs_debug_lines() {
    let levels = |v: &str| -> Vec<String> {
        let text = logged_by_plan(
            &format!("verbosity{v}"),
            &["--logging-format=json", v],
        );
        json_lines(&text)
            .iter()
            .map(|l| l["level"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert!(!levels("-v=1").iter().any(|l| l == "debug"));
    assert!(levels("-v=2").iter().any(|l| l == "debug"));
}

#[test]
fn write_config_to_writes_what_config_reads_back() {
    let scratch = Scratch::new("write-config");
    let target = scratch.0.join("written.yaml");
    let out = Command::new(PROXY)
        .args(["--config", KUBEADM, "--write-config-to"])
        .arg(&target)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{out:?}");
    let written = fs::read_to_string(&target).expect("the file is written");
    let original = config::resolve(
        &ConfigArgs::default(),
        Some(&fs::read_to_string(KUBEADM).expect("example")),
    )
    .expect("valid");
    let read = config::resolve(&ConfigArgs::default(), Some(&written))
        .expect("the written file is valid");
    assert_eq!(read.config, original.config, "{written}");
    assert_eq!(read.warnings, vec![], "{written}");
}

/// A network namespace of the test's own, deleted when dropped.
struct Netns(String);

impl Netns {
    fn new(name: &str) -> Self {
        let name = format!("kip-{name}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        sh(&format!("ip netns add {name}"));
        Netns(name)
    }

    fn sh(&self, script: &str) -> String {
        sh(&format!("ip netns exec {} sh -c '{script}'", self.0))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

fn sh(script: &str) -> String {
    let out = Command::new("sh")
        .args(["-c", script])
        .output()
        .expect("sh runs");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What the proxy could have left in the namespace: links, ipsets, KUBE
/// chains in every iptables flavour there is.
fn leftovers(ns: &Netns) -> Vec<String> {
    let mut found: Vec<String> = ns
        .sh("ip -o link show")
        .lines()
        .filter(|l| !l.contains(": lo:"))
        .map(str::to_owned)
        .collect();
    found.extend(ns.sh("ipset list -n").lines().map(|l| format!("set {l}")));
    for save in [
        "iptables-save",
        "ip6tables-save",
        "iptables-legacy-save",
        "ip6tables-legacy-save",
        "iptables-nft-save",
        "ip6tables-nft-save",
    ] {
        let present = Command::new("sh")
            .args(["-c", &format!("command -v {save}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if present {
            found.extend(
                ns.sh(save)
                    .lines()
                    .filter(|l| l.contains("KUBE-"))
                    .map(|l| format!("{save}: {l}")),
            );
        }
    }
    found
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The proxy run in `ns` on examples/cluster.yaml with `extra`, its
/// stderr through a file.
fn run_in(ns: &Netns, scratch: &Scratch, extra: &[&str]) -> (Output, String) {
    let log = scratch.0.join("stderr");
    let state = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/cluster.yaml");
    let file = File::create(&log).expect("stderr file");
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, PROXY, "--state", state])
        .args(["--healthz-bind-address=", "--metrics-bind-address="])
        .args(extra)
        .env_remove("RUST_LOG")
        .stderr(Stdio::from(file))
        .output()
        .expect("the proxy runs");
    (out, fs::read_to_string(&log).expect("log"))
}

// Oracles independent of the proxy: what a kernel with the modules loaded
// shows (the proxy's requests load them where they exist).
fn has_ipvs() -> bool {
    Path::new("/proc/net/ip_vs").exists()
}

fn has_dummy() -> bool {
    Path::new("/sys/module/dummy").exists()
}

const FORWARD: &str = "cat /proc/sys/net/ipv4/ip_forward";

/// The start on this machine's kernel (no IPVS, no dummy driver): one
/// line naming both and the modules, exit 69, and nothing left behind,
/// sysctls included; `--init-only` checks the same.
#[test]
#[cfg_attr(
    feature = "kernel-tests",
    ignore = "the guest has IPVS and the dummy driver loaded, and cannot \
              unload them under the other tests: this runs on the host \
              (`make unit`), whose kernel has neither"
)]
fn a_kernel_without_ipvs_is_refused_and_left_as_it_was() {
    assert!(
        is_root(),
        "needs root for a network namespace (CI and the development \
         machines run tests as root)"
    );
    let (has_ipvs, has_dummy) = (has_ipvs(), has_dummy());
    assert!(
        !(has_ipvs && has_dummy),
        "this kernel has IPVS and the dummy driver: nothing to refuse \
         here (the development and CI hosts have neither)"
    );
    let scratch = Scratch::new("no-ipvs");
    let ns = Netns::new("startup");
    let forward_before = ns.sh(FORWARD);
    let check_refusal = |code: Option<i32>, text: &str| {
        assert_eq!(code, Some(69), "EX_UNAVAILABLE: {text}");
        let errors: Vec<&str> =
            text.lines().filter(|l| l.contains(" ERROR ")).collect();
        assert_eq!(errors.len(), 1, "one line: {text}");
        let line = errors[0];
        assert!(line.contains("this kernel cannot run IPVS mode"), "{line}");
        let mut modules = Vec::new();
        if !has_ipvs {
            assert!(line.contains("missing IPVS ("), "{line}");
            modules.push("ip_vs");
        }
        if !has_dummy {
            assert!(line.contains("dummy links ("), "{line}");
            modules.push("dummy");
        }
        let load = format!("`modprobe {}`", modules.join(" "));
        assert!(line.contains(&load), "{line}");
    };

    let (out, text) = run_in(&ns, &scratch, &["--init-only"]);
    check_refusal(out.status.code(), &text);
    assert_eq!(leftovers(&ns), Vec::<String>::new());
    assert_eq!(ns.sh(FORWARD), forward_before, "sysctls untouched");

    // The proxy's own start: refused the same way, before anything.
    let (out, text) = run_in(&ns, &scratch, &[]);
    check_refusal(out.status.code(), &text);
    assert_eq!(leftovers(&ns), Vec::<String>::new());
    assert_eq!(ns.sh(FORWARD), forward_before, "sysctls untouched");
}

/// Where the kernel has them (the guest), `--init-only` passes the check,
/// sets the sysctls and leaves nothing behind either.
#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs IPVS and the dummy driver: run `make vm-test`"
)]
fn init_only_on_a_kernel_with_ipvs_sets_the_sysctls_and_leaves_nothing() {
    assert!(is_root(), "needs root for a network namespace");
    assert!(
        has_ipvs() && has_dummy(),
        "needs IPVS and the dummy driver loaded (the guest loads both)"
    );
    let scratch = Scratch::new("ipvs");
    let ns = Netns::new("init-only");
    let (out, text) = run_in(&ns, &scratch, &["--init-only"]);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("--init-only"), "{text}");
    assert_eq!(leftovers(&ns), Vec::<String>::new());
    assert_eq!(ns.sh("ipvsadm -Ln | grep -c ^TCP || true").trim(), "0");
    assert_eq!(ns.sh(FORWARD).trim(), "1", "IPVS mode's sysctls set");
}

/// `explain` on a state file, where the kernel has no such virtual
/// servers or none at all: the reasons from the objects, the kernel's
/// part said either way, and exit 1 for a Service that is not there.
#[test]
fn explain_gives_each_endpoint_its_reason_and_its_exit_status() {
    let state = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/plan/loadbalancer-local.yaml"
    );
    let explain = |service: &str| {
        Command::new(PROXY)
            .args(["explain", "--state", state, "--output", "json", service])
            .env("NO_COLOR", "1")
            .output()
            .expect("explain runs")
    };
    let out = explain("default/shop");
    let answer: Value =
        serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let frontends = answer["ports"][0]["frontends"].as_array().unwrap();
    let load_balancer = frontends
        .iter()
        .find(|f| f["kind"] == "loadBalancer")
        .expect("the load balancer's frontend");
    assert_eq!(load_balancer["policy"], "Local", "{answer:#}");
    let reasons: Vec<&str> = (load_balancer["endpoints"].as_array().unwrap())
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or("used"))
        .collect();
    assert_eq!(reasons, ["used", "not-local"], "{answer:#}");
    // Here the kernel has no IPVS (exit 0, said); in a guest it has no
    // such virtual servers (exit 2, each missing one named).
    match out.status.code() {
        Some(0) => assert!(answer["kernelNotRead"].is_string(), "{answer:#}"),
        Some(2) => assert!(
            answer["kernel"]
                .to_string()
                .contains("missing from the kernel"),
            "{answer:#}"
        ),
        other => panic!("exit {other:?}: {answer:#}"),
    }

    let out = explain("default/nosuch");
    assert_eq!(out.status.code(), Some(1));
    let answer: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(answer["found"], false, "{answer}");
}
