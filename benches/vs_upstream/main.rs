//! `make bench-vs-upstream`: upstream kube-proxy in IPVS mode
//! against ours, on the same API objects, in the same real-kernel guest,
//! against the loopback control plane (tests/e2e/control-plane.sh).
//! tests/vm/bench-vs-upstream.sh drives it in three steps:
//!
//! - `populate N` (on the host, `KUBECONFIG` the admin's): N ClusterIP
//!   services, each with one EndpointSlice of ten endpoints on other
//!   nodes, in namespace `bench` (bench_support::fixtures, numbered from
//!   [`objects::FIRST`]).
//! - `api-alone PROXY N` (on the host, right after `populate`): the API
//!   server's answers to a new service's writes with no guest running
//!   (api_alone.rs), printed as that proxy's `RESULT` lines so the report
//!   sets them beside the guest's.
//! - `measure PROXY N BINARY CONFIG` (in a fresh guest boot per proxy, so
//!   neither inherits the other's kernel state; `KUBECONFIG` the guest's
//!   admin one): starts `BINARY --config CONFIG` and measures
//!   1. cold sync: from its start to the kernel holding every service's
//!      virtual server and real servers (its first sync, as the
//!      `..._last_timestamp_seconds` metric says, then checked by
//!      counting the IPVS table);
//!   2. one endpoint change: an endpoint's readiness flipped through the
//!      API, timed from the request to the real server leaving the
//!      kernel, polled over ipvs-sys (median of BENCH_REPS, 3);
//!   3. one new service: a Service and its slice created, until its ten
//!      real servers are in the kernel (median of BENCH_REPS);
//!   4. churn: BENCH_CHURN_RATE (100) endpoint changes a second for
//!      BENCH_CHURN_SECONDS (60), round robin over the services, one in
//!      BENCH_CHURN_SAMPLE (10) timed the same way from its request to
//!      the kernel (p50, p99, max; churn.rs), then the proxy's CPU time
//!      for the minute and what it needed to catch up;
//!
//!   BENCH_TRASH_WARMUP=S first deletes real servers of the bench's own
//!   at the churn's rate for S seconds (trash.rs): the kernel's list of
//!   deleted real servers, which every add walks, is then as a churn of
//!   S seconds leaves it (180 s is its steady state), so that the
//!   churn's first minute starts where its later ones are.
//!   5. the proxy's CPU seconds (utime + stime) and peak RSS (VmHWM);
//!   6. once the proxy has exited, its cold sync's floor (floor.rs).
//!
//!   It prints `RESULT proxy services metric value` lines, among them
//!   how busy the guest's CPUs were over the churn and how much of that
//!   was this bench's own (guest_cpu.rs).
//! - `relay PORT` (on the host, `KUBECONFIG` the admin's, for the length
//!   of a `measure`): makes the churn's writes on the guest's schedule
//!   (relay.rs), so that the bench's TLS and JSON do not take the CPUs of
//!   the node it measures; the guest still stamps every change's time.
//! - `report RESULTS DIR`: the Markdown table of both proxies and the
//!   ratios, written with a CSV and, through gnuplot, a PNG chart to DIR.
//!
//! The latencies are measured directly rather than read from the
//! `kubeproxy_network_programming_duration_seconds` histogram both
//! proxies export: its buckets start at 0.25 s, too coarse for ours. The
//! trigger-time annotation is still set on every change, so both do the
//! metric's work.

use anyhow::{bail, Context};

mod api;
mod api_alone;
mod breakdown;
mod churn;
mod floor;
mod guest_cpu;
mod measure;
mod measurement;
mod objects;
mod relay;
mod report;
mod settings;
mod trash;

use settings::Settings;

fn usage() -> anyhow::Error {
    anyhow::anyhow!(
        "usage: vs_upstream populate N | api-alone upstream|ours N | \
         measure upstream|ours N BINARY CONFIG | relay PORT | report \
         RESULTS DIR"
    )
}

fn services(arg: Option<&String>) -> anyhow::Result<usize> {
    let n: usize = arg
        .ok_or_else(usage)?
        .parse()
        .context("the number of services")?;
    if !(1..=objects::MAX_SERVICES).contains(&n) {
        bail!(
            "the number of services must be 1..={}",
            objects::MAX_SERVICES
        );
    }
    Ok(n)
}

fn main() -> anyhow::Result<()> {
    // `cargo bench` appends --bench; nothing else is an option here.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match args.first().map(String::as_str) {
        Some("populate") => rt.block_on(api::populate(services(args.get(1))?)),
        Some("api-alone") => {
            let [_, proxy, n] = &args[..] else {
                return Err(usage());
            };
            rt.block_on(api_alone::run(proxy, services(Some(n))?))
        }
        Some("measure") => {
            let [_, proxy, n, binary, config] = &args[..] else {
                return Err(usage());
            };
            let settings = Settings::from_env()?;
            let n = services(Some(n))?;
            // One thread in the guest: the writer and the observer wait
            // on the network and the kernel, and a second worker only
            // added wake-ups between the two (futexes, context
            // switches) to the CPUs the proxy is measured on.
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(measure::run(&settings, proxy, n, binary, config))
        }
        Some("relay") => {
            let port = args
                .get(1)
                .ok_or_else(usage)?
                .parse()
                .context("the relay's port")?;
            rt.block_on(relay::serve(port))
        }
        Some("report") => {
            let [_, results, dir] = &args[..] else {
                return Err(usage());
            };
            report::write(results.as_ref(), dir.as_ref())
        }
        _ => Err(usage()),
    }
}
