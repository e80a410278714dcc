//! Build facts for `--version` and `kubernetes_build_info`: the git
//! commit, its date and the compiler. A build outside a git checkout (an
//! image built from a copied tree) can pass them in as
//! KUBE_IPVS_PROXY_GIT_COMMIT and KUBE_IPVS_PROXY_BUILD_DATE;
//! SOURCE_DATE_EPOCH is not used, the commit's date is as reproducible.

use std::process::Command;

fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

fn git(args: &[&str]) -> Option<String> {
    output("git", args)
}

fn main() {
    for var in ["KUBE_IPVS_PROXY_GIT_COMMIT", "KUBE_IPVS_PROXY_BUILD_DATE"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    // A new commit moves HEAD or the branch it points to (a worktree's
    // HEAD lives under the common git directory's worktrees/).
    if let Some(head) = git(&["rev-parse", "--git-path", "HEAD"]) {
        println!("cargo:rerun-if-changed={head}");
    }
    if let Some(branch) = git(&["rev-parse", "--symbolic-full-name", "HEAD"]) {
        if let Some(path) = git(&["rev-parse", "--git-path", &branch]) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    if let Some(packed) = git(&["rev-parse", "--git-path", "packed-refs"]) {
        println!("cargo:rerun-if-changed={packed}");
    }

    let commit = std::env::var("KUBE_IPVS_PROXY_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "HEAD"]))
        .unwrap_or_default();
    let date = std::env::var("KUBE_IPVS_PROXY_BUILD_DATE")
        .ok()
        .filter(|d| !d.is_empty())
        .or_else(|| git(&["log", "-1", "--format=%cI"]))
        .unwrap_or_default();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let rustc_version = output(&rustc, &["--version"]).unwrap_or_default();
    println!("cargo:rustc-env=KUBE_IPVS_PROXY_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=KUBE_IPVS_PROXY_BUILD_DATE={date}");
    println!("cargo:rustc-env=KUBE_IPVS_PROXY_RUSTC_VERSION={rustc_version}");
}
