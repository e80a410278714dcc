//! The kernel facilities the proxy programs, each behind a small trait over
//! our own types. Every trait has two implementations: the real one
//! (netlink, or the restore tools where netlink is impractical) and an
//! in-memory model for fast tests. Models return the kernel's errors
//! (EEXIST, ENOENT) instead of forgiving them, and one contract suite per
//! trait runs the same scenario against both, so a model cannot drift from
//! the kernel unnoticed.
//!
//! The traits are batch-shaped: read the whole table once, then apply a
//! list of operations and get one result per operation. A sync's plan is
//! such a list, and the real implementations pipeline it.

pub mod addresses;
pub mod capabilities;
pub mod conntrack;
mod error;
pub mod ipsets;
pub mod iptables;
pub mod ipvs;
mod read_thread;
pub mod sysctl;

pub use error::{ErrorKind, KernelError};

/// A read of the kernel that borrows nothing, so that it can run (on the
/// reads' thread) while syncs go on: what each facility's `*_detached`
/// method returns.
pub trait DetachedRead<T>:
    std::future::Future<Output = Result<T, KernelError>> + Send + 'static
{
}

impl<T, F> DetachedRead<T> for F where
    F: std::future::Future<Output = Result<T, KernelError>> + Send + 'static
{
}
