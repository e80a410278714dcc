//! The crate's one error type.

use std::{fmt, io};

use genetlink::GenetlinkError;
use netlink_packet_core::{DecodeError, ErrorMessage};

// The errno values the kernel's IPVS code answers with.
use libc::{EEXIST, EINVAL, ENOENT, ESRCH};

/// What a request was doing, for error messages and metric labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Adding a virtual service.
    AddService,
    /// Changing a virtual service.
    SetService,
    /// Deleting a virtual service.
    DelService,
    /// Reading one virtual service.
    GetService,
    /// Dumping the virtual services.
    ListServices,
    /// Adding a destination.
    AddDest,
    /// Changing a destination.
    SetDest,
    /// Deleting a destination.
    DelDest,
    /// Dumping a service's destinations.
    ListDests,
    /// Deleting every service.
    Flush,
    /// Zeroing counters.
    Zero,
    /// Reading IPVS's version and table size.
    GetInfo,
    /// Reading the connection timeouts.
    GetTimeouts,
    /// Setting the connection timeouts.
    SetTimeouts,
    /// Looking up the "IPVS" generic netlink family.
    ResolveFamily,
}

impl Operation {
    /// A stable, lower-case label (for logs and metrics).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AddService => "add_service",
            Self::SetService => "set_service",
            Self::DelService => "del_service",
            Self::GetService => "get_service",
            Self::ListServices => "list_services",
            Self::AddDest => "add_dest",
            Self::SetDest => "set_dest",
            Self::DelDest => "del_dest",
            Self::ListDests => "list_dests",
            Self::Flush => "flush",
            Self::Zero => "zero",
            Self::GetInfo => "get_info",
            Self::GetTimeouts => "get_timeouts",
            Self::SetTimeouts => "set_timeouts",
            Self::ResolveFamily => "resolve_family",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Errors of ipvs-sys. Every variant that comes from a request says which
/// operation on which object failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel has no "IPVS" generic netlink family: the `ip_vs` module
    /// is not loaded (or not built).
    #[error(
        "IPVS is not available in this kernel: no generic netlink family \
         \"IPVS\" (is the ip_vs module loaded?)"
    )]
    IpvsUnavailable,

    /// The kernel refused a request. `errno` is positive (`EEXIST` = 17).
    #[error("{operation} {object}: {} ({})", io::Error::from_raw_os_error(*errno), errno_name(*errno))]
    Kernel {
        /// What was asked.
        operation: Operation,
        /// `TCP 198.18.0.10:80`, `198.19.0.5:8080 in TCP 198.18.0.10:80`.
        object: String,
        /// The kernel's errno, positive.
        errno: i32,
        /// The kernel's whole error message.
        message: ErrorMessage,
    },

    /// A reply could not be decoded.
    #[error(
        "{operation} {object}: cannot decode the kernel's reply: {source}"
    )]
    Decode {
        /// What was asked.
        operation: Operation,
        /// What it was about.
        object: String,
        /// Why the reply could not be read.
        #[source]
        source: DecodeError,
    },

    /// The kernel answered with something the request does not expect.
    #[error("{operation} {object}: unexpected reply: {detail}")]
    UnexpectedReply {
        /// What was asked.
        operation: Operation,
        /// What it was about.
        object: String,
        /// What came back instead.
        detail: String,
    },

    /// A request was refused before being sent (it could not be encoded).
    #[error("{operation} {object}: invalid request: {reason}")]
    InvalidRequest {
        /// What was asked.
        operation: Operation,
        /// What it was about.
        object: String,
        /// Why it cannot be sent.
        reason: String,
    },

    /// The netlink connection failed (closed socket, send error).
    #[error("{operation} {object}: netlink transport error: {source}")]
    Transport {
        /// What was asked.
        operation: Operation,
        /// What it was about.
        object: String,
        /// The connection's error.
        #[source]
        source: GenetlinkError,
    },

    /// The kernel refused a read over the `getsockopt` interface
    /// ([`SockoptSocket`](crate::SockoptSocket)). `errno` is positive.
    #[error("{operation} {object}: {} ({})", io::Error::from_raw_os_error(*errno), errno_name(*errno))]
    Sockopt {
        /// What was asked.
        operation: Operation,
        /// The service.
        object: String,
        /// The kernel's errno, positive.
        errno: i32,
    },

    /// Opening a socket failed: the generic netlink one, or the raw one
    /// of [`SockoptSocket`](crate::SockoptSocket).
    #[error("cannot open a socket to IPVS: {0}")]
    Socket(#[from] io::Error),
}

impl Error {
    /// The errno of a kernel refusal (positive), if this is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Self::Kernel { errno, .. } | Self::Sockopt { errno, .. } => {
                Some(*errno)
            }
            _ => None,
        }
    }

    /// The object exists already (`EEXIST`): adding a service or
    /// destination twice.
    pub fn is_exists(&self) -> bool {
        self.errno() == Some(EEXIST)
    }

    /// The object does not exist: a missing service (`ESRCH`) or
    /// destination or scheduler (`ENOENT`).
    pub fn is_not_found(&self) -> bool {
        matches!(self.errno(), Some(ESRCH) | Some(ENOENT))
    }

    /// The kernel found the request invalid (`EINVAL`).
    pub fn is_invalid(&self) -> bool {
        self.errno() == Some(EINVAL)
    }

    /// The operation that failed, when known.
    pub fn operation(&self) -> Option<Operation> {
        match self {
            Self::Kernel { operation, .. }
            | Self::Decode { operation, .. }
            | Self::UnexpectedReply { operation, .. }
            | Self::InvalidRequest { operation, .. }
            | Self::Transport { operation, .. }
            | Self::Sockopt { operation, .. } => Some(*operation),
            Self::IpvsUnavailable | Self::Socket(_) => None,
        }
    }

    /// A short, stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::IpvsUnavailable => "ipvs_unavailable",
            Self::Kernel { errno, .. } | Self::Sockopt { errno, .. } => {
                match *errno {
                    EEXIST => "exists",
                    ENOENT | ESRCH => "not_found",
                    EINVAL => "invalid",
                    _ => "kernel",
                }
            }
            Self::Decode { .. } => "decode",
            Self::UnexpectedReply { .. } => "unexpected_reply",
            Self::InvalidRequest { .. } => "invalid_request",
            Self::Transport { .. } => "transport",
            Self::Socket(_) => "socket",
        }
    }

    pub(crate) fn kernel(
        operation: Operation,
        object: &str,
        message: ErrorMessage,
    ) -> Self {
        Self::Kernel {
            operation,
            object: object.to_owned(),
            errno: message.raw_code().saturating_abs(),
            message,
        }
    }

    /// For `map_err`: a reply about `object` that could not be decoded.
    pub(crate) fn decode(
        operation: Operation,
        object: &str,
    ) -> impl FnOnce(DecodeError) -> Self + '_ {
        move |source| Self::Decode {
            operation,
            object: object.to_owned(),
            source,
        }
    }
}

/// The symbolic name of the errno values IPVS uses.
fn errno_name(errno: i32) -> &'static str {
    match errno {
        1 => "EPERM",
        ENOENT => "ENOENT",
        ESRCH => "ESRCH",
        EEXIST => "EEXIST",
        EINVAL => "EINVAL",
        12 => "ENOMEM",
        13 => "EACCES",
        16 => "EBUSY",
        19 => "ENODEV",
        95 => "EOPNOTSUPP",
        _ => "errno",
    }
}
