//! `make bench`'s guest part: the proxy against the kernel
//! tools on the same state, in one boot of the real-kernel guest, as
//! root. Prints one Markdown table.
//!
//! 1. Cold sync of BENCH_SERVICES (10,000) ClusterIP services x 10
//!    endpoints: the proxy from its start to its first sync applied
//!    (`kubeproxy_sync_proxy_rules_last_timestamp_seconds`) against
//!    `ip -batch`, `ipset restore` and `ipvsadm -R` loading the same
//!    state (from the same objects, through `plan`'s code). Each side
//!    gets a fresh network namespace, and both are checked to hold the
//!    same number of virtual servers, real servers, addresses and set
//!    entries.
//! 2. With those present, one endpoint change (readiness of one endpoint
//!    flipped, back and forth) and one new service, each made by
//!    rewriting the state file: the time from the rename to the kernel
//!    showing it, seen by polling that one virtual server's real servers
//!    over ipvs-sys every millisecond; the proxy's sync time for it (its
//!    duration histogram) and its CPU time (utime + stime from
//!    /proc/PID/stat, clock ticks). The baseline makes the same change
//!    with the tools (one process each). Medians of BENCH_REPS (6).
//! 3. The proxy's peak RSS (VmHWM) after the cold sync.
//! 4. The pipeline in this process, fed watch events: its cold sync, one
//!    endpoint change and one new service, once as shipped and once
//!    with every IPVS read and write over generic netlink (a second
//!    table: what IPVS's socket options change, in the same boot).
//!
//! Built by `cargo bench --features guest-bench --bench guest_sync`
//! (release profile, the proxy binary too) and run in the guest by
//! tests/vm/bench-guest.sh. BENCH_SETTLE_MS (5000) is the pause after
//! leaving the baseline's namespace while the kernel tears it down;
//! BENCH_PROXY_LOG, if set, is the proxy's RUST_LOG, and its log is
//! printed at the end.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use bench_support::{
    fixtures::{self, ENDPOINTS_PER_SERVICE},
    ipvs,
    proxy::{scrape, Proxy, SyncMetrics},
};
use ipvs_sys::{Destination, Handle};

mod baseline;
mod change;
mod events;
mod kernel;
mod settings;
mod state;

use change::{all_serving, median, Flip, POLL};
use settings::Settings;
use state::{StateFile, NODE, NODE_IP};

/// Our proxy, as cargo built it for this bench.
const PROXY: &str = env!("CARGO_BIN_EXE_kube-ipvs-proxy");

/// How long after the kernel shows a change the proxy's CPU time is read:
/// the file source reads a fresh file again once it is a second old
/// (timestamps may be coarse), and that belongs to the change.
const QUIET: Duration = Duration::from_millis(2500);
const CHANGE_TIMEOUT: Duration = Duration::from_secs(120);
const COLD_TIMEOUT: Duration = Duration::from_secs(1800);

/// What both sides must hold after the cold load.
#[derive(Debug, PartialEq, Eq)]
struct Counts {
    virtual_servers: usize,
    real_servers: usize,
    addresses: usize,
    set_entries: usize,
}

impl Counts {
    fn of_plan(plan: &kube_ipvs_proxy::desired::Plan) -> Self {
        Self {
            virtual_servers: plan.virtual_servers.len(),
            real_servers: plan
                .virtual_servers
                .iter()
                .map(|vs| vs.real_servers.len())
                .sum(),
            addresses: plan.bound_addresses.len(),
            set_entries: plan.ipsets.values().map(Vec::len).sum(),
        }
    }

    async fn of_kernel(handle: &Handle) -> anyhow::Result<Self> {
        let (virtual_servers, real_servers) = ipvs::ipvs_counts(handle).await?;
        let (addresses, set_entries) = kernel::address_and_entry_counts()?;
        Ok(Self {
            virtual_servers,
            real_servers,
            addresses,
            set_entries,
        })
    }
}

async fn check_kernel(
    handle: &Handle,
    want: &Counts,
    side: &str,
) -> anyhow::Result<()> {
    let got = Counts::of_kernel(handle).await?;
    if &got != want {
        bail!("{side}: the kernel holds {got:?}, expected {want:?}");
    }
    Ok(())
}

/// CPU time (user + system) of the children waited for so far.
fn children_cpu() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64)
            + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// One change's numbers, ours or the baseline's.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    latency: Duration,
    sync: Duration,
    cpu: Duration,
}

#[derive(Debug, Default)]
struct Medians {
    latency: Duration,
    sync: Duration,
    cpu: Duration,
}

fn medians(samples: &[Sample]) -> Medians {
    Medians {
        latency: median(samples.iter().map(|s| s.latency).collect()),
        sync: median(samples.iter().map(|s| s.sync).collect()),
        cpu: median(samples.iter().map(|s| s.cpu).collect()),
    }
}

struct Baseline {
    cold: baseline::ColdLoad,
    cold_cpu: Duration,
    endpoint: Medians,
    new_service: Medians,
}

async fn run_baseline(
    settings: &Settings,
    scripts: &baseline::Scripts,
    want: &Counts,
) -> anyhow::Result<Baseline> {
    kernel::fresh_netns(NODE_IP)?;
    eprintln!(
        "guest_sync: baseline cold load (ip -batch, ipset restore, ipvsadm -R)"
    );
    let cpu = children_cpu();
    let cold = baseline::cold_load(scripts)?;
    let cold_cpu = children_cpu().saturating_sub(cpu);
    let handle = ipvs::connect()?;
    check_kernel(&handle, want, "baseline").await?;

    eprintln!("guest_sync: baseline changes");
    let flip = Flip::new(settings.services)?;
    let mut endpoint = Vec::new();
    for k in 0..settings.reps {
        let cpu = children_cpu();
        let latency =
            baseline::endpoint_change(flip.vip, flip.rip, Flip::ready(k))?;
        endpoint.push(Sample {
            latency,
            sync: Duration::ZERO,
            cpu: children_cpu().saturating_sub(cpu),
        });
    }
    let mut new_service = Vec::new();
    for k in 0..settings.reps {
        let i = settings.services + k;
        let rips = (0..ENDPOINTS_PER_SERVICE)
            .map(|j| state::endpoint_ip(i, j))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let cpu = children_cpu();
        let latency = baseline::new_service(state::cluster_ip(i)?, &rips)?;
        new_service.push(Sample {
            latency,
            sync: Duration::ZERO,
            cpu: children_cpu().saturating_sub(cpu),
        });
    }
    kernel::tear_down(&handle).await?;
    Ok(Baseline {
        cold,
        cold_cpu,
        endpoint: medians(&endpoint),
        new_service: medians(&new_service),
    })
}

struct Ours {
    cold: Duration,
    first_sync: Duration,
    cold_cpu: Duration,
    peak_rss_kib: u64,
    end_peak_rss_kib: u64,
    endpoint: Medians,
    new_service: Medians,
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

async fn wait_first_sync(proxy: &mut Proxy) -> anyhow::Result<SyncMetrics> {
    let start = Instant::now();
    loop {
        proxy.check_alive()?;
        if let Some(m) = scrape().filter(|m| m.last_sync > 0.0) {
            return Ok(m);
        }
        if start.elapsed() > COLD_TIMEOUT {
            bail!("no sync within {COLD_TIMEOUT:?}:\n{}", proxy.log_tail());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writes the file, waits for the kernel to show it, then for the
/// proxy to go quiet.
async fn timed_change(
    proxy: &mut Proxy,
    handle: &Handle,
    file: &StateFile,
    vip: std::net::IpAddr,
    shown: impl Fn(&[Destination]) -> bool,
) -> anyhow::Result<Sample> {
    let before = scrape().context("metrics before the change")?;
    let cpu = proxy.cpu()?;
    file.write()?;
    let start = Instant::now();
    loop {
        let dests = ipvs::real_servers(handle, vip, 80).await?;
        if shown(&dests) {
            break;
        }
        if start.elapsed() > CHANGE_TIMEOUT {
            bail!(
                "the change to {vip} did not show within {CHANGE_TIMEOUT:?} \
                 (real servers {dests:?}):\n{}",
                proxy.log_tail()
            );
        }
        proxy.check_alive()?;
        tokio::time::sleep(POLL).await;
    }
    let latency = start.elapsed();
    tokio::time::sleep(QUIET).await;
    let after = scrape().context("metrics after the change")?;
    Ok(Sample {
        latency,
        sync: Duration::from_secs_f64(
            (after.sync_seconds - before.sync_seconds).max(0.0),
        ),
        cpu: proxy.cpu()?.saturating_sub(cpu),
    })
}

async fn run_ours(
    settings: &Settings,
    file: &mut StateFile,
    log: std::path::PathBuf,
    want: &Counts,
) -> anyhow::Result<Ours> {
    kernel::fresh_netns(NODE_IP)?;
    tokio::time::sleep(settings.settle).await;
    eprintln!("guest_sync: the proxy's cold sync");
    let started = SystemTime::now();
    let mut proxy = Proxy::start(PROXY, &file.path, NODE, log)?;
    let first = wait_first_sync(&mut proxy).await?;
    let cold_cpu = proxy.cpu()?;
    let peak_rss_kib = proxy.status_kib("VmHWM")?;
    let cold = Duration::from_secs_f64(
        (first.last_sync - unix_seconds(started)).max(0.0),
    );
    let first_sync = Duration::from_secs_f64(first.sync_seconds.max(0.0));
    let handle = ipvs::connect()?;
    check_kernel(&handle, want, "the proxy").await?;
    // Whatever the start-up left to do (a second read of the file once it
    // is old enough) is not part of the first change.
    tokio::time::sleep(QUIET).await;

    eprintln!("guest_sync: the proxy's changes");
    let flip = Flip::new(settings.services)?;
    let mut endpoint = Vec::new();
    for k in 0..settings.reps {
        let ready = if Flip::ready(k) {
            ENDPOINTS_PER_SERVICE
        } else {
            ENDPOINTS_PER_SERVICE - 1
        };
        file.set_slice(flip.service, &fixtures::slice(flip.service, ready))?;
        let sample = timed_change(&mut proxy, &handle, file, flip.vip, |d| {
            flip.shown(k, d)
        })
        .await?;
        eprintln!("guest_sync: endpoint change {k}: {sample:?}");
        endpoint.push(sample);
    }
    let mut new_service = Vec::new();
    for k in 0..settings.reps {
        let i = settings.services + k;
        file.add_service(i)?;
        let vip = state::cluster_ip(i)?;
        let sample =
            timed_change(&mut proxy, &handle, file, vip, all_serving).await?;
        eprintln!("guest_sync: new service {k}: {sample:?}");
        new_service.push(sample);
    }
    if std::env::var_os("BENCH_PROXY_LOG").is_some() {
        eprintln!("guest_sync: the proxy's log:\n{}", proxy.log());
    }
    Ok(Ours {
        cold,
        first_sync,
        cold_cpu,
        peak_rss_kib,
        end_peak_rss_kib: proxy.status_kib("VmHWM")?,
        endpoint: medians(&endpoint),
        new_service: medians(&new_service),
    })
}

fn show(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 10.0 {
        format!("{s:.1} s")
    } else if s >= 1.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.1} ms", s * 1e3)
    }
}

fn ratio(ours: Duration, theirs: Duration) -> String {
    if theirs.is_zero() {
        return "—".into();
    }
    format!("{:.2}", ours.as_secs_f64() / theirs.as_secs_f64())
}

fn row(what: &str, ours: Duration, theirs: Option<Duration>) {
    match theirs {
        Some(t) => println!(
            "| {what} | {} | {} | {} |",
            show(ours),
            show(t),
            ratio(ours, t)
        ),
        None => println!("| {what} | {} | — | — |", show(ours)),
    }
}

fn print_table(
    settings: &Settings,
    want: &Counts,
    b: &Baseline,
    o: &Ours,
    e: &events::EventsSide,
) {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!();
    println!(
        "{} ClusterIP services x {ENDPOINTS_PER_SERVICE} endpoints (TCP): \
         {} virtual servers, {} real servers, {} addresses, {} set entries \
         on both sides; {cpus} CPUs; each side in a fresh network namespace; \
         changes are medians of {}.",
        settings.services,
        want.virtual_servers,
        want.real_servers,
        want.addresses,
        want.set_entries,
        settings.reps
    );
    println!();
    println!("| what | ours | baseline | ours / baseline |");
    println!("|---|---|---|---|");
    row(
        "cold sync: proxy start to first sync applied / \
         `ip -batch` + `ipset restore` + `ipvsadm -R`",
        o.cold,
        Some(b.cold.total()),
    );
    row(
        "… of which the proxy's first sync (IPVS, addresses, sets, iptables)",
        o.first_sync,
        None,
    );
    row(
        "cold sync CPU (proxy / the tools, user + system)",
        o.cold_cpu,
        Some(b.cold_cpu),
    );
    row(
        "one endpoint change: file rename to kernel / one `ipvsadm` command",
        o.endpoint.latency,
        Some(b.endpoint.latency),
    );
    row("… the proxy's sync for it", o.endpoint.sync, None);
    row(
        "… proxy CPU / `ipvsadm` CPU",
        o.endpoint.cpu,
        Some(b.endpoint.cpu),
    );
    row(
        "one new service: file rename to kernel / `ip` + `ipset` + `ipvsadm`",
        o.new_service.latency,
        Some(b.new_service.latency),
    );
    row("… the proxy's sync for it", o.new_service.sync, None);
    row(
        "… proxy CPU / the tools' CPU",
        o.new_service.cpu,
        Some(b.new_service.cpu),
    );
    row(
        "watch events, in process: first event to first sync applied / \
         the tools' cold load",
        e.cold,
        Some(b.cold.total()),
    );
    row(
        "watch events: one endpoint change, event to kernel / one `ipvsadm` \
         command",
        e.endpoint,
        Some(b.endpoint.latency),
    );
    row(
        "watch events: one new service, events to kernel / `ip` + `ipset` + \
         `ipvsadm`",
        e.new_service,
        Some(b.new_service.latency),
    );
    println!(
        "| proxy peak RSS (VmHWM) after the cold sync | {:.0} MiB | — | — |",
        o.peak_rss_kib as f64 / 1024.0
    );
    println!();
    println!(
        "Baseline parts: `ip -batch` {}, `ipset restore` {}, `ipvsadm -R` {}. \
         Proxy peak RSS at the end: {:.0} MiB. The state file is polled \
         every 500 ms and a new version is read once it has held for one \
         poll, so a change waits 0.5-1 s before the proxy reads it; CPU \
         times are in clock ticks ({} ms).",
        show(b.cold.ip_batch),
        show(b.cold.ipset_restore),
        show(b.cold.ipvsadm_restore),
        o.end_peak_rss_kib as f64 / 1024.0,
        // SAFETY: sysconf has no preconditions.
        1000 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1)
    );
}

/// The watch-event side as shipped against the same side with IPVS over
/// generic netlink alone, in this process and boot.
fn print_ipvs_paths(
    shipped: &events::EventsSide,
    netlink: &events::EventsSide,
) {
    println!();
    println!(
        "| watch events, in process | IPVS's socket options (as shipped) | \
         generic netlink only | options / netlink |"
    );
    println!("|---|---|---|---|");
    for (what, a, b) in [
        (
            "first event to first sync applied",
            shipped.cold,
            netlink.cold,
        ),
        ("one endpoint change", shipped.endpoint, netlink.endpoint),
        ("one new service", shipped.new_service, netlink.new_service),
    ] {
        row(what, a, Some(b));
    }
}

// One thread: unshare() moves only the calling thread, and the proxy and
// the tools inherit its namespace.
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    // `cargo test --all-targets` runs benches without `--bench`: nothing
    // to check there, and no root or guest to do it with.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("guest_sync: a benchmark; run by tests/vm/bench-guest.sh");
        return Ok(());
    }
    if std::env::var_os("TESTKIT_VM_GUEST").is_none() {
        bail!(
            "guest_sync runs in the real-kernel guest: tests/vm/bench-guest.sh"
        );
    }
    let settings = Settings::from_env()?;
    let dir = std::env::temp_dir().join("guest-bench");
    std::fs::create_dir_all(&dir)?;

    eprintln!(
        "guest_sync: {} services x {ENDPOINTS_PER_SERVICE} endpoints",
        settings.services
    );
    let plan = state::plan(settings.services);
    let want = Counts::of_plan(&plan);
    let scripts = baseline::Scripts::new(&plan)?;
    drop(plan);
    let mut file = StateFile::new(dir.join("state.json"), settings.services)?;
    file.write()?;

    let baseline = run_baseline(&settings, &scripts, &want).await?;
    drop(scripts);
    let ours =
        run_ours(&settings, &mut file, dir.join("proxy.log"), &want).await?;
    let events = events::run(&settings, events::IpvsPath::AsShipped).await?;
    let over_netlink =
        events::run(&settings, events::IpvsPath::NetlinkOnly).await?;
    print_table(&settings, &want, &baseline, &ours, &events);
    print_ipvs_paths(&events, &over_netlink);
    Ok(())
}
