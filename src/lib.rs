//! kube-ipvs-proxy: Kubernetes' kube-proxy in IPVS mode.
//!
//! Data flows one way: sources (`source`) feed object events to the change
//! trackers (`tracker`); a sync checks the changes out and turns them into
//! the desired kernel state (`desired`), which backends apply.

pub mod backend;
pub mod config;
pub mod daemon;
pub mod desired;
pub mod endpointslice;
pub mod kernel;
pub mod logging;
pub mod model;
pub mod oom;
pub mod proxier;
pub mod runner;
pub mod selection;
pub mod server;
pub mod source;
pub mod sync;
pub mod telemetry;
pub mod tracker;
pub mod version;
