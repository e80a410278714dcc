//! The real proxy in the real-kernel guest, seen from a user's side: each
//! test writes a small state file, starts `kube-ipvs-proxy` on it, and
//! checks what traffic through the services does (and what the kernel
//! holds where traffic cannot tell).
//!
//! The tests share the root network namespace (IPVS, kube-ipvs0, node0,
//! the KUBE- sets and chains), so each holds the root-namespace lock for
//! its whole run and cleans up after itself (see [`harness::Cluster`]).
//!
//! Select them in the guest by module (basics, departures, inspection,
//! policies, privileges, schedulers): `make vm-test
//! VM_TEST_ARGS='inspection:: schedulers::'`.

mod basics;
mod departures;
mod harness;
mod inspection;
mod policies;
mod privileges;
mod schedulers;
