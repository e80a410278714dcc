//! Fixtures for tests that need the real kernel: they run inside the QEMU
//! guest that `make vm-test` boots (see tests/vm/README.md).
//!
//! - [`guest`] tells a kernel test whether it is in that guest and, if not,
//!   says so plainly instead of letting it pass.
//! - [`pod`] starts "pods": a network namespace with a veth pair into the
//!   root namespace and the native `testpod` server inside.
//! - [`client`] opens TCP connections and sends UDP datagrams and tallies
//!   which pod answered.
//! - [`command`] runs a command and gives back its output or a clear error.

pub mod client;
pub mod command;
mod error;
pub mod guest;
pub mod pod;

pub use client::{
    http_get, http_request, metric_sum, tcp_tally, udp_tally, Tally,
};
pub use command::{run, run_with_input};
pub use error::Error;
pub use pod::{start_pods, Pod, PodSpec};
