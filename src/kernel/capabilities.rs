//! What IPVS mode needs from the kernel, checked once at start-up before
//! the proxy changes anything, as kube-proxy refuses to start in IPVS mode
//! where it cannot work (`CanUseIPVSProxier`).
//!
//! Checked: IPVS itself (its generic netlink family), the configured
//! scheduler (a virtual server with it is added and deleted again, unless
//! one already uses it, as upstream does), dummy links (one is created
//! and deleted again; kube-ipvs0 is one), ipset and each set type the
//! proxy creates (the kernel's type query). The kernel loads a missing
//! module itself on first use where it can, so asking is the test; what
//! still fails is reported all at once, in one line that names what is
//! missing and the module to load, and nothing is left behind.
//!
//! A kernel refuses a process without `CAP_NET_ADMIN` before it looks
//! for the module, so an `EPERM` there says nothing about the kernel:
//! it is reported as the capability this process lacks, as is a raw
//! socket refused (`CAP_NET_RAW`: iptables' set match and IPVS's socket
//! option open one), so that an unprivileged container given too little
//! stops at once with the capability to add, not later with syncs that
//! fail.

use std::{
    fmt,
    future::Future,
    net::{IpAddr, Ipv4Addr},
};

use super::{
    addresses::Addresses,
    ipsets::{SetType, SetTypes},
    ipvs::{Ipvs, IpvsOp, ServiceSpec, VirtualServerKey},
    ErrorKind, KernelError,
};
use crate::model::Protocol;

#[cfg(test)]
mod tests;

/// The dummy link created and deleted to see that dummy links work; at
/// most 15 characters (IFNAMSIZ), and no name a node would use.
pub const PROBE_LINK: &str = "kube-ipvs-probe";

/// Upstream's probe virtual server: an address of TEST-NET-2 (RFC 5737),
/// documentation-only, so no node serves it; port 20000, TCP.
pub const PROBE_SERVICE: VirtualServerKey = VirtualServerKey {
    address: IpAddr::V4(Ipv4Addr::new(198, 51, 100, 0)),
    port: 20000,
    protocol: Protocol::Tcp,
};

/// The set types the proxy creates (see `desired::SetKind::set_type`).
pub const SET_TYPES: [SetType; 5] = [
    SetType::HashIp,
    SetType::HashIpPort,
    SetType::HashIpPortIp,
    SetType::HashIpPortNet,
    SetType::BitmapPort,
];

/// One thing IPVS mode needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    Ipvs,
    Scheduler(String),
    DummyLinks,
    Ipset,
    SetType(SetType),
}

impl Need {
    /// The kernel module that provides it.
    pub fn module(&self) -> String {
        match self {
            Need::Ipvs => "ip_vs".to_owned(),
            Need::Scheduler(name) => format!("ip_vs_{name}"),
            Need::DummyLinks => "dummy".to_owned(),
            Need::Ipset => "ip_set".to_owned(),
            Need::SetType(set_type) => match set_type {
                SetType::HashIp => "ip_set_hash_ip",
                SetType::HashIpPort => "ip_set_hash_ipport",
                SetType::HashIpPortIp => "ip_set_hash_ipportip",
                SetType::HashIpPortNet => "ip_set_hash_ipportnet",
                SetType::BitmapPort => "ip_set_bitmap_port",
            }
            .to_owned(),
        }
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::Ipvs => f.write_str("IPVS"),
            Need::Scheduler(name) => write!(f, "the IPVS scheduler {name:?}"),
            Need::DummyLinks => f.write_str("dummy links"),
            Need::Ipset => f.write_str("ipset"),
            Need::SetType(set_type) => {
                write!(f, "the ipset type {}", set_type.as_str())
            }
        }
    }
}

/// A need the kernel did not meet, and its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub need: Need,
    pub error: KernelError,
}

/// Everything that is missing; displays as one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported(pub Vec<Missing>);

impl std::error::Error for Unsupported {}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("this kernel cannot run IPVS mode: missing ")?;
        for (i, missing) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} ({})", missing.need, missing.error)?;
        }
        let modules: Vec<String> =
            self.0.iter().map(|m| m.need.module()).collect();
        write!(
            f,
            "; load {} on the node with `modprobe {}` (and list {} in \
             /etc/modules-load.d/ to keep {} across reboots)",
            if modules.len() == 1 { "it" } else { "them" },
            modules.join(" "),
            if modules.len() == 1 { "it" } else { "them" },
            if modules.len() == 1 { "it" } else { "them" },
        )
    }
}

/// A capability this process lacks, and the answers that show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lacked {
    /// As `capabilities(7)` names it, without `CAP_`: what a container's
    /// `securityContext.capabilities.add` takes.
    pub capability: &'static str,
    /// What was refused (`IPVS`, `a raw IPv4 socket`), and the answer.
    pub refused: Vec<(String, KernelError)>,
}

/// The capabilities this process lacks; displays as one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forbidden(pub Vec<Lacked>);

impl std::error::Error for Forbidden {}

impl fmt::Display for Forbidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("this process may not program the kernel: it lacks ")?;
        for (i, lacked) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "CAP_{} (", lacked.capability)?;
            for (j, (what, error)) in lacked.refused.iter().enumerate() {
                if j > 0 {
                    f.write_str("; ")?;
                }
                write!(f, "{what}: {error}")?;
            }
            f.write_str(")")?;
        }
        let names: Vec<&str> = self.0.iter().map(|l| l.capability).collect();
        write!(
            f,
            "; in a container, add {} to securityContext.capabilities.add \
             (the manifests give NET_ADMIN, NET_RAW and SYS_RESOURCE)",
            names.join(" and ")
        )
    }
}

/// Why the check refused to go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// This process lacks a capability; the kernel may have everything.
    Forbidden(Forbidden),
    /// The kernel lacks a part of IPVS mode.
    Unsupported(Unsupported),
}

impl std::error::Error for Refused {}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Forbidden(e) => e.fmt(f),
            Refused::Unsupported(e) => e.fmt(f),
        }
    }
}

/// Whether the kernel refused the process rather than the request.
fn is_permission(error: &KernelError) -> bool {
    matches!(error.errno, Some(libc::EPERM | libc::EACCES))
}

/// What the check asks of the kernel.
pub trait Probe {
    /// The schedulers of the virtual servers there are; an error when
    /// IPVS is missing.
    fn ipvs_schedulers(
        &mut self,
    ) -> impl Future<Output = Result<Vec<String>, KernelError>> + Send;

    /// Adds [`PROBE_SERVICE`] with the scheduler and deletes it again.
    fn try_scheduler(
        &mut self,
        scheduler: &str,
    ) -> impl Future<Output = Result<(), KernelError>> + Send;

    /// Creates [`PROBE_LINK`] as a dummy link and deletes it again.
    fn try_dummy_link(
        &mut self,
    ) -> impl Future<Output = Result<(), KernelError>> + Send;

    /// Whether the kernel speaks ipset at all.
    fn ipsets(&mut self) -> Result<(), KernelError>;

    fn set_type(&mut self, set_type: SetType) -> Result<(), KernelError>;

    /// Opens a raw IPv4 socket and closes it again.
    fn raw_socket(&mut self) -> Result<(), KernelError>;
}

/// Asks for everything IPVS mode needs with `scheduler`; every need the
/// kernel does not meet is in the error, or, where the kernel refused
/// this process, every capability it lacks.
pub async fn check<P: Probe>(
    probe: &mut P,
    scheduler: &str,
) -> Result<(), Refused> {
    let mut missing = Vec::new();
    let mut miss = |need: Need, error: KernelError| {
        missing.push(Missing { need, error });
    };
    match probe.ipvs_schedulers().await {
        Err(error) => miss(Need::Ipvs, error),
        Ok(in_use) if in_use.iter().any(|s| s == scheduler) => {}
        Ok(_) => {
            if let Err(error) = probe.try_scheduler(scheduler).await {
                miss(Need::Scheduler(scheduler.to_owned()), error);
            }
        }
    }
    if let Err(error) = probe.try_dummy_link().await {
        miss(Need::DummyLinks, error);
    }
    match probe.ipsets() {
        Err(error) => miss(Need::Ipset, error),
        Ok(()) => {
            for set_type in SET_TYPES {
                if let Err(error) = probe.set_type(set_type) {
                    miss(Need::SetType(set_type), error);
                }
            }
        }
    }
    refusal(missing, probe.raw_socket())
}

/// What the answers add up to: the capabilities this process lacks, if
/// the kernel refused it anything, else the parts the kernel lacks.
pub fn refusal(
    missing: Vec<Missing>,
    raw_socket: Result<(), KernelError>,
) -> Result<(), Refused> {
    let (refused, missing): (Vec<Missing>, Vec<Missing>) =
        missing.into_iter().partition(|m| is_permission(&m.error));
    let mut lacked = Vec::new();
    if !refused.is_empty() {
        lacked.push(Lacked {
            capability: "NET_ADMIN",
            refused: refused
                .into_iter()
                .map(|m| (m.need.to_string(), m.error))
                .collect(),
        });
    }
    match raw_socket {
        Err(error) if is_permission(&error) => lacked.push(Lacked {
            capability: "NET_RAW",
            refused: vec![("a raw IPv4 socket".to_owned(), error)],
        }),
        // Without IPv4 (or raw sockets) at all: IPVS's reads fall back to
        // dumps, and iptables says itself what it cannot do.
        Err(_) | Ok(()) => {}
    }
    if !lacked.is_empty() {
        Err(Refused::Forbidden(Forbidden(lacked)))
    } else if !missing.is_empty() {
        Err(Refused::Unsupported(Unsupported(missing)))
    } else {
        Ok(())
    }
}

/// The probe over the kernel facilities' traits: the netlink ones at
/// start-up, the models in tests.
/// Creates and deletes the probe's virtual server with `scheduler`: the
/// kernel loads the scheduler's module for it, or answers that it has
/// none (ENOENT).
pub async fn try_scheduler<I: Ipvs + Send>(
    ipvs: &mut I,
    scheduler: &str,
) -> Result<(), KernelError> {
    let add =
        IpvsOp::AddService(ServiceSpec::new(PROBE_SERVICE, scheduler, None));
    let delete = IpvsOp::DeleteService(PROBE_SERVICE);
    let mut added = first(ipvs.apply(std::slice::from_ref(&add)).await);
    // Left by a probe that died half-way: it is ours to replace.
    if added.as_ref().is_err_and(|e| e.kind == ErrorKind::Exists) {
        first(ipvs.apply(std::slice::from_ref(&delete)).await)?;
        added = first(ipvs.apply(std::slice::from_ref(&add)).await);
    }
    added?;
    first(ipvs.apply(std::slice::from_ref(&delete)).await)
}

pub struct FacilityProbe<I, A, S> {
    pub ipvs: I,
    pub addresses: A,
    /// Opening ipset can fail by itself (no ipset in the kernel).
    pub ipsets: Result<S, KernelError>,
    /// Whether a raw IPv4 socket could be opened.
    pub raw_socket: Result<(), KernelError>,
}

impl<I, A, S> Probe for FacilityProbe<I, A, S>
where
    I: Ipvs + Send,
    A: Addresses + Send,
    S: SetTypes + Send,
{
    async fn ipvs_schedulers(&mut self) -> Result<Vec<String>, KernelError> {
        let table = self.ipvs.dump().await?;
        Ok(table
            .services
            .values()
            .map(|entry| entry.spec.scheduler.clone())
            .collect())
    }

    async fn try_scheduler(
        &mut self,
        scheduler: &str,
    ) -> Result<(), KernelError> {
        try_scheduler(&mut self.ipvs, scheduler).await
    }

    async fn try_dummy_link(&mut self) -> Result<(), KernelError> {
        self.addresses.ensure_dummy(PROBE_LINK).await?;
        self.addresses.delete_link(PROBE_LINK).await
    }

    fn ipsets(&mut self) -> Result<(), KernelError> {
        self.ipsets.as_ref().map(|_| ()).map_err(Clone::clone)
    }

    fn set_type(&mut self, set_type: SetType) -> Result<(), KernelError> {
        match &mut self.ipsets {
            Ok(ipsets) => ipsets.check_type(set_type),
            Err(error) => Err(error.clone()),
        }
    }

    fn raw_socket(&mut self) -> Result<(), KernelError> {
        self.raw_socket.clone()
    }
}

/// The one result of a one-operation apply.
fn first(results: Vec<Result<(), KernelError>>) -> Result<(), KernelError> {
    results.into_iter().next().unwrap_or_else(|| {
        Err(KernelError::new(
            ErrorKind::Transport,
            PROBE_SERVICE,
            "no result for the operation",
        ))
    })
}
