use std::fmt;

/// What went wrong, independent of the facility: what the contract tests
/// compare between a model and the kernel, and the `reason` label of the
/// operation-failure metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// EEXIST.
    Exists,
    /// ENOENT or ESRCH.
    NotFound,
    /// EINVAL.
    Invalid,
    /// Any other errno.
    Other,
    /// The facility is missing from this kernel (module not loaded).
    Unavailable,
    /// The socket or the tool failed, not the operation.
    Transport,
}

impl ErrorKind {
    pub fn metric_label(self) -> &'static str {
        match self {
            ErrorKind::Exists => "exists",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Other => "other",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Transport => "transport",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.metric_label())
    }
}

/// A failed kernel operation. It names the object (`TCP
/// 198.18.0.10:80`, `198.18.0.10/32 on kube-ipvs0`, `KUBE-CLUSTER-IP`)
/// and the errno, so that a log line alone says what failed and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {message} ({kind}{})", errno_suffix(*.errno))]
pub struct KernelError {
    pub kind: ErrorKind,
    pub object: String,
    pub errno: Option<i32>,
    pub message: String,
}

fn errno_suffix(errno: Option<i32>) -> String {
    errno.map(|e| format!(", errno {e}")).unwrap_or_default()
}

impl KernelError {
    pub fn new(
        kind: ErrorKind,
        object: impl fmt::Display,
        message: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            object: object.to_string(),
            errno: None,
            message: message.into(),
        }
    }

    pub fn with_errno(mut self, errno: i32) -> Self {
        self.errno = Some(errno);
        self
    }

    /// The errors a model returns where the kernel would.
    #[cfg(any(test, feature = "test-support"))]
    pub fn exists(object: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Exists, object, "already exists")
            .with_errno(libc::EEXIST)
    }

    #[cfg(any(test, feature = "test-support"))]
    pub fn not_found(object: impl fmt::Display) -> Self {
        Self::new(ErrorKind::NotFound, object, "not found")
            .with_errno(libc::ENOENT)
    }

    pub fn invalid(object: impl fmt::Display, why: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, object, why).with_errno(libc::EINVAL)
    }
}
