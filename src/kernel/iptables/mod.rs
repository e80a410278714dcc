//! iptables as a kernel facility: save a table, restore a payload with
//! `iptables-restore --noflush` (so that nothing but the payload's chains
//! is touched), and read dumps back.
//!
//! - [`real::RealIptables`] runs the tools; `model::IptablesModel` is the
//!   in-memory iptables the unit tests use, held to the tools by the
//!   `contract` scenarios (both tests only).
//! - [`save`]: a dump's tables, chains and rules in canonical form
//!   ([`canon`]), so that either tool's output and the model's compare.
//!
//! Which chains and rules kube-proxy writes, and when, is policy: it lives
//! with the IPVS policy in `proxier/iptables/`.

use std::future::Future;

use super::{DetachedRead, KernelError};

pub mod canon;
#[cfg(any(test, feature = "test-support"))]
// Test support: a failed expectation is the calling test's failure.
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod contract;
#[cfg(any(test, feature = "test-support"))]
pub mod model;
pub mod real;
pub mod save;

/// Which of iptables and ip6tables.
pub use crate::model::IpFamily;

pub trait Iptables {
    /// `iptables-save -t TABLE` (or ip6tables) output.
    fn save(
        &mut self,
        family: IpFamily,
        table: &str,
    ) -> impl Future<Output = Result<String, KernelError>> + Send;

    /// [`Iptables::save`] as a future that borrows nothing, so that the
    /// repair can read the tables while syncs go on.
    fn save_detached(
        &self,
        family: IpFamily,
        table: &str,
    ) -> impl DetachedRead<String> + use<Self>;

    /// Feeds `payload` (one or more tables' `*table … COMMIT` blocks) to
    /// `iptables-restore --noflush`. Each table is applied whole or not
    /// at all; on failure nothing of the failing table is, and the
    /// error's message starts with `line N:` (the tests read it with
    /// `failed_line`).
    fn restore(
        &mut self,
        family: IpFamily,
        payload: &str,
    ) -> impl Future<Output = Result<(), KernelError>> + Send;
}

/// The payload line (1-based) a failed restore names, when the tool named
/// one.
#[cfg(any(test, feature = "test-support"))]
pub fn failed_line(err: &KernelError) -> Option<usize> {
    err.message
        .strip_prefix("line ")?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}
