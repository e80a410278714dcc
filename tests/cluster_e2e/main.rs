//! The proxy against a real control plane, one set of scenarios
//! ([`scenarios`]) on two clusters:
//!
//! - [`guest_e2e`], `make e2e`: the proxy in the real-kernel QEMU guest
//!   against tests/e2e/control-plane.sh's API server and controller-manager
//!   on the host; fake Pods whose status the test sets, netns pods for the
//!   traffic. Runs here (features `kernel-tests` and `e2e-tests`).
//! - [`kind_e2e`], `make kind-e2e`: deploy/'s DaemonSet on a kind cluster
//!   without kube-proxy; real Pods with a readiness probe, `docker exec`
//!   into the node. Needs Docker and kind (feature `kind-tests`).
//!
//! Select one with a name filter: `guest_e2e` or `kind_e2e`.

mod api;
mod guest_e2e;
mod kind_e2e;
mod scenarios;
