//! The proxy against a real control plane, one set of scenarios
//! ([`scenarios`]) on three clusters:
//!
//! - [`guest_e2e`], `make e2e`: the proxy in the real-kernel QEMU guest
//!   against tests/e2e/control-plane.sh's API server and controller-manager
//!   on the host; fake Pods whose status the test sets, netns pods for the
//!   traffic. Runs here (features `kernel-tests` and `e2e-tests`).
//! - [`kind_e2e`], `make kind-e2e`: deploy/'s DaemonSet on a kind cluster
//!   without kube-proxy; real Pods with a readiness probe, `docker exec`
//!   into the node. Needs Docker and kind (feature `kind-tests`).
//! - [`node_e2e`], `make node-e2e`: the real-kernel guest as a real node
//!   (containerd, CNI, a kubelet) against the same control plane; deploy/'s
//!   DaemonSet from the image built from deploy/Dockerfile, real Pods from
//!   Deployments with a readiness probe, the take-over, a rolling update
//!   and the migration from upstream kube-proxy (feature `node-tests`).
//!
//! Select one with a name filter: `guest_e2e`, `node_e2e` or `kind_e2e`.

mod api;
mod daemonset;
mod guest_e2e;
mod kind_e2e;
mod node_e2e;
mod scenarios;
