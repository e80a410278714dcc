//! Whether this process runs inside the real-kernel guest.
//!
//! Kernel tests are compiled in only with the `kernel-tests` feature
//! (elsewhere they are listed as ignored, with the reason). With the
//! feature on, a test still calls [`require`] first, so one started by
//! hand on a kernel without IPVS fails with a plain explanation instead of
//! a confusing netlink error, and never passes without having run.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// Set by the guest for the command it runs (tests/vm/run).
pub const MARKER_ENV: &str = "TESTKIT_VM_GUEST";

/// The file a kernel with IPVS loaded has.
const IPVS_PROC: &str = "/proc/net/ip_vs";

/// Why this process is not in a usable guest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotInGuest {
    #[error(
        "not inside the real-kernel guest ({MARKER_ENV} is not set): \
         kernel tests run there; use `make vm-test`"
    )]
    NoMarker,
    #[error(
        "{MARKER_ENV} is set but this kernel has no IPVS ({IPVS_PROC} is \
         missing): the guest did not load ip_vs; see tests/vm/modules"
    )]
    NoIpvs,
}

/// `Ok` when running in the guest with IPVS available.
pub fn check() -> Result<(), NotInGuest> {
    classify(
        std::env::var_os(MARKER_ENV).is_some(),
        Path::new(IPVS_PROC).exists(),
    )
}

/// For the first line of a kernel test: panics with the reason unless it
/// runs in the guest.
#[track_caller]
pub fn require() {
    if let Err(e) = check() {
        panic!("{e}");
    }
}

/// Serialises tests of one binary that change root-namespace state IPVS
/// keeps globally (the virtual server table, kube-ipvs0): libtest runs a
/// binary's tests on parallel threads. Hold the guard for the whole test.
pub fn lock_root_netns() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    // A test that panicked while holding it left nothing a guard protects
    // in memory; the next test cleans the kernel state it needs.
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub(crate) fn classify(marker: bool, has_ipvs: bool) -> Result<(), NotInGuest> {
    match (marker, has_ipvs) {
        (false, _) => Err(NotInGuest::NoMarker),
        (true, false) => Err(NotInGuest::NoIpvs),
        (true, true) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        let cases = [
            (false, false, Err(NotInGuest::NoMarker)),
            // A host that happens to have IPVS is still not the guest: the
            // tests change its network state.
            (false, true, Err(NotInGuest::NoMarker)),
            (true, false, Err(NotInGuest::NoIpvs)),
            (true, true, Ok(())),
        ];
        for (marker, ipvs, want) in cases {
            assert_eq!(
                classify(marker, ipvs),
                want,
                "marker {marker} ipvs {ipvs}"
            );
        }
    }

    #[test]
    fn messages_say_how_to_run_the_tests() {
        assert!(NotInGuest::NoMarker.to_string().contains("make vm-test"));
        assert!(NotInGuest::NoIpvs.to_string().contains("tests/vm/modules"));
    }

    // Outside the guest (cargo test on a workstation or in CI) a kernel
    // test that calls `require` must fail, not pass.
    #[test]
    #[cfg_attr(
        feature = "kernel-tests",
        ignore = "checks behaviour outside the guest"
    )]
    fn require_panics_outside_the_guest() {
        if check().is_ok() {
            // In the guest without the feature (not a combination the
            // harness uses) there is nothing to check.
            return;
        }
        let result = std::panic::catch_unwind(require);
        let message = result
            .err()
            .and_then(|p| p.downcast_ref::<String>().cloned());
        assert_eq!(message, check().err().map(|e| e.to_string()));
    }
}
