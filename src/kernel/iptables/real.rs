//! The real iptables, through `iptables-save` / `iptables-restore
//! --noflush` (and the ip6tables pair): one process per call, never one
//! per rule.

use std::{
    io::Write as _,
    process::{Command, Stdio},
};

use super::{IpFamily, Iptables};
use crate::{
    kernel::{read_thread, DetachedRead, ErrorKind, KernelError},
    telemetry::events::{InternalEvent, IptablesRestoreFailed},
};

/// Which iptables binaries to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// `iptables` as installed (whatever the alternatives system picks).
    Installed,
    Nft,
    Legacy,
}

impl Variant {
    fn suffix(self) -> &'static str {
        match self {
            Variant::Installed => "",
            Variant::Nft => "-nft",
            Variant::Legacy => "-legacy",
        }
    }

    fn binary(self, family: IpFamily, what: &str) -> String {
        let base = match family {
            IpFamily::V4 => "iptables",
            IpFamily::V6 => "ip6tables",
        };
        format!("{base}{}{what}", self.suffix())
    }

    /// Picks the variant the node already uses, as kube-proxy's image
    /// does (its iptables-wrapper): the kubelet creates the chain
    /// `KUBE-IPTABLES-HINT` (or, in older releases, `KUBE-KUBELET-CANARY`)
    /// in the mangle table of the mode it uses; failing that, the variant
    /// holding more rules wins; with nothing to go by, `iptables` as
    /// installed. Runs at most two saves, once at start-up.
    pub async fn detect() -> Variant {
        tokio::task::spawn_blocking(detect_blocking)
            .await
            .unwrap_or(Variant::Installed)
    }
}

fn detect_blocking() -> Variant {
    let dump = |v: Variant| {
        Command::new(v.binary(IpFamily::V4, "-save"))
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    choose(
        dump(Variant::Nft).as_deref(),
        dump(Variant::Legacy).as_deref(),
    )
}

/// The decision of [`Variant::detect`] from the two dumps (`None`: that
/// variant's tool is missing or failed).
fn choose(nft: Option<&str>, legacy: Option<&str>) -> Variant {
    let (Some(nft), Some(legacy)) = (nft, legacy) else {
        return Variant::Installed;
    };
    let hint = |d: &str| {
        d.lines().any(|l| {
            l.starts_with(":KUBE-IPTABLES-HINT")
                || l.starts_with(":KUBE-KUBELET-CANARY")
        })
    };
    match (hint(nft), hint(legacy)) {
        (true, false) => return Variant::Nft,
        (false, true) => return Variant::Legacy,
        _ => {}
    }
    let rules = |d: &str| d.lines().filter(|l| l.starts_with("-A ")).count();
    match rules(nft).cmp(&rules(legacy)) {
        std::cmp::Ordering::Greater => Variant::Nft,
        std::cmp::Ordering::Less => Variant::Legacy,
        std::cmp::Ordering::Equal => Variant::Installed,
    }
}

/// The restore tools of one variant.
#[derive(Debug, Clone)]
pub struct RealIptables {
    variant: Variant,
}

impl RealIptables {
    pub fn new(variant: Variant) -> Self {
        Self { variant }
    }
}

struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn run(
    program: String,
    args: Vec<String>,
    input: Option<String>,
) -> Result<Output, String> {
    let mut child = Command::new(&program)
        .args(&args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        // A tool that fails early closes its input; its stderr says why,
        // so a broken pipe here is not the error to report.
        let _ = stdin.write_all(text.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("waiting for {program}: {e}"))?;
    Ok(Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    })
}

async fn run_async(
    program: String,
    args: Vec<String>,
    input: Option<String>,
) -> Result<Output, String> {
    tokio::task::spawn_blocking(move || run(program, args, input))
        .await
        .map_err(|e| format!("tool task failed: {e}"))?
}

/// The line number a restore tool's stderr names: `line N failed`,
/// `line N: ...`, or `Error occurred at line: N`.
fn stderr_line(stderr: &str) -> Option<usize> {
    for marker in ["Error occurred at line: ", "line "] {
        for (at, _) in stderr.match_indices(marker) {
            let digits: String = stderr[at + marker.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(n) = digits.parse() {
                return Some(n);
            }
        }
    }
    None
}

/// A best-effort reading of the tool's message; the legacy tools often
/// say only "line N failed".
fn classify(stderr: &str) -> ErrorKind {
    let s = stderr.to_ascii_lowercase();
    if s.contains("does not exist")
        || s.contains("doesn't exist")
        || s.contains("no chain/target/match")
        || s.contains("couldn't load target")
        || s.contains("does a matching rule exist")
        || s.contains("no such file")
    {
        ErrorKind::NotFound
    } else if s.contains("busy") || s.contains("too many links") {
        ErrorKind::Other
    } else {
        ErrorKind::Invalid
    }
}

fn first_table(payload: &str) -> &str {
    payload
        .lines()
        .find_map(|l| l.trim().strip_prefix('*'))
        .unwrap_or("?")
}

/// `iptables-save -t TABLE` with the variant's tool.
async fn save(
    variant: Variant,
    family: IpFamily,
    table: String,
) -> Result<String, KernelError> {
    let program = variant.binary(family, "-save");
    let object = format!("{program} -t {table}");
    let out = run_async(program, vec!["-t".into(), table.clone()], None)
        .await
        .map_err(|e| KernelError::new(ErrorKind::Transport, &object, e))?;
    if !out.ok {
        return Err(KernelError::new(
            classify(&out.stderr),
            &object,
            out.stderr,
        ));
    }
    Ok(out.stdout)
}

impl Iptables for RealIptables {
    async fn save(
        &mut self,
        family: IpFamily,
        table: &str,
    ) -> Result<String, KernelError> {
        save(self.variant, family, table.to_owned()).await
    }

    fn save_detached(
        &self,
        family: IpFamily,
        table: &str,
    ) -> impl DetachedRead<String> + use<> {
        // Started from the reads' runtime, the tool runs at its lower
        // priority: a repair's iptables-save yields to the syncs.
        read_thread::run(save(self.variant, family, table.to_owned()))
    }

    async fn restore(
        &mut self,
        family: IpFamily,
        payload: &str,
    ) -> Result<(), KernelError> {
        let program = self.variant.binary(family, "-restore");
        let object = format!("{program} ({} {})", family, first_table(payload));
        // --wait: the legacy tools take the xtables lock; waiting for it
        // beats failing a sync because someone else held it.
        let args = vec!["--noflush".into(), "--wait".into(), "5".into()];
        let result = run_async(program, args, Some(payload.to_owned())).await;
        let err = match result {
            Ok(out) if out.ok => return Ok(()),
            Ok(out) => {
                let line = stderr_line(&out.stderr);
                let text = line
                    .and_then(|n| payload.lines().nth(n.saturating_sub(1)))
                    .map(|l| format!(" (at: {l})"))
                    .unwrap_or_default();
                let message = match line {
                    Some(n) => format!("line {n}: {}{text}", out.stderr),
                    None => out.stderr,
                };
                KernelError::new(classify(&message), &object, message)
            }
            Err(e) => KernelError::new(ErrorKind::Transport, &object, e),
        };
        IptablesRestoreFailed {
            family,
            error: &err,
        }
        .emit();
        Err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_failing_line_from_either_tool() {
        let cases = [
            ("iptables-restore: line 2 failed", Some(2)),
            (
                "iptables-nft-restore v1.8.9 (nf_tables): \nline 3: CHAIN_DEL \
                 failed (Device or resource busy): chain KUBE-B",
                Some(3),
            ),
            (
                "iptables-restore v1.8.9 (legacy): Couldn't load target \
                 `KUBE-NOPE':No such file or directory\n\nError occurred at \
                 line: 3",
                Some(3),
            ),
            ("something else", None),
        ];
        for (stderr, want) in cases {
            assert_eq!(stderr_line(stderr), want, "{stderr}");
        }
    }

    #[test]
    fn picks_the_variant_the_node_uses() {
        let hinted = "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n";
        let busy = "*filter\n-A INPUT -j A\n-A INPUT -j B\nCOMMIT\n";
        let cases = [
            ("legacy tool missing", Some(busy), None, Variant::Installed),
            (
                "kubelet hint in nft",
                Some(hinted),
                Some(busy),
                Variant::Nft,
            ),
            (
                "kubelet hint in legacy",
                Some(busy),
                Some(hinted),
                Variant::Legacy,
            ),
            ("more legacy rules", Some(""), Some(busy), Variant::Legacy),
            ("nothing to go by", Some(""), Some(""), Variant::Installed),
        ];
        for (name, nft, legacy, want) in cases {
            assert_eq!(choose(nft, legacy), want, "{name}");
        }
    }

    #[test]
    fn classifies_messages() {
        assert_eq!(
            classify("Chain 'KUBE-NOPE' does not exist"),
            ErrorKind::NotFound
        );
        assert_eq!(
            classify("CHAIN_DEL failed (Device or resource busy)"),
            ErrorKind::Other
        );
        assert_eq!(classify("line 2 failed"), ErrorKind::Invalid);
    }
}
