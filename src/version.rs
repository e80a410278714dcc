//! What this binary is: its version and the commit it was built from, for
//! `--version` and the `kubernetes_build_info` metric.

use std::fmt::Write as _;

/// Facts fixed at build time (see build.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildInfo {
    /// `v` and the crate's version, as Kubernetes spells its own.
    pub git_version: &'static str,
    pub major: &'static str,
    pub minor: &'static str,
    /// Empty when built outside a git checkout without
    /// KUBE_IPVS_PROXY_GIT_COMMIT.
    pub git_commit: &'static str,
    /// The commit's date (RFC 3339), or KUBE_IPVS_PROXY_BUILD_DATE.
    pub build_date: &'static str,
    /// `rustc --version` of the compiler that built it.
    pub compiler_version: &'static str,
}

pub const BUILD: BuildInfo = BuildInfo {
    git_version: concat!("v", env!("CARGO_PKG_VERSION")),
    major: env!("CARGO_PKG_VERSION_MAJOR"),
    minor: env!("CARGO_PKG_VERSION_MINOR"),
    git_commit: env!("KUBE_IPVS_PROXY_GIT_COMMIT"),
    build_date: env!("KUBE_IPVS_PROXY_BUILD_DATE"),
    compiler_version: env!("KUBE_IPVS_PROXY_RUSTC_VERSION"),
};

/// The Kubernetes release the proxy behaves as, in the API server's
/// words (`/version`): what `kubernetes_build_info` names, and what the
/// API side tells its nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kubernetes {
    pub major: String,
    pub minor: String,
    pub git_version: String,
}

/// Go's names for the platform, as Kubernetes reports it
/// (`linux/amd64`).
pub fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    format!("{}/{arch}", std::env::consts::OS)
}

/// How `--version` was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionFlag {
    /// `--version=false`: run as usual.
    Off,
    /// `--version`: one line.
    Short,
    /// `--version=raw`: every field.
    Raw,
}

impl VersionFlag {
    /// The flag's value as kube-proxy's `--version` takes it.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value {
            "raw" => Ok(VersionFlag::Raw),
            "true" | "1" | "t" | "T" | "TRUE" | "True" => {
                Ok(VersionFlag::Short)
            }
            "false" | "0" | "f" | "F" | "FALSE" | "False" => {
                Ok(VersionFlag::Off)
            }
            other => Err(format!(
                "invalid --version value {other:?} (true, false or raw)"
            )),
        }
    }
}

impl BuildInfo {
    /// What `--version` prints.
    pub fn render(&self, flag: VersionFlag) -> String {
        let commit = if self.git_commit.is_empty() {
            "unknown"
        } else {
            self.git_commit
        };
        match flag {
            VersionFlag::Off => String::new(),
            VersionFlag::Short => format!(
                "kube-ipvs-proxy {} (git commit {commit})\n",
                self.git_version
            ),
            VersionFlag::Raw => {
                let mut out = String::new();
                for (key, value) in [
                    ("gitVersion", self.git_version),
                    ("major", self.major),
                    ("minor", self.minor),
                    ("gitCommit", commit),
                    ("buildDate", self.build_date),
                    ("compiler", self.compiler_version),
                ] {
                    let _ = writeln!(out, "{key}: {value:?}");
                }
                let _ = writeln!(out, "platform: {:?}", platform());
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_names_the_crate_version_and_the_commit() {
        let line = BUILD.render(VersionFlag::Short);
        assert!(line.starts_with(&format!(
            "kube-ipvs-proxy v{} (git commit ",
            env!("CARGO_PKG_VERSION")
        )));
        // Built from this repository, so the commit is known.
        assert_eq!(BUILD.git_commit.len(), 40, "{line}");
        assert!(line.contains(BUILD.git_commit));
        let raw = BUILD.render(VersionFlag::Raw);
        assert!(raw.contains(&format!("gitCommit: {:?}", BUILD.git_commit)));
        assert!(raw.contains("platform: \"linux/"), "{raw}");
    }

    #[test]
    fn flag_values_as_kube_proxy_takes_them() {
        assert_eq!(VersionFlag::parse("true"), Ok(VersionFlag::Short));
        assert_eq!(VersionFlag::parse("raw"), Ok(VersionFlag::Raw));
        assert_eq!(VersionFlag::parse("false"), Ok(VersionFlag::Off));
        assert!(VersionFlag::parse("v1.2.3").is_err());
    }
}
