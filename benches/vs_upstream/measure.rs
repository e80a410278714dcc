//! One proxy's run in the guest: cold sync, single changes, churn, and
//! what it cost; printed as `RESULT` lines.

use std::{
    collections::BTreeMap,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use bench_support::{
    fixtures::ENDPOINTS_PER_SERVICE,
    ipvs,
    proxy::{metrics_text, scrape, CpuTimes, Proxy},
};
use ipvs_sys::Handle;

use crate::{
    api,
    breakdown::{breakdown, each_minute, single},
    churn, floor,
    guest_cpu::{cpu_by_name, own_cpu, MachineCpu},
    measurement::{median_ms, percentile_ms, Results},
    objects::{self, Addresses},
    settings::Settings,
    trash,
};

const POLL: Duration = Duration::from_millis(2);
/// Between timed changes, so that one's sync does not run into the next.
const QUIET: Duration = Duration::from_secs(2);

pub async fn run(
    settings: &Settings,
    proxy_name: &str,
    n: usize,
    binary: &str,
    config: &str,
) -> anyhow::Result<()> {
    let results = Results::new(proxy_name, n)?;
    let client = api::connected_client().await?;
    let handle = ipvs::connect()?;
    let (vs, rs) = ipvs::ipvs_counts(&handle).await?;
    if vs + rs > 0 {
        bail!("the guest's IPVS table is not empty ({vs} services)");
    }
    let addresses = Addresses::new(n + settings.reps)?;

    let mut command = Command::new(binary);
    command.arg("--config").arg(config).env("NO_COLOR", "1");
    // In the guest's results share where there is one, so that the
    // whole log outlives the guest (tests/vm/run's VM_KEEP=1).
    let logs = Path::new("/run/vm");
    let logs = if logs.is_dir() {
        logs
    } else {
        Path::new("/tmp")
    };
    let log = logs.join(format!("{proxy_name}-{n}.proxy.log"));
    let start = Instant::now();
    let mut proxy = Proxy::spawn(command, log)?;
    // BENCH_PERF=cold: the cold sync's profile instead of the churn's.
    let cold_profile = std::env::var("BENCH_PERF").is_ok_and(|p| p == "cold");
    let outcome = async {
        let profile = match cold_profile {
            true => Some(Profile::start(
                &format!("{proxy_name}-cold"),
                n,
                proxy.pid(),
            )?),
            false => None,
        };
        let cold = cold_sync(settings, &mut proxy, &handle, n, start).await;
        if let Some(profile) = profile {
            profile.stop()?;
        }
        let cold = match cold {
            Ok(cold) => cold,
            Err(e) => {
                // A lower bound is still a result, with what it cost.
                if start.elapsed() > settings.cold_timeout {
                    results.print(
                        "cold_sync_over_s",
                        settings.cold_timeout.as_secs_f64(),
                    );
                    results.costs(&proxy)?;
                }
                return Err(e);
            }
        };
        results.print("cold_sync_s", cold.as_secs_f64());
        results.print("cold_cpu_s", proxy.cpu()?.as_secs_f64());
        tokio::time::sleep(QUIET).await;

        let slices = api::slices(&client);
        let metrics_before = metrics_text().unwrap_or_default();
        let mut samples = Vec::new();
        let mut writes = Writes::default();
        for r in 0..settings.reps {
            let k = (n / 2 + r) % n;
            let shown = Shown {
                k,
                all_ready: false,
            };
            let write = api::set_ready(&slices, k, false);
            let (written, shown_after) =
                timed(settings, &mut proxy, &handle, &addresses, shown, write)
                    .await
                    .with_context(|| {
                        format!("endpoint change of service {k}")
                    })?;
            samples.push(shown_after);
            writes.push(written, shown_after);
            tokio::time::sleep(QUIET).await;
        }
        results.print("endpoint_change_ms", median_ms(&mut samples));
        writes.print(&results, "endpoint_change");
        single(&results, &metrics_before, "endpoint_change");

        let svc_api = api::services(&client);
        let metrics_before = metrics_text().unwrap_or_default();
        let mut samples = Vec::new();
        let mut writes = Writes::default();
        for r in 0..settings.reps {
            let k = n + r;
            let shown = Shown { k, all_ready: true };
            let write = api::create_service(&svc_api, &slices, k);
            let (written, shown_after) =
                timed(settings, &mut proxy, &handle, &addresses, shown, write)
                    .await
                    .with_context(|| format!("new service {k}"))?;
            samples.push(shown_after);
            writes.push(written, shown_after);
            tokio::time::sleep(QUIET).await;
        }
        results.print("new_service_ms", median_ms(&mut samples));
        writes.print(&results, "new_service");
        single(&results, &metrics_before, "new_service");

        if !settings.trash_warmup.is_zero() {
            trash::warm_up(&handle, settings.churn_rate, settings.trash_warmup)
                .await?;
        }
        let cpu_before = proxy.cpu()?;
        let times_before = proxy.cpu_times()?;
        let machine_before = MachineCpu::read()?;
        let own_before = own_cpu()?;
        let threads_before = thread_cpu(proxy.pid())?;
        let metrics_before = metrics_text().unwrap_or_default();
        let writer = churn::Writer::from_env(&slices).await?;
        eprintln!("churn: the writes are made {}", writer.describe());
        // BENCH_PERF=bench: the bench's own share of the guest instead.
        let profile = match std::env::var("BENCH_PERF").as_deref() {
            Ok("cold") | Err(_) => None,
            Ok("bench") => {
                Some(Profile::start("bench", n, std::process::id())?)
            }
            Ok(_) => Some(Profile::start(proxy_name, n, proxy.pid())?),
        };
        let churn =
            churn::run(settings, writer, &handle, &addresses, n, &mut proxy)
                .await?;
        if let Some(profile) = profile {
            profile.stop()?;
        }
        let machine = MachineCpu::read()?.since(machine_before);
        let own = own_cpu()?.since(own_before);
        let proxy_churn = proxy.cpu()?.saturating_sub(cpu_before);
        // The kernel's share (its IPVS writes, the trash walk of every
        // real server added) apart from the proxy's own code.
        let times = proxy.cpu_times()?.since(times_before);
        breakdown(&results, &metrics_before);
        guest_share(&results, machine, proxy_churn, own);
        let threads: Vec<String> = thread_cpu(proxy.pid())?
            .into_iter()
            .map(|(name, after)| {
                let before =
                    threads_before.get(&name).copied().unwrap_or_default();
                format!(
                    "{name} {:.1}",
                    after.saturating_sub(before).as_secs_f64()
                )
            })
            .collect();
        eprintln!(
            "{proxy_name} {n}: churn CPU by thread (s): {}",
            threads.join(", ")
        );
        let minutes = churn.each_minute();
        if minutes.len() >= 2 {
            let series: Vec<String> = minutes
                .iter()
                .map(|m| {
                    format!(
                        "{:.0}/{:.0}",
                        percentile_ms(m, 0.50),
                        percentile_ms(m, 0.99)
                    )
                })
                .collect();
            eprintln!(
                "{proxy_name} {n}: churn p50/p99 (ms) by minute: {}",
                series.join(" ")
            );
        }
        let costs = each_minute(&churn.scrapes);
        if costs.len() >= 2 {
            eprintln!(
                "{proxy_name} {n}: by minute, p99 of total/queue/sync (ms), \
                 repair reads ended (longest, ms), CPU user+system (s): {}",
                costs.join(" | ")
            );
        }
        for (label, minute) in churn.minutes() {
            results.print(
                &format!("churn_p99_{label}_minute_ms"),
                percentile_ms(&minute, 0.99),
            );
        }
        let mut latencies: Vec<Duration> =
            churn.latencies.iter().map(|(_, d)| *d).collect();
        latencies.sort();
        results.print("churn_rate_per_s", churn.achieved_rate);
        results.print("churn_timed", latencies.len() as f64);
        results.print("churn_p50_ms", percentile_ms(&latencies, 0.50));
        results.print("churn_p99_ms", percentile_ms(&latencies, 0.99));
        results.print("churn_max_ms", percentile_ms(&latencies, 1.0));
        results.print("churn_catch_up_s", churn.catch_up.as_secs_f64());
        results.print("churn_unobserved", churn.unobserved as f64);
        results.print("churn_write_errors", churn.write_errors as f64);
        results.print("churn_cpu_s", proxy_churn.as_secs_f64());
        results.print("churn_user_cpu_s", times.user.as_secs_f64());
        results.print("churn_system_cpu_s", times.system.as_secs_f64());
        results.costs(&proxy)?;
        anyhow::Ok(cold)
    }
    .await;
    // The guest's /tmp goes with it: what the proxy said, for the
    // record.
    eprintln!("--- the end of {proxy_name}'s log:\n{}", proxy.log_tail());
    // What it left in the kernel, loaded again without it.
    drop(proxy);
    floor::measure(&results, &handle, outcome?).await
}

/// With BENCH_PERF set, a `perf record` of the proxy (call graphs, the
/// CPU clock: TCG has no hardware counters) for the churn, written to
/// the guest's results share (`VM_KEEP=1` keeps it) as
/// perf-PROXY-N.data; of this bench instead (perf-bench-N.data) with
/// BENCH_PERF=bench; of the proxy's start and cold sync instead
/// (perf-PROXY-cold-N.data) with BENCH_PERF=cold.
struct Profile {
    perf: std::process::Child,
    name: String,
}

impl Profile {
    fn start(proxy: &str, n: usize, pid: u32) -> anyhow::Result<Self> {
        let name = format!("{proxy}-{n}");
        // Frame pointers by default; BENCH_PERF_CALL_GRAPH=dwarf for whole
        // stacks of a build that has none (the release build omits them).
        let call_graph = std::env::var("BENCH_PERF_CALL_GRAPH")
            .unwrap_or_else(|_| "fp".to_owned());
        let perf = Command::new("perf")
            .args(["record", "-e", "cpu-clock", "-F", "499", "--call-graph"])
            .arg(call_graph)
            .arg("-p")
            .arg(pid.to_string())
            .arg("-o")
            .arg(format!("/run/vm/perf-{name}.data"))
            .spawn()
            .context("perf record (Debian's linux-perf)")?;
        Ok(Self { perf, name })
    }

    /// Stops perf and keeps the guest's kernel symbols beside its data:
    /// read on the host, the profile's kernel addresses would otherwise
    /// be named after the host's kernel (`perf report --kallsyms`).
    fn stop(mut self) -> anyhow::Result<()> {
        // SIGINT: perf writes its data and exits.
        // SAFETY: kill with a valid signal on our own child.
        unsafe { libc::kill(self.perf.id() as i32, libc::SIGINT) };
        self.perf.wait().context("perf record")?;
        // A procfs file reports no size, so it is read, not copied.
        let symbols = std::fs::read("/proc/kallsyms")
            .context("reading the guest's /proc/kallsyms")?;
        let kept = format!("/run/vm/kallsyms-{}", self.name);
        std::fs::write(&kept, symbols).with_context(|| kept.clone())?;
        Ok(())
    }
}

/// From the proxy's start to its first sync (its metric), then to the
/// IPVS table holding every service's ten real servers.
async fn cold_sync(
    settings: &Settings,
    proxy: &mut Proxy,
    handle: &Handle,
    n: usize,
    start: Instant,
) -> anyhow::Result<Duration> {
    loop {
        proxy.check_alive()?;
        if scrape().is_some_and(|m| m.last_sync > 0.0) {
            break;
        }
        if start.elapsed() > settings.cold_timeout {
            bail!("no sync within {:?}", settings.cold_timeout);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first_sync = start.elapsed();
    // Counting takes seconds at 10,000 services under TCG: a table
    // complete at the first count was complete at the first sync; after
    // that, the count that found it complete began after it was.
    let mut cold = first_sync;
    loop {
        // `kubernetes` is there too, with its own real server.
        let (vs, rs) = ipvs::ipvs_counts(handle).await?;
        if vs > n && rs > n * ENDPOINTS_PER_SERVICE {
            break;
        }
        proxy.check_alive()?;
        if start.elapsed() > settings.cold_timeout {
            bail!(
                "after {:?}: {vs} virtual servers, {rs} real servers",
                settings.cold_timeout
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        cold = start.elapsed();
    }
    eprintln!(
        "first sync after {:.1} s, kernel complete after {:.1} s",
        first_sync.as_secs_f64(),
        cold.as_secs_f64()
    );
    Ok(cold)
}

/// The state a timed change waits for: service `k`'s real servers as
/// [`objects::shows`] reads them.
struct Shown {
    k: usize,
    all_ready: bool,
}

/// Makes `write` (a future not yet polled) and waits for the kernel to
/// show it: the time to the API's answer, and to the kernel, both from
/// the request.
async fn timed(
    settings: &Settings,
    proxy: &mut Proxy,
    handle: &Handle,
    addresses: &Addresses,
    shown: Shown,
    write: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<(Duration, Duration)> {
    let started = Instant::now();
    write.await?;
    let written = started.elapsed();
    let shown_after =
        until(settings, proxy, handle, addresses, shown, started).await?;
    Ok((written, shown_after))
}

/// Polls service `k`'s real servers until they show the change; the time
/// since `started`.
async fn until(
    settings: &Settings,
    proxy: &mut Proxy,
    handle: &Handle,
    addresses: &Addresses,
    Shown { k, all_ready }: Shown,
    started: Instant,
) -> anyhow::Result<Duration> {
    loop {
        let dests =
            churn::real_servers(handle, addresses.vips[k], objects::PORT)
                .await?;
        if objects::shows(&dests, addresses.flipping[k], all_ready) {
            return Ok(started.elapsed());
        }
        proxy.check_alive()?;
        if started.elapsed() > settings.change_timeout {
            bail!("not in the kernel after {:?}", settings.change_timeout);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A single change's time split at the API server's answer to the
/// bench's write(s): what the API server took to accept them (for a new
/// service, the Service's create and then its slice's), and the rest, to
/// the kernel. The first is the same for both proxies; it grows with
/// the cluster in the API server itself (a Service's create lists every
/// IPAddress object to update the allocator's gauges).
#[derive(Default)]
struct Writes {
    written: Vec<Duration>,
    after: Vec<Duration>,
}

impl Writes {
    fn push(&mut self, written: Duration, shown_after: Duration) {
        self.written.push(written);
        self.after.push(shown_after.saturating_sub(written));
    }

    fn print(&mut self, results: &Results, name: &str) {
        results
            .print(&format!("{name}_write_ms"), median_ms(&mut self.written));
        results.print(
            &format!("{name}_after_write_ms"),
            median_ms(&mut self.after),
        );
    }
}

/// How busy the guest's CPUs were over the churn, and whose work that
/// was: a proxy that cannot get a CPU when a change arrives is late
/// however little each change costs it.
fn guest_share(
    results: &Results,
    machine: MachineCpu,
    proxy: Duration,
    own: CpuTimes,
) {
    let bench = own.user + own.system;
    let total = machine.total.as_secs_f64().max(1e-9);
    let pct = |d: Duration| 100.0 * d.as_secs_f64() / total;
    let rest = machine.busy.saturating_sub(proxy).saturating_sub(bench);
    results.print("churn_guest_busy_pct", pct(machine.busy));
    results.print("churn_bench_cpu_s", bench.as_secs_f64());
    eprintln!(
        "{} {}: the guest's CPUs over the churn were {:.0} % busy: \
         the proxy {:.0} %, this bench (writer and observer) {:.0} % \
         ({:.0} % user, {:.0} % system), the rest (other processes, \
         interrupts) {:.0} %",
        results.proxy(),
        results.services(),
        pct(machine.busy),
        pct(proxy),
        pct(bench),
        pct(own.user),
        pct(own.system),
        pct(rest),
    );
}

/// The CPU of each of `pid`'s living threads, user and system together,
/// summed by thread name: which of the proxy's threads a cost is on.
fn thread_cpu(pid: u32) -> anyhow::Result<BTreeMap<String, Duration>> {
    cpu_by_name(Path::new(&format!("/proc/{pid}/task")))
}
