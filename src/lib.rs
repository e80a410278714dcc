//! kube-ipvs-proxy: Kubernetes' kube-proxy in IPVS mode.
//!
//! Data flows one way: sources (`source`) feed object events to the change
//! trackers (`tracker`); a sync checks the changes out and turns them into
//! the desired kernel state (`desired`), which backends apply.

// Input from the API and the kernel must never panic the proxy: no
// unwrap, expect or panic! outside tests.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

#[cfg(test)]
mod docs_page;
mod explanation;
// The fuzz targets' entries (fuzz/), replayed by the tests.
#[cfg(any(test, feature = "test-support"))]
pub mod fuzz;
mod runtime_thread;
mod selection;
mod tracker;

// `make dead-code` compiles this crate with `--cfg private_modules`: every
// module is then crate-private and the binary's `main` is compiled inside
// the library, so rustc reports whatever neither the binary nor the
// library itself uses. Tests, benches and the binary see public modules.
macro_rules! modules {
    ($($name:ident),* $(,)?) => {
        $(
            #[cfg(not(private_modules))]
            pub mod $name;
            #[cfg(private_modules)]
            mod $name;
        )*
    };
}

// Public for the binary, the tests and the benches.
modules!(
    apiside,
    app,
    backend,
    config,
    daemon,
    desired,
    endpointslice,
    kernel,
    logging,
    model,
    nodeview,
    oom,
    proxier,
    runner,
    server,
    signals,
    source,
    sync,
    telemetry,
    version,
);

#[cfg(private_modules)]
extern crate self as kube_ipvs_proxy;
#[cfg(private_modules)]
#[path = "main.rs"]
mod binary;
#[cfg(private_modules)]
pub use binary::main;
