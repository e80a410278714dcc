//! iptables: kube-proxy's chains, written with `iptables-restore
//! --noflush` so that nothing but our chains is touched.
//!
//! - [`rules`]: the rules themselves, a pure function of [`RulesInput`].
//! - [`save`]: reading dumps back (missing jumps, drift, cleanup).
//! - [`facts::RulesFacts`]: the input kept up to date from service deltas.
//! - [`apply::RulesApplier`]: one sync's work against any [`Iptables`].
//! - [`real::RealIptables`] runs the tools; [`model::IptablesModel`] is the
//!   in-memory iptables the unit tests use.
//!
//! A proxier keeps one [`RulesFacts`] (fed every sync's `ServiceDelta`s)
//! and one [`RulesApplier`] per process. Each sync builds the input with
//! [`RulesFacts::input`] and calls [`RulesApplier::sync`] with `verify`
//! false: when no rule changed this runs no tool. The drift repair saves
//! each table away from the sync loop and hands the saves to
//! [`RulesApplier::repair`], which restores only the tables whose chains
//! were flushed or lack a jump. `--cleanup`
//! calls [`apply::cleanup`].

use std::future::Future;

use super::KernelError;

pub mod apply;
mod canon;
#[cfg(any(test, feature = "kernel-tests"))]
pub mod contract;
pub mod facts;
pub mod model;
pub mod real;
pub mod rules;
pub mod save;

pub use apply::{cleanup, RulesApplier, RulesReport};
pub use facts::RulesFacts;
pub use rules::{
    FamilyInput, LocalDetector, NoNodeAccess, Payload, RulesInput,
};

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
    ) -> impl Future<Output = Result<String, KernelError>> + Send + 'static + use<Self>;

    /// Feeds `payload` (one table's `*table … COMMIT` block) to
    /// `iptables-restore --noflush`. On failure nothing of the payload is
    /// applied, and the error's message starts with `line N:` (see
    /// [`failed_line`]).
    fn restore(
        &mut self,
        family: IpFamily,
        payload: &str,
    ) -> impl Future<Output = Result<(), KernelError>> + Send;
}

/// The payload line (1-based) a failed restore names, when the tool named
/// one.
pub fn failed_line(err: &KernelError) -> Option<usize> {
    err.message
        .strip_prefix("line ")?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}
