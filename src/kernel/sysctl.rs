//! The sysctls IPVS mode needs, written only when they differ.
//!
//! Upstream's IPVS proxier sets these once when it starts, failing the
//! start if one cannot be written: conntrack for IPVS connections (so
//! that masquerading works), expiring connections whose real server is
//! gone or quiescent, IP forwarding, strict ARP on request, and
//! `conn_reuse_mode=0` only on kernels from 4.1 (where it appeared) to
//! before 5.9 (where the kernel fixed the slow reuse that made it
//! necessary). Upstream never sets `net/bridge/bridge-nf-call-iptables`:
//! releases that look at it only log when it is readable and not 1, which
//! [`bridge_nf_call_iptables_off`] lets the caller do.

use std::{
    fmt, fs, io,
    path::{Component, Path, PathBuf},
};

use super::{ErrorKind, KernelError};

pub mod conntrack;
#[cfg(test)]
mod tests;

/// Reads and writes sysctls by their `/proc/sys` path
/// (`net/ipv4/vs/conntrack`).
pub trait Sysctls {
    /// The value, trimmed of its trailing newline.
    fn read(&mut self, path: &str) -> Result<String, KernelError>;
    fn write(&mut self, path: &str, value: &str) -> Result<(), KernelError>;
}

/// What the configuration decides about sysctls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SysctlConfig {
    /// `ipvs.strictARP`: answer ARP only for addresses on the asking
    /// interface, so kube-ipvs0's addresses are not announced.
    pub strict_arp: bool,
}

/// A kernel release, as far as its first two numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
}

impl KernelVersion {
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }

    /// Parses `uname -r` / `kernel/osrelease` (`6.1.0-28-amd64`).
    pub fn parse(release: &str) -> Result<Self, KernelError> {
        let bad = || {
            KernelError::invalid(
                "kernel release",
                format!("cannot parse {release:?} as MAJOR.MINOR"),
            )
        };
        let mut numbers = release.trim().split(['.', '-', '+']);
        let mut next = || -> Result<u32, KernelError> {
            numbers.next().and_then(|n| n.parse().ok()).ok_or_else(bad)
        };
        Ok(Self::new(next()?, next()?))
    }

    /// The running kernel's version, read through `sysctls`.
    pub fn running(sysctls: &mut impl Sysctls) -> Result<Self, KernelError> {
        Self::parse(&sysctls.read(OSRELEASE)?)
    }
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

pub const BRIDGE_NF_CALL_IPTABLES: &str = "net/bridge/bridge-nf-call-iptables";
pub const OSRELEASE: &str = "kernel/osrelease";
pub const VS_CONNTRACK: &str = "net/ipv4/vs/conntrack";
pub const VS_CONN_REUSE_MODE: &str = "net/ipv4/vs/conn_reuse_mode";
pub const VS_EXPIRE_NODEST_CONN: &str = "net/ipv4/vs/expire_nodest_conn";
pub const VS_EXPIRE_QUIESCENT_TEMPLATE: &str =
    "net/ipv4/vs/expire_quiescent_template";
pub const IP_FORWARD: &str = "net/ipv4/ip_forward";
pub const ARP_IGNORE: &str = "net/ipv4/conf/all/arp_ignore";
pub const ARP_ANNOUNCE: &str = "net/ipv4/conf/all/arp_announce";

/// `conn_reuse_mode` exists from this release on.
const CONN_REUSE_SINCE: KernelVersion = KernelVersion::new(4, 1);
/// From this release on the kernel no longer stalls reused connections
/// (torvalds/linux 35dfb013149f), and upstream leaves the value alone.
const CONN_REUSE_FIXED: KernelVersion = KernelVersion::new(5, 9);

/// One sysctl and the value IPVS mode wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub path: &'static str,
    pub value: &'static str,
}

/// Everything IPVS mode sets on `kernel`, in upstream's order.
pub fn wanted(config: &SysctlConfig, kernel: KernelVersion) -> Vec<Setting> {
    let set = |path, value| Setting { path, value };
    let mut out = vec![set(VS_CONNTRACK, "1")];
    if (CONN_REUSE_SINCE..CONN_REUSE_FIXED).contains(&kernel) {
        out.push(set(VS_CONN_REUSE_MODE, "0"));
    }
    out.push(set(VS_EXPIRE_NODEST_CONN, "1"));
    out.push(set(VS_EXPIRE_QUIESCENT_TEMPLATE, "1"));
    out.push(set(IP_FORWARD, "1"));
    if config.strict_arp {
        out.push(set(ARP_IGNORE, "1"));
        out.push(set(ARP_ANNOUNCE, "2"));
    }
    out
}

/// Whether br_netfilter is loaded but bridged traffic skips iptables,
/// which breaks services for pods on a Linux bridge: worth a log line.
/// False when the sysctl is missing (no br_netfilter) or unreadable.
pub fn bridge_nf_call_iptables_off(sysctls: &mut impl Sysctls) -> bool {
    sysctls
        .read(BRIDGE_NF_CALL_IPTABLES)
        .is_ok_and(|value| value != "1")
}

/// A sysctl that was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: &'static str,
    pub from: String,
    pub to: String,
}

/// Writes `value` to `path` unless it is there already: `None` when
/// nothing was written.
pub(crate) fn write_if_differs(
    sysctls: &mut impl Sysctls,
    path: &'static str,
    value: &str,
) -> Option<Result<Change, KernelError>> {
    let current = match sysctls.read(path) {
        Ok(current) => current,
        Err(e) => return Some(Err(e)),
    };
    if current == value {
        return None;
    }
    Some(sysctls.write(path, value).map(|()| Change {
        path,
        from: current,
        to: value.to_owned(),
    }))
}

/// Writes each wanted sysctl whose value differs; values already right
/// are neither written nor reported. One result per write or failure,
/// so a second run on an unchanged kernel returns nothing.
pub fn ensure(
    sysctls: &mut impl Sysctls,
    config: &SysctlConfig,
    kernel: KernelVersion,
) -> Vec<Result<Change, KernelError>> {
    wanted(config, kernel)
        .into_iter()
        .filter_map(|Setting { path, value }| {
            write_if_differs(sysctls, path, value)
        })
        .collect()
}

fn object(path: &str) -> String {
    format!("sysctl {path}")
}

/// The kernel's sysctls under `/proc/sys`.
#[derive(Debug, Clone)]
pub struct ProcSysctls {
    root: PathBuf,
}

impl Default for ProcSysctls {
    fn default() -> Self {
        Self::new()
    }
}

impl ProcSysctls {
    pub fn new() -> Self {
        Self::with_root("/proc/sys")
    }

    /// Another root, for tests on a scratch directory.
    pub fn with_root(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn file(&self, path: &str) -> Result<PathBuf, KernelError> {
        let relative = Path::new(path);
        let plain = !path.is_empty()
            && relative
                .components()
                .all(|c| matches!(c, Component::Normal(_)));
        if !plain {
            return Err(KernelError::invalid(
                object(path),
                "not a relative path below /proc/sys",
            ));
        }
        Ok(self.root.join(relative))
    }
}

fn io_error(path: &str, what: &str, e: io::Error) -> KernelError {
    let errno = e.raw_os_error();
    let kind = match errno {
        Some(libc::ENOENT) => ErrorKind::NotFound,
        Some(libc::EINVAL) => ErrorKind::Invalid,
        _ => ErrorKind::Other,
    };
    let err = KernelError::new(kind, object(path), format!("{what}: {e}"));
    match errno {
        Some(errno) => err.with_errno(errno),
        None => err,
    }
}

impl Sysctls for ProcSysctls {
    fn read(&mut self, path: &str) -> Result<String, KernelError> {
        let text = fs::read_to_string(self.file(path)?)
            .map_err(|e| io_error(path, "read", e))?;
        Ok(text.trim_end().to_owned())
    }

    fn write(&mut self, path: &str, value: &str) -> Result<(), KernelError> {
        // Not `fs::write`: that would create a missing file under a
        // scratch root, where /proc/sys answers ENOENT.
        use io::Write;
        let mut file = fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(self.file(path)?)
            .map_err(|e| io_error(path, "open", e))?;
        file.write_all(value.as_bytes())
            .map_err(|e| io_error(path, "write", e))
    }
}

/// An in-memory kernel: sysctls that exist and their values, and every
/// write in order.
#[cfg(any(test, feature = "test-support"))]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SysctlsModel {
    pub values: std::collections::BTreeMap<String, String>,
    pub writes: Vec<(String, String)>,
    /// Every write fails with EROFS, as in a container whose `/sys` or
    /// `/proc/sys` is mounted read-only.
    pub read_only: bool,
}

#[cfg(any(test, feature = "test-support"))]
impl SysctlsModel {
    pub fn new<'a>(
        values: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Self {
        Self {
            values: values
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            writes: Vec::new(),
            read_only: false,
        }
    }

    fn missing(path: &str) -> KernelError {
        KernelError::not_found(object(path))
    }
}

#[cfg(any(test, feature = "test-support"))]
impl Sysctls for SysctlsModel {
    fn read(&mut self, path: &str) -> Result<String, KernelError> {
        self.values
            .get(path)
            .cloned()
            .ok_or_else(|| Self::missing(path))
    }

    fn write(&mut self, path: &str, value: &str) -> Result<(), KernelError> {
        let slot = self
            .values
            .get_mut(path)
            .ok_or_else(|| Self::missing(path))?;
        if self.read_only {
            let e = io::Error::from_raw_os_error(libc::EROFS);
            return Err(io_error(path, "open", e));
        }
        value.clone_into(slot);
        self.writes.push((path.to_owned(), value.to_owned()));
        Ok(())
    }
}
